"""Dependencies the format does not record but the profiler's wait times reveal.

A Neuron instruction's ``evt_wait_time`` is how long it stalled on a semaphore after it was ready
to issue. When no recorded edge explains that stall, the event it waited for is the one on
another track of the same rank (another engine, a DMA queue, a collective) that finished last
inside the stall window [start - wait, start]: the semaphore is released by the last producer
it counts, and the waiter issues right after. Legacy JSON profiles (no edges into collectives)
and Parquet profiles without a Flow table need this for the critical path to cross engines.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracediag.model import schema as S

#: Slack for the last ns of a semaphore signal (the wait ends just after the producer ends).
TOLERANCE_NS = 100


def wait_edges(trace: S.Trace) -> pd.DataFrame:
    """Edges ``producer -> waiter`` (kind ``dependency``) for unexplained semaphore stalls."""
    ev = trace.events
    empty = S.empty_frame(S.EDGE_COLUMNS)
    if not len(ev):
        return empty
    ts = ev[S.TS].to_numpy()
    end = ts + ev[S.DUR].to_numpy()
    # Kind tests on the categorical column (per category, not a string compare per event).
    is_compute = (ev[S.KIND] == "compute").to_numpy(dtype=bool)
    rank = ev[S.RANK].to_numpy()
    wait = _waits(trace, ts, end, is_compute)
    waiter = np.flatnonzero(is_compute & np.isfinite(wait) & (wait > 0))
    if not len(waiter):
        return empty
    ready = ts[waiter] - wait[waiter].astype(np.int64)
    explained = _explained(trace, waiter, ready, end)
    waiter, ready = waiter[~explained], ready[~explained]
    producer = np.flatnonzero(ev[S.KIND].isin(("compute", "dma", "collective")).to_numpy())
    if not len(waiter) or not len(producer):
        return empty
    # Latest producer end <= waiter start, per rank: search in (rank, end) order.
    span = int(end.max() - min(ts.min(), ready.min())) + 1
    base = int(min(ts.min(), ready.min()))
    key_p = rank[producer].astype(np.int64) * span + (end[producer] - base)
    o = np.argsort(key_p, kind="stable")
    key_p, producer = key_p[o], producer[o]
    # A producer ends no later than its waiter starts (the waiter itself is never a candidate).
    key_w = rank[waiter].astype(np.int64) * span + (ts[waiter] - base)
    i = np.searchsorted(key_p, key_w, side="right") - 1
    ok = i >= 0
    cand = producer[np.maximum(i, 0)]
    ok &= rank[cand] == rank[waiter]
    ok &= ev[S.TRACK].to_numpy()[cand] != ev[S.TRACK].to_numpy()[waiter]  # program order has it
    ok &= end[cand] >= ready - TOLERANCE_NS
    return pd.DataFrame(
        {
            S.SRC: cand[ok].astype(np.int64),
            S.DST: waiter[ok].astype(np.int64),
            S.EDGE_KIND: pd.Categorical.from_codes(
                np.full(int(ok.sum()), S.EDGE_KINDS.index("dependency")), categories=S.EDGE_KINDS
            ),
        }
    )


def _waits(trace: S.Trace, ts: np.ndarray, end: np.ndarray, is_compute: np.ndarray) -> np.ndarray:
    """The profiler's stall time per event; on NeuronCore engines without one, the idle time
    since the previous instruction on the engine (an engine idles only when its next
    instruction waits)."""
    ev = trace.events
    wait = (
        ev[S.WAIT].to_numpy(dtype=np.float64, copy=True)
        if S.WAIT in ev
        else np.full(len(ev), np.nan)
    )
    track = ev[S.TRACK].to_numpy()
    engine_track = (S.strings(trace.tracks[S.TRACK_KIND]) == "compute_engine")[track]
    missing = ~np.isfinite(wait) & engine_track & is_compute
    if missing.any():
        o = np.lexsort((ts, track))
        same = np.r_[False, track[o][1:] == track[o][:-1]]
        idle = np.full(len(ev), np.nan)
        prev_end = np.r_[0, end[o][:-1]]
        idle[o[same]] = ts[o][same] - prev_end[same]
        wait[missing] = idle[missing]
    return wait


def _explained(
    trace: S.Trace, waiter: np.ndarray, ready: np.ndarray, end: np.ndarray
) -> np.ndarray:
    """True where a recorded predecessor ends inside the stall window."""
    ed = trace.edges
    if not len(ed):
        return np.zeros(len(waiter), dtype=bool)
    latest = pd.Series(end[ed[S.SRC].to_numpy()]).groupby(ed[S.DST].to_numpy()).max()
    pred_end = latest.reindex(waiter).to_numpy()
    return np.nan_to_num(pred_end, nan=-np.inf) >= ready - TOLERANCE_NS
