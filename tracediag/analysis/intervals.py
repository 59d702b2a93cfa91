"""Interval arithmetic on numpy arrays: overlap with a union of intervals, busy time per group."""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd

from tracediag.graph.sort_orders import stable_order_by


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


def uncovered_by_compute(
    events: pd.DataFrame, rank: np.ndarray, start: np.ndarray, end: np.ndarray
) -> np.ndarray:
    """Per interval ``[start, end)`` of ``rank``: its ns that no compute event of that rank
    overlaps (what communication leaves exposed). One pass per rank, not per interval."""
    from tracediag.model import schema as S

    compute = (events[S.KIND] == "compute").to_numpy()
    ev_rank, ev_ts = events[S.RANK].to_numpy(), events[S.TS].to_numpy()
    ev_end = ev_ts + events[S.DUR].to_numpy()
    out = np.zeros(len(start), dtype=np.int64)
    for r in np.unique(rank):  # a loop over the ranks, not events
        mine = rank == r
        c = compute & (ev_rank == r)
        a, b = start[mine], end[mine]
        out[mine] = (b - a) - interval_overlap(a, b, ev_ts[c], ev_end[c])
    return out


def busy_ns_by_group(group: np.ndarray, start: np.ndarray, end: np.ndarray) -> pd.Series:
    """Per group id: the length of the union of its intervals (overlaps counted once)."""
    if not len(group):
        return pd.Series(dtype="int64")
    o = stable_order_by(group, start)
    kernel = (
        _busy_kernel()
        if len(group) > _COMPILE_ABOVE
        and group.dtype.kind in "iu"
        and start.dtype == np.int64
        and end.dtype == np.int64
        else None
    )
    if kernel is not None:  # one pass in sorted order, no row-sized temporaries
        base = int(start.min())
        span = int(end.max() - base) + 1
        sums = np.empty(len(group), dtype=np.int64)
        heads = np.empty(len(group), dtype=group.dtype)
        n = kernel(o, group, start, end, base, span, sums, heads)
        return pd.Series(sums[:n], index=heads[:n])
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


def _busy_loop(o, group, start, end, base, span, sums, heads) -> int:
    """The sums of :func:`busy_ns_by_group` over the rows in order ``o``, by the same integer
    expressions, into ``sums`` (per group) and ``heads`` (its id); returns the group count."""
    k = -1
    top = 0  # the running max of the lifted ends
    prev_end = base  # the previous row's running end
    for i in range(len(o)):
        j = o[i]
        new = i == 0 or group[j] != group[o[i - 1]]
        if new:
            k += 1
            sums[k] = 0
            heads[k] = group[j]
        lift = k * span
        lifted = end[j] - base + lift
        if i == 0 or lifted > top:
            top = lifted
        if new:
            sums[k] += end[j] - start[j]
        else:
            reach = start[j] if start[j] > prev_end else prev_end
            if end[j] - reach > 0:
                sums[k] += end[j] - reach
        prev_end = top - lift + base
    return k + 1


#: Above this many intervals the busy times are summed by the compiled loop (numba is loaded
#: by then: a graph of this many events replays compiled).
_COMPILE_ABOVE = 1_000_000


@functools.cache
def _busy_kernel():
    """The compiled :func:`_busy_loop`, or None (see ``tracediag.io.compiled``)."""
    from tracediag.io.compiled import compiled

    one = np.zeros(2, dtype=np.int64)
    return compiled(_busy_loop, np.arange(2), one, one, one + 1, 0, 2, one.copy(), one.copy())


def overlap_pairs(start, end, win_start, win_end):
    """Pairs (item, window) of overlapping intervals, with the overlap's bounds, for windows
    sorted by start: an item's candidates are the windows from the first whose running
    maximum end passes its start to the last starting before its end (one searchsorted each,
    then one repeat: no loop over items)."""
    start, end = np.asarray(start, np.int64), np.asarray(end, np.int64)
    win_start, win_end = np.asarray(win_start, np.int64), np.asarray(win_end, np.int64)
    if not len(start) or not len(win_start):
        empty = np.empty(0, np.int64)
        return empty, empty, empty, empty
    reach = np.maximum.accumulate(win_end)
    lo = np.searchsorted(reach, start, side="right")
    hi = np.searchsorted(win_start, end, side="left")
    count = np.maximum(hi - lo, 0)
    item = np.repeat(np.arange(len(start)), count)
    first = np.cumsum(count) - count
    win = lo[item] + np.arange(int(count.sum())) - first[item]
    s = np.maximum(start[item], win_start[win])
    e = np.minimum(end[item], win_end[win])
    keep = e > s
    return item[keep], win[keep], s[keep], e[keep]
