"""How a DMA queue served by several rings is named: one serial track per ring.

A Neuron DMA queue (``qSyncIO0``) is served by several DMA engines (rings, ``engine_idx``) at
once, so its transfers overlap in time and the queue is not one serial resource. Readers give
each ring of such a queue its own track, named ``<queue>/ring<k>``; a queue served by one ring
keeps the queue's name. Rules that reason per queue (bandwidth, busy time) read the queue back
from the track name with :func:`split_ring_names`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

#: Between a queue's name and its ring number in a track name.
RING_SEPARATOR = "/ring"


def ring_track_name(queue: str, ring: int) -> str:
    """The track name of ring ``ring`` of ``queue``."""
    return f"{queue}{RING_SEPARATOR}{ring}"


def split_ring_names(names: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per track name: the queue (the name itself when it names no ring) and the ring (-1)."""
    parts = pd.Series(np.asarray(names, dtype=object), dtype=object).str.extract(
        rf"^(?P<queue>.*){RING_SEPARATOR}(?P<ring>\d+)$"
    )
    has = parts["ring"].notna().to_numpy()
    queue = np.where(has, parts["queue"].to_numpy(dtype=object), np.asarray(names, dtype=object))
    ring = np.where(has, pd.to_numeric(parts["ring"]).fillna(-1).to_numpy(), -1).astype(np.int64)
    return queue.astype(object), ring
