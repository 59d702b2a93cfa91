"""Per-track sorted event times, so a timeline draws only the events a window shows.

Built once per trace (one sort over all events). A window query is two ``searchsorted`` calls
per lane and the drawing of a lane is vectorised over its visible events only: moving the
cursor or panning never walks the whole trace and makes no Python object per event.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tracediag.model import schema as S

#: Block of at least this many columns gets the event's name written inside it.
LABEL_MIN_COLUMNS = 6


@dataclass
class LaneCells:
    """What one lane shows across ``width`` columns."""

    event: np.ndarray  # int64 per column: the event drawn there, -1 where the track is idle
    busy: np.ndarray  # float per column: the fraction of the column's time the track is busy
    path: np.ndarray  # bool per column: the critical path runs through this track here
    labels: list[tuple[int, int, int]]  # (first column, end column, event) of wide blocks


class TimelineIndex:
    """Events ordered by (track, start), with per-track offsets and the critical path beside."""

    def __init__(self, trace: S.Trace, segments) -> None:
        ev = trace.events
        self.n_tracks = len(trace.tracks)
        track = ev[S.TRACK].to_numpy().astype(np.int64)
        ts = ev[S.TS].to_numpy()
        end = ts + ev[S.DUR].to_numpy()
        self.order = np.lexsort((ts, track))
        self.track_ptr = np.searchsorted(track[self.order], np.arange(self.n_tracks + 1))
        self.start = ts[self.order]
        self.end = end[self.order]
        # Running max of ends per track: the first event that can reach into a window.
        self.reach = np.empty_like(self.end)
        for k in range(self.n_tracks):  # a loop over tracks, not events
            a, b = self.track_ptr[k], self.track_ptr[k + 1]
            self.reach[a:b] = np.maximum.accumulate(self.end[a:b])
        self.position = np.empty(len(ev), dtype=np.int64)
        self.position[self.order] = np.arange(len(ev))
        self.kind = _kind_codes(ev[S.KIND])
        self.t_min = int(ts.min()) if len(ev) else 0
        self.t_max = int(end.max()) if len(ev) else 1
        self._index_path(segments)

    def _index_path(self, seg) -> None:
        chrono = np.argsort(seg["start_ns"].to_numpy(), kind="stable")
        self.seg_row = chrono  # row of each chronological segment in ``Analysis.segments``
        self.seg_start = seg["start_ns"].to_numpy()[chrono]
        self.seg_end = seg["end_ns"].to_numpy()[chrono]
        self.seg_event = seg["event"].to_numpy()[chrono]
        self.seg_track = seg["track"].to_numpy().astype(np.int64)[chrono]
        self.seg_rank = seg["rank"].to_numpy()[chrono]
        self.seg_category = np.asarray(seg["category"].astype(str))[chrono]
        self.on_path = np.zeros(len(self.position), dtype=bool)
        self.on_path[self.seg_event[self.seg_event >= 0]] = True
        # Segments per track in time order (the path is one chain: they never overlap).
        on_track = np.flatnonzero(self.seg_track >= 0)
        by_track = on_track[np.lexsort((self.seg_start[on_track], self.seg_track[on_track]))]
        self.path_order = by_track
        self.path_ptr = np.searchsorted(self.seg_track[by_track], np.arange(self.n_tracks + 1))

    # ---- queries ---------------------------------------------------------------------------
    def visible(self, track: int, t0: int, t1: int) -> tuple[int, int]:
        """Positions ``[lo, hi)`` in the sorted arrays of ``track``'s events that reach into
        ``[t0, t1)`` (a few that end just before ``t0`` may be included; callers clip)."""
        a, b = int(self.track_ptr[track]), int(self.track_ptr[track + 1])
        lo = a + int(np.searchsorted(self.reach[a:b], t0, side="right"))
        hi = a + int(np.searchsorted(self.start[a:b], t1, side="left"))
        return lo, max(lo, hi)

    def events_on(self, track: int) -> int:
        """How many events ``track`` holds."""
        return int(self.track_ptr[track + 1] - self.track_ptr[track])

    def track_of_position(self, pos: int) -> int:
        """The track whose slice of the sorted arrays holds position ``pos``."""
        return int(np.searchsorted(self.track_ptr, pos, side="right") - 1)

    def nearest(self, track: int, t: int) -> int:
        """The event of ``track`` running at ``t``, else the closer of the last one before and
        the first one after; -1 when the track is empty."""
        a, b = int(self.track_ptr[track]), int(self.track_ptr[track + 1])
        if a == b:
            return -1
        pos = a + int(np.searchsorted(self.start[a:b], t, side="right")) - 1
        if pos >= a and self.end[pos] > t:
            return int(self.order[pos])
        before = t - self.end[pos] if pos >= a else None
        after = self.start[pos + 1] - t if pos + 1 < b else None
        if after is None or (before is not None and before < after):
            return int(self.order[pos])
        return int(self.order[pos + 1])

    def step(self, event: int, delta: int) -> int:
        """The event ``delta`` places after ``event`` on its track (clamped to the track)."""
        pos = int(self.position[event])
        track = self.track_of_position(pos)
        a, b = int(self.track_ptr[track]), int(self.track_ptr[track + 1])
        return int(self.order[min(max(pos + delta, a), b - 1)])

    def segments_of(self, event: int) -> np.ndarray:
        """Chronological indices of the path segments that belong to ``event``."""
        return np.flatnonzero(self.seg_event == event)

    # ---- drawing ---------------------------------------------------------------------------
    def lane(self, track: int, t0: int, t1: int, width: int) -> LaneCells:
        """The cells of ``track`` for the window ``[t0, t1)`` drawn on ``width`` columns."""
        cols = np.arange(width)
        ns_per_col = max(t1 - t0, 1) / width
        event = np.full(width, -1, dtype=np.int64)
        busy = np.zeros(width)
        labels: list[tuple[int, int, int]] = []
        lo, hi = self.visible(track, t0, t1)
        s, e = self.start[lo:hi], self.end[lo:hi]
        keep = np.flatnonzero((e > t0) | (s >= t0))
        if len(keep):
            c0, c1 = _columns(s[keep], e[keep], t0, ns_per_col, width)
            ids = self.order[lo:hi][keep]
            # Per column: the latest-starting block there, or an earlier one still covering it.
            j = np.searchsorted(c0, cols, side="right") - 1
            reach = np.maximum.accumulate(c1)
            longest = np.maximum.accumulate(np.where(c1 == reach, np.arange(len(c1)), 0))
            has = j >= 0
            jj = np.maximum(j, 0)
            cand = np.where(c1[jj] > cols, jj, longest[jj])
            drawn = has & (c1[cand] > cols)
            event[drawn] = ids[cand[drawn]]
            busy = _busy_fraction(s[keep], e[keep], t0, ns_per_col, width)
            wide = np.flatnonzero(c1 - c0 >= LABEL_MIN_COLUMNS)
            labels = [(int(c0[i]), int(c1[i]), int(ids[i])) for i in wide]  # at most width/6
        path = self._path_cells(track, t0, t1, width, ns_per_col)
        return LaneCells(event, busy, path, labels)

    def _path_cells(self, track: int, t0: int, t1: int, width: int, ns_per_col: float):
        a, b = int(self.path_ptr[track]), int(self.path_ptr[track + 1])
        segs = self.path_order[a:b]
        lo = int(np.searchsorted(self.seg_end[segs], t0, side="right"))
        hi = int(np.searchsorted(self.seg_start[segs], t1, side="left"))
        cover = np.zeros(width + 1, dtype=np.int64)
        if hi > lo:
            chosen = segs[lo:hi]
            c0, c1 = _columns(self.seg_start[chosen], self.seg_end[chosen], t0, ns_per_col, width)
            np.add.at(cover, c0, 1)
            np.add.at(cover, c1, -1)
        return np.cumsum(cover[:width]) > 0


def _columns(s, e, t0: int, ns_per_col: float, width: int):
    """First and end column of each interval; every interval gets at least one column."""
    c0 = np.clip(np.floor((s - t0) / ns_per_col), 0, width - 1).astype(np.int64)
    c1 = np.clip(np.ceil((e - t0) / ns_per_col), 0, width).astype(np.int64)
    return c0, np.maximum(c1, c0 + 1)


def _busy_fraction(s, e, t0: int, ns_per_col: float, width: int) -> np.ndarray:
    """Per column: busy ns over the column's ns (overlapping events may push it past 1).

    ``G(x)``, the busy time before ``x``, is ``sum(x - s_i for s_i < x) - sum(x - e_i for
    e_i < x)``; with the starts and ends sorted it is two ``searchsorted`` and prefix sums.
    """
    span = ns_per_col * width
    s = np.clip(s - t0, 0, span).astype(float)
    e = np.sort(np.clip(e - t0, 0, span).astype(float))
    edges = np.arange(width + 1) * ns_per_col
    n_s = np.searchsorted(s, edges, side="left")
    n_e = np.searchsorted(e, edges, side="left")
    sum_s = np.concatenate([[0.0], np.cumsum(s)])[n_s]
    sum_e = np.concatenate([[0.0], np.cumsum(e)])[n_e]
    g = (n_s * edges - sum_s) - (n_e * edges - sum_e)
    return np.diff(g) / ns_per_col


def _kind_codes(col) -> np.ndarray:
    """Per event: the index of its kind in ``schema.KINDS`` (int8)."""
    cats = [S.KINDS.index(str(c)) for c in col.cat.categories]
    lookup = np.append(np.asarray(cats, dtype=np.int8), np.int8(len(S.KINDS) - 1))
    return lookup[col.cat.codes.to_numpy()]
