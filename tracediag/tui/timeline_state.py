"""What the timeline shows and where its cursor is: window, lanes, selection, path position.

Pure state over a :class:`TimelineIndex` (no Textual), so behaviour is tested without a screen.
Every move is a handful of ``searchsorted`` calls; nothing here walks all events.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tracediag.model import schema as S
from tracediag.tui.lanes import LaneLayout
from tracediag.tui.timeline_index import TimelineIndex

#: The narrowest window (ns) zooming in reaches.
MIN_SPAN_NS = 20


@dataclass(frozen=True)
class TimelineTarget:
    """Where to open the timeline: a window, the ranks whose tracks get lanes, what to select."""

    t0: int
    t1: int
    ranks: tuple[int, ...]
    stall: tuple[int, int] | None = None  # the finding's window, marked on the ruler
    event: int = -1
    segment: int = -1  # chronological index of a critical-path segment
    title: str = ""


class TimelineState:
    """The timeline's view and cursor. Times are aligned ns."""

    def __init__(
        self,
        index: TimelineIndex,
        track_ranks: np.ndarray,
        target: TimelineTarget,
        layout: LaneLayout | None = None,
    ):
        self.index = index
        self.track_ranks = track_ranks
        n = len(track_ranks)
        # without a layout: every track, in track order
        self.shown = layout.shown if layout is not None else np.ones(n, dtype=bool)
        self.position = layout.position if layout is not None else np.arange(n)
        self.title = target.title
        self.stall = target.stall
        self.focus_ranks = tuple(sorted(set(target.ranks)))
        self.all_ranks = False
        self.ranks = self.focus_ranks
        self.lanes = self._lanes_for(self.ranks)
        self.t0, self.t1 = int(target.t0), max(int(target.t1), int(target.t0) + MIN_SPAN_NS)
        self.lane = 0
        self.selected = -1
        self.segment = -1
        if target.segment >= 0:
            self._go_to_segment(target.segment)
        elif target.event >= 0:
            self.select(target.event)
        elif self.lanes:
            self.select(index.nearest(self.lanes[0], self.t0))

    # ---- lanes -----------------------------------------------------------------------------
    def _lanes_for(self, ranks) -> list[int]:
        """The shown tracks of ``ranks`` in lane order (the same order on every rank)."""
        wanted = np.isin(self.track_ranks, np.asarray(ranks, dtype=self.track_ranks.dtype))
        counts = np.diff(self.index.track_ptr)
        tracks = np.flatnonzero(wanted & (counts > 0) & self.shown)
        return tracks[np.argsort(self.position[tracks], kind="stable")].tolist()

    def _show_rank(self, rank: int) -> None:
        if rank not in self.ranks:
            self.ranks = tuple(sorted({*self.ranks, rank}))
            self.lanes = self._lanes_for(self.ranks)

    def toggle_all_ranks(self) -> None:
        """Lanes for every rank, or back to the ranks the view was opened on."""
        self.all_ranks = not self.all_ranks
        every = np.unique(self.track_ranks).tolist()
        self.ranks = tuple(every) if self.all_ranks else self.focus_ranks
        if self.selected >= 0:
            self._show_rank(int(self.track_ranks[self._track_of(self.selected)]))
        self.lanes = self._lanes_for(self.ranks)
        self._lane_to_selection()

    # ---- window ----------------------------------------------------------------------------
    @property
    def span(self) -> int:
        return self.t1 - self.t0

    def zoom(self, factor: float) -> None:
        """Scale the window by ``factor`` (< 1 zooms in) around the selected event or centre."""
        span = max(MIN_SPAN_NS, min(int(self.span * factor), self._extent() * 2))
        anchor = self._anchor()
        frac = (anchor - self.t0) / self.span if self.span else 0.5
        self.t0 = int(round(anchor - frac * span))
        self.t1 = self.t0 + span

    def pan(self, fraction: float) -> None:
        """Move the window by ``fraction`` of its width (negative: earlier)."""
        span = self.span
        lo = self.index.t_min - span // 2
        hi = self.index.t_max + span // 2
        self.t0 = min(max(self.t0 + int(span * fraction), lo), max(lo, hi - span))
        self.t1 = self.t0 + span

    def fit(self, t0: int, t1: int, margin: float = 0.05) -> None:
        """Show ``[t0, t1]`` with a margin on both sides."""
        pad = int((t1 - t0) * margin)
        self.t0, self.t1 = t0 - pad, max(t1 + pad, t0 - pad + MIN_SPAN_NS)

    def fit_all(self) -> None:
        """The whole trace."""
        self.fit(self.index.t_min, self.index.t_max, margin=0.0)

    def _extent(self) -> int:
        return max(self.index.t_max - self.index.t_min, MIN_SPAN_NS)

    def _anchor(self) -> int:
        if self.selected >= 0:
            s, e = self.event_times(self.selected)
            mid = (s + e) // 2
            if self.t0 <= mid <= self.t1:
                return mid
        return (self.t0 + self.t1) // 2

    def _ensure_visible(self, s: int, e: int) -> None:
        if e - s > self.span * 0.9:
            self.fit(s, e)
        elif s < self.t0 or e > self.t1:
            half = self.span // 2
            self.t0 = (s + e) // 2 - half
            self.t1 = self.t0 + 2 * half

    # ---- selection -------------------------------------------------------------------------
    def event_times(self, event: int) -> tuple[int, int]:
        pos = self.index.position[event]
        return int(self.index.start[pos]), int(self.index.end[pos])

    def _track_of(self, event: int) -> int:
        return self.index.track_of_position(int(self.index.position[event]))

    def _lane_to_selection(self) -> None:
        if self.selected >= 0:
            track = self._track_of(self.selected)
            if track in self.lanes:
                self.lane = self.lanes.index(track)
        self.lane = min(self.lane, max(len(self.lanes) - 1, 0))

    def select(self, event: int) -> None:
        """Select ``event``: its rank gets lanes, its lane the cursor, its block the view."""
        if event < 0:
            return
        self.selected = int(event)
        self._show_rank(int(self.track_ranks[self._track_of(event)]))
        self._lane_to_selection()
        self._ensure_visible(*self.event_times(event))

    def move_event(self, delta: int) -> None:
        """The previous/next event on the cursor's lane."""
        if not self.lanes:
            return
        track = self.lanes[self.lane]
        if self.selected >= 0 and self._track_of(self.selected) == track:
            self.select(self.index.step(self.selected, delta))
        else:
            self.select(self.index.nearest(track, (self.t0 + self.t1) // 2))
        self.segment = -1

    def move_lane(self, delta: int) -> None:
        """The lane above/below; selects its event nearest the current one."""
        if not self.lanes:
            return
        self.lane = min(max(self.lane + delta, 0), len(self.lanes) - 1)
        at = self._anchor()
        event = self.index.nearest(self.lanes[self.lane], at)
        if event >= 0:
            self.selected = event
            self._ensure_visible(*self.event_times(event))
        self.segment = -1

    # ---- the critical path -----------------------------------------------------------------
    def jump_path(self, delta: int) -> int:
        """Move to the previous (-1) or next (+1) event of the critical path in time and select
        it; returns the chronological index of its first segment (-1 when the path has none on
        a track). Consecutive segments of one event (a collective's skew then its transfer, an
        event's gap then its body) are one step, so every press moves the selection."""
        idx = self.index
        usable = np.flatnonzero(idx.seg_track >= 0)
        if not len(usable):
            return -1
        ev = idx.seg_event[usable]
        heads = usable[np.r_[True, ev[1:] != ev[:-1]]]
        if self.segment >= 0:
            here = int(np.searchsorted(heads, self.segment, side="right")) - 1
            k = here + delta if here >= 0 else (0 if delta > 0 else -1)
        else:
            t = self.event_times(self.selected)[0] if self.selected >= 0 else self.t0
            starts = idx.seg_start[heads]
            # next: the first event starting after the selected one; previous: the last at or
            # before it
            k = int(np.searchsorted(starts, t, side="right")) - (0 if delta > 0 else 1)
        k = min(max(k, 0), len(heads) - 1)
        self._go_to_segment(int(heads[k]))
        return self.segment

    def _go_to_segment(self, seg: int) -> None:
        idx = self.index
        self.segment = seg
        event = int(idx.seg_event[seg])
        if event >= 0:
            self.selected = event
            self._show_rank(int(self.track_ranks[self._track_of(event)]))
            self._lane_to_selection()
        self._ensure_visible(int(idx.seg_start[seg]), int(idx.seg_end[seg]))


def track_ranks(trace: S.Trace) -> np.ndarray:
    """Per track: its rank (the array :class:`TimelineState` uses to pick lanes)."""
    return trace.tracks[S.RANK].to_numpy().astype(np.int64)
