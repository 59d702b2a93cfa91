"""Neuron DMA tables -> DMA events on one serial track per ring, and the order of each engine.

A DMA queue (``qSyncDynamicHW``) is served by several DMA engines (rings, ``engine_idx``) at
once: its packets overlap in time, so the queue is not one serial resource. Each ring of a queue
gets its own track (``qSyncDynamicHW/ring5``, see :mod:`tracediag.model.dma_rings`), so no track
chains overlapping packets. A DMA engine also serves several queues (``qSyncDynamicHW`` and
``qSyncSpillReload0`` both on engine 5): where its packets follow one another without
overlapping, an ``engine order`` edge links the last packet of one queue to the next packet of
another, so that a what-if that speeds one queue's transfers frees the engine for the next queue
as the hardware would (within one queue, the ring's track order does that).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracediag.model import schema as S
from tracediag.model.assembly import TRACK_LABEL
from tracediag.model.dma_rings import ring_track_name
from tracediag.parsers.neuron_common import (
    column,
    constant,
    fill_missing,
    floats,
    ints,
    labels,
    numbered,
    several,
)
from tracediag.parsers.neuron_dma_lanes import serial_lanes
from tracediag.parsers.neuron_events import event_frame, times


def dma_events(df: pd.DataFrame, device: str) -> pd.DataFrame:
    """``DmaPacket`` (or ``DmaPacketAggregated``) rows -> DMA events, one serial track per ring,
    each with the transfer it serves (``packet_aggregation_id``, :data:`S.TRANSFER`).

    A queue served by several rings (``engine_idx``) at once gets one track per ring (see
    :mod:`tracediag.model.dma_rings`), so that no track chains overlapping packets; with several
    physical cores (``pcore_idx``) each core's queue is its own (``qSyncIO0/pcore1``)."""
    n = len(df)
    engine_idx, evalid = ints(column(df, "engine_idx"), n)
    by_engine = fill_missing(numbered("dma engine ", engine_idx, evalid), "dma")
    named = labels(column(df, "queue_name"), n)
    queue = _per_pcore(fill_missing(named, by_engine), df)
    label = _ring_labels(queue, engine_idx, evalid & ~named.isna())
    label = _lane_labels(label, df, ~evalid)
    variable = labels(column(df, "variable"), n)
    if "unknown" in variable.categories:  # no DGE notification: no tensor name
        variable = variable.remove_categories(["unknown"])
    ids, valid = ints(column(df, "id"), n)
    transfer, tvalid = ints(column(df, "packet_aggregation_id"), n)
    return event_frame(
        df, "dma", fill_missing(variable, queue), label, constant("dma", n), "dma_queue", device,
        **{S.BYTES: floats(column(df, "transfer_bytes"), n), S.SRC_ID: np.where(valid, ids, -1),
           S.TRANSFER: np.where(tvalid, transfer, -1)},
    )  # fmt: skip


def _per_pcore(queue: pd.Categorical, df: pd.DataFrame) -> pd.Categorical:
    """Queue labels with ``/pcore<i>`` appended when the table holds several physical cores."""
    pcore, pvalid = ints(column(df, "pcore_idx"), len(df))
    if not several(pcore[pvalid]):
        return queue
    pair = queue.codes.astype(np.int64) << 32 | np.where(pvalid, pcore + 1, 0)
    codes, uniq = pd.factorize(pair)
    names = [
        f"{queue.categories[u >> 32]}/pcore{(u & 0xFFFFFFFF) - 1}"
        if u & 0xFFFFFFFF
        else str(queue.categories[u >> 32])
        for u in uniq
    ]
    return pd.Categorical.from_codes(codes, pd.Index(names, dtype="str"))


def _ring_labels(queue: pd.Categorical, ring: np.ndarray, has_ring: np.ndarray) -> pd.Categorical:
    """Track labels: ``<queue>/ring<k>`` for the rows of a queue that several rings serve, the
    queue's own label otherwise (one ring: the queue is serial as it is)."""
    q = queue.codes.astype(np.int64)
    rings = (
        pd.Series(ring[has_ring]).groupby(q[has_ring]).nunique()
        if has_ring.any()
        else pd.Series(dtype="int64")
    )
    several = np.zeros(len(queue.categories) + 1, dtype=bool)
    several[rings.index[rings.to_numpy() > 1].to_numpy()] = True
    split = has_ring & several[q]
    if not split.any():
        return queue
    # One label per distinct (queue, ring) pair, formatted once per pair.
    pair = np.where(split, q << 32 | (ring & 0xFFFFFFFF), -1 - q)
    codes, uniq = pd.factorize(pair)
    names = [
        ring_track_name(str(queue.categories[u >> 32]), int(u & 0xFFFFFFFF))
        if u >= 0
        else str(queue.categories[-1 - u])
        for u in uniq
    ]
    return pd.Categorical.from_codes(codes, pd.Index(names, dtype="str"))


def _lane_labels(label: pd.Categorical, df: pd.DataFrame, ringless: np.ndarray) -> pd.Categorical:
    """``label`` with the rows that name no ring spread over serial lanes where their queue's
    transfers overlap (``<queue>/ring<k>``, :mod:`neuron_dma_lanes`); unchanged otherwise."""
    if not ringless.any():
        return label
    start, dur = times(df)
    s = start.to_numpy(dtype=np.float64, na_value=np.nan)
    e = s + dur.to_numpy(dtype=np.float64, na_value=np.nan)
    lane = serial_lanes(np.where(ringless, label.codes, -1).astype(np.int64), s, e)
    if lane.max(initial=0) < 1:
        return label
    code = label.codes.astype(np.int64)
    several = np.zeros(len(label.categories), dtype=bool)
    np.logical_or.at(several, code[lane > 0], True)
    split = (lane >= 0) & several[np.maximum(code, 0)] & (code >= 0)
    pair = np.where(split, code << 32 | lane, -1 - code)
    codes, uniq = pd.factorize(pair)
    cats = label.categories
    names = [
        ring_track_name(str(cats[u >> 32]), int(u & 0xFFFFFFFF)) if u >= 0 else str(cats[-1 - u])
        for u in uniq  # one per distinct (queue, lane)
    ]
    missing = code < 0
    if missing.any():  # keep a missing label missing
        codes = np.where(missing, -1, codes)
    return pd.Categorical.from_codes(codes, pd.Index(names, dtype="str")).remove_unused_categories()


def engine_order_edges(dma: pd.DataFrame, events: pd.DataFrame, first_row: int) -> pd.DataFrame:
    """Edges packet -> next packet on the same DMA engine (and physical core) where the next one
    belongs to another track (another queue) and starts no earlier than the first ends; kind
    ``dependency``. ``events``: :func:`dma_events` of ``dma``; rows from ``first_row``."""
    n = len(dma)
    ring, valid = ints(column(dma, "engine_idx"), n)
    pcore, _ = ints(column(dma, "pcore_idx"), n)
    start, dur = times(dma)
    ok = valid & start.notna().to_numpy() & dur.notna().to_numpy()
    rows = np.flatnonzero(ok)
    empty = pd.DataFrame({S.SRC: np.zeros(0, np.int64), S.DST: np.zeros(0, np.int64),
                          S.EDGE_KIND: "dependency"})  # fmt: skip
    if len(rows) < 2:
        return empty
    s = start.to_numpy(dtype=np.int64, na_value=0)[rows]
    e = s + dur.to_numpy(dtype=np.int64, na_value=0)[rows]
    engine = pcore[rows] * (int(ring[rows].max()) + 1) + ring[rows]
    o = np.lexsort((rows, s, engine))
    engine, s, e, rows = engine[o], s[o], e[o], rows[o]
    track = events[TRACK_LABEL].array.codes[rows]
    follow = (engine[1:] == engine[:-1]) & (track[1:] != track[:-1]) & (s[1:] >= e[:-1])
    src, dst = rows[:-1][follow], rows[1:][follow]
    return pd.DataFrame(
        {
            S.SRC: first_row + src,
            S.DST: first_row + dst,
            S.EDGE_KIND: constant("dependency", len(src)),
        }
    )
