"""What a rank's host threads and devices do around a launch gap: which threads launch device
work, until when the device drains what was queued, how much it works inside a window, what one
launch call costs, and which host op is dispatching in a gap (HST401's stalls and dispatch gaps).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracediag.analysis.intervals import interval_overlap, overlap_pairs
from tracediag.graph.device_waits import device_busy_runs
from tracediag.graph.wait_evidence import DEVICE_WAKE_TOLERANCE_NS
from tracediag.model import schema as S


def launch_call_ns(ctx) -> np.ndarray:
    """Per rank (indexed by rank id): the median duration of its calls that launch device work
    (a ``launch`` edge's source), 0 without: what one launch costs the host, so the least a
    device idles between launches of a host that issues them back to back."""
    import pandas as pd

    ev, ed = ctx.trace.events, ctx.trace.edges
    src = np.unique(ed[S.SRC].to_numpy()[(ed[S.EDGE_KIND] == "launch").to_numpy()])
    rank = ev[S.RANK].to_numpy()
    out = np.zeros(int(max(rank.max(initial=0), ctx.graph.rank.max(initial=0))) + 1, np.int64)
    cost = pd.Series(ev[S.DUR].to_numpy()[src]).groupby(rank[src]).median()
    out[cost.index.to_numpy().astype(np.int64)] = cost.to_numpy().astype(np.int64)
    return out


def dispatching(ctx, nodes: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per gap ``[lo, hi]`` before launch call ``nodes[i]``: the outermost event on a CPU thread
    of its rank that begins in the gap and is still running when the call is made (the op
    whose dispatch issues the launch: ``PjitFunction(dot)`` around XLA's thunk, ``aten::mm``
    around ``cudaLaunchKernel``); -1 where none."""

    g, ev = ctx.graph, ctx.trace.events
    out = np.full(len(nodes), -1, np.int64)
    track = ev[S.TRACK].to_numpy()
    on_cpu = np.append(ctx.trace.tracks[S.TRACK_KIND].astype(str).to_numpy() == "cpu_thread", False)
    cand = np.flatnonzero(on_cpu[np.where(track >= 0, track, len(on_cpu) - 1)])
    ts = ev[S.TS].to_numpy()[cand]
    stop = ts + ev[S.DUR].to_numpy()[cand]
    o = np.argsort(lo, kind="stable")
    item, win, _, _ = overlap_pairs(ts, stop, lo[o], hi[o] + 1)
    win = o[win]
    keep = (
        (ev[S.RANK].to_numpy()[cand][item] == g.rank[nodes[win]])
        & (ts[item] >= lo[win])
        & (ts[item] < hi[win])
        & (stop[item] > hi[win])
        & (cand[item] != g.event[nodes[win]])
    )
    item, win = item[keep], win[keep]
    first = np.lexsort((ts[item], win))  # per gap, the earliest start first
    head = first[np.r_[True, win[first][1:] != win[first][:-1]]] if len(first) else first
    out[win[head]] = cand[item[head]]
    return out


def event_names(ctx, event: np.ndarray) -> np.ndarray:
    """Event names (``""`` for -1), read for these rows only."""

    out = np.full(len(event), "", dtype=object)
    has = event >= 0
    out[has] = ctx.trace.events[S.NAME].iloc[event[has]].astype(str).to_numpy()
    return out


def launch_tracks(ctx) -> np.ndarray:
    """Per track (and a trailing False for none): a device track, or a host thread with an
    event that launches device work (a recorded ``launch`` edge)."""

    kinds = ctx.trace.tracks[S.TRACK_KIND].astype(str).to_numpy()
    out = np.append(kinds != "cpu_thread", False)
    ed = ctx.trace.edges
    src = ed[S.SRC].to_numpy()[(ed[S.EDGE_KIND] == "launch").to_numpy()]
    out[np.unique(ctx.trace.events[S.TRACK].to_numpy()[src])] = True
    return out


def device_busy_until(
    ctx, rank: np.ndarray, lo: np.ndarray, hi: np.ndarray, woken: bool = True
) -> np.ndarray:
    """Per stall [lo, hi] of a rank: until when the host may have waited for its device
    (clipped to [lo, hi]; ``lo`` where it did not). That is the end of the rank's busy run in
    progress at ``lo`` or starting within :data:`_QUEUED_START_NS` of it (work queued before
    the host went quiet; a run that starts later was launched during the stall, the device
    idling before it), when a thread of the rank wakes within
    :data:`~tracediag.graph.wait_evidence.DEVICE_WAKE_TOLERANCE_NS` of that end: a wait the graph
    did not bind (too short for the inference to tell from overhead). A host that resumes
    later was busy, not waiting, while the device drained its queue. With ``woken`` False the
    wake is not asked: when the device drained, whatever the host did meanwhile."""

    runs = device_busy_runs(ctx.trace)
    ev = ctx.trace.events
    on_host = (ctx.trace.tracks[S.TRACK_KIND].astype(str).to_numpy() == "cpu_thread")[
        ev[S.TRACK].to_numpy()
    ]
    ev_rank, ev_ts = ev[S.RANK].to_numpy(), ev[S.TS].to_numpy()
    out = lo.astype(np.int64, copy=True)
    for r in np.unique(rank):  # per rank (a few), each one vectorised search
        on, mine = runs.rank == r, rank == r
        start, end = runs.start[on], runs.end[on]
        if not len(start):
            continue
        k = np.minimum(np.searchsorted(end, lo[mine], side="right"), len(end) - 1)
        queued = (end[k] > lo[mine]) & (
            start[k] <= np.minimum(lo[mine] + _QUEUED_START_NS, hi[mine])
        )
        until = np.clip(end[k], lo[mine], hi[mine])
        # a host event of the rank starting just after the run's end: something woke for it
        starts = np.sort(ev_ts[on_host & (ev_rank == r)])
        first = np.searchsorted(starts, until, side="left")
        woke = first < len(starts)
        woke[woke] = starts[first[woke]] - until[woke] <= DEVICE_WAKE_TOLERANCE_NS
        out[mine] = np.where(queued & (woke | (not woken)), until, lo[mine])
    return out


#: A stall through which the rank's other threads launch device work for at least this share
#: of it (first to last launch) is a wait for those threads, not a host stall.
FED_SHARE = 0.5


def launches_within(ctx, rank: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple:
    """Per window ``(lo, hi)`` of a rank, the calls of the rank that launch device work (a
    recorded ``launch`` edge's source, on any of its threads) starting strictly inside: how
    many, and the start of the first and of the last (``lo`` where none)."""

    ev, ed = ctx.trace.events, ctx.trace.edges
    src = np.unique(ed[S.SRC].to_numpy()[(ed[S.EDGE_KIND] == "launch").to_numpy()])
    src_rank, src_ts = ev[S.RANK].to_numpy()[src], ev[S.TS].to_numpy()[src]
    count = np.zeros(len(lo), dtype=np.int64)
    first, last = lo.astype(np.int64, copy=True), lo.astype(np.int64, copy=True)
    for r in np.unique(rank):  # per rank (a few), each one vectorised search
        mine = np.flatnonzero(rank == r)
        ts = np.sort(src_ts[src_rank == r])
        a = np.searchsorted(ts, lo[mine], side="right")
        b = np.searchsorted(ts, hi[mine], side="left")
        some = b > a
        count[mine] = np.maximum(b - a, 0)
        first[mine[some]], last[mine[some]] = ts[a[some]], ts[b[some] - 1]
    return count, first, last


def launch_span_within(ctx, rank: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per window of a rank: the ns from the first to the last launch inside it (0 for fewer
    than two): how long the rank's threads go on feeding the device through it."""
    _, first, last = launches_within(ctx, rank, lo, hi)
    return last - first


def device_busy_within(ctx, rank: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per window ``[lo, hi]`` of a rank: the ns its devices work inside it (the union of
    their busy runs, ``device_waits.device_busy_runs``)."""

    from tracediag.graph.device_waits import device_busy_runs

    runs = device_busy_runs(ctx.trace)
    out = np.zeros(len(lo), dtype=np.int64)
    for r in np.unique(rank):
        mine, on = rank == r, runs.rank == r
        out[mine] = interval_overlap(lo[mine], hi[mine], runs.start[on], runs.end[on])
    return out


#: Work the host queued just before it went quiet starts this soon after (launch latency: 5-20
#: µs on real CUDA and ROCm traces; more when it waits behind other work, then it belongs to the
#: busy run already in progress).
_QUEUED_START_NS = 50_000

#: Texts that name nothing: empty, or a null pointer or missing value printed as text.
_NO_NAME = r"\s*(?:\(null\)|null|none|nil|nan|<null>|\(none\))?\s*"


def launched_layer(ctx, nodes: np.ndarray) -> str:
    """The layer of the device work the stalled calls launch, else of the calls themselves
    (a stream wait launches nothing), else their op, when the trace says."""

    ev = ctx.trace.events
    ed = ctx.trace.edges
    events = ctx.graph.event[nodes]
    launched = ed.loc[ed[S.SRC].isin(events), S.DST].to_numpy()
    for col, rows in ((S.LAYER, launched), (S.LAYER, events), (S.OP, launched)):
        if col in ev and len(rows):
            vals = S.strings(ev[col])[rows]
            vals = vals[vals != None]  # noqa: E711 (object array of str or None)
            # A range named "(null)" (an NVTX range pushed with a NULL message, printed by C)
            # or "" names no layer: the next source is asked instead.
            vals = vals[
                ~pd.Series(vals, dtype=object).str.fullmatch(_NO_NAME, case=False).to_numpy(bool)
            ]
            if len(vals):
                return str(pd.Series(vals).mode().iloc[0])
    return ""
