"""The critical path as a list of segments in time order; enter opens one in the timeline."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, Static

from tracediag.model.units import fmt_ns
from tracediag.tui import targets
from tracediag.tui.row_list import RowList
from tracediag.tui.styles import CATEGORY_COLOR

COLUMNS = [
    ("#", 6),
    ("start", 10),
    ("duration", 10),
    ("category", 20),
    ("rank", 5),
    ("track", 12),
    ("event / op", 18),
    ("layer", 14),
]


def _text(frame, col: str, i: int) -> str:
    """A segment's string field, ``""`` when the column or the value is missing."""
    if col not in frame:
        return ""
    value = frame[col].iat[i]
    return "" if value is None or value != value else str(value)


class PathScreen(Screen):
    """Every segment of the critical path: category, rank, track, duration, event and op."""

    BINDINGS = [
        Binding("escape", "app.back", "Back", show=False),
    ]
    DEFAULT_CSS = "PathScreen #path-summary { height: 1; background: $panel; padding: 0 1; }"

    def compose(self) -> ComposeResult:
        session = self.app.session
        idx = session.timeline
        seg = session.diagnosis.analysis.segments.iloc[idx.seg_row]
        self.segments = seg
        length = session.diagnosis.analysis.length_ns
        yield Static(
            f"{len(seg)} segments, {fmt_ns(length)} · enter opens a segment in the timeline",
            id="path-summary",
        )
        yield RowList(COLUMNS, len(seg), self.row_cells, id="segments")
        yield Footer(show_command_palette=False)

    def on_mount(self) -> None:
        self.query_one(RowList).focus()

    def row_cells(self, i: int) -> list[tuple[str, str]]:
        """The cells of chronological segment ``i``."""
        idx = self.app.session.timeline
        base = self.app.session.path_start
        cat = str(idx.seg_category[i])
        rank = int(idx.seg_rank[i])
        what = " ".join(t for t in (_text(self.segments, c, i) for c in ("name", "op")) if t)
        return [
            (str(i + 1), "dim"),
            (fmt_ns(int(idx.seg_start[i]) - base), ""),
            (fmt_ns(int(idx.seg_end[i] - idx.seg_start[i])), "bold"),
            (cat, CATEGORY_COLOR[cat]),
            (str(rank) if rank >= 0 else "-", ""),
            (_text(self.segments, "track_name", i) or "-", ""),
            (what or "-", ""),
            (_text(self.segments, "layer", i) or "-", "dim"),
        ]

    def on_row_list_selected(self, event: RowList.Selected) -> None:
        self._open(event.index)

    def _open(self, i: int) -> None:
        if self.app.session.timeline.seg_track[i] >= 0:
            self.app.open_timeline(targets.for_segment(self.app.session, i))
        else:
            self.notify("This segment is a gap no track explains; nothing to show in the timeline")
