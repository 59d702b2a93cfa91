"""The DMA table rules read: each transfer with its queue and ring, tensor, bytes, achieved
bandwidth and layer; the time each queue is busy; and the bandwidth a queue typically achieves
(what a what-if restores to)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracediag.analysis.intervals import busy_ns_by_group
from tracediag.analysis.peers import event_ordinals, peer_track_names
from tracediag.graph.dependencies import stable_order_by
from tracediag.model import schema as S
from tracediag.model.dma_rings import split_ring_names


def dma_frame(
    trace: S.Trace, ordinals: np.ndarray | None = None, inferred: pd.DataFrame | None = None
) -> pd.DataFrame:
    """DMA events with their queue, ring, tensor, bytes, duration, achieved bandwidth and layer.

    ``queue`` is the queue's name on every ring that serves it (``ring`` its number, -1 for a
    queue with one track); ``ordinal`` counts the transfers of the event's own track and
    ``tensor_ordinal`` those of its queue and tensor (the event's name: the tensor a Neuron DMA
    moves), so a transfer's peer on another rank has the same ``queue``, ``tensor`` and
    ``tensor_ordinal``. The layer is the DMA's own when the
    format gives one (Neuron readers take it from the tensor's name), else the layer of the
    instruction that triggered it (an explicit ``dma_trigger`` edge); never the layer of the
    work that consumes it, which may load several layers' tensors ahead. ``ordinals`` (of
    :func:`event_ordinals`) are ranked on the DMA events' tracks alone when not given;
    ``inferred`` is accepted for callers that pass their inferred edges (they never carry a
    DMA's layer).
    """
    del inferred  # inferred edges are waits, never a DMA's trigger
    ev = trace.events
    is_dma = (ev[S.KIND] == "dma").to_numpy()
    ids = np.flatnonzero(is_dma)
    track = ev[S.TRACK].to_numpy()[ids]
    on_dma_track = np.zeros(len(trace.tracks), dtype=bool)
    on_dma_track[track] = True
    queues, rings = split_ring_names(peer_track_names(trace, on_dma_track))
    if ordinals is None:
        ordinals = event_ordinals(trace, on_dma_track)
    ts = ev[S.TS].to_numpy()[ids]
    df = pd.DataFrame(
        {
            "event": ids,
            "rank": ev[S.RANK].to_numpy()[ids],
            "track": track,
            # The few track names taken per row (not a string array of every row re-inferred).
            "queue": pd.Series(queues).array.take(track)
            if len(ids)
            else np.array([], dtype=object),
            "ring": rings[track],
            "tensor": _texts_at(ev[S.NAME], ids),
            "ts": ts,
            "dur": ev[S.DUR].to_numpy()[ids],
            "bytes": ev[S.BYTES].to_numpy()[ids] if S.BYTES in ev else np.full(len(ids), np.nan),
            "ordinal": ordinals[ids],
        },
        index=pd.Index(np.arange(len(ids))),
    )
    df["bw"] = df["bytes"] / np.maximum(df["dur"], 1) * 1e9  # bytes/s
    df["tensor_ordinal"] = _tensor_ordinals(df)
    if S.LAYER not in ev:
        df["layer"] = np.full(len(ids), None, dtype=object)
        return df
    layers, code = _category_codes(ev[S.LAYER])
    own = code[ids]
    layer = np.where(own >= 0, own, _trigger_layer(trace, ids, code))
    if (layer >= 0).any() and all(isinstance(x, str) for x in layers):
        # The few layer names taken per row, missing where -1 (not a string per row re-inferred).
        df["layer"] = pd.Series(np.asarray(layers, dtype=object)).array.take(layer, allow_fill=True)
    else:
        df["layer"] = np.full(len(ids), None, dtype=object)
    return df


def queue_busy_ns(dma: pd.DataFrame) -> pd.Series:
    """Per (rank, queue): the time any of the queue's rings moves data (the union of its
    transfers' intervals; the gaps between them are idle, however many rings overlap)."""
    if not len(dma):
        return pd.Series(
            dtype="int64", index=pd.MultiIndex.from_arrays([[], []], names=["rank", "queue"])
        )
    code, queues = pd.factorize(dma["queue"])
    rank = dma["rank"].to_numpy().astype(np.int64)
    group = rank * (len(queues) + 1) + code
    ts = dma["ts"].to_numpy()
    busy = busy_ns_by_group(group, ts, ts + dma["dur"].to_numpy())
    g = busy.index.to_numpy()
    index = pd.MultiIndex.from_arrays(
        [g // (len(queues) + 1), np.asarray(queues, dtype=object)[g % (len(queues) + 1)]],
        names=["rank", "queue"],
    )
    return pd.Series(busy.to_numpy(dtype=np.int64), index=index, name="busy_ns")


def _tensor_ordinals(df: pd.DataFrame) -> np.ndarray:
    """Per transfer: its position among its rank's transfers of the same queue and tensor, in
    time order. Rings are taken dynamically (a packet goes to whichever ring is free), so a
    transfer's peer on another rank is the same k-th transfer of the tensor, not the k-th
    transfer of the same ring."""
    if not len(df):
        return np.zeros(0, dtype=np.int64)
    key = pd.MultiIndex.from_arrays(
        [df["rank"].to_numpy(), df["queue"].to_numpy(), df["tensor"].fillna("").to_numpy()]
    )
    group = pd.factorize(key)[0].astype(np.int64)
    o = stable_order_by(group, df["ts"].to_numpy())
    g = group[o]
    first = np.r_[0, np.flatnonzero(g[1:] != g[:-1]) + 1]
    out = np.empty(len(g), dtype=np.int64)
    out[o] = np.arange(len(g)) - np.repeat(first, np.diff(np.r_[first, len(g)]))
    return out


def _texts_at(col: pd.Series, rows: np.ndarray) -> np.ndarray:
    """``col`` at ``rows`` as objects, taken by category code (not a string per event)."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        cats = np.asarray(col.cat.categories, dtype=object)
        codes = col.cat.codes.to_numpy()[rows]
        return np.where(codes >= 0, np.r_[cats, [None]][codes], None)
    return col.to_numpy(dtype=object)[rows]


def _category_codes(col: pd.Series) -> tuple[list, np.ndarray]:
    """The distinct values of a column and each row's index into them (-1: missing)."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        return list(col.cat.categories), col.cat.codes.to_numpy().astype(np.int64)
    codes, uniques = pd.factorize(col)
    return list(uniques), codes.astype(np.int64)


def _trigger_layer(trace: S.Trace, dma_ids: np.ndarray, layer_code: np.ndarray) -> np.ndarray:
    """Per DMA: the layer of the instruction that triggered it (``dma_trigger`` edge), -1."""
    out = np.full(len(dma_ids), -1, dtype=np.int64)
    ed = trace.edges
    if not len(ed) or not len(dma_ids):
        return out
    trig = (ed[S.EDGE_KIND] == "dma_trigger").to_numpy(dtype=bool)
    dst = ed[S.DST].to_numpy()[trig]
    # ``dma_ids`` ascend: a search finds the edges into a DMA (no sort of every transfer).
    row = np.searchsorted(dma_ids, dst)
    hit = row < len(dma_ids)
    hit[hit] = dma_ids[row[hit]] == dst[hit]
    layers = layer_code[ed[S.SRC].to_numpy()[trig][hit]]
    ok = layers >= 0
    out[row[hit][ok]] = layers[ok]
    return out


def typical_bandwidth(dma: pd.DataFrame, min_bytes: float, floor_ratio: float = 0.5) -> pd.Series:
    """The bandwidth a queue's transfers usually achieve: per queue name, the median over its
    transfers of at least ``min_bytes`` (all its transfers when none is that large).

    A queue whose every transfer is slow has no fast peer on the queue itself: when its median
    is below ``floor_ratio`` of the median over all queues' large transfers, its peers are the
    other queues, and that job-wide median is its typical bandwidth.
    """
    # Grouped by the queue names' codes: a few million rows are not a frame filtered and
    # grouped by string twice.
    code, queues = pd.factorize(dma["queue"], sort=True)
    bw = pd.Series(dma["bw"].to_numpy())
    big = (dma["bytes"] >= min_bytes).to_numpy()

    def median_per_queue(rows: np.ndarray) -> pd.Series:
        rows = rows & (code >= 0)
        med = bw[rows].groupby(code[rows]).median()
        return pd.Series(med.to_numpy(), index=queues[med.index].rename("queue"), name="bw")

    typical = median_per_queue(big)
    fallback = median_per_queue(np.ones(len(code), dtype=bool))
    typical = typical.reindex(fallback.index).fillna(fallback)
    job_wide = float(bw[big].median()) if big.any() else float(bw.median())
    if np.isfinite(job_wide):
        typical = typical.where(typical >= floor_ratio * job_wide, job_wide)
    return typical
