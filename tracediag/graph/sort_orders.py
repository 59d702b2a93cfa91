"""The sort orders of the dependency graph: by destination and latest end (the binding
predecessor of every node) and by fused keys with their ties broken, as ``np.lexsort`` gives
them, in fewer passes; on a big graph by loops numba compiles (:mod:`tracediag.io.compiled`).
:func:`stable_order_by` is the two-key order every table of events uses."""

from __future__ import annotations

import functools

import numpy as np


def stable_order_by(major: np.ndarray, minor: np.ndarray) -> np.ndarray:
    """``np.lexsort((minor, major))``, by one stable sort of a combined key when it fits."""
    if len(major) < 2:
        return np.arange(len(major))
    m0, n0 = int(major.min()), int(minor.min())
    m_span, n_span = int(major.max()) - m0 + 1, int(minor.max()) - n0 + 1
    if m_span * n_span >= 2**62:
        return np.lexsort((minor, major))
    key = np.subtract(major, m0, dtype=np.int64) * n_span  # in place from here: no temporaries
    key += np.subtract(minor, n0, dtype=np.int64)
    return np.argsort(key, kind="stable")


#: From this many rows (edges, nodes) the orders below are compiled: numba is loaded by then
#: (the replay of a graph this big runs compiled). On the clean-room writer's 64 x 100k job
#: (16.8M edges, 8.9M nodes) they took ``build_graph`` from 3.2-3.9 s to 1.8-1.9 s.
COMPILE_ABOVE_ROWS = 1_000_000


def binding_order(src, dst, neg_end, explicit_first, n_nodes: int) -> np.ndarray:
    """``np.lexsort((src, explicit_first, neg_end, dst))`` (``dst`` below ``n_nodes``): compiled
    on a big graph, else the first three keys fused into one int64 when their ranges fit (two
    sort passes instead of four)."""
    if len(dst) > COMPILE_ABOVE_ROWS:
        kernel = _bucket_kernel()
        if kernel is not None:
            return kernel(src, dst, neg_end, explicit_first, n_nodes)
    if len(dst) < 2:
        return np.lexsort((src, explicit_first, neg_end, dst))
    d0, e0 = int(dst.min()), int(neg_end.min())
    d_span, e_span = int(dst.max()) - d0 + 1, int(neg_end.max()) - e0 + 1
    if d_span * e_span * 2 >= 2**62:
        return np.lexsort((src, explicit_first, neg_end, dst))
    key = np.subtract(dst, d0, dtype=np.int64) * (e_span * 2)  # in place from here
    key += np.subtract(neg_end, e0, dtype=np.int64) * 2
    key += explicit_first
    return break_ties(key, src)


def _bucket_order(src, dst, neg_end, explicit_first, n_nodes):
    """The order of ``np.lexsort((src, explicit_first, neg_end, dst))`` in one counting pass by
    destination (stable), then each destination's edges by the other keys: in place for the
    few a node has (an insertion sort, stable), by three stable sorts for a node with many (a
    collective instance's arrivals). Plain Python here; compiled by :func:`_bucket_kernel`."""
    m = len(dst)
    pos = np.zeros(n_nodes, np.int64)  # edges per destination, then where its next one goes
    for i in range(m):
        pos[dst[i]] += 1
    total = 0
    for v in range(n_nodes):
        count = pos[v]
        pos[v] = total
        total += count
    out = np.empty(m, np.int64)
    for i in range(m):
        out[pos[dst[i]]] = i
        pos[dst[i]] += 1
    hi = 0  # pos[v] is now where node v's edges end
    for v in range(n_nodes):
        lo, hi = hi, pos[v]
        if hi - lo > 32:
            part = out[lo:hi].copy()
            part = part[np.argsort(src[part], kind="mergesort")]
            part = part[np.argsort(explicit_first[part], kind="mergesort")]
            out[lo:hi] = part[np.argsort(neg_end[part], kind="mergesort")]
            continue
        for a in range(lo + 1, hi):
            x = out[a]
            b = a - 1
            while b >= lo:
                y = out[b]
                # y stays before x unless it sorts after it by (neg_end, explicit_first, src).
                if neg_end[y] != neg_end[x]:
                    if neg_end[y] < neg_end[x]:
                        break
                elif explicit_first[y] != explicit_first[x]:
                    if explicit_first[y] < explicit_first[x]:
                        break
                elif src[y] <= src[x]:
                    break
                out[b + 1] = y
                b -= 1
            out[b + 1] = x
    return out


@functools.cache
def _bucket_kernel():
    """The compiled :func:`_bucket_order`, or None where numba cannot (the sorts give the same
    order); compiled now on one edge, with the dtypes ``build_graph`` passes."""
    from tracediag.io.compiled import compiled

    one = np.zeros(1, dtype=np.int64)
    return compiled(_bucket_order, one, one, one, np.zeros(1, dtype=np.int8), 1)


def break_ties(key: np.ndarray, minor: np.ndarray) -> np.ndarray:
    """``np.lexsort((minor, key))``: one stable sort of ``key``, then ``minor`` orders only the
    runs of equal keys (a second full sort pass would move nothing else): on a big graph by the
    compiled :func:`_order_runs`, else by a stable sort of the runs' members."""
    order = np.argsort(key, kind="stable")
    if len(order) > COMPILE_ABOVE_ROWS:
        kernel = _runs_kernel()
        if kernel is not None:
            return kernel(order, key[order], minor)
    sorted_key = key[order]
    tie = sorted_key[1:] == sorted_key[:-1]
    del sorted_key
    if not tie.any():
        return order
    in_run = np.zeros(len(order), dtype=bool)  # positions inside a run of equal keys
    in_run[1:] = tie
    in_run[:-1] |= tie
    run = np.cumsum(~tie)  # run number of positions 1.. (position 0 is in run 0)
    pos = np.flatnonzero(in_run)
    members = order[pos]
    # Within a run members stand in index order (the sort is stable): ordering them stably by
    # (run, minor) gives lexsort's order, index order on equal ``minor`` included.
    run_of = np.where(pos > 0, run[np.maximum(pos, 1) - 1], 0)
    order[pos] = members[stable_order_by(run_of, minor[members])]
    return order


def _order_runs(order, sorted_key, minor):
    """In place: each run of ``order`` (a stable sort of a key; ``sorted_key`` the key in that
    order) whose keys are equal ordered by ``minor``, stably (its members stand in index
    order): an insertion sort for a short run, a stable sort for one of over 32. Plain Python
    here; compiled by :func:`_runs_kernel`."""
    n = len(order)
    lo = 0
    for hi in range(1, n + 1):
        if hi < n and sorted_key[hi] == sorted_key[lo]:
            continue  # the run [lo, hi) goes on
        if hi - lo > 32:
            part = order[lo:hi].copy()
            order[lo:hi] = part[np.argsort(minor[part], kind="mergesort")]
        else:
            for a in range(lo + 1, hi):
                x = order[a]
                b = a - 1
                while b >= lo and minor[order[b]] > minor[x]:
                    order[b + 1] = order[b]
                    b -= 1
                order[b + 1] = x
        lo = hi
    return order


@functools.cache
def _runs_kernel():
    """The compiled :func:`_order_runs`, or None (the runs are then ordered by numpy)."""
    from tracediag.io.compiled import compiled

    one = np.zeros(1, dtype=np.int64)
    return compiled(_order_runs, one.copy(), one, one)
