"""Waits a GPU trace implies but does not record: idle streams and idle host threads.

Three inferences, each giving edges of its own kind with its evidence (see
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
  latest-ending event (see :func:`_device_waits` for the tests and their thresholds). A thread
  blocked *inside* one call instead (a ``block_until_ready`` or synchronize recorded as an
  event spanning the wait, with no sync record) waited the same way: the edge goes to that
  call, whose end the graph then takes from the device work (:func:`_blocking_calls`).

A wait is explained only by a predecessor that ends within the tolerance of the waiter's start,
never by one that ends somewhere inside the wait: a recorded predecessor that ends earlier leaves
the wait unexplained, and an inferred one must end later than every recorded one (else the
recorded one binds anyway and no edge is added).
"""

from __future__ import annotations

import re
from typing import NamedTuple

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
#: ... or this soon when nothing else of the process started in between: then no other thread
#: of it can have woken the thread. The first backward of
#: ``kineto_df_index_resolver_1rank`` starts on the autograd thread 587 µs after the main
#: thread's last launch (``aten::ones_like``'s fill), the later ones 250-400 µs after.
QUIET_THREAD_TOLERANCE_NS = 2_000_000

#: A host thread blocked on device work resumes this soon after the work ends: a blocking
#: synchronize wakes its thread in 30-100 µs on ROCm (MI300X XPlane: the Python thread 32-45 µs
#: after each GEMM it waited for, the runtime's launch line 57-99 µs), a few µs on CUDA.
DEVICE_WAKE_TOLERANCE_NS = 100_000
#: ... and was silent at least this long while the device ran. Shorter pauses are Python's
#: overhead between ops that a starved GPU's last kernel happens to span: the host-bound
#: ResNet-50 trace (the host never waits for its GPU; HTA: cpu_bound) has 18 pauses of 30-66 µs
#: that pass every other test here, none of 100 µs.
MIN_DEVICE_WAIT_NS = 100_000

#: Edge kinds these inferences add (``EDGE_KIND`` of their edges).
STREAM_WAIT = "stream_wait"
THREAD_HANDOFF = "thread_handoff"
DEVICE_WAIT = "device_wait"

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
        _device_waits(trace, pred_end, pred_ev, silences),
        _blocking_calls(trace),
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
    rt = _rank_track(ev)
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


class BusyRuns(NamedTuple):
    """The busy runs of each rank's devices, sorted by (rank, start): per run its rank, start,
    end, latest-ending event and the event ending just before that one (-1: a run of one)."""

    rank: np.ndarray
    start: np.ndarray
    end: np.ndarray
    event: np.ndarray
    runner_up: np.ndarray


def device_busy_runs(trace: S.Trace, group_of_rank: np.ndarray | None = None) -> BusyRuns:
    """The union of each rank's device work (compute, DMA and collective events on any track
    but a host thread's) as runs: a run goes on while the next event starts before everything
    started so far has ended. ``group_of_rank`` (indexed by rank): the runs of each group of
    ranks instead, ``BusyRuns.rank`` then holding the group."""
    ev = trace.events
    ts = ev[S.TS].to_numpy()
    end = ts + ev[S.DUR].to_numpy()
    on_device = (S.strings(trace.tracks[S.TRACK_KIND]) != "cpu_thread")[ev[S.TRACK].to_numpy()]
    work = np.flatnonzero(on_device & ev[S.KIND].isin(_DEVICE_WORK).to_numpy())
    rank = ev[S.RANK].to_numpy()
    if group_of_rank is not None:
        rank = group_of_rank[rank]
    work = work[stable_order_by(rank[work], ts[work])]
    w_rank, w_ts, w_end = rank[work].astype(np.int64), ts[work], end[work]
    reach = pd.Series(w_end).groupby(w_rank).cummax().to_numpy()
    new = np.r_[True, (w_rank[1:] != w_rank[:-1]) | (w_ts[1:] > reach[:-1])][: len(work)]
    first = np.flatnonzero(new)
    last = np.r_[first[1:] - 1, len(work) - 1][: len(first)]
    # A run's events keep their positions when sorted by (run, end).
    by_end = np.lexsort((w_end, np.cumsum(new) - 1))
    return BusyRuns(
        w_rank[first],
        w_ts[first],
        reach[last],
        work[by_end[last]],
        np.where(last > first, work[by_end[np.maximum(last - 1, 0)]], -1),
    )


def _device_waits(trace, pred_end, pred_ev, silences) -> pd.DataFrame:
    """``device_wait`` edges: host threads resuming when the device work they waited for ends.

    The device work of a rank forms busy runs (the union of its events on every device track).
    A thread *woke* for a run when, silent at least :data:`MIN_DEVICE_WAIT_NS` while the run
    went on, it resumed within :data:`DEVICE_WAKE_TOLERANCE_NS` of the run's end with the
    devices idle in between (nothing else was queued: the device then waited for the host).
    Every thread of that process silent at least as long while the run went on waited for it
    too, when it resumes within :data:`THREAD_TOLERANCE_NS` of the run's end (the woken thread
    hands it work, as a Python thread does to the runtime's launch line). Each such thread's
    next event binds to the run's latest-ending event; the gap is host time (the wake-up and
    the CPU work after it)."""
    if silences is None:
        return empty_evidence_frame()
    runs = device_busy_runs(trace)
    if not len(runs.start):
        return empty_evidence_frame()
    ev = trace.events
    ts = ev[S.TS].to_numpy()
    end = ts + ev[S.DUR].to_numpy()
    rank = ev[S.RANK].to_numpy()
    run_rank, run_start, run_end = runs.rank, runs.start, runs.end
    run_event, runner = runs.event, runs.runner_up
    # Per silence: the last run of its rank that ended at or before the resume. The thread
    # woke for it when it was silent while the run went on, resumed right after its end, and
    # nothing ran on the rank's devices in between.
    sil = silences
    s_rank = sil.rank.astype(np.int64)
    # The run ends inside the silence (the thread stays silent until it ends); the waiter, the
    # thread's next graph event, starts within the tolerance of its end.
    at = ts[sil.waiter]
    k = search_pairs(run_rank, run_end, s_rank, sil.hi, side="right") - 1
    kc = np.maximum(k, 0)
    nxt = np.minimum(kc + 1, len(run_end) - 1)
    idle_after = (kc + 1 >= len(run_end)) | (run_rank[nxt] != s_rank) | (run_start[nxt] >= at)
    woke = (k >= 0) & (run_rank[kc] == s_rank) & idle_after
    woke &= run_end[kc] - np.maximum(run_start[kc], sil.lo) >= MIN_DEVICE_WAIT_NS
    woke &= at - run_end[kc] <= DEVICE_WAKE_TOLERANCE_NS
    # The runs each process woke for, by (process, end). Every thread of the process silent
    # while such a run went on waited for it too when it resumes within a hand-off's latency of
    # the run's end (the woken thread hands it work: after its own device work is launched).
    wg, wr = np.unique(np.c_[sil.waiter_group[woke], kc[woke]], axis=0).T.reshape(2, -1)
    o = stable_order_by(wg, run_end[wr])
    wg, wr = wg[o], wr[o]
    j = search_pairs(wg, run_end[wr], sil.waiter_group, sil.hi, side="right") - 1
    jc = np.maximum(j, 0)
    ok = (j >= 0) & (wg[jc] == sil.waiter_group) if len(wg) else np.zeros(len(j), bool)
    run = wr[jc] if len(wr) else np.zeros(len(j), np.int64)
    waited = run_end[run] - np.maximum(run_start[run], sil.lo)
    ok &= (waited >= MIN_DEVICE_WAIT_NS) & (at - run_end[run] <= THREAD_TOLERANCE_NS)
    src = run_event[run]
    w = sil.waiter
    ok &= (end[src] > pred_end[w]) & (ts[src] <= ts[w])
    s, w = src[ok], w[ok]
    r = runner[run][ok]
    edges = _frame(
        s,
        w,
        rank[w],
        ts[w] - end[s],
        waited[ok],
        pred_ev[w],
        r,
        np.where(r >= 0, end[np.maximum(r, 0)], -1),
        kind=DEVICE_WAIT,
    )
    return edges.drop_duplicates(S.DST, keep="last").reset_index(drop=True)


def _blocking_calls(trace: S.Trace) -> pd.DataFrame:
    """``device_wait`` edges into host calls that blocked until device work ended.

    A host event on a thread (no event nested in it, at least :data:`MIN_DEVICE_WAIT_NS` long)
    blocked on its process's devices when a busy run of those devices went on for at least
    that long inside it, the call returned within :data:`DEVICE_WAKE_TOLERANCE_NS` of the run's
    end, and no device work of the process started in between (the devices then waited for
    the host). The edge runs from the run's latest-ending event to the call; as it ends after
    the call starts, the graph gives the call a completion node bound by it (as a recorded
    synchronize). Only where the reader names the host process (XPlane: one process drives
    every device of its file, each device a rank; ``block_until_ready`` may be recorded as one
    event spanning the wait). On Kineto traces the same tests find blocking pageable copies
    (``cudaMemcpyAsync``) and MTIA synchronizes, but a path then running through the streams
    they waited for meets stream waits nothing infers yet (kineto_negative_queue_rank0: 21% ->
    54% gap): left out there until those are."""
    ev = trace.events
    ts = ev[S.TS].to_numpy()
    end = ts + ev[S.DUR].to_numpy()
    track = ev[S.TRACK].to_numpy()
    on_thread = (S.strings(trace.tracks[S.TRACK_KIND]) == "cpu_thread")[track]
    named = [int(r) for r, m in trace.meta.items() if "host_process" in m.info]
    calls = np.flatnonzero(
        on_thread
        & (ev[S.KIND] == "host").to_numpy(dtype=bool)
        & np.isin(ev[S.RANK].to_numpy(), named)
    )
    calls = calls[end[calls] - ts[calls] >= MIN_DEVICE_WAIT_NS]
    if not len(calls):
        return empty_evidence_frame()
    # Leaves only: the next event of the thread starts at or after the call's end.
    rt = _rank_track(ev)
    on = np.flatnonzero(on_thread)
    o = on[stable_order_by(rt[on], ts[on])]
    nxt = np.full(len(ev), np.iinfo(np.int64).max, dtype=np.int64)
    same = rt[o][1:] == rt[o][:-1]
    nxt[o[:-1][same]] = ts[o[1:][same]]
    calls = calls[nxt[calls] >= end[calls]]
    rank = ev[S.RANK].to_numpy()
    proc_of_rank = process_of_rank(trace)
    runs = device_busy_runs(trace, proc_of_rank)
    if not len(calls) or not len(runs.start):
        return empty_evidence_frame()
    proc = proc_of_rank[rank[calls]]
    # The last run of the process ending by the call's end; the devices idle from there on.
    k = search_pairs(runs.rank, runs.end, proc, end[calls], side="right") - 1
    kc = np.maximum(k, 0)
    after = np.minimum(kc + 1, len(runs.end) - 1)
    idle_after = (
        (kc + 1 >= len(runs.end)) | (runs.rank[after] != proc) | (runs.start[after] >= end[calls])
    )
    # Device time inside the call (runs split by the µs between back-to-back kernels).
    waited = _busy_until(runs, proc, runs.end[kc]) - _busy_until(runs, proc, ts[calls])
    ok = (k >= 0) & (runs.rank[kc] == proc) & idle_after & (runs.end[kc] > ts[calls])
    ok &= (waited >= MIN_DEVICE_WAIT_NS) & (end[calls] - runs.end[kc] <= DEVICE_WAKE_TOLERANCE_NS)
    c, run = calls[ok], kc[ok]
    src, runner = runs.event[run], runs.runner_up[run]
    return _frame(
        src,
        c,
        rank[c],
        end[c] - end[src],
        waited[ok],
        np.full(len(c), -1, dtype=np.int64),
        runner,
        np.where(runner >= 0, end[np.maximum(runner, 0)], -1),
        kind=DEVICE_WAIT,
    )


def _busy_until(runs: BusyRuns, group: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Per query: the ns the runs of ``group`` were busy before ``t``, counted from the start of
    all runs (the same base for every query of a group, so differences are busy time)."""
    busy = np.r_[0, np.cumsum(runs.end - runs.start)]  # busy[i]: before run i
    i = search_pairs(runs.rank, runs.start, group, t, side="left")  # runs starting before t
    last = np.maximum(i - 1, 0)
    in_group = (i > 0) & (runs.rank[last] == group)
    # The last run that started before t counts up to t; runs of other groups not at all.
    partial = np.where(in_group, np.minimum(t, runs.end[last]) - runs.start[last], 0)
    first = np.searchsorted(runs.rank, group, side="left")
    return np.where(in_group, busy[last] + partial, busy[first])


def process_of_rank(trace: S.Trace) -> np.ndarray:
    """Per rank (indexed by rank): a code shared by the ranks one host process drives (the
    devices of one XPlane file: ``meta.info['host_process']``), else the rank's own."""
    ranks = sorted(set(int(r) for r in trace.meta) | set(np.unique(trace.events[S.RANK]).tolist()))
    keys = [
        ("process", trace.meta[r].info["host_process"])
        if r in trace.meta and "host_process" in trace.meta[r].info
        else ("rank", r)
        for r in ranks
    ]
    out = np.zeros(max(ranks, default=0) + 1, dtype=np.int64)
    out[ranks] = pd.factorize(pd.Series(keys, dtype=object))[0]
    return out


def _process(label: str) -> str:
    """The process of a host track from its label; a label that names none is a thread of the
    rank's one process (an XPlane host plane's lines: the runtime API calls of a thread and the
    Python thread's own line are one process)."""
    m = _PID.match(label)
    return m.group(1) if m else ""


def _group_key(rank: np.ndarray, sub: np.ndarray) -> np.ndarray:
    return rank.astype(np.int64) * (int(sub.max(initial=0)) + 2) + sub.astype(np.int64) + 1


def search_pairs(key, val, q_key, q_val, side: str) -> np.ndarray:
    """Positions of (q_key, q_val) in the (key, val)-sorted arrays (np.searchsorted on pairs)."""
    if not len(key):
        return np.zeros(len(q_key), dtype=np.int64)
    v0 = int(min(val.min(), q_val.min(initial=val.min())))
    span = int(max(val.max(), q_val.max(initial=val.max()))) - v0 + 1
    return np.searchsorted(key * span + (val - v0), q_key * span + (q_val - v0), side=side)


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
