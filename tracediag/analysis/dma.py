"""The DMA table rules read: each transfer with its queue and ring, tensor, bytes, achieved
bandwidth, direction and layer; the time each queue is busy; the bandwidth a queue typically
achieves (what a what-if restores to); and the hardware peak a transfer of each direction is
compared with."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd

from tracediag.analysis.group_codes import group_codes
from tracediag.analysis.intervals import busy_ns_by_group
from tracediag.analysis.peers import event_ordinals, peer_track_names
from tracediag.graph.sort_orders import stable_order_by
from tracediag.model import schema as S
from tracediag.model import wording
from tracediag.model.dma_rings import split_ring_names

#: A DMA engine's queue (Neuron ``qSyncIO0``): its transfers are compared with the queue's peak.
QUEUE = "queue"
#: A GPU copy whose name says no direction: no peak applies.
UNKNOWN = "unknown"
#: Not a transfer: a memset only writes, and has no transfer bandwidth.
MEMSET = "memset"
#: Copy directions by the words of a copy's name or of the call that launched it (Kineto's
#: ``Memcpy HtoD (Pinned -> Device)``, ``Memcpy PtoP (Device -> Device)``, XPlane's
#: ``MemcpyH2D``, HIP's ``hipMemcpyDtoDAsync``, CUDA's ``cudaMemcpyPeerAsync``), tried in order.
_DIRECTIONS = (
    (MEMSET, re.compile(r"memset", re.IGNORECASE)),
    ("PtoP", re.compile(r"PtoP|P2P|peer", re.IGNORECASE)),
    ("HtoD", re.compile(r"HtoD|H2D|(?:host|pinned|pageable)\s*(?:->|to)\s*device", re.IGNORECASE)),
    ("DtoH", re.compile(r"DtoH|D2H|device\s*(?:->|to)\s*(?:host|pinned|pageable)", re.IGNORECASE)),
    ("DtoD", re.compile(r"DtoD|D2D|device\s*(?:->|to)\s*device", re.IGNORECASE)),
)


def copy_direction(name: str) -> str:
    """``HtoD``, ``DtoH``, ``DtoD``, ``PtoP`` or ``memset`` as ``name`` says; "" when it does not."""
    return next((d for d, pattern in _DIRECTIONS if pattern.search(name or "")), "")


def direction_peak(hw, direction: str) -> tuple[float, str]:
    """The peak (B/s) a transfer of ``direction`` is compared with on hardware ``hw`` and its
    name: host copies the host link (the profile's DMA figure, PCIe on GPUs), device-to-device
    copies the device memory (HBM) bandwidth halved, since a copy reads and writes every byte,
    peer copies the device link (NVLink, xGMI), a DMA engine's queue the queue's figure.
    Memsets and copies of unknown direction have none (NaN, "")."""
    if hw is None:
        return math.nan, ""
    peak, label = {
        "HtoD": (hw.dma_queue_bw, "host link"),
        "DtoH": (hw.dma_queue_bw, "host link"),
        "DtoD": (hw.hbm_bw / 2, "device memory (HBM, read and write)"),
        "PtoP": (hw.link_bw, "device link"),
        QUEUE: (hw.dma_queue_bw, "DMA queue"),
    }.get(direction, (0.0, ""))
    return (float(peak), label) if peak and peak > 0 else (math.nan, "")


#: How messages name the transfers of a direction (one table, kept with the other words).
DIRECTION_WORDS = wording.DIRECTION_WORDS


def dma_frame(
    trace: S.Trace, ordinals: np.ndarray | None = None, inferred: pd.DataFrame | None = None
) -> pd.DataFrame:
    """DMA events with their queue, ring, tensor, bytes, duration, achieved bandwidth,
    direction, layer and the transfer they serve (``transfer``: -1 a transfer of its own; see
    :func:`per_transfer`).

    ``bytes`` is NaN where the format records none, and where it records 0 for a transfer that
    took time (profilers write ``size:0`` when they did not capture the size). ``direction``
    (:func:`copy_direction` of the event's name, else of the call that launched it): ``HtoD``,
    ``DtoH``, ``DtoD``, ``PtoP``, ``memset``, :data:`QUEUE` for a DMA engine's queue,
    :data:`UNKNOWN` for a GPU copy that says none.

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
    nbytes = ev[S.BYTES].to_numpy()[ids] if S.BYTES in ev else np.full(len(ids), np.nan)
    nbytes = np.where(nbytes > 0, nbytes, np.nan)  # 0 B that took time: the size is unknown
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
            "bytes": nbytes,
            "ordinal": ordinals[ids],
            "transfer": ev[S.TRANSFER].to_numpy()[ids]
            if S.TRANSFER in ev
            else np.full(len(ids), -1),
        },
        index=pd.Index(np.arange(len(ids))),
    )
    df["bw"] = df["bytes"] / np.maximum(df["dur"], 1) * 1e9  # bytes/s
    df["direction"] = _directions(trace, ids, track)
    # Grouped by codes (the queue's per track, the tensor's category): no string per row.
    queue_code = pd.factorize(np.asarray(queues, dtype=object))[0].astype(np.int64)[track]
    df["tensor_ordinal"] = _tensor_ordinals(df, queue_code, _tensor_codes(ev[S.NAME], ids))
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


def _directions(trace: S.Trace, ids: np.ndarray, track: np.ndarray) -> np.ndarray:
    """Per DMA: its direction from its name, else from the name of the call that launched it
    (ROCm copies run as ``__amd_rocclr_copyBuffer`` kernels launched by ``hipMemcpyDtoDAsync``);
    a DMA queue's transfer is :data:`QUEUE`, a GPU stream's copy that says none :data:`UNKNOWN`."""
    out = _per_distinct_at(trace.events[S.NAME], ids, copy_direction)
    missing = out == ""
    ed = trace.edges
    if missing.any() and len(ed):
        launch = (ed[S.EDGE_KIND] == "launch").to_numpy(dtype=bool)
        dst = ed[S.DST].to_numpy()[launch]
        row = np.searchsorted(ids, dst)  # ``ids`` ascend: a search finds the launched DMAs
        hit = row < len(ids)
        hit[hit] = ids[row[hit]] == dst[hit]
        src = ed[S.SRC].to_numpy()[launch][hit]
        callers = _per_distinct_at(trace.events[S.NAME], src, copy_direction)
        take = missing[row[hit]] & (callers != "")
        out[row[hit][take]] = callers[take]
    on_gpu = (trace.tracks[S.TRACK_KIND].astype(str) == "gpu_stream").to_numpy()[track]
    return np.where(out != "", out, np.where(on_gpu, UNKNOWN, QUEUE)).astype(object)


def _per_distinct_at(col: pd.Series, rows: np.ndarray, fn) -> np.ndarray:
    """``fn`` of the text of ``col`` at ``rows`` (missing: ""), called once per distinct text:
    for a categorical by the codes the rows use (no string per row)."""
    if not isinstance(col.dtype, pd.CategoricalDtype):
        return _per_distinct(col.to_numpy(dtype=object)[rows], fn)
    cats = col.cat.categories
    codes = col.cat.codes.to_numpy()[rows].astype(np.int64) + 1  # 0: missing
    used = np.flatnonzero(np.bincount(codes, minlength=len(cats) + 1))
    table = np.empty(len(cats) + 1, dtype=object)
    table[used] = [fn("" if c == 0 else str(cats[c - 1])) for c in used]
    return table[codes]


def _per_distinct(values: np.ndarray, fn) -> np.ndarray:
    """``fn`` of each distinct text (missing: ""), spread back without a call per row."""
    text = pd.Series(values, dtype=object).fillna("").astype(str).to_numpy(dtype=object)
    if not len(text):
        return np.zeros(0, dtype=object)
    uniq, inverse = np.unique(text, return_inverse=True)
    return np.array([fn(u) for u in uniq], dtype=object)[inverse]


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


def _tensor_ordinals(
    df: pd.DataFrame, queue_code: np.ndarray, tensor_code: np.ndarray
) -> np.ndarray:
    """Per transfer: its position among its rank's transfers of the same queue and tensor, in
    time order. Rings are taken dynamically (a packet goes to whichever ring is free), so a
    transfer's peer on another rank is the same k-th transfer of the tensor, not the k-th
    transfer of the same ring. ``queue_code`` and ``tensor_code``: per row, equal for equal
    names (:func:`_tensor_codes`)."""
    if not len(df):
        return np.zeros(0, dtype=np.int64)
    group = group_codes(df["rank"].to_numpy(), queue_code, tensor_code)[0]
    o = stable_order_by(group, df["ts"].to_numpy())
    g = group[o]
    first = np.r_[0, np.flatnonzero(g[1:] != g[:-1]) + 1]
    out = np.empty(len(g), dtype=np.int64)
    out[o] = np.arange(len(g)) - np.repeat(first, np.diff(np.r_[first, len(g)]))
    return out


def _tensor_codes(col: pd.Series, rows: np.ndarray) -> np.ndarray:
    """Per row of ``rows``: a code equal for equal texts of ``col``, a missing one counted as
    "" (its category code, not a string per row)."""
    if not isinstance(col.dtype, pd.CategoricalDtype):
        return pd.factorize(pd.Series(_texts_at(col, rows), dtype=object).fillna(""))[0]
    cats = col.cat.categories
    codes = col.cat.codes.to_numpy()[rows].astype(np.int64)
    empty = cats.get_indexer([""])[0] if len(cats) else -1
    return np.where(codes >= 0, codes, empty if empty >= 0 else len(cats))


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


def typical_bandwidth(
    dma: pd.DataFrame, min_bytes: float, floor_ratio: float = 0.5, *, by_direction: bool = False
) -> pd.Series:
    """The bandwidth a queue's transfers usually achieve: per queue name, the median over its
    transfers of at least ``min_bytes`` (all its transfers when none is that large).

    A queue whose every transfer is slow has no fast peer on the queue itself: when its median
    is below ``floor_ratio`` of the median over all queues' large transfers, its peers are the
    other queues, and that job-wide median is its typical bandwidth.

    ``by_direction``: per (queue, direction) instead, each direction's job-wide median its own,
    memsets left out (a GPU stream runs host copies at PCIe speed and device copies at HBM
    speed: one median of both is neither's typical pace; a memset is no transfer).
    """
    if by_direction:
        dma = dma[(dma["direction"] != MEMSET).to_numpy()]
        # Each column factorized, the codes combined (no tuple per row), sorted as the
        # (queue, direction) pairs sort.
        code, first = group_codes(dma["queue"], dma["direction"], sort=True)
        keys = pd.MultiIndex.from_arrays(
            [dma["queue"].iloc[first].to_numpy(), dma["direction"].iloc[first].to_numpy()],
            names=["queue", "direction"],
        )
        lane = dma["direction"].to_numpy()
    else:
        key = pd.Index(dma["queue"].to_numpy(), name="queue")
        lane = np.zeros(len(dma), dtype=np.int64)
        code, keys = pd.factorize(key, sort=True)
    # Grouped by the keys' codes: a few million rows are not a frame filtered and grouped by
    # string twice.
    lanes = pd.factorize(lane)[0]
    bw = pd.Series(dma["bw"].to_numpy())
    big = (dma["bytes"] >= min_bytes).to_numpy()

    def median_per_key(rows: np.ndarray, by: np.ndarray) -> pd.Series:
        rows = rows & (by >= 0) & np.isfinite(bw.to_numpy())
        return bw[rows].groupby(by[rows]).median()

    every = np.ones(len(code), dtype=bool)
    fallback = median_per_key(every, code)
    typical = median_per_key(big, code).reindex(fallback.index).fillna(fallback)
    # The job-wide median of each key's lane (its direction, or the whole job).
    job_big, job_all = median_per_key(big, lanes), median_per_key(every, lanes)
    job_wide = job_big.reindex(job_all.index).fillna(job_all)
    key_lane = pd.Series(lanes).groupby(code).first().reindex(typical.index)
    floor = job_wide.reindex(key_lane.to_numpy()).to_numpy()
    values = typical.to_numpy()
    values = np.where(np.isfinite(floor) & ~(values >= floor_ratio * floor), floor, values)
    index = keys[typical.index.to_numpy()] if len(typical) else keys[:0]
    return pd.Series(values, index=index, name="bw")


def per_transfer(dma: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    """One row per transfer of ``dma`` (rows of :func:`dma_frame`): the packets of a rank that
    share a ``transfer`` id, a packet without one on its own. Its ``event``, rank, queue,
    direction and tensor are its first row's; ``ts`` its earliest packet's start, ``dur`` the
    span to its last packet's end, ``bytes`` the packets' sum (NaN when none states a size),
    ``bw`` bytes over the span and ``packets`` their number; with, per row of ``dma``, its
    transfer (a row of the result), for the per-packet changes.

    A transfer's descriptors are the vendor's unit of DMA efficiency (the 32 KiB target is per
    transfer, not per packet): a transfer served by several rings at once moves its packets in
    parallel, so its bandwidth is its bytes over its span, not any packet's."""
    n = len(dma)
    transfer = dma["transfer"].to_numpy(dtype=np.int64)
    own = transfer < 0
    # A packet without an id is keyed by its own row, apart from every id (negative keys).
    key = np.where(own, -1 - np.arange(n, dtype=np.int64), transfer)
    group, first = group_codes(dma["rank"].to_numpy(), key)
    ts = dma["ts"].to_numpy()
    end = ts + dma["dur"].to_numpy()
    m = len(first)
    start = np.full(m, np.iinfo(np.int64).max, dtype=np.int64)
    stop = np.full(m, np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(start, group, ts)
    np.maximum.at(stop, group, end)
    nbytes = dma["bytes"].to_numpy(dtype=np.float64)
    known = np.isfinite(nbytes)
    total = np.bincount(group[known], weights=nbytes[known], minlength=m)
    stated = np.bincount(group[known], minlength=m) > 0
    out = dma.iloc[first][["event", "rank", "track", "queue", "tensor", "direction"]]
    out = out.reset_index(drop=True).assign(
        ts=start,
        dur=stop - start,
        bytes=np.where(stated, total, np.nan),
        packets=np.bincount(group, minlength=m),
    )
    out["bw"] = out["bytes"] / np.maximum(out["dur"], 1) * 1e9
    return out, group


def transfer_count(rows: pd.DataFrame) -> int:
    """How many transfers the packets ``rows`` (rows of :func:`dma_frame`) belong to: the
    distinct ``transfer`` ids of each rank, a packet without one a transfer of its own."""
    if not len(rows):
        return 0
    transfer = rows["transfer"].to_numpy(dtype=np.int64)
    own = transfer < 0
    if own.all():
        return len(rows)
    pairs = np.column_stack([rows["rank"].to_numpy(dtype=np.int64)[~own], transfer[~own]])
    return int(own.sum()) + len(np.unique(pairs, axis=0))
