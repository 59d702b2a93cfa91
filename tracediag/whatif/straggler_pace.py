"""The straggler what-if: some ranks run at their peers' pace.

Each event of the ranks that takes longer than the median of the same work on the other ranks
(same track name and ordinal) gets that median duration, and each node whose unexplained gap
exceeds its peers' median gap gets that median gap. Moving only a straggler's arrivals would not
do: its own slow work would still hold its engines, so its next arrival would be late again.
"""

from __future__ import annotations

import numpy as np

from tracediag.graph.replay import WhatIf
from tracediag.model import schema as S

_DURATION_KINDS = ("compute", "dma", "host")  # collective bodies' length follows from arrivals


def peer_pace_change(ctx, ranks) -> WhatIf:
    """The change that makes ``ranks`` run at the median pace of the other ranks."""
    ev = ctx.trace.events
    ranks = np.asarray(list(ranks))
    excess = ctx.excess_over_peers
    slow = (
        np.isin(ev[S.RANK].to_numpy(), ranks)
        & (excess > 0)
        & ev[S.KIND].isin(_DURATION_KINDS).to_numpy()
    )
    ids = np.flatnonzero(slow)
    nodes = ctx.nodes_of(ids)
    ok = nodes >= 0
    change = WhatIf.durations(nodes[ok], ctx.graph.dur[nodes[ok]] - excess[ids][ok])
    return change + _gap_change(ctx, ranks)


def _gap_change(ctx, ranks: np.ndarray) -> WhatIf:
    g = ctx.graph
    idx, med = ctx.peer_gap_medians
    late = np.isin(g.rank[idx], ranks) & ~np.isnan(med) & (g.gap[idx] > np.nan_to_num(med))
    return WhatIf.gaps(idx[late], np.floor(med[late]).astype(np.int64))
