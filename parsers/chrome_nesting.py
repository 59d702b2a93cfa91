"""Which slice encloses a point in time on a thread: flow binding, launch ops, annotations.

Slices of one thread nest like a call stack. For each thread the slices are sorted by (start,
longer first) and each gets its parent (the innermost slice open at its start), found without a
stack: a slice's depth is the number of earlier slices still open at its start, and its parent is
the last earlier slice one level up. A query then takes the last slice starting at or before the
point and climbs parents until one is still open: at most the nesting depth of vectorised steps.
"""

from __future__ import annotations

import numpy as np

_SHALLOW = 16  # nesting levels up to which parents are found level by level (see below)


class SliceNesting:
    """Nesting of slices per thread, for innermost-enclosing-slice queries.

    ``thread`` holds integer thread codes; ``start``/``end`` int64 times. Intervals are half-open,
    except that a slice starting exactly at a query point always encloses it (zero-length slices
    included), since Chrome flows and Kineto launches point at a slice's own start.
    """

    def __init__(self, thread: np.ndarray, start: np.ndarray, end: np.ndarray):
        self._threads: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}
        thread = np.asarray(thread)
        for code in np.unique(thread):
            rows = np.flatnonzero(thread == code)
            order = np.lexsort((-end[rows], start[rows]))
            rows = rows[order]
            s, e = start[rows], end[rows]
            self._threads[int(code)] = (rows, s, e, _parents(s, e))

    def innermost(self, thread: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Per query point, the row of the innermost slice enclosing ``t`` on ``thread``, or -1."""
        thread = np.asarray(thread)
        out = np.full(len(t), -1, dtype=np.int64)
        for code, (rows, s, e, parent) in self._threads.items():
            q = np.flatnonzero(thread == code)
            if not len(q):
                continue
            tq = t[q]
            k = np.searchsorted(s, tq, side="right") - 1
            # Climb while the candidate closed before the point (and did not start at it); each
            # step looks only at the points still climbing.
            todo = np.flatnonzero(k >= 0)
            while len(todo):
                kk = k[todo]
                climb = (s[kk] != tq[todo]) & (e[kk] <= tq[todo])
                todo = todo[climb]
                k[todo] = parent[kk[climb]]
                todo = todo[k[todo] >= 0]
            out[q] = np.where(k >= 0, rows[np.maximum(k, 0)], -1)
        return out

    def next_starting(self, thread: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Per query point, the row of the first slice starting at or after ``t``, or -1."""
        thread = np.asarray(thread)
        out = np.full(len(t), -1, dtype=np.int64)
        for code, (rows, s, _e, _parent) in self._threads.items():
            q = np.flatnonzero(thread == code)
            if not len(q):
                continue
            k = np.searchsorted(s, t[q], side="left")
            out[q] = np.where(k < len(s), rows[np.minimum(k, len(s) - 1)], -1)
        return out


def _parents(s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Parent position of each slice of one thread sorted by (start, end descending); -1 at top."""
    m = len(s)
    pos = np.arange(m, dtype=np.int64)
    # Earlier slices closed by s_i: all ends <= s_i, less the zero-length slices at s_i that sort
    # at or after i (zero-length slices sort last among equal starts).
    closed_before = np.searchsorted(np.sort(e, kind="stable"), s, side="right")  # (nearly sorted)
    zero_starts = s[e == s]  # sorted, as s is
    if len(zero_starts):
        new_start = np.r_[False, s[1:] != s[:-1]]
        group_last = np.flatnonzero(np.r_[new_start[1:], True])[np.cumsum(new_start)]
        zeros_at = np.searchsorted(zero_starts, s, side="right") - np.searchsorted(
            zero_starts, s, side="left"
        )
        closed_before -= np.minimum(zeros_at, group_last - pos + 1)
    return _last_one_level_up(pos - closed_before)


def _last_one_level_up(depth: np.ndarray) -> np.ndarray:
    """Per position, the last earlier position one level up (-1 where none or at the top).

    Shallow nesting (the usual): a running maximum per level, a few vectorised passes each.
    Deep nesting: one sort by (depth, position), where the wanted keys (one level up, same
    position) are in order too."""
    m = len(depth)
    pos = np.arange(m, dtype=np.int64)
    top = int(depth.max(initial=0))
    if top <= _SHALLOW:
        parent = np.full(m, -1, dtype=np.int64)
        for level in range(1, top + 1):
            last_up = np.maximum.accumulate(np.where(depth == level - 1, pos, -1))
            at = depth == level
            parent[at] = last_up[at]
        return parent
    key = depth * (m + 1) + pos
    order = np.argsort(key, kind="stable")
    sorted_key = key[order]
    c = np.empty(m, dtype=np.int64)
    c[order] = np.searchsorted(sorted_key, sorted_key - (m + 1), side="left") - 1
    cand = order[np.maximum(c, 0)]
    ok = (depth > 0) & (c >= 0) & (depth[cand] == depth - 1) & (cand < pos)
    return np.where(ok, cand, -1)
