"""The timeline drawn in the terminal: a time ruler, then one lane per track.

Line API: each screen line is rendered on demand from the lanes' visible events only
(:meth:`TimelineIndex.lane`), cached per window, so moving the cursor redraws a few lanes of a
few hundred cells and never touches the rest of the trace.
"""

from __future__ import annotations

import numpy as np
from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip
from textual.widget import Widget

from tracediag.model import schema as S
from tracediag.model.units import fmt_ns
from tracediag.tui.lanes import fit_label
from tracediag.tui.session import Session
from tracediag.tui.timeline_index import LaneCells
from tracediag.tui.timeline_state import TimelineState

#: The lane label column: as wide as the longest label of the lanes, within these bounds (the
#: upper one a share of the screen, so the plot keeps most of a wide terminal).
MIN_LABEL, MAX_LABEL_SHARE = 12, 0.3
TICK_EVERY = 14  # columns between ruler labels
BLOCKS = " ▁▂▃▄▅▆▇█"


class TimelineView(Widget, can_focus=True):
    """Draws a :class:`TimelineState`; the screen owns the keys and calls :meth:`refresh`."""

    COMPONENT_CLASSES = {
        "timeline--ruler",
        "timeline--ruler-stall",
        "timeline--label",
        "timeline--label-current",
        "timeline--compute",
        "timeline--dma",
        "timeline--collective",
        "timeline--sync",
        "timeline--host",
        "timeline--marker",
        "timeline--path",
        "timeline--wait",
        "timeline--selected",
        "timeline--stall",
    }
    DEFAULT_CSS = """
    TimelineView { height: 1fr; }
    TimelineView > .timeline--ruler { color: $foreground-muted; }
    TimelineView > .timeline--ruler-stall { background: $error 50%; }
    TimelineView > .timeline--label { color: $foreground-muted; }
    TimelineView > .timeline--label-current { color: $accent; text-style: bold reverse; }
    TimelineView > .timeline--compute { color: $primary; }
    TimelineView > .timeline--dma { color: $success; }
    TimelineView > .timeline--collective { color: $secondary; }
    TimelineView > .timeline--sync { color: $foreground-muted; }
    TimelineView > .timeline--host { color: $accent-darken-1; }
    TimelineView > .timeline--marker { color: $foreground-disabled; }
    TimelineView > .timeline--path { color: $warning; }
    TimelineView > .timeline--wait { color: $warning; }
    TimelineView > .timeline--selected { color: $foreground; text-style: bold; }
    TimelineView > .timeline--stall { background: $error 15%; }
    """

    def __init__(self, session: Session, state: TimelineState, **kwargs) -> None:
        super().__init__(**kwargs)
        self.session = session
        self.state = state
        self.lane_offset = 0
        # Per view (window, width, theme, stall): each lane's cells and its drawn line by
        # (track, selected event on it, cursor on it). A cursor move redraws two lanes.
        self._view: tuple = ()
        self._cells_cache: dict[int, LaneCells] = {}
        self._strips: dict[tuple, Strip] = {}
        self._styles: dict[int, Style] = {}

    # ---- layout ----------------------------------------------------------------------------
    @property
    def label_width(self) -> int:
        """Fits the longest lane label, up to ``MAX_LABEL_SHARE`` of the width."""
        labels = self.session.lanes.labels
        longest = max((len(labels[t]) for t in self.state.lanes), default=0) + 1
        cap = max(MIN_LABEL, int(self.size.width * MAX_LABEL_SHARE))
        return min(max(longest, MIN_LABEL), cap)

    @property
    def plot_width(self) -> int:
        return max(self.size.width - self.label_width, 1)

    def _scroll_to_lane(self) -> None:
        rows = max(self.size.height - 1, 1)
        lane = self.state.lane
        if lane < self.lane_offset:
            self.lane_offset = lane
        elif lane >= self.lane_offset + rows:
            self.lane_offset = lane - rows + 1
        self.lane_offset = min(self.lane_offset, max(len(self.state.lanes) - rows, 0))

    def _check_view(self) -> None:
        view = (self.state.t0, self.state.t1, self.plot_width, self.app.theme, self.state.stall)
        if view != self._view:
            self._view = view
            self._cells_cache, self._strips, self._styles = {}, {}, {}

    def _cells(self, track: int) -> LaneCells:
        if track not in self._cells_cache:
            st = self.state
            self._cells_cache[track] = self.session.timeline.lane(
                track, st.t0, st.t1, self.plot_width
            )
        return self._cells_cache[track]

    def _columns_of(self, t_a: int, t_b: int) -> tuple[int, int]:
        w = self.plot_width
        ns = max(self.state.span, 1) / w
        c0 = int(np.clip(np.floor((t_a - self.state.t0) / ns), 0, w))
        c1 = int(np.clip(np.ceil((t_b - self.state.t0) / ns), 0, w))
        inside = t_b > self.state.t0 and t_a < self.state.t1
        return c0, (max(c1, c0 + 1) if inside else c0)

    # ---- drawing ---------------------------------------------------------------------------
    def render_line(self, y: int) -> Strip:
        self._scroll_to_lane()
        self._check_view()
        if y == 0:
            if "ruler" not in self._strips:
                self._strips["ruler"] = self._ruler()
            return self._strips["ruler"]
        lane = self.offset_lane(y)
        if lane >= len(self.state.lanes):
            return Strip.blank(self.size.width)
        track = self.state.lanes[lane]
        selected = self.state.selected if self._selected_track() == track else -1
        key = (track, selected, lane == self.state.lane)
        if key not in self._strips:
            if len(self._strips) > 1000:  # many cursor moves in one window: start afresh
                self._strips = {}
            self._strips[key] = self._lane(lane, selected)
        return self._strips[key]

    def offset_lane(self, y: int) -> int:
        """The lane drawn on screen line ``y`` (line 0 is the ruler)."""
        return self.lane_offset + y - 1

    def _selected_track(self) -> int:
        st = self.state
        if st.selected < 0:
            return -1
        return self.session.timeline.track_of_position(
            int(self.session.timeline.position[st.selected])
        )

    def _style(self, name: str) -> Style:
        return self.get_component_rich_style(f"timeline--{name}", partial=True)

    def _background(self, name: str) -> Style:
        """A component's background only, blended over the widget's (partial styles are not)."""
        return Style(bgcolor=self.get_component_rich_style(f"timeline--{name}").bgcolor)

    def _code_style(self, key: int) -> Style:
        """The style of a run: ``key = code * 4 + flags`` (bit 0 label, bit 1 stall)."""
        if key not in self._styles:
            code, flags = divmod(key, 4)
            names = ("", *S.KINDS, "path", "wait", "selected")
            style = self.rich_style + (self._style(names[code]) if code else Style())
            if flags & 1:
                style += Style(reverse=True)
            if flags & 2:
                style += self._background("stall")
            self._styles[key] = style
        return self._styles[key]

    def _stall_columns(self) -> tuple[int, int]:
        if self.state.stall is None:
            return 0, 0
        return self._columns_of(*self.state.stall)

    def _ruler(self) -> Strip:
        w = self.plot_width
        chars = [" "] * w
        base = self.session.path_start
        ns = self.state.span / w
        for col in range(0, w - 6, TICK_EVERY):
            label = "|" + fmt_ns(self.state.t0 + col * ns - base)
            chars[col : col + len(label)] = list(label[: w - col])
        ruler = self.rich_style + self._style("ruler")
        stall = self._background("ruler-stall") + Style(bold=True)
        s0, s1 = self._stall_columns()
        head = fit_label(f"span {fmt_ns(self.state.span)}", self.label_width)
        segments = [Segment(head, ruler), Segment("".join(chars[:s0]), ruler)]
        segments += [Segment("".join(chars[s0:s1]), ruler + stall)]
        segments += [Segment("".join(chars[s1:]), ruler)]
        return Strip(segments)

    def _lane(self, lane: int, selected: int) -> Strip:
        st = self.state
        track = st.lanes[lane]
        idx = self.session.timeline
        cells = self._cells(track)
        label = fit_label(str(self.session.lanes.labels[track]), self.label_width)
        label_style = self.rich_style + self._style("label-current" if lane == st.lane else "label")
        w = self.plot_width
        drawn = cells.event >= 0
        ev = cells.event[drawn]
        # Bar height = how busy the track is in the column: idle gaps show even zoomed out.
        level = np.clip(np.ceil(cells.busy[drawn] * 8), 1, 8).astype(int)
        chars = np.full(w, " ", dtype="<U1")
        chars[drawn] = _BLOCKS[level]
        code = np.zeros(w, dtype=np.int64)
        code[drawn] = np.where(idx.on_path[ev], _PATH, 1 + idx.kind[ev])
        waiting = ~drawn & cells.path
        chars[waiting], code[waiting] = "░", _WAIT
        if selected >= 0:
            mine = cells.event == selected
            chars[mine], code[mine] = "█", _SELECTED
        key = code * 4
        names = self.session.event_names
        for c0, c1, e in cells.labels:  # a few wide blocks: their name inside, reversed
            text = str(names.iat[e])[: c1 - c0 - 2]
            cols = np.arange(c0 + 1, c0 + 1 + len(text))
            cols = cols[cells.event[cols] == e]
            chars[cols] = np.array(list(text))[cols - c0 - 1]
            key[cols] |= 1
        s0, s1 = self._stall_columns()
        key[s0:s1] |= 2
        bounds = [0, *(np.flatnonzero(np.diff(key)) + 1).tolist(), w]
        segments = [Segment(label, label_style)]
        for a, b in zip(bounds[:-1], bounds[1:], strict=True):
            segments.append(Segment("".join(chars[a:b]), self._code_style(int(key[a]))))
        return Strip(segments)


_BLOCKS = np.array(list(BLOCKS))
_PATH, _WAIT, _SELECTED = len(S.KINDS) + 1, len(S.KINDS) + 2, len(S.KINDS) + 3
