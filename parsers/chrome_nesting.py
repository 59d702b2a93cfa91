"""Which slice encloses a point in time on a thread: flow binding, launch ops, annotations.

Slices of one thread nest like a call stack. For each thread the slices are sorted by (start,
longer first) and each gets its parent (the innermost slice open at its start), found without a
stack: a slice's depth is the number of earlier slices still open at its start, and its parent is
the last earlier slice one level up. A query then takes the last slice starting at or before the
point and climbs parents until one is still open: at most the nesting depth of vectorised steps.
"""

from __future__ import annotations

import numpy as np


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
            # Climb while the candidate closed before the point (and did not start at it).
            while True:
                kk = np.maximum(k, 0)
                climb = (k >= 0) & (s[kk] != tq) & (e[kk] <= tq)
                if not climb.any():
                    break
                k = np.where(climb, parent[kk], k)
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
    ends_le = np.searchsorted(np.sort(e), s, side="right")
    group_last = np.searchsorted(s, s, side="right") - 1
    zeros_at = np.searchsorted(np.sort(s[e == s]), s, side="right") - np.searchsorted(
        np.sort(s[e == s]), s, side="left"
    )
    closed_before = ends_le - np.minimum(zeros_at, group_last - pos + 1)
    depth = pos - closed_before
    # Parent: the last earlier slice one level up.
    key = depth * (m + 1) + pos
    order = np.argsort(key, kind="stable")
    sorted_key = key[order]
    want = (depth - 1) * (m + 1) + pos
    c = np.searchsorted(sorted_key, want, side="left") - 1
    cand = order[np.maximum(c, 0)]
    ok = (depth > 0) & (c >= 0) & (depth[cand] == depth - 1) & (cand < pos)
    return np.where(ok, cand, -1)
