"""As-of look-ups of the Perfetto fast path: per query, the latest entry with the same keys
written before it (the sequence state a slow packet left, an interned entry of the same sequence
generation), as the protobuf loop of :mod:`perfetto_decode` would have had it at that packet.
"""

from __future__ import annotations

import numpy as np


def asof(ek1, ek2, epos, qk1, qk2, qpos) -> np.ndarray:
    """For each query, the latest entry with the same two keys at a smaller position (-1: none).

    Entries are few (one per slow packet or interned entry), queries many (one per fast event
    or annotation): the entries' keys are numbered, each (key, position) packed into one int64,
    and every query is one binary search among the sorted entries, the queries never sorted
    (:func:`asof_sorted`, the general reading, where the packed keys would not fit)."""
    ek1, ek2, epos = (np.asarray(c, dtype=np.int64) for c in (ek1, ek2, epos))
    qk1, qk2, qpos = (np.asarray(c, dtype=np.int64) for c in (qk1, qk2, qpos))
    out = np.full(len(qk1), -1, dtype=np.int64)
    if not len(ek1) or not len(qk1):
        return out
    lo = min(int(epos.min()), int(qpos.min()))
    span = max(int(epos.max()), int(qpos.max())) - lo + 1
    u1, c1 = np.unique(ek1, return_inverse=True)
    u2, c2 = np.unique(ek2, return_inverse=True)
    if len(u1) * len(u2) * span >= 1 << 62:
        return asof_sorted(ek1, ek2, epos, qk1, qk2, qpos)
    q1 = np.minimum(np.searchsorted(u1, qk1), len(u1) - 1)
    q2 = np.minimum(np.searchsorted(u2, qk2), len(u2) - 1)
    known = (u1[q1] == qk1) & (u2[q2] == qk2)  # a key no entry has: none
    step = np.int64(span)
    ekey = (c1.ravel().astype(np.int64) * len(u2) + c2.ravel()) * step + (epos - lo)
    qkey = (q1 * len(u2) + q2) * step + (qpos - lo)
    order = np.argsort(ekey, kind="stable")  # equal keys: the later entry last, and taken
    at = np.searchsorted(ekey[order], qkey, side="right") - 1
    entry = order[np.maximum(at, 0)]
    same = known & (at >= 0) & (ekey[entry] // step == qkey // step)
    out[same] = entry[same]
    return out


def asof_sorted(ek1, ek2, epos, qk1, qk2, qpos) -> np.ndarray:
    """:func:`asof` by one sort of entries and queries together (any keys)."""
    ne = len(ek1)
    k1, k2 = np.concatenate([ek1, qk1]), np.concatenate([ek2, qk2])
    pos = np.concatenate([epos, qpos])
    is_query = np.arange(len(k1)) >= ne
    order = np.lexsort((is_query, pos, k2, k1))
    sorted_entry = np.where(is_query[order], -1, np.arange(len(order)))
    last = np.maximum.accumulate(sorted_entry) if len(order) else sorted_entry
    q_at = np.flatnonzero(is_query[order])
    query = order[q_at] - ne
    prev = last[q_at]
    entry = np.where(prev >= 0, order[np.maximum(prev, 0)], 0)
    same = (prev >= 0) & (k1[entry] == k1[query + ne]) & (k2[entry] == k2[query + ne])
    out = np.full(len(qk1), -1, dtype=np.int64)
    out[query] = np.where(same, entry, -1)
    return out
