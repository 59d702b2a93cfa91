"""Waits a GPU trace implies but does not record: idle streams and idle host threads.

Four inferences, each giving edges of its own kind with its evidence (see
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
- ``device_wait``: a host thread that was silent while the device worked and resumes just after
  the device's busy run ends, the device then idle until the host gives it more (a synchronous
  loop: ``jax.block_until_ready``, ``.item()``, a blocking copy or synchronize the profiler did
  not record as a call), waited for that device work: its next event binds to the run's
  latest-ending event. A thread blocked *inside* one call instead (a ``block_until_ready`` or
  synchronize recorded as an event spanning the wait, with no sync record) waited the same way:
  the edge goes to that call, whose end the graph then takes from the device work. Both live in
  :mod:`tracediag.graph.device_waits`, with their tests and thresholds; the thresholds, edge
  kinds and evidence columns in :mod:`tracediag.graph.wait_evidence`.
- ``dispatch_wait``: on a rank whose trace records no launches (TPU XPlane), device work that
  starts a busy run later than its recorded predecessors allow binds to the host call of its
  process that returned just before (:func:`tracediag.graph.device_waits.dispatch_waits`).

A wait is explained only by a predecessor that ends within the tolerance of the waiter's start,
never by one that ends somewhere inside the wait: a recorded predecessor that ends earlier leaves
the wait unexplained, and an inferred one must end later than every recorded one (else the
recorded one binds anyway and no edge is added).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracediag.graph.device_waits import (
    DEVICE_WORK,
    blocking_calls,
    device_waits,
    dispatch_waits,
)
from tracediag.graph.sort_orders import stable_order_by
from tracediag.graph.wait_evidence import (
    MIN_DEVICE_WAIT_NS,
    MIN_THREAD_SILENCE_NS,
    QUIET_THREAD_TOLERANCE_NS,
    STREAM_TOLERANCE_NS,
    STREAM_WAIT,
    THREAD_HANDOFF,
    THREAD_TOLERANCE_NS,
    empty_evidence_frame,
    evidence_frame,
    process_of_rank,
    rank_track,
    search_pairs,
)
from tracediag.model import schema as S

_GRAPH_KINDS = ("compute", "dma", "collective", "sync", "host")
_PID = re.compile(r"^cpu (.+?)/")  # Kineto's host track label: "cpu {pid}/{tid} (name)"


def idle_wait_edges(trace: S.Trace, recorded: tuple | None = None) -> pd.DataFrame:
    """Inferred ``stream_wait``, ``thread_handoff`` and ``device_wait`` edges with their evidence
    (columns SRC, DST, EDGE_KIND and :data:`EVIDENCE_COLUMNS`); empty without GPU streams or
    threads. ``recorded``: :func:`recorded_predecessors` of the trace when the caller has it."""
    ev = trace.events
    if not len(ev):
        return empty_evidence_frame()
    pred_end, pred_ev, synced = recorded or recorded_predecessors(trace)
    silences = _silences(trace, min(MIN_THREAD_SILENCE_NS, MIN_DEVICE_WAIT_NS))
    parts = [
        _stream_waits(trace, pred_end, pred_ev, synced),
        _thread_handoffs(trace, pred_end, pred_ev, silences),
        device_waits(trace, pred_end, pred_ev, silences),
        blocking_calls(trace),
        dispatch_waits(trace, pred_end, pred_ev),
    ]
    return pd.concat(parts, ignore_index=True)


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
    rt = rank_track(ev)
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
        o = stable_order_by(dst, end[src])  # per destination, the latest-ending source last
        last = np.r_[dst[o][1:] != dst[o][:-1], True] if len(o) else np.zeros(0, bool)
        d, s = dst[o][last], src[o][last]
        later = end[s] > pred_end[d]
        pred_end[d[later]] = end[s[later]]
        pred_ev[d[later]] = s[later]
    return pred_end, pred_ev, synced


def _stream_waits(trace, pred_end, pred_ev, synced) -> pd.DataFrame:
    ev = trace.events
    ts = ev[S.TS].to_numpy()
    end = ts + ev[S.DUR].to_numpy()
    track = ev[S.TRACK].to_numpy()
    tracks = trace.tracks
    on_stream = (S.strings(tracks[S.TRACK_KIND]) == "gpu_stream")[track]
    work = on_stream & ev[S.KIND].isin(DEVICE_WORK).to_numpy()
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


def _thread_handoffs(trace, pred_end, pred_ev, silences=None) -> pd.DataFrame:
    sil = silences if silences is not None else _silences(trace, MIN_THREAD_SILENCE_NS)
    if sil is None:
        return empty_evidence_frame()
    ev = trace.events
    ts = ev[S.TS].to_numpy()
    end = ts + ev[S.DUR].to_numpy()
    long = sil.hi - sil.lo >= MIN_THREAD_SILENCE_NS
    w, s_lo, s_hi = sil.waiter[long], sil.lo[long], sil.hi[long]
    edges = _bind(
        THREAD_HANDOFF,
        ev,
        sil.group,
        sil.graph_on,
        end,
        w,
        s_hi,
        pred_end,
        pred_ev,
        THREAD_TOLERANCE_NS,
        idle=s_hi - s_lo,
        floor=s_lo,
        # Past the tolerance, a hand-off with nothing else of the process started between.
        quiet=(
            QUIET_THREAD_TOLERANCE_NS,
            lambda g, lo, hi: _starts_between(trace, sil.group, g, lo, hi) == 0,
        ),
    )
    # A thread's first event ends a silence since the trace began, which says little: where one
    # process drives several ranks, that first event is not taken as woken by another rank's
    # thread (a device's copies launched before the Python thread's first dispatch).
    first = np.zeros(len(ev), dtype=bool)
    first[w[sil.first[long]]] = True
    rank = ev[S.RANK].to_numpy()
    src, dst = edges[S.SRC].to_numpy(), edges[S.DST].to_numpy()
    edges = edges[~(first[dst] & (rank[src] != rank[dst]))]
    # Several silences before one waiter: the latest resume binds it.
    return edges.drop_duplicates(S.DST, keep="last").reset_index(drop=True)


def _starts_between(trace: S.Trace, group: np.ndarray, q_group, lo, hi) -> np.ndarray:
    """Per query: how many events (annotations included) of host threads of process group
    ``q_group`` start strictly between ``lo`` and ``hi``."""
    ev = trace.events
    is_thread = (S.strings(trace.tracks[S.TRACK_KIND]) == "cpu_thread")[ev[S.TRACK].to_numpy()]
    on = np.flatnonzero(is_thread)
    ts = ev[S.TS].to_numpy()[on]
    g = group[on]
    o = stable_order_by(g, ts)
    g, ts = g[o], ts[o]
    a = search_pairs(g, ts, q_group, lo, side="right")
    b = search_pairs(g, ts, q_group, hi, side="left")
    return np.maximum(b - a, 0)


class _Silences:
    """Host threads' silences that end at a graph event: per silence its start ``lo``, its end
    ``hi`` (the resume), the waiter (the thread's next graph event), and the thread's process
    group, and whether it is the thread's first (since the trace began); ``group`` (per event)
    and ``graph_on`` (the host graph events) for the binding."""

    def __init__(self, lo, hi, waiter, rank, waiter_group, group, graph_on, first):
        self.lo, self.hi, self.waiter, self.rank = lo, hi, waiter, rank
        self.waiter_group, self.group, self.graph_on = waiter_group, group, graph_on
        self.first = first


def _silences(trace: S.Trace, min_ns: int) -> _Silences | None:
    """The silences of at least ``min_ns`` on host threads (None without host graph events).

    A silence is a gap between consecutive instants (starts and ends of every event,
    annotations included) of one thread; a thread's first instant ends one too (it was idle
    since the trace began: the autograd thread's first backward). A graph event that spans the
    silence (a blocking call) means the thread was busy, not idle: no silence there."""
    ev = trace.events
    ts = ev[S.TS].to_numpy()
    end = ts + ev[S.DUR].to_numpy()
    track = ev[S.TRACK].to_numpy()
    tracks = trace.tracks
    is_thread = (S.strings(tracks[S.TRACK_KIND]) == "cpu_thread")[track]
    if not is_thread.any():
        return None
    rt = rank_track(ev)
    on = np.flatnonzero(is_thread)
    inst_rt = np.r_[rt[on], rt[on]]
    inst_t = np.r_[ts[on], end[on]]
    o = stable_order_by(inst_rt, inst_t)
    inst_rt, inst_t = inst_rt[o], inst_t[o]
    same = inst_rt[1:] == inst_rt[:-1]
    silent = np.flatnonzero(same & (np.diff(inst_t) >= min_ns))
    graph_on = on[ev[S.KIND].isin(_GRAPH_KINDS).to_numpy()[on]]
    if not len(graph_on):
        return None
    first = np.flatnonzero(np.r_[True, ~same])
    s_rt = np.r_[inst_rt[silent], inst_rt[first]]
    s_lo = np.r_[inst_t[silent], np.full(len(first), int(ts.min()) - MIN_THREAD_SILENCE_NS)]
    s_hi = np.r_[inst_t[silent + 1], inst_t[first]]
    s_first = np.r_[np.zeros(len(silent), dtype=bool), np.ones(len(first), dtype=bool)]
    o = stable_order_by(s_rt, s_hi)
    s_rt, s_lo, s_hi, s_first = s_rt[o], s_lo[o], s_hi[o], s_first[o]
    # The thread's next graph event after each silence: the waiter.
    g = graph_on[stable_order_by(rt[graph_on], ts[graph_on])]
    g_key_rt, g_ts = rt[g], ts[g]
    k = search_pairs(g_key_rt, g_ts, s_rt, s_hi, side="left")
    has_next = (k < len(g)) & (g_key_rt[np.minimum(k, len(g) - 1)] == s_rt)
    w = np.where(has_next, g[np.minimum(k, len(g) - 1)], -1)
    prev_ok = np.ones(len(s_rt), dtype=bool)
    kp = k - 1
    same_prev = (kp >= 0) & (g_key_rt[np.maximum(kp, 0)] == s_rt)
    prev_end = end[g[np.maximum(kp, 0)]]
    prev_ok[same_prev] = prev_end[same_prev] <= s_lo[same_prev]
    keep = has_next & prev_ok
    w, s_lo, s_hi, s_first = w[keep], s_lo[keep], s_hi[keep], s_first[keep]
    # Threads of one process form a group (of one rank, or of the ranks one process drives).
    pid = np.array([_process(str(name)) for name in S.strings(tracks[S.TRACK_NAME])], dtype=object)
    pid_code = pd.factorize(pid)[0]
    group = _group_key(process_of_rank(trace)[ev[S.RANK].to_numpy()], pid_code[track])
    rank = ev[S.RANK].to_numpy()[w]
    return _Silences(s_lo, s_hi, w, rank, group[w], group, graph_on, s_first)


def _process(label: str) -> str:
    """The process of a host track from its label; a label that names none is a thread of the
    rank's one process (an XPlane host plane's lines: the runtime API calls of a thread and the
    Python thread's own line are one process)."""
    m = _PID.match(label)
    return m.group(1) if m else ""


def _group_key(rank: np.ndarray, sub: np.ndarray) -> np.ndarray:
    return rank.astype(np.int64) * (int(sub.max(initial=0)) + 2) + sub.astype(np.int64) + 1


def _bind(
    kind, ev, group, cand, end, waiter, at, pred_end, pred_ev, tol, idle, floor=None, quiet=None
):
    """Per waiter resuming at ``at``: the candidate of its group on another track whose end is
    the latest at or before ``at``, kept when it ends within ``tol`` of ``at``, after the waiter's
    recorded predecessors (and after ``floor``, the start of its silence, when given).
    ``quiet``: (a longer tolerance, a test ``(group, lo, hi) -> bool`` per waiter) that admits a
    candidate up to that tolerance when the test passes between its end and ``at``."""
    if not len(waiter) or not len(cand):
        return empty_evidence_frame()
    track = ev[S.TRACK].to_numpy()
    ts = ev[S.TS].to_numpy()
    o = stable_order_by(group[cand], end[cand])
    cand = cand[o]
    c_group, c_end = group[cand], end[cand]
    i = search_pairs(c_group, c_end, group[waiter], at, side="right") - 1
    # The latest end on the waiter's own track is no candidate: then the one before that run of
    # its track. A zero-length waiter ends at ``at`` itself (XLA's thread pools record only
    # instants: a worker's ThreadpoolListener::StartRegion), and would hide every other track.
    new_run = np.r_[True, track[cand][1:] != track[cand][:-1]]
    before_run = np.flatnonzero(new_run)[np.cumsum(new_run) - 1] - 1
    own = (i >= 0) & (track[cand[np.maximum(i, 0)]] == track[waiter])
    i = np.where(own, before_run[np.maximum(i, 0)], i)
    ok = i >= 0
    ci = np.maximum(i, 0)
    src = cand[ci]
    ok &= c_group[ci] == group[waiter]
    ok &= track[src] != track[waiter]
    near = at - end[src] <= tol
    if quiet is not None:
        longer, test = quiet
        maybe = np.flatnonzero(ok & ~near & (at - end[src] <= longer))
        near[maybe] = test(group[waiter][maybe], end[src][maybe], at[maybe])
    ok &= near
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
    return evidence_frame(
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
