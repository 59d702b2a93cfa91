"""DMA transfers that waited for their queue: ``queue_wait`` edges.

A Neuron DMA queue runs its transfers in order, each on several rings at once
(:mod:`tracediag.model.dma_rings`): a transfer queued behind another starts on its rings when
the one before it completes on all of its own. A profile with a Flow table records that as an
edge from the previous transfer; a legacy JSON profile does not, and a transfer that starts
microseconds after its trigger instruction then holds a fixed gap that no what-if can shrink,
nor one on its queue lengthen (the clean-room 1F1B pipeline's spill reloads: 3.7 µs after the
trigger, at the very nanosecond the queue's previous transfer ended on its last ring).

So a DMA event whose start its recorded predecessors (its ring's previous transfer, its
trigger) leave unexplained by more than :data:`TOLERANCE_NS` binds to the transfer of the same
queue, on another ring, that ended last at most that long before it started.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracediag.graph.sort_orders import stable_order_by
from tracediag.graph.wait_evidence import empty_evidence_frame, evidence_frame, search_pairs
from tracediag.model import schema as S
from tracediag.model.dma_rings import split_ring_names

QUEUE_WAIT = "queue_wait"

#: A transfer starts this soon after the one it queued behind ends (the same slack as a
#: semaphore's signal: both are the hardware's own hand-over).
TOLERANCE_NS = 100


def queue_wait_edges(trace: S.Trace, pred_end: np.ndarray, pred_ev: np.ndarray) -> pd.DataFrame:
    """``queue_wait`` edges with their evidence (see the module docstring); ``pred_end`` and
    ``pred_ev``: :func:`tracediag.graph.idle_waits.recorded_predecessors` of the trace."""
    ev = trace.events
    tracks = trace.tracks
    if not len(ev):
        return empty_evidence_frame()
    queue_name, ring = split_ring_names(S.strings(tracks[S.TRACK_NAME]))
    on_ring = (S.strings(tracks[S.TRACK_KIND]) == "dma_queue") & (ring >= 0)
    track = ev[S.TRACK].to_numpy()
    dma = np.flatnonzero(on_ring[track] & (ev[S.KIND] == "dma").to_numpy(dtype=bool))
    if not len(dma):
        return empty_evidence_frame()
    # One code per (rank, queue): the rings of a queue share it.
    queue_of_track = pd.factorize(
        pd.MultiIndex.from_arrays([tracks[S.RANK].to_numpy(), queue_name.astype(str)])
    )[0].astype(np.int64)
    queue = queue_of_track[track[dma]]
    ts = ev[S.TS].to_numpy()[dma]
    end = ts + ev[S.DUR].to_numpy()[dma]
    waiting = ts - pred_end[dma] > TOLERANCE_NS
    if not waiting.any():
        return empty_evidence_frame()
    # The latest end at or before each waiter's start on its queue: search in (queue, end) order.
    o = stable_order_by(queue, end)
    w = np.flatnonzero(waiting)
    at = search_pairs(queue[o], end[o], queue[w], ts[w], side="right") - 1
    ok = at >= 0
    cand = o[np.maximum(at, 0)]
    ok &= queue[cand] == queue[w]
    ok &= end[cand] >= ts[w] - TOLERANCE_NS
    ok &= end[cand] > pred_end[dma[w]]
    ok &= track[dma[cand]] != track[dma[w]]  # its ring's previous transfer is recorded already
    runner = o[np.maximum(at - 1, 0)]
    has_runner = (at >= 1) & (queue[runner] == queue[w])
    w, cand, runner, has_runner = w[ok], cand[ok], runner[ok], has_runner[ok]
    waiter, source = dma[w], dma[cand]
    return evidence_frame(
        source,
        waiter,
        ev[S.RANK].to_numpy()[waiter],
        ts[w] - end[cand],
        ts[w] - pred_end[waiter],
        pred_ev[waiter],
        np.where(has_runner, dma[runner], -1),
        np.where(has_runner, end[runner], -1),
        kind=QUEUE_WAIT,
    )
