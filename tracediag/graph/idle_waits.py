"""Waits a GPU trace implies but does not record: idle streams and idle host threads.

Two inferences, each giving edges of its own kind with its evidence (see
:data:`EVIDENCE_COLUMNS`):

- ``stream_wait``: a GPU event (kernel, copy, NCCL/RCCL kernel) that starts more than
  :data:`STREAM_TOLERANCE_NS` after everything recorded allows (its launch, the previous event on
  its stream, recorded edges) waited on its own idle stream for something else. It binds to the
  event on *another stream of the same device* that ended last at or before its start, if that
  end is within the tolerance of the start (an event wait resumes a stream a few µs after the
  awaited work ends: ``cudaStreamWaitEvent`` without its ``cuda_sync`` record, RCCL's internal
  stream dependencies). A recorded ``sync`` edge into the event wins: nothing is inferred there.
- ``thread_handoff``: a host thread that was silent (no event of any kind, annotations
  included, starts or ends) for at least :data:`MIN_THREAD_SILENCE_NS` and resumes within
  :data:`THREAD_TOLERANCE_NS` after an event of *another thread of the same process* ended
  (the autograd engine's backward thread, a data loader, a communication thread) waited for it.
  Its next runtime call binds to that event.

A wait is explained only by a predecessor that ends within the tolerance of the waiter's start,
never by one that ends somewhere inside the wait: a recorded predecessor that ends earlier leaves
the wait unexplained, and an inferred one must end later than every recorded one (else the
recorded one binds anyway and no edge is added).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracediag.graph.dependencies import stable_order_by
from tracediag.model import schema as S

#: An event wait resumes a GPU stream this soon after the awaited work ends (AMD's cross-stream
#: waits take ~20 µs on MI300; CUDA's a few µs).
STREAM_TOLERANCE_NS = 50_000
#: A woken thread issues its first recorded event this soon after the thread it waited for
#: finished (the autograd engine hands the main thread back in 0.1-0.2 ms on real traces).
THREAD_TOLERANCE_NS = 500_000
#: A host thread silent this long was idle, not between two ops (a silence shorter than the
#: tolerance could not tell a hand-off from an op boundary).
MIN_THREAD_SILENCE_NS = 2 * THREAD_TOLERANCE_NS

#: Edge kinds these inferences add (``EDGE_KIND`` of their edges).
STREAM_WAIT = "stream_wait"
THREAD_HANDOFF = "thread_handoff"

#: Evidence kept with each inferred edge, besides SRC, DST and EDGE_KIND: the rank; the gap from
#: the source's end to the waiter's start; how long the waiter's resource idled (stream: from
#: its latest recorded predecessor's end; thread: its silence); the recorded predecessor the
#: edge beat (-1: none); the runner-up candidate (the next latest end on the same device or
#: process, -1: none) and its end.
EVIDENCE_COLUMNS = ("rank", "gap_ns", "idle_ns", "beaten", "runner_up", "runner_up_end_ns")

_GRAPH_KINDS = ("compute", "dma", "collective", "sync", "host")
_DEVICE_WORK = ("compute", "dma", "collective")
_PID = re.compile(r"^cpu (.+?)/")  # Kineto's host track label: "cpu {pid}/{tid} (name)"


def idle_wait_edges(trace: S.Trace, recorded: tuple | None = None) -> pd.DataFrame:
    """Inferred ``stream_wait`` and ``thread_handoff`` edges with their evidence (columns
    SRC, DST, EDGE_KIND and :data:`EVIDENCE_COLUMNS`); empty without GPU streams or threads.
    ``recorded``: :func:`recorded_predecessors` of the trace when the caller has it."""
    ev = trace.events
    if not len(ev):
        return empty_evidence_frame()
    pred_end, pred_ev, synced = recorded or recorded_predecessors(trace)
    parts = [
        _stream_waits(trace, pred_end, pred_ev, synced),
        _thread_handoffs(trace, pred_end, pred_ev),
    ]
    return pd.concat(parts, ignore_index=True)


def empty_evidence_frame() -> pd.DataFrame:
    """An edge frame with the evidence columns and no rows."""
    return _frame(*(np.zeros(0, np.int64) for _ in range(8)), kind="")


def recorded_predecessors(trace: S.Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per event: the end of its latest-ending recorded predecessor (the previous graph event on
    its track, or the source of a recorded edge into its start; -2**62 without one), that
    predecessor's id (-1) and whether a recorded ``sync`` edge points to it."""
    ev = trace.events
    n = len(ev)
    ts = ev[S.TS].to_numpy()
    end = ts + ev[S.DUR].to_numpy()
    in_graph = (ev[S.KIND] != "marker").to_numpy(dtype=bool)
    pred_end = np.full(n, -(2**62), dtype=np.int64)
    pred_ev = np.full(n, -1, dtype=np.int64)
    ids = np.flatnonzero(in_graph)
    rt = _rank_track(ev)
    o = ids[stable_order_by(rt[ids], ts[ids])]  # as the graph's program order sorts them
    same = np.zeros(len(o), dtype=bool)  # sized by hand: no graph event at all is allowed
    same[1:] = rt[o][1:] == rt[o][:-1]
    pred_ev[o[same]] = o[np.flatnonzero(same) - 1]
    pred_end[o[same]] = end[pred_ev[o[same]]]
    synced = np.zeros(n, dtype=bool)
    ed = trace.edges
    if len(ed):
        src, dst = ed[S.SRC].to_numpy(), ed[S.DST].to_numpy()
        is_sync = (ed[S.EDGE_KIND] == "sync").to_numpy(dtype=bool)
        synced[dst[is_sync]] = True
        # A sync edge into a host sync call binds its completion, not its start.
        into_start = (
            in_graph[src] & in_graph[dst] & ~(is_sync & (ev[S.KIND] == "sync").to_numpy()[dst])
        )
        src, dst = src[into_start], dst[into_start]
        o = np.lexsort((end[src], dst))  # per destination, the latest-ending source last
        last = np.r_[dst[o][1:] != dst[o][:-1], True] if len(o) else np.zeros(0, bool)
        d, s = dst[o][last], src[o][last]
        later = end[s] > pred_end[d]
        pred_end[d[later]] = end[s[later]]
        pred_ev[d[later]] = s[later]
    return pred_end, pred_ev, synced


def _rank_track(ev: pd.DataFrame) -> np.ndarray:
    track = ev[S.TRACK].to_numpy()
    return np.multiply(ev[S.RANK].to_numpy(), int(track.max(initial=0)) + 1, dtype=np.int64) + track


def _stream_waits(trace, pred_end, pred_ev, synced) -> pd.DataFrame:
    ev = trace.events
    ts = ev[S.TS].to_numpy()
    end = ts + ev[S.DUR].to_numpy()
    track = ev[S.TRACK].to_numpy()
    tracks = trace.tracks
    on_stream = (S.strings(tracks[S.TRACK_KIND]) == "gpu_stream")[track]
    work = on_stream & ev[S.KIND].isin(_DEVICE_WORK).to_numpy()
    if not work.any():
        return empty_evidence_frame()
    # Streams of one device of one rank form a group (device codes, one per track).
    device_code = pd.factorize(S.strings(tracks[S.DEVICE]).astype(str))[0]
    group = _group_key(ev[S.RANK].to_numpy(), device_code[track])
    waiter = np.flatnonzero(work & ~synced & (ts - pred_end > STREAM_TOLERANCE_NS))
    cand = np.flatnonzero(work)
    return _bind(
        STREAM_WAIT,
        ev,
        group,
        cand,
        end,
        waiter,
        ts[waiter],
        pred_end,
        pred_ev,
        STREAM_TOLERANCE_NS,
        idle=ts[waiter] - np.maximum(pred_end[waiter], ts.min()),
    )


def _thread_handoffs(trace, pred_end, pred_ev) -> pd.DataFrame:
    ev = trace.events
    ts = ev[S.TS].to_numpy()
    end = ts + ev[S.DUR].to_numpy()
    track = ev[S.TRACK].to_numpy()
    tracks = trace.tracks
    is_thread = (S.strings(tracks[S.TRACK_KIND]) == "cpu_thread")[track]
    if not is_thread.any():
        return empty_evidence_frame()
    rt = _rank_track(ev)
    # Silences: gaps between consecutive instants (starts and ends of every event, annotations
    # included) on one thread, at least MIN_THREAD_SILENCE_NS long.
    on = np.flatnonzero(is_thread)
    inst_rt = np.r_[rt[on], rt[on]]
    inst_t = np.r_[ts[on], end[on]]
    o = stable_order_by(inst_rt, inst_t)
    inst_rt, inst_t = inst_rt[o], inst_t[o]
    same = inst_rt[1:] == inst_rt[:-1]
    silent = np.flatnonzero(same & (np.diff(inst_t) >= MIN_THREAD_SILENCE_NS))
    graph_on = on[ev[S.KIND].isin(_GRAPH_KINDS).to_numpy()[on]]
    if not len(graph_on):
        return empty_evidence_frame()
    # A thread's first instant ends a silence too: it was idle since the trace began (the
    # autograd thread's first backward).
    first = np.flatnonzero(np.r_[True, ~same])
    s_rt = np.r_[inst_rt[silent], inst_rt[first]]
    s_lo = np.r_[inst_t[silent], np.full(len(first), int(ts.min()) - MIN_THREAD_SILENCE_NS)]
    s_hi = np.r_[inst_t[silent + 1], inst_t[first]]
    o = stable_order_by(s_rt, s_hi)
    s_rt, s_lo, s_hi = s_rt[o], s_lo[o], s_hi[o]
    # The thread's next graph event after each silence: the waiter. A graph event that spans
    # the silence (a blocking call) means the thread was busy, not idle.
    g = graph_on[stable_order_by(rt[graph_on], ts[graph_on])]
    g_key_rt, g_ts = rt[g], ts[g]
    k = _search_pairs(g_key_rt, g_ts, s_rt, s_hi, side="left")
    has_next = (k < len(g)) & (g_key_rt[np.minimum(k, len(g) - 1)] == s_rt)
    w = np.where(has_next, g[np.minimum(k, len(g) - 1)], -1)
    prev_ok = np.ones(len(s_rt), dtype=bool)
    kp = k - 1
    same_prev = (kp >= 0) & (g_key_rt[np.maximum(kp, 0)] == s_rt)
    prev_end = end[g[np.maximum(kp, 0)]]
    prev_ok[same_prev] = prev_end[same_prev] <= s_lo[same_prev]
    keep = has_next & prev_ok
    w, s_lo, s_hi = w[keep], s_lo[keep], s_hi[keep]
    # Threads of one process of one rank form a group.
    pid = np.array([_process(str(name)) for name in S.strings(tracks[S.TRACK_NAME])], dtype=object)
    pid_code = pd.factorize(pid)[0]
    group = _group_key(ev[S.RANK].to_numpy(), pid_code[track])
    cand = graph_on
    edges = _bind(
        THREAD_HANDOFF,
        ev,
        group,
        cand,
        end,
        w,
        s_hi,
        pred_end,
        pred_ev,
        THREAD_TOLERANCE_NS,
        idle=s_hi - s_lo,
        floor=s_lo,
    )
    # Several silences before one waiter: the latest resume binds it.
    return edges.drop_duplicates(S.DST, keep="last").reset_index(drop=True)


def _process(label: str) -> str:
    """The process of a host track from its label (the whole label when it names none)."""
    m = _PID.match(label)
    return m.group(1) if m else label


def _group_key(rank: np.ndarray, sub: np.ndarray) -> np.ndarray:
    return rank.astype(np.int64) * (int(sub.max(initial=0)) + 2) + sub.astype(np.int64) + 1


def _search_pairs(key, val, q_key, q_val, side: str) -> np.ndarray:
    """Positions of (q_key, q_val) in the (key, val)-sorted arrays (np.searchsorted on pairs)."""
    if not len(key):
        return np.zeros(len(q_key), dtype=np.int64)
    v0 = int(min(val.min(), q_val.min(initial=val.min())))
    span = int(max(val.max(), q_val.max(initial=val.max()))) - v0 + 1
    return np.searchsorted(key * span + (val - v0), q_key * span + (q_val - v0), side=side)


def _bind(kind, ev, group, cand, end, waiter, at, pred_end, pred_ev, tol, idle, floor=None):
    """Per waiter resuming at ``at``: the candidate of its group on another track whose end is
    the latest at or before ``at``, kept when it ends within ``tol`` of ``at``, after the waiter's
    recorded predecessors (and after ``floor``, the start of its silence, when given)."""
    if not len(waiter) or not len(cand):
        return empty_evidence_frame()
    track = ev[S.TRACK].to_numpy()
    ts = ev[S.TS].to_numpy()
    o = stable_order_by(group[cand], end[cand])
    cand = cand[o]
    c_group, c_end = group[cand], end[cand]
    i = _search_pairs(c_group, c_end, group[waiter], at, side="right") - 1
    ok = i >= 0
    ci = np.maximum(i, 0)
    src = cand[ci]
    ok &= c_group[ci] == group[waiter]
    ok &= track[src] != track[waiter]
    ok &= at - end[src] <= tol
    ok &= end[src] > pred_end[waiter]
    if floor is not None:
        ok &= end[src] >= floor
    ok &= ts[src] <= ts[waiter]  # an edge never goes back in time
    # The runner-up: the next latest end in the group (any other track), for the evidence.
    ri = np.maximum(i - 1, 0)
    has_ru = (i >= 1) & (c_group[ri] == group[waiter])
    runner = np.where(has_ru, cand[ri], -1)
    w = waiter[ok]
    s = src[ok]
    return _frame(
        s,
        w,
        ev[S.RANK].to_numpy()[w],
        ts[w] - end[s],
        np.asarray(idle)[ok],
        pred_ev[w],
        runner[ok],
        np.where(runner[ok] >= 0, end[np.maximum(runner[ok], 0)], -1),
        kind=kind,
    )


def _frame(src, dst, rank, gap, idle, beaten, runner, runner_end, kind: str) -> pd.DataFrame:
    n = len(src)
    return pd.DataFrame(
        {
            S.SRC: np.asarray(src, np.int64),
            S.DST: np.asarray(dst, np.int64),
            S.EDGE_KIND: np.full(n, kind, dtype=object),
            "rank": np.asarray(rank, np.int64),
            "gap_ns": np.asarray(gap, np.int64),
            "idle_ns": np.asarray(idle, np.int64),
            "beaten": np.asarray(beaten, np.int64),
            "runner_up": np.asarray(runner, np.int64),
            "runner_up_end_ns": np.asarray(runner_end, np.int64),
        }
    )
