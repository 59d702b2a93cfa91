"""What each gap between two bounds would save: the change that closes it, replayed.

AWS's gaps (:mod:`tracediag.analysis.bounds`) say where a window's time goes, not what fixing
it gains: the engines overlap, so closing a gap on one engine shortens the step only where that
engine holds it. Each gap here becomes one change to the rank's events in the window, replayed
on the dependency graph (queues and engines keep their order, the other engines their times):

- DMA idle, TE idle, serialization: every other engine's work (the DMA's transfers too, for
  the TE and the busiest engine) takes no time, and the kept engine's waits after its triggers
  (the gap before a DMA transfer starts) are gone: the DMA (TE, busiest engine) never waits;
- DMA inefficiency: every data transfer at the DMA peak (``bytes / peak``), control transfers
  (at most 4 bytes) in no time;
- excess HBM traffic: each data transfer loses its share of the bytes beyond the necessary ones,
  at the peak (``bytes x (1 - necessary / moved) / peak``);
- TE underutilization: every matrix-engine instruction at its FLOPs at the peak (none: no time);
- transpose overhead: each matrix instruction loses its transpose FLOPs at the peak.

A saving is the replayed window's gain, never more than its gap (the change removes at most the
gap's time from the engine; overlap that the replay finds elsewhere is not the gap's). Replays
cost a pass over the whole graph each, so they run only while ``len(graph)`` x replays stays
within :data:`REPLAY_BUDGET` (a kernel micro-benchmark or a few-rank job); beyond, the savings
are unknown (NaN) and :func:`gap_savings` says why.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracediag.analysis.bounds import CONTROL_TRANSFER_BYTES, GAPS, EventClasses, classify_events
from tracediag.graph.changes import WhatIf

#: Node-replays (graph nodes x replays) the savings may cost: 7 replays of a 1M-node graph
#: would add seconds per rank to a report; a kernel of 20k nodes costs milliseconds.
REPLAY_BUDGET = 10_000_000
#: The note when the budget stops the replays.
OVER_BUDGET = "not replayed: {replays} replays of a {nodes:,}-node graph exceed the budget"


def gap_savings(ctx, table: pd.DataFrame, budget: int = REPLAY_BUDGET) -> tuple[pd.DataFrame, str]:
    """Per rank of ``table`` (:func:`bounds_table`): ``<gap>_saving_ns`` for every gap, the ns
    the replayed window would be shorter with that gap closed (module docstring), at most the
    gap; 0 for a gap of 0, NaN where the gap is unknown or the replays are over ``budget``.
    Returns the frame and a note ("" when every known gap was replayed)."""
    out = pd.DataFrame(index=table.index, columns=[f"{g}_saving_ns" for g in GAPS], dtype=float)
    classes = classify_events(ctx.trace, table, ctx.hardware)
    changes = {}
    for i, r in enumerate(table.index):
        row = table.loc[r]
        for gap in GAPS:
            size = float(row[f"{gap}_ns"])
            if not np.isfinite(size):
                continue
            if size <= 0:
                out.at[r, f"{gap}_saving_ns"] = 0.0
                continue
            changes[(r, gap)] = (i, size)
    if not changes:
        return out, ""
    # Serialization closes the idle gap of the busiest engine when that is the DMA or the matrix
    # engine: one replay for both.
    replays = len({_same_as(table.loc[r], gap) for r, gap in changes})
    if replays * len(ctx.graph) > budget:
        return out, OVER_BUDGET.format(replays=replays, nodes=len(ctx.graph))
    done: dict[tuple, int] = {}
    for (r, gap), (i, size) in changes.items():
        key = _same_as(table.loc[r], gap)
        if key not in done:
            change = _change(ctx, classes, table.loc[r], i, key[1])
            done[key] = ctx.what_if(change) if change is not None else 0
        out.at[r, f"{gap}_saving_ns"] = float(min(done[key], size))
    return out, ""


def with_gap_savings(ctx, table: pd.DataFrame) -> pd.DataFrame:
    """``table`` with :func:`gap_savings`' columns and ``gap_savings_note`` (per rank)."""
    savings, note = gap_savings(ctx, table)
    out = pd.concat([table, savings], axis=1)
    out["gap_savings_note"] = note
    out["gap_savings_note"] = out["gap_savings_note"].astype(object)
    return out


def _same_as(row: pd.Series, gap: str) -> tuple:
    """The replay that closes ``gap`` of ``row``'s rank: (rank, the gap whose change it is)."""
    if gap == "serialization":
        if row["bottleneck"] == "dma":
            return row.name, "dma_idle"
        if row["bottleneck"] == row["matrix_engine"]:
            return row.name, "te_idle"
    return row.name, gap


def _change(ctx, c: EventClasses, row: pd.Series, i: int, gap: str) -> WhatIf | None:
    """The change that closes ``gap`` on rank position ``i`` (module docstring)."""
    mine = (c.pos == i) & c.began & (c.code >= 0)
    matrix = row["matrix_engine"]
    matrix_code = int(np.searchsorted(c.engines, matrix)) if matrix else -2
    if gap in ("dma_idle", "te_idle", "serialization"):
        keep = {"dma_idle": c.dma_code, "te_idle": matrix_code}.get(gap)
        if keep is None:
            keep = int(np.searchsorted(c.engines, row["bottleneck"]))
        ids = np.flatnonzero(mine & (c.code != keep))
        change = _durations(ctx, ids, np.zeros(len(ids)))
        # Nor does it wait the latency between a trigger and its start (the DMA's 2 µs
        # descriptor fetch): the replay adds a node's gap after its last predecessor, whichever
        # that is, so a kept gap would delay the engine once it is busy.
        kept = ctx.nodes_of(np.flatnonzero(mine & (c.code == keep)))
        kept = kept[kept >= 0]
        kept = kept[ctx.graph.gap[kept] > 0]
        gaps = WhatIf.gaps(kept, np.zeros(len(kept), dtype=np.int64))
        return gaps if change is None else change + gaps
    ns = 1e9
    if gap in ("dma_inefficiency", "excess_hbm_traffic"):
        peak = float(row["dma_peak_Bps"])
        ids = np.flatnonzero(mine & (c.code == c.dma_code))
        nbytes = np.nan_to_num(c.nbytes[ids])
        data = nbytes > CONTROL_TRANSFER_BYTES
        if gap == "dma_inefficiency":
            return _durations(ctx, ids, np.where(data, nbytes / peak * ns, 0.0), shorter=True)
        excess = 1.0 - float(row["necessary_bytes"]) / float(row["dma_bytes"])
        ids = ids[data]
        return _durations(ctx, ids, -nbytes[data] * excess / peak * ns, relative=True)
    peak = float(row["te_peak_flops"])
    ids = np.flatnonzero(mine & (c.code == matrix_code))
    if gap == "te_underutilization":
        flops = np.nan_to_num(c.flops[ids])
        return _durations(ctx, ids, flops / peak * ns, shorter=True)
    if gap == "transpose_overhead":
        cut = np.nan_to_num(c.transpose_flops[ids])
        ids, cut = ids[cut > 0], cut[cut > 0]
        return _durations(ctx, ids, -cut / peak * ns, relative=True)
    return None


def _durations(ctx, ids, values, *, shorter=False, relative=False) -> WhatIf | None:
    """The change setting events ``ids``' nodes to ``values`` ns (``relative``: their duration
    plus ``values``), never below 0; ``shorter``: never above their duration either."""
    nodes = ctx.nodes_of(ids)
    ok = nodes >= 0
    if not ok.any():
        return None
    nodes, values = nodes[ok], np.asarray(values, dtype=np.float64)[ok]
    dur = ctx.graph.dur[nodes]
    new = dur + values if relative else values
    if shorter or relative:
        new = np.minimum(new, dur)
    return WhatIf.durations(nodes, np.maximum(np.ceil(new), 0).astype(np.int64))
