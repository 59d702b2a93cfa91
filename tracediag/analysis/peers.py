"""Peers of an event: the same work on other ranks, and typical figures to restore a cause to.

Data-parallel ranks run the same program, so the k-th event of a track on one rank is the same
work as the k-th event of the track of the same name on another rank. What-ifs restore a cause
to what these peers achieve (the median rank, the typical bandwidth of a queue), never to the
hardware's peak.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracediag.graph.dependencies import stable_order_by
from tracediag.model import schema as S


def peer_track_names(trace: S.Trace, tracks: np.ndarray | None = None) -> np.ndarray:
    """Per track, a name equal for the same resource on every rank.

    Neuron engines and queues already are (``tensor``, ``qSyncIO0``). GPU streams drop the
    device (rank r runs on GPU r: ``gpu3/stream 7`` -> ``stream 7``); CPU threads, whose ids
    differ everywhere, become ``cpu thread #k`` by the order of their first event on the rank.
    With ``tracks`` (a mask per track) only those tracks' names are asked for: unless one is a
    CPU thread, the threads keep their own names (numbering them reads every event).
    """
    tr = trace.tracks
    names = (
        tr[S.TRACK_NAME].astype(str).str.replace(r"^gpu\d+/", "", regex=True).to_numpy(dtype=object)
    )
    cpu = (tr[S.TRACK_KIND].astype(str) == "cpu_thread").to_numpy()
    if cpu.any() and (tracks is None or (cpu & tracks).any()):
        ev = trace.events
        first = (
            ev.groupby(S.TRACK, observed=True)[S.TS].min().reindex(np.arange(len(tr))).to_numpy()
        )
        order = (
            pd.Series(first[cpu])
            .groupby(tr[S.RANK].to_numpy()[cpu])
            .rank(method="first")
            .to_numpy()
        )
        names[cpu] = [f"cpu thread #{k}" for k in order.astype(int)]
    return names


def track_name_codes(names: np.ndarray) -> np.ndarray:
    """Per track, an int64 code equal for equal peer track names (index it by event's track
    rather than factorizing a string per event)."""
    return pd.factorize(names)[0].astype(np.int64)


def event_ordinals(trace: S.Trace, tracks: np.ndarray | None = None) -> np.ndarray:
    """Per event: its position in time order among the events of its kind group on its track.

    Markers (annotations, CUPTI sync records) are counted apart from work: they sit at host
    times, in a different order on different ranks, and would push the work's ordinals out of
    step with its peers'. With ``tracks`` (a mask per track) only the events on those tracks
    are ranked, the same as in the whole table, and the others read -1: a caller that needs a
    few tracks' ordinals sorts only their events.
    """
    ev = trace.events
    if not len(ev):
        return np.zeros(0, dtype=np.int64)
    track = ev[S.TRACK].to_numpy()
    rows = np.flatnonzero(tracks[track]) if tracks is not None else np.arange(len(ev))
    marker = (ev[S.KIND] == "marker").to_numpy(dtype=np.int64)[rows]
    key = track[rows].astype(np.int64) * 2 + marker
    order = stable_order_by(key, ev[S.TS].to_numpy()[rows])  # ties: event order
    k = key[order]
    first = np.r_[0, np.flatnonzero(k[1:] != k[:-1]) + 1]
    run_start = np.repeat(first, np.diff(np.r_[first, len(k)]))
    out = np.full(len(ev), -1, dtype=np.int64)
    # Markers never pair with work: their ordinals live above every work ordinal.
    out[rows[order]] = np.arange(len(rows)) - run_start + marker[order] * len(ev)
    return out


def peer_events(trace: S.Trace, ordinals: np.ndarray, event_ids: np.ndarray) -> np.ndarray:
    """The events on every rank (the given ones included) that match by track name and ordinal."""
    ev = trace.events
    tname = peer_track_names(trace)[ev[S.TRACK].to_numpy()]
    want = pd.MultiIndex.from_arrays([tname[event_ids], ordinals[event_ids]]).unique()
    have = pd.MultiIndex.from_arrays([tname, ordinals])
    return np.flatnonzero(have.isin(want))


def dma_frame(
    trace: S.Trace, ordinals: np.ndarray | None = None, inferred: pd.DataFrame | None = None
) -> pd.DataFrame:
    """DMA events with their queue, bytes, duration, achieved bandwidth and the layer they feed.

    The layer is the DMA's own when the format gives one, else the layer of the instruction
    its transfer feeds (explicit edge DMA -> instruction), back-filled along the queue so every
    packet of a block carries its consumer's layer. ``ordinals`` (of :func:`event_ordinals`)
    are ranked on the DMA events' tracks alone when not given.
    """
    ev = trace.events
    is_dma = (ev[S.KIND] == "dma").to_numpy()
    ids = np.flatnonzero(is_dma)
    track = ev[S.TRACK].to_numpy()[ids]
    on_dma_track = np.zeros(len(trace.tracks), dtype=bool)
    on_dma_track[track] = True
    names = peer_track_names(trace, on_dma_track)
    if ordinals is None:
        ordinals = event_ordinals(trace, on_dma_track)
    ts = ev[S.TS].to_numpy()[ids]
    df = pd.DataFrame(
        {
            "event": ids,
            "rank": ev[S.RANK].to_numpy()[ids],
            "track": track,
            # The few track names taken per row (not a string array of every row re-inferred).
            "queue": pd.Series(names).array.take(track) if len(ids) else np.array([], dtype=object),
            "ts": ts,
            "dur": ev[S.DUR].to_numpy()[ids],
            "bytes": ev[S.BYTES].to_numpy()[ids] if S.BYTES in ev else np.full(len(ids), np.nan),
            "ordinal": ordinals[ids],
        },
        index=pd.Index(np.arange(len(ids))),
    )
    df["bw"] = df["bytes"] / np.maximum(df["dur"], 1) * 1e9  # bytes/s
    if S.LAYER not in ev:
        df["layer"] = np.full(len(ids), None, dtype=object)
        return df
    layers, code = _category_codes(ev[S.LAYER])
    own = code[ids]
    layer = np.where(own >= 0, own, _consumer_layer(trace, ids, inferred, code))
    filled = _next_present_on_track(track, ordinals[ids], layer)
    if (filled >= 0).any() and all(isinstance(x, str) for x in layers):
        # The few layer names taken per row, missing where -1 (not a string per row re-inferred).
        df["layer"] = pd.Series(np.asarray(layers, dtype=object)).array.take(
            filled, allow_fill=True
        )
    else:
        df["layer"] = np.full(len(ids), None, dtype=object)
    return df


def _category_codes(col: pd.Series) -> tuple[list, np.ndarray]:
    """The distinct values of a column and each row's index into them (-1: missing)."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        return list(col.cat.categories), col.cat.codes.to_numpy().astype(np.int64)
    codes, uniques = pd.factorize(col)
    return list(uniques), codes.astype(np.int64)


def _next_present_on_track(track: np.ndarray, ordinal: np.ndarray, code: np.ndarray) -> np.ndarray:
    """Each missing code (-1) replaced by the next present one on its track in time order (the
    events' ordinals: unique on a track, in time then event order); -1 where none follows.

    A search among the few present rows, not a sort of every row: ``track * span + ordinal``
    orders rows like (track, time) and fits an int64 (both are below the number of events).
    """
    present = np.flatnonzero(code >= 0)
    if not len(present):
        return code.copy()
    key = np.multiply(track, int(ordinal.max()) + 1, dtype=np.int64)
    key += ordinal
    by_key = present[np.argsort(key[present])]
    nxt = np.searchsorted(key[by_key], key)  # a present row finds itself
    nxt_row = by_key[np.minimum(nxt, len(by_key) - 1)]
    same_track = (nxt < len(by_key)) & (track[nxt_row] == track)
    return np.where(same_track, code[nxt_row], -1)


def _consumer_layer(
    trace: S.Trace, dma_ids: np.ndarray, inferred: pd.DataFrame | None, layer_code: np.ndarray
) -> np.ndarray:
    out = np.full(len(dma_ids), -1, dtype=np.int64)
    ed = (
        trace.edges if inferred is None or not len(inferred) else pd.concat([trace.edges, inferred])
    )
    if not len(ed):
        return out
    src = ed[S.SRC].to_numpy()
    # ``dma_ids`` ascend: a search finds the edges from a DMA (no sort of every transfer).
    row = np.searchsorted(dma_ids, src)
    hit = row < len(dma_ids)
    hit[hit] = dma_ids[row[hit]] == src[hit]
    layers = layer_code[ed[S.DST].to_numpy()[hit]]
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


def interval_overlap(
    a_start: np.ndarray, a_end: np.ndarray, b_start: np.ndarray, b_end: np.ndarray
) -> np.ndarray:
    """For each interval a_i, the ns covered by the union of the b intervals."""
    if not len(b_start) or not len(a_start):
        return np.zeros(len(a_start), dtype=np.int64)
    o = np.argsort(b_start, kind="stable")
    bs, be = b_start[o], b_end[o]
    # Merge b into disjoint intervals.
    run_end = np.maximum.accumulate(be)
    new = np.r_[True, bs[1:] > run_end[:-1]]
    ms = bs[new]
    me = np.maximum.reduceat(run_end, np.flatnonzero(new))
    covered = np.r_[0, np.cumsum(me - ms)]

    def cum_at(t: np.ndarray) -> np.ndarray:
        i = np.searchsorted(ms, t, side="right")  # merged intervals starting at or before t
        inside = np.clip(t - ms[np.maximum(i - 1, 0)], 0, (me - ms)[np.maximum(i - 1, 0)])
        return covered[np.maximum(i - 1, 0)] * (i > 0) + np.where(i > 0, inside, 0)

    return (cum_at(a_end) - cum_at(a_start)).astype(np.int64)


def busy_ns_by_group(group: np.ndarray, start: np.ndarray, end: np.ndarray) -> pd.Series:
    """Per group id: the length of the union of its intervals (overlaps counted once)."""
    if not len(group):
        return pd.Series(dtype="int64")
    o = stable_order_by(group, start)
    g, s, e = group[o], start[o].astype(np.int64), end[o].astype(np.int64)
    new_group = np.r_[True, g[1:] != g[:-1]]
    # A running max of ends within each group: lift each group above the previous one so a
    # single cumulative max never carries an end across groups.
    base = s.min()
    span = int(e.max() - base) + 1
    lift = (np.cumsum(new_group) - 1).astype(np.int64) * span
    run_end = np.maximum.accumulate(e - base + lift) - lift + base
    prev_end = np.r_[base, run_end[:-1]]
    add = np.where(new_group, e - s, np.maximum(e - np.maximum(s, prev_end), 0))
    # The groups are contiguous once sorted: one reduction per run, no grouping by hash.
    first = np.flatnonzero(new_group)
    return pd.Series(np.add.reduceat(add, first), index=g[first])


def median_of_others(group: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Per element: the median of the *other* elements of its group (NaN when it is alone)."""
    n = len(values)
    if not n:
        return np.zeros(0)
    o = _group_value_order(np.asarray(group), np.asarray(values))
    g, v = group[o], values[o].astype(np.float64)
    first = np.r_[0, np.flatnonzero(g[1:] != g[:-1]) + 1]
    sizes = np.diff(np.r_[first, n])
    # In a sorted group of k, dropping the element at index i leaves m = k-1: their middle
    # one(s), at first + lo and first + hi, shift one up when at or past i. Computed per group,
    # then repeated per element; a lone element (m = 0) reads index first-1 (a valid index, its
    # NaN is set below) instead of one past the end.
    m = sizes - 1
    at = np.arange(n)
    lo_i = np.repeat(first + (m - 1) // 2, sizes)
    lo_i += lo_i >= at
    hi_i = np.repeat(first + np.where(m > 0, m // 2, -1), sizes)
    hi_i += hi_i >= at
    med = (v[lo_i] + v[hi_i]) / 2
    med[first[m == 0]] = np.nan
    out = np.empty(n)
    out[o] = med
    return out


def _group_value_order(group: np.ndarray, values: np.ndarray) -> np.ndarray:
    """An order sorting by group, then value. Integers whose ranges fit one int64 key sort
    in one pass (any order of equal pairs is as good: only the sorted values are read).

    The stable sort: on these keys, whose rows come partly ordered (rank by rank, each in time
    order), it is several times faster than the default quicksort."""
    if (
        group.dtype.kind in "iu"
        and values.dtype.kind in "iu"
        and len(values)
        and (group.min() >= -(2**62) and values.min() >= -(2**62))
    ):
        g0, v0 = int(group.min()), int(values.min())
        g_span, v_span = int(group.max()) - g0 + 1, int(values.max()) - v0 + 1
        if g_span * v_span < 2**62:
            key = np.subtract(group, g0, dtype=np.int64)  # in place: no temporary per step
            key *= v_span
            key += np.subtract(values, v0, dtype=np.int64)
            return np.argsort(key, kind="stable")
    return np.lexsort((values, group))


def excess_over_peers(trace: S.Trace, ordinals: np.ndarray) -> np.ndarray:
    """Per event: its duration minus the median duration of its peers on the other ranks
    (same track name and ordinal); 0 where it has no peer."""
    ev = trace.events
    names = peer_track_names(trace)
    name_code = track_name_codes(names)[ev[S.TRACK].to_numpy()]
    key = name_code * (int(ordinals.max(initial=0)) + 1) + ordinals
    dur = ev[S.DUR].to_numpy()
    med = median_of_others(key, dur)
    return np.where(np.isnan(med), 0, dur - np.nan_to_num(med)).astype(np.int64)


def device_ranks(trace: S.Trace) -> set[int]:
    """Ranks with events on a device (an engine, DMA queue, collective core or GPU stream):
    a host-only profile (a JAX CPU run, a CPU thread trace) has no device to leave idle."""
    device_track = trace.tracks[S.ENGINE].astype(str).to_numpy() != "cpu"
    on_device = device_track[trace.events[S.TRACK].to_numpy()]
    return {int(r) for r in pd.unique(trace.events[S.RANK].to_numpy()[on_device])}  # no sort
