"""Idle host threads inside the critical path's program-order gaps.

A node on a host thread bound by the previous node of its thread (program order) waited from
that node's end to its own start. That wait is host time (Python and framework code between two
recorded calls) where the thread recorded work; where it recorded nothing for at least
:data:`IDLE_THREAD_NS` it idled (a ``time.sleep``, a wait on something the profiler does not
see), which nothing in the trace explains: a ``gap``.

Work is every event of the thread, annotations and CPU ops included, that *ended* by the node's
start: a range still open then (``ProfilerStep#N``, a ``record_function`` region around a
wait) holds the wait, it does not fill it, as for the path's leading segment
(:func:`tracediag.graph.critical_path._leading`). So on ``tests/data/real_gloo/straggler_sleep``
the 80 ms ``time.sleep`` before each forward, inside ``ProfilerStep#N`` only, is a gap, and on
``kineto_resnet50_train_worker0`` the 43 ms of single-process data loading between two runtime
calls, inside ``enumerate(DataLoader)#...__next__`` that ends before the copy it feeds, is host.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracediag.graph.dependencies import Graph
from tracediag.graph.sort_orders import stable_order_by
from tracediag.graph.wait_evidence import MIN_THREAD_SILENCE_NS, search_pairs
from tracediag.model import schema as S

#: A host thread that records nothing this long idled (the hand-off inference's silence: a
#: shorter pause is the overhead between two ops).
IDLE_THREAD_NS = MIN_THREAD_SILENCE_NS


def idle_stretches(
    graph: Graph, trace: S.Trace, node: np.ndarray, lo: np.ndarray, hi: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The idle stretches of path segments ``[lo[i], hi[i])``, each the program-order wait of
    host-thread node ``node[i]``: (segment index, start, end) of every stretch of at least
    :data:`IDLE_THREAD_NS` that no event of the node's thread ending by the node's start
    covers, in segment then time order.

    The events ending inside one node's wait are the ones ending between its predecessor's end
    and its start, so each event is looked at for one wait at most (no pair per event and
    segment beyond that)."""
    empty = (np.zeros(0, np.int64),) * 3
    if not len(node):
        return empty
    ev = trace.events
    ts = ev[S.TS].to_numpy()
    end = ts + ev[S.DUR].to_numpy()
    track = ev[S.TRACK].to_numpy()
    on_thread = (S.strings(trace.tracks[S.TRACK_KIND]) == "cpu_thread")[track]
    on = np.flatnonzero(on_thread)
    # Dense codes of (rank, thread): a pair key times a time span stays far inside int64.
    width = int(track.max(initial=0)) + 1
    threads, key = np.unique(
        ev[S.RANK].to_numpy()[on].astype(np.int64) * width + track[on], return_inverse=True
    )
    o = stable_order_by(key, end[on])
    on, key = on[o], key[o]
    q = graph.rank[node].astype(np.int64) * width + graph.track[node]
    q_key = np.searchsorted(threads, q)
    if len(threads):  # a node on no thread of the trace (none expected): past every code
        q_key[threads[np.minimum(q_key, len(threads) - 1)] != q] = len(threads)
    due = graph.start[node]  # work that ended by then fills the wait
    first = search_pairs(key, end[on], q_key, lo, side="right")
    last = search_pairs(key, end[on], q_key, due, side="right")
    n_ev = np.maximum(last - first, 0)
    seg = np.repeat(np.arange(len(node)), n_ev)
    pos = np.arange(len(seg)) - np.repeat(np.cumsum(n_ev) - n_ev, n_ev)
    e = on[first[seg] + pos]
    # Each event's cover, clipped to its segment; per segment by start, then the reach so far.
    a = np.clip(ts[e], lo[seg], hi[seg])
    b = np.clip(end[e], lo[seg], hi[seg])
    o = np.lexsort((a, seg))
    seg, a, b = seg[o], a[o], b[o]
    reach = pd.Series(b).groupby(seg).cummax().to_numpy()
    head = np.r_[True, seg[1:] != seg[:-1]] if len(seg) else np.zeros(0, bool)
    before = np.where(head, lo[seg], np.r_[0, reach[:-1]])
    before = np.maximum(before, lo[seg])
    # Holes before each cover, and after the last cover (or the whole segment: no cover).
    tail_reach = lo.copy()
    if len(seg):
        tail = np.r_[seg[1:] != seg[:-1], True]
        tail_reach[seg[tail]] = np.maximum(reach[tail], lo[seg[tail]])
    h_seg = np.r_[seg, np.arange(len(node))]
    h_lo = np.r_[before, tail_reach]
    h_hi = np.r_[a, hi]
    long = h_hi - h_lo >= IDLE_THREAD_NS
    h_seg, h_lo, h_hi = h_seg[long], h_lo[long], h_hi[long]
    o = np.lexsort((h_lo, h_seg))
    return h_seg[o], h_lo[o], h_hi[o]


def split_idle(
    seg_node: np.ndarray,
    seg_cat: np.ndarray,
    seg_a: np.ndarray,
    seg_b: np.ndarray,
    candidate: np.ndarray,
    graph: Graph,
    trace: S.Trace,
    host: int,
    gap: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The path's segments (latest first) with the idle stretches of the ``candidate`` ones
    (host program-order waits on host threads) cut out as ``gap`` pieces, the rest of each such
    segment left ``host``; latest first still."""
    rows = np.flatnonzero(candidate)
    h_seg, h_lo, h_hi = idle_stretches(graph, trace, seg_node[rows], seg_a[rows], seg_b[rows])
    if not len(h_seg):
        return seg_node, seg_cat, seg_a, seg_b
    split = rows[h_seg]  # the segment row of each stretch
    # Per stretch: the host piece before it (from the previous stretch's end or the segment's
    # start) and the stretch itself; per split segment, the host piece after its last stretch.
    first = np.r_[True, split[1:] != split[:-1]]
    prev_hi = np.where(first, seg_a[split], np.r_[0, h_hi[:-1]])
    last = np.r_[split[1:] != split[:-1], True]
    p_row = np.r_[split, split, split[last]]
    p_a = np.r_[prev_hi, h_lo, h_hi[last]]
    p_b = np.r_[h_lo, h_hi, seg_b[split[last]]]
    p_cat = np.r_[np.full(len(split), host), np.full(len(split), gap), np.full(last.sum(), host)]
    whole = np.ones(len(seg_node), dtype=bool)
    whole[split] = False
    keep = np.flatnonzero(whole)
    row = np.r_[keep, p_row]
    a = np.r_[seg_a[keep], p_a]
    b = np.r_[seg_b[keep], p_b]
    cat = np.r_[seg_cat[keep], p_cat].astype(seg_cat.dtype)
    # Latest first: by the segment's row, then latest piece first; empty pieces dropped.
    o = np.lexsort((-a, row))
    o = o[b[o] > a[o]]
    return seg_node[row[o]], cat[o], a[o], b[o]
