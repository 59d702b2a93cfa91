"""A DMA transfer's latency after its trigger, kept where the queue would not hide it.

The graph keeps one gap per node, after its binding predecessor; the replay adds it after
whichever predecessor ends last. For a DMA transfer bound to its trigger on another engine, the
gap is the trigger-to-first-byte latency (descriptor generation and fetch), which the hardware
overlaps with the queue's previous transfer. When a change makes the triggers come sooner, the
queue's previous transfer becomes the last predecessor, and the replay would charge the latency
again after it: an idle queue between every two transfers that the faster engine would not see.
:func:`with_trigger_latency` replays the change once, sets each such transfer's gap to the part
of its latency its trigger still exposes (``start = max(trigger end + latency, other preds)``),
and returns the change with those gaps, for the replay the rule reports.
"""

from __future__ import annotations

import numpy as np

from tracediag.graph.changes import WhatIf
from tracediag.graph.replay import replay
from tracediag.model import schema as S


def with_trigger_latency(ctx, change: WhatIf) -> WhatIf:
    """``change`` plus the gaps of the DMA transfers whose trigger latency the queue would hide
    once ``change`` is made (module docstring); ``change`` alone when none would."""
    g = ctx.graph
    dma_track = (ctx.trace.tracks[S.ENGINE].astype(str) == "dma").to_numpy()
    track = g.track
    on_dma = track >= 0
    on_dma[on_dma] = dma_track[track[on_dma]]
    bind = g.bind
    cand = np.flatnonzero(on_dma & (g.gap > 0) & (bind >= 0))
    if not len(cand):
        return change
    cand = cand[track[bind[cand]] != track[cand]]  # bound to a trigger on another track
    lo, hi = g.pred_ptr[cand], g.pred_ptr[cand + 1]
    several = hi - lo > 1  # a queue predecessor to overlap the latency with
    cand, lo, hi = cand[several], lo[several], hi[several]
    if not len(cand):
        return change
    end = replay(g, change).end
    # The last of each transfer's predecessors' ends: reduceat over [lo, hi) pairs (a sentinel
    # keeps the last slice's end index in range).
    src_end = np.append(end[g.pred_src], 0)
    last = np.maximum.reduceat(src_end, np.column_stack([lo, hi]).ravel())[::2]
    latency = g.gap[cand]
    exposed = np.clip(end[bind[cand]] + latency - last, 0, latency)
    moved = exposed < latency
    if not moved.any():
        return change
    return change + WhatIf.gaps(cand[moved], exposed[moved].astype(np.int64))
