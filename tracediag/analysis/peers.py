"""Peers of an event: the same work on other ranks, and typical figures to restore a cause to.

Data-parallel ranks run the same program, so the k-th event of a track on one rank is the same
work as the k-th event of the track of the same name on another rank. What-ifs restore a cause
to what these peers achieve (the median rank, the typical bandwidth of a queue), never to the
hardware's peak.
"""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd

from tracediag.graph.sort_orders import stable_order_by
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


def track_labels(trace: S.Trace, peers: np.ndarray | None = None) -> np.ndarray:
    """Per track, the name every view shows (text, Markdown, HTML, JSON, TUI): its own name,
    which holds the thread's name where the trace gives one (Kineto's ``thread_name``
    ``thread 11982 (python)``: ``cpu 11982/11982 (python)``, what the user's profiler viewer
    shows). Only a CPU thread the trace does not name, of a multi-rank trace whose rank runs
    several threads, gets its peer number, which matches it with the same thread on the other
    ranks (their ids differ): ``cpu 1234/5678 (thread #3)``; the number is tracediag's own.

    GPU streams and Neuron engines keep their own name, which holds the peer name already
    (``gpu3/stream 7``). ``peers``: the trace's :func:`peer_track_names`, when at hand.
    """
    tr = trace.tracks
    names = tr[S.TRACK_NAME].astype(str).to_numpy(dtype=object)
    cpu = (tr[S.TRACK_KIND].astype(str) == "cpu_thread").to_numpy()
    rank = tr[S.RANK].to_numpy()
    # One rank has no peers, and a rank's only thread needs no number to be told apart.
    threads = pd.Series(cpu).groupby(rank).transform("sum").to_numpy()
    # The trace's own thread name, where the reader kept one, is what the user knows.
    named = pd.Series(names, dtype=object).str.contains(r"\(.+\)$", regex=True).to_numpy(bool)
    numbered = cpu & (threads > 1) & ~named
    if not numbered.any() or len(pd.unique(rank)) < 2:
        return names
    if peers is None:
        peers = peer_track_names(trace)
    number = pd.Series(peers[numbered], dtype=object).str.replace("cpu thread ", "", regex=False)
    names[numbered] = (
        pd.Series(names[numbered], dtype=object) + " (thread " + number + ")"
    ).to_numpy()
    return names


def rank_track_label(
    trace: S.Trace, rank: int, name: str, labels: np.ndarray, peers: np.ndarray
) -> str:
    """The label (:func:`track_labels`) of ``rank``'s own track that ``name`` names, by its
    own name or its peer name (``stream 7``, ``cpu thread #3``: the same on every rank, in
    ``peers``); ``name`` itself when no single track of the rank has it (a DMA queue of several
    rings, a name that already is a label)."""
    tr = trace.tracks
    mine = tr[S.RANK].to_numpy() == rank
    own = tr[S.TRACK_NAME].astype(str).to_numpy() == name
    hit = np.flatnonzero(mine & own)
    if len(hit) != 1:
        hit = np.flatnonzero(mine & (peers == name))
    return str(labels[hit[0]]) if len(hit) == 1 else name


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


def median_of_others(group: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Per element: the median of the *other* elements of its group (NaN when it is alone)."""
    n = len(values)
    if not n:
        return np.zeros(0)
    o = _group_value_order(np.asarray(group), np.asarray(values))
    g, v = group[o], values[o].astype(np.float64)
    kernel = _median_kernel() if n > _COMPILE_ABOVE and g.dtype.kind in "iu" else None
    if kernel is not None:  # one pass over the sorted rows, no row-sized temporaries
        med = np.empty(n)
        kernel(g, v, med)
    else:
        med = _others_median_arrays(g, v)
    out = np.empty(n)
    out[o] = med
    return out


def _others_median_arrays(g: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Per row of ``g`` (sorted) and ``v`` (sorted within each run of ``g``): the median of the
    other rows of its run, NaN for a row alone."""
    n = len(v)
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
    return med


def _others_median_loop(g, v, med) -> None:
    """:func:`_others_median_arrays` into ``med``, as one loop (compiled by numba)."""
    n = len(g)
    i = 0
    while i < n:
        j = i + 1
        while j < n and g[j] == g[i]:
            j += 1
        m = j - i - 1  # the others of each row of the run i:j
        for at in range(i, j):
            if m == 0:
                med[at] = np.nan
                continue
            lo = i + (m - 1) // 2
            if lo >= at:
                lo += 1
            hi = i + m // 2
            if hi >= at:
                hi += 1
            med[at] = (v[lo] + v[hi]) / 2
        i = j


#: Above this many rows the medians are taken by the compiled loop (numba is loaded by then:
#: a graph of this many events replays compiled).
_COMPILE_ABOVE = 1_000_000


@functools.cache
def _median_kernel():
    """The compiled :func:`_others_median_loop`, or None (see ``tracediag.io.compiled``)."""
    from tracediag.io.compiled import compiled

    return compiled(_others_median_loop, np.zeros(2, np.int64), np.zeros(2), np.empty(2))


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


def peer_gap_medians(ctx) -> tuple[np.ndarray, np.ndarray]:
    """(nodes with an event and a binding predecessor, the median gap of the same node on the
    other ranks: same track name, ordinal and role; NaN where no other rank has it).

    Independent of which ranks a what-if speeds up: ``Analysis.peer_gap_medians`` keeps it, so
    a rule trying several ranks computes the medians once."""
    g = ctx.graph
    idx = np.flatnonzero((g.event >= 0) & (g.bind >= 0))
    names = peer_track_names(ctx.trace)
    name_code = track_name_codes(names)[g.track[idx]]
    ordinal = ctx.ordinals[g.event[idx]]
    key = (name_code * (int(ordinal.max(initial=0)) + 1) + ordinal) * 4 + g.role[idx]
    return idx, median_of_others(key, g.gap[idx])
