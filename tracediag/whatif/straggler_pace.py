"""The straggler what-if: some ranks run at their peers' pace.

Each event of the ranks that takes longer than the median of the same work on the other ranks
gets that median duration, and each node whose unexplained gap exceeds its peers' median gap
gets that median gap. Moving only a straggler's arrivals would not do: its own slow work would
still hold its engines, so its next arrival would be late again.

"The same work" is, on a device (a NeuronCore engine, a DMA queue, a GPU stream), the event of
the same ordinal on the track of the same name: the compiled program issues the same sequence
on every rank. A CPU thread runs Python, whose op sequence differs between ranks (a rank that
computes something more, logs, collects garbage): one extra op there shifts every later
ordinal, and the rank's ops were compared with unrelated ones (on the real gloo job of
``tests/data/real_gloo/straggler_compute``, rank 1's 30 extra matmuls per step were priced at
36 of the 57 ms per step the job measured). On CPU threads the same work is the op of the same
name and occurrence within the same step on the thread of the same name; an op that no other
rank runs in that step while they run the thread's step is work the peers do not do: at their
pace it takes no time, and neither does the gap before it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracediag.analysis.peers import median_of_others, peer_track_names, track_name_codes
from tracediag.graph.changes import WhatIf
from tracediag.graph.wait_evidence import process_of_rank
from tracediag.model import schema as S

#: The kinds whose durations the pace sets (a collective body's length follows from arrivals).
DURATION_KINDS = ("compute", "dma", "host")


def peer_pace_change(ctx, ranks) -> WhatIf:
    """The change that makes ``ranks`` run at the median pace of the other ranks."""
    ev = ctx.trace.events
    ranks = np.asarray(list(ranks))
    excess = pace_excess(ctx)
    slow = (
        np.isin(ev[S.RANK].to_numpy(), ranks)
        & (excess > 0)
        & ev[S.KIND].isin(DURATION_KINDS).to_numpy()
    )
    ids = np.flatnonzero(slow)
    nodes = ctx.nodes_of(ids)
    ok = nodes >= 0
    change = WhatIf.durations(nodes[ok], ctx.graph.dur[nodes[ok]] - excess[ids][ok])
    return change + _gap_change(ctx, ranks)


def pace_excess(ctx) -> np.ndarray:
    """Per event: ns longer than the same work on the median other rank (device tracks: by
    ordinal, ``ctx.excess_over_peers``; CPU threads: by step, name and occurrence, the whole
    duration where no other rank runs it)."""
    cached = ctx.__dict__.get("_pace_excess")
    if cached is not None:
        return cached
    excess = ctx.excess_over_peers
    host, shared = _host_peers(ctx), _shared_host_work(ctx)
    if host is not None or shared.any():  # else the device excess as it is (no event-sized copy)
        excess = excess.copy()
    if host is not None:
        ids, med, extra = host
        dur = ctx.trace.events[S.DUR].to_numpy()[ids]
        excess[ids] = np.where(extra, dur, np.where(np.isnan(med), 0, dur - np.nan_to_num(med)))
    excess[shared] = 0
    ctx.__dict__["_pace_excess"] = excess
    return excess


def _shared_host_work(ctx) -> np.ndarray:
    """Per event: on a CPU thread of a process that drives several ranks (the devices of one
    XPlane host). Its threads are split among those ranks (the Python thread goes to one of
    them), so they are no rank's own pace: the rank holding the Python thread would be priced
    as running the whole process's host work on top of its peers'."""
    cached = ctx.__dict__.get("_pace_shared_host_work")
    if cached is not None:
        return cached
    ev = ctx.trace.events
    process = process_of_rank(ctx.trace)
    shared = np.bincount(process, minlength=len(process))[process] > 1
    cpu_track = (ctx.trace.tracks[S.TRACK_KIND].astype(str) == "cpu_thread").to_numpy()
    out = cpu_track[ev[S.TRACK].to_numpy()] & shared[ev[S.RANK].to_numpy()]
    ctx.__dict__["_pace_shared_host_work"] = out
    return out


def _gap_change(ctx, ranks: np.ndarray) -> WhatIf:
    g = ctx.graph
    idx, med = ctx.peer_gap_medians
    med = med.copy()
    host = _host_peers(ctx)
    if host is not None:
        ids, _, extra = host
        # The same work's gap on the median other rank: its node's gap, grouped as its event.
        nodes = ctx.nodes_of(ids)
        ok = nodes >= 0
        at = np.searchsorted(idx, g.event_in_node[ids[ok]]) if len(idx) else np.zeros(0, int)
        hit = (at < len(idx)) & (idx[np.minimum(at, len(idx) - 1)] == g.event_in_node[ids[ok]])
        key = _host_keys(ctx, ids)[ok][hit]
        gaps = g.gap[idx[at[hit]]]
        host_med = median_of_others(key, gaps)
        host_med[extra[ok][hit]] = 0  # work the peers do not do has no gap before it either
        med[at[hit]] = host_med
    # A peer's gap may be negative (its event starts a few ns before the one it follows ends:
    # clock rounding, a queue's overlap); the rank's own gap is cut to it but never below its own
    # overlap or 0, or the event would start before its dependency ends (tracediag/engine/
    # saving_bound.py, ``early_ns``).
    gap = g.gap[idx]
    new = np.maximum(np.floor(np.nan_to_num(med)), np.minimum(gap, 0)).astype(np.int64)
    late = np.isin(g.rank[idx], ranks) & ~np.isnan(med) & (gap > new)
    node_event = g.event[idx]
    late &= ~(_shared_host_work(ctx)[np.maximum(node_event, 0)] & (node_event >= 0))
    return WhatIf.gaps(idx[late], new[late])


def _host_peers(ctx):
    """(work event ids on CPU threads, their peers' median duration (NaN: no peer), whether
    no other rank runs that op in the step while they run the thread's step), or None without
    CPU-thread work."""
    cached = ctx.__dict__.get("_pace_host_peers", False)
    if cached is not False:
        return cached
    ev = ctx.trace.events
    tracks = ctx.trace.tracks
    cpu_track = (tracks[S.TRACK_KIND].astype(str) == "cpu_thread").to_numpy()
    on_cpu = cpu_track[ev[S.TRACK].to_numpy()] & ev[S.KIND].isin(DURATION_KINDS).to_numpy()
    ids = np.flatnonzero(on_cpu)
    out = None
    if len(ids):
        key = _host_keys(ctx, ids)
        med = median_of_others(key, ev[S.DUR].to_numpy()[ids])
        thread_step = _thread_step_codes(ctx, ids)
        ranks = ev[S.RANK].to_numpy()[ids]
        ranks_running = pd.Series(ranks).groupby(thread_step).transform("nunique").to_numpy()
        out = (ids, med, np.isnan(med) & (ranks_running > 1))
    ctx.__dict__["_pace_host_peers"] = out
    return out


def _thread_step_codes(ctx, ids: np.ndarray) -> np.ndarray:
    """Per event: a code for (thread by its peer name, step), equal across ranks."""
    ev = ctx.trace.events
    names = track_name_codes(peer_track_names(ctx.trace))[ev[S.TRACK].to_numpy()[ids]]
    step = _steps(ev, ids)
    return pd.factorize(pd.MultiIndex.from_arrays([names, step]))[0].astype(np.int64)


def _steps(ev: pd.DataFrame, ids: np.ndarray) -> np.ndarray:
    if S.STEP not in ev:
        return np.full(len(ids), -1, dtype=np.int64)
    return np.nan_to_num(ev[S.STEP].to_numpy(dtype=np.float64)[ids], nan=-1).astype(np.int64)


def _host_keys(ctx, ids: np.ndarray) -> np.ndarray:
    """Per CPU-thread event: a code for (thread by its peer name, step, op name, occurrence of
    that name in the thread's step), equal for the same op on every rank."""
    ev = ctx.trace.events
    thread_step = _thread_step_codes(ctx, ids)
    name = (
        ev[S.NAME].cat.codes.to_numpy()[ids]
        if hasattr(ev[S.NAME], "cat")
        else (pd.factorize(ev[S.NAME].to_numpy()[ids])[0])
    )
    rank = ev[S.RANK].to_numpy()[ids]
    frame = pd.DataFrame({"r": rank, "ts": thread_step, "n": name, "t": ev[S.TS].to_numpy()[ids]})
    order = np.lexsort((frame["t"].to_numpy(), name, thread_step, rank))
    occurrence = np.empty(len(ids), dtype=np.int64)
    occurrence[order] = frame.iloc[order].groupby(["r", "ts", "n"], sort=False).cumcount()
    return pd.factorize(pd.MultiIndex.from_arrays([thread_step, name, occurrence]))[0].astype(
        np.int64
    )
