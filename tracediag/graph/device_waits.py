"""Host threads that waited for their devices (``device_wait`` edges), and devices that waited
for their host (``dispatch_wait``); see :mod:`tracediag.graph.idle_waits` for the inferences
together.

- A host thread silent while the device worked resumes just after the device's busy run ends,
  the device then idle until the host gives it more (a synchronous loop:
  ``jax.block_until_ready``, ``.item()``, a blocking copy or synchronize the profiler did not
  record as a call): its next event binds to the run's latest-ending event
  (:func:`device_waits`).
- A host call that blocked inside itself until the device work ended (:func:`blocking_calls`):
  the edge goes to that call, whose end the graph then takes from the device work.
- Device work no recorded launch ties to the host that starts right after a host call returns,
  its devices idle until then (:func:`dispatch_waits`).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

from tracediag.graph.sort_orders import stable_order_by
from tracediag.graph.wait_evidence import (
    DEVICE_WAIT,
    DEVICE_WAKE_TOLERANCE_NS,
    DISPATCH_TOLERANCE_NS,
    DISPATCH_WAIT,
    MIN_DEVICE_WAIT_NS,
    THREAD_TOLERANCE_NS,
    empty_evidence_frame,
    evidence_frame,
    process_of_rank,
    rank_track,
    search_pairs,
)
from tracediag.model import schema as S

#: Below this, a recorded predecessor's end is none (``recorded_predecessors``' -2**62).
NO_PREDECESSOR = -(2**61)

#: The formats whose host calls dispatch device work directly. Not Neuron's (any layout): the
#: host event just before an execution there is the runtime's ``enc_barrier``, a wait for the
#: other ranks whose release no what-if moves; bound to it, a slow rank's executions could not
#: speed up (the clean-room system straggler: COL201 0.63 ms against the truth's 1.75 ms). Not
#: Kineto's yet: on the MTIA trace (no launch records) the 9 dispatches found are plausible
#: (``enqueueCommand memcpyHtoDAsync`` 17-49 µs before each ``dma_request``), but the worker
#: threads making them had been silent 6.7-41 ms and resumed 0.5-6.9 ms after the device went
#: idle, woken by nothing the trace shows, so the path then ran back along those threads: 76%
#: host where the device works.
DISPATCH_FORMATS = ("xplane",)

#: The event kinds that are device work.
DEVICE_WORK = ("compute", "dma", "collective")


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
    work = np.flatnonzero(on_device & ev[S.KIND].isin(DEVICE_WORK).to_numpy())
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


def device_waits(trace, pred_end, pred_ev, silences) -> pd.DataFrame:
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
    edges = evidence_frame(
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


def blocking_calls(trace: S.Trace) -> pd.DataFrame:
    """``device_wait`` edges into host calls that blocked until device work ended.

    A host event on a thread (no event nested in it, at least :data:`MIN_DEVICE_WAIT_NS` long)
    blocked on its process's devices when a busy run of those devices went on for at least
    that long inside it, the call returned within :data:`DEVICE_WAKE_TOLERANCE_NS` of the run's
    end, and no device work of the process started in between (the devices then waited for
    the host). The edge runs from the run's latest-ending event to the call; as it ends after
    the call starts, the graph gives the call a completion node bound by it (as a recorded
    synchronize). XPlane's ``block_until_ready`` may be recorded as one event spanning the
    wait; on Kineto traces these are blocking pageable copies (``cudaMemcpyAsync``), launches
    held by a full launch queue and synchronizes without a ``cuda_sync`` record."""
    ev = trace.events
    ts = ev[S.TS].to_numpy()
    end = ts + ev[S.DUR].to_numpy()
    track = ev[S.TRACK].to_numpy()
    on_thread = (S.strings(trace.tracks[S.TRACK_KIND]) == "cpu_thread")[track]
    calls = np.flatnonzero(on_thread & (ev[S.KIND] == "host").to_numpy(dtype=bool))
    calls = calls[end[calls] - ts[calls] >= MIN_DEVICE_WAIT_NS]
    if not len(calls):
        return empty_evidence_frame()
    # Leaves only: the next event of the thread starts at or after the call's end.
    rt = rank_track(ev)
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
    return evidence_frame(
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


def dispatch_waits(trace: S.Trace, pred_end, pred_ev) -> pd.DataFrame:
    """``dispatch_wait`` edges: device work that waited for its host to dispatch it, where the
    trace records no launches (TPU XPlane: the host enqueues a step's program and the device
    runs it; nothing ties the step's first op to the host call).

    On a rank of :data:`DISPATCH_FORMATS` none of whose events a recorded ``launch`` edge
    reaches (TPU XPlane), a device event that
    starts a busy run of the rank's devices (they idled before it) more than
    :data:`DISPATCH_TOLERANCE_NS` after its recorded predecessor ended binds to the host event
    of its process (any thread) that ended last at or before its start, when that end is
    within the tolerance and later than the recorded predecessor's. Its gap is host time."""
    formats = [r for r, m in trace.meta.items() if m.format in DISPATCH_FORMATS]
    if not formats:
        return empty_evidence_frame()
    ev = trace.events
    ts = ev[S.TS].to_numpy()
    end = ts + ev[S.DUR].to_numpy()
    rank = ev[S.RANK].to_numpy()
    on_thread = (S.strings(trace.tracks[S.TRACK_KIND]) == "cpu_thread")[ev[S.TRACK].to_numpy()]
    ed = trace.edges
    launched = ed[S.DST].to_numpy()[(ed[S.EDGE_KIND] == "launch").to_numpy(dtype=bool)]
    unlaunched = np.isin(rank, formats) & ~np.isin(rank, np.unique(rank[launched]))
    host = np.flatnonzero(on_thread & (ev[S.KIND] == "host").to_numpy(dtype=bool))
    work = ~on_thread & ev[S.KIND].isin(DEVICE_WORK).to_numpy() & unlaunched
    if not len(host) or not work.any():
        return empty_evidence_frame()
    runs = device_busy_runs(trace)
    # The events that start a run (the devices idled before them), late for what is recorded.
    work = np.flatnonzero(work)
    k = search_pairs(runs.rank, runs.start, rank[work], ts[work], side="left")
    kc = np.minimum(k, len(runs.start) - 1)
    starts = (k < len(runs.start)) & (runs.rank[kc] == rank[work]) & (runs.start[kc] == ts[work])
    late = ts[work] - pred_end[work] > DISPATCH_TOLERANCE_NS
    waiter, run = work[starts & late], kc[starts & late]
    if not len(waiter):
        return empty_evidence_frame()
    # Per waiter: the host event of its process that ended last at or before its start.
    proc = process_of_rank(trace)
    order = stable_order_by(proc[rank[host]], end[host])
    h = host[order]
    h_proc, w_proc = proc[rank[h]], proc[rank[waiter]]
    j = search_pairs(h_proc, end[h], w_proc, ts[waiter], side="right") - 1
    jc = np.maximum(j, 0)
    src = h[jc]
    ok = (j >= 0) & (h_proc[jc] == w_proc) & (ts[waiter] - end[src] <= DISPATCH_TOLERANCE_NS)
    ok &= end[src] > pred_end[waiter]
    prev = np.maximum(j - 1, 0)
    runner = np.where((j >= 1) & (h_proc[prev] == w_proc), h[prev], -1)
    # The devices idled from the rank's previous run (or its recorded predecessor) to the start.
    before = np.maximum(run - 1, 0)
    idle_from = np.where(
        (run >= 1) & (runs.rank[before] == rank[waiter]), runs.end[before], pred_end[waiter]
    )
    s, w, r = src[ok], waiter[ok], runner[ok]
    return evidence_frame(
        s,
        w,
        rank[w],
        ts[w] - end[s],
        np.where(idle_from[ok] > NO_PREDECESSOR, ts[w] - idle_from[ok], 0),  # 0: unknown
        pred_ev[w],
        r,
        np.where(r >= 0, end[np.maximum(r, 0)], -1),
        kind=DISPATCH_WAIT,
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
