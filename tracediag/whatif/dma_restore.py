"""What-ifs for DMA causes: transfers at the queue's typical bandwidth, queueing as usual."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracediag.analysis.context import Analysis
from tracediag.graph import dependencies as G
from tracediag.graph.changes import WhatIf


def typical_trigger_wait(ctx: Analysis) -> pd.Series:
    """Per queue name: the median gap between a DMA's trigger and its start."""
    dma = ctx.dma
    nodes = ctx.nodes_of(dma["event"].to_numpy())
    ok = nodes >= 0
    code = np.where(ok, ctx.graph.bind_code[np.maximum(nodes, 0)], -1)
    gap = np.where(ok, ctx.graph.gap[np.maximum(nodes, 0)], 0)
    trig = np.flatnonzero(code == G.DMA_TRIGGER)
    # Only the triggered rows' queue names (not the whole column as Python strings).
    return pd.Series(gap[trig]).groupby(dma["queue"].iloc[trig].to_numpy()).median()


def restore(
    ctx: Analysis,
    rows: pd.DataFrame,
    target_bw: pd.Series | float,
    *,
    trigger_wait: pd.Series | None = None,
    merge_packets: bool = False,
) -> WhatIf:
    """A change that moves the DMA ``rows`` (of ``ctx.dma``) at ``target_bw`` bytes/s.

    Transfers already faster keep their duration. With ``trigger_wait`` a wait after the
    trigger longer than the queue's typical one is cut to it; with ``merge_packets`` the gaps
    between consecutive packets on the queue shrink by their typical (median) gap: the bytes
    move as one transfer and pay its setup once, while idle time between them stays.
    """
    bw = (
        rows["queue"].map(target_bw).to_numpy(dtype=float)
        if isinstance(target_bw, pd.Series)
        else np.full(len(rows), float(target_bw))
    )
    nodes = ctx.nodes_of(rows["event"].to_numpy())
    ok = (nodes >= 0) & np.isfinite(bw) & (bw > 0) & rows["bytes"].notna().to_numpy()
    nodes, bw, sub = nodes[ok], bw[ok], rows.loc[ok]
    want = np.ceil(sub["bytes"].to_numpy() / bw * 1e9).astype(np.int64)
    new_dur = np.minimum(ctx.graph.dur[nodes], want)
    change = WhatIf.durations(nodes, new_dur)
    gap = ctx.graph.gap[nodes]
    code = ctx.graph.bind_code[nodes]
    if trigger_wait is not None:
        usual = sub["queue"].map(trigger_wait).fillna(0).to_numpy(dtype=np.int64)
        late = (code == G.DMA_TRIGGER) & (gap > usual)
        change = change + WhatIf.gaps(nodes[late], usual[late])
    if merge_packets:
        # Each transfer pays a setup gap after the previous one; merged, the bytes pay it once.
        # Only the typical gap between these transfers is setup: a longer one is the queue idle
        # for lack of work (a GPU stream's copies ms apart), which merging does not remove.
        po = (code == G.PROGRAM_ORDER) & (gap > 0)
        setup = int(np.median(gap[po])) if po.any() else 0
        change = change + WhatIf.gaps(nodes[po], gap[po] - np.minimum(gap[po], setup))
    return change
