"""Serial lanes for a DMA queue's transfers when the profile names no ring.

A DMA queue is served by several DMA engines (rings) at once, so its transfers overlap in time
(neuron-real-output.md). ``DmaPacket`` rows name their ring (``engine_idx``) and each ring gets
its own serial track (:mod:`neuron_dma`). ``DmaPacketAggregated`` blocks (the only DMA table of
a capture without ``DmaPacket``) and legacy JSON rows without ``engine_idx`` name none: put on
one track, a block that starts while the previous one still runs is chained to it with a
negative gap, and a what-if that shortens the earlier block pulls the later one before its own
trigger (even before the profile's start, stretching the window it should shorten). Each such
queue's transfers are therefore spread over lanes, stand-ins for the rings that served them: in
start order, a lane takes the earliest transfer, then the next one that starts after it ended,
and so on; the transfers left form the next lane. No lane holds two overlapping transfers; a
queue that never overlaps keeps one lane (its own track).

Columnar: each lane is one greedy chain, found by pointer doubling over "the next transfer of
the queue that starts after this one ended" (``np.searchsorted``), O(n log n) per lane; the
number of lanes is the queue's concurrency, not the number of transfers.
"""

from __future__ import annotations

import numpy as np


def serial_lanes(key: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per row: its lane (0, 1, ...) within its ``key`` (a queue code), so that no two rows of
    one key and lane overlap in time (see the module); -1 where ``key`` < 0 or a time is
    unknown (NaN)."""
    n = len(key)
    lane = np.full(n, -1, dtype=np.int64)
    ok = (key >= 0) & np.isfinite(start) & np.isfinite(end)
    if not ok.any():
        return lane
    # Times as ranks: one int64 sort key per (queue, time) without overflow.
    times = np.unique(np.concatenate([start[ok], end[ok]]))
    span = len(times) + 1
    rs = np.searchsorted(times, np.where(ok, start, times[0]))
    re = np.maximum(np.searchsorted(times, np.where(ok, end, times[0])), rs)
    rows = np.flatnonzero(ok)
    rows = rows[np.lexsort((re[rows], rs[rows], key[rows]))]  # by queue, then start
    k = 0
    while len(rows):
        lane[rows[_first_chain(key[rows], rs[rows], re[rows], span)]] = k
        rows = rows[lane[rows] < 0]
        k += 1
    return lane


def _first_chain(key: np.ndarray, s: np.ndarray, e: np.ndarray, span: int) -> np.ndarray:
    """Mask of the rows (sorted by key, then start) on each key's greedy chain: its first row,
    then the first row starting at or after that one's end, and so on."""
    m = len(key)
    at = np.arange(m)
    sort_key = key.astype(np.int64) * span + s
    nxt = np.maximum(np.searchsorted(sort_key, key.astype(np.int64) * span + e), at + 1)
    same = nxt < m
    same[same] = key[nxt[same]] == key[same]
    jump = np.r_[np.where(same, nxt, m), m]  # m: past the chain's end (maps to itself)
    on = np.zeros(m + 1, dtype=bool)
    on[np.r_[True, key[1:] != key[:-1]].nonzero()[0]] = True  # each key's first row
    # After step j, ``on`` holds the rows within 2**j hops of a head; ``jump`` hops 2**j.
    while (jump[:m] < m).any():
        on[jump[on.nonzero()[0]]] = True
        jump = jump[jump]
    on[jump[on.nonzero()[0]]] = True
    return on[:m]
