"""Which tracks get a timeline lane, in which order, under which label.

Per track, vectorised over the tracks table (never per event):

* shown: a track holding only markers (``cpu Spans/PyTorch Profiler``, ``cpu /``: profiler
  annotations with no work of their own) gets no lane; it would be a blank line on every rank.
* order: the same on every rank, so rank 0's third lane is the same resource as rank 5's:
  engines in the order they first appear in the trace, then the main CPU thread (pid = tid)
  before the others, the busiest thread first, then names with their numbers compared as
  numbers (``stream 7`` before ``stream 24``).
* label: the track's name as every view shows it (``peers.track_labels``) after the rank, less
  what repeats the rank: ``r3 stream 7`` (the GPU prefix), ``r3 cpu 12101 (thread #2)`` (the
  pid); the widget fits its column to the longest label the screen allows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracediag.model import schema as S


@dataclass(frozen=True)
class LaneLayout:
    """Per track: whether it gets a lane, its sort position across the trace, its label."""

    shown: np.ndarray  # bool per track
    position: np.ndarray  # int64 per track: lanes are drawn in increasing position
    labels: np.ndarray  # str per track


def _natural(names: pd.Series) -> pd.Series:
    """Names with every run of digits zero-padded, so they sort as numbers."""
    return names.str.replace(r"\d+", lambda m: m.group(0).zfill(12), regex=True)


def lane_layout(trace: S.Trace, names: np.ndarray | None = None) -> LaneLayout:
    """The lanes of ``trace``'s tracks (see the module docstring); ``names``: the tracks'
    labels (``Analysis.track_labels``), their own names when not given."""
    tr = trace.tracks
    n = len(tr)
    ev = trace.events
    work = (ev[S.KIND] != "marker").to_numpy(dtype=bool)
    n_work = np.bincount(ev[S.TRACK].to_numpy()[work].astype(np.int64), minlength=n)[:n]
    own = tr[S.TRACK_NAME] if names is None else names
    names = pd.Series(np.asarray(own, dtype=object)).astype(str)
    cpu = (tr[S.TRACK_KIND].astype(str) == "cpu_thread").to_numpy()
    ids = names.str.extract(r"^cpu (\d+)/(\d+)")
    main = cpu & ids[0].notna().to_numpy() & (ids[0] == ids[1]).to_numpy()
    short = names.str.replace(r"^gpu\d+/", "", regex=True)
    short = short.where(
        ~(cpu & ids[1].notna().to_numpy()), names.str.replace(r"^cpu \d+/", "cpu ", regex=True)
    )
    engine = pd.factorize(tr[S.ENGINE].astype(str))[0]
    busiest = np.where(cpu, -n_work, 0)  # threads have no name shared across ranks
    order = np.lexsort(
        (
            np.arange(n),
            _natural(short).to_numpy(dtype=str),
            busiest,
            ~main,
            engine,
            tr[S.RANK].to_numpy(),
        )
    )
    position = np.empty(n, dtype=np.int64)
    position[order] = np.arange(n)
    labels = ("r" + tr[S.RANK].astype(str) + " " + short).to_numpy(dtype=object)
    return LaneLayout(n_work > 0, position, labels)


def fit_label(label: str, width: int) -> str:
    """``label`` in a column of ``width`` cells (one left blank), cut with an ellipsis."""
    room = max(width - 1, 1)
    text = label if len(label) <= room else label[: room - 1] + "…"
    return text.ljust(width)
