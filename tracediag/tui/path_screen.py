"""The critical path as a list of segments: sorted, searched and grouped by category or rank;
enter opens a segment in the timeline (or opens/closes a group)."""

from __future__ import annotations

from dataclasses import replace

from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, Input, Static

from tracediag.model.units import fmt_ns
from tracediag.model.wording import plural
from tracediag.tui import targets
from tracediag.tui.path_query import PathQuery, PathTable
from tracediag.tui.row_list import RowList
from tracediag.tui.styles import CATEGORY_COLOR

#: (title, width, weight): the text columns share what a wide screen leaves over.
COLUMNS = [
    ("#", 6),
    ("start", 11),
    ("duration", 11),
    ("category", 20),
    ("rank", 5),
    ("track", 14, 2),
    ("event / op", 18, 4),
    ("layer", 12, 1),
]


class PathScreen(Screen):
    """Every segment of the critical path: category, rank, track, duration, event and op."""

    BINDINGS = [
        Binding("escape", "app.back", "Back", show=False),
        Binding("slash", "search", "Search", key_display="/"),
        Binding("s", "sort", "Sort"),
        Binding("S", "reverse", "Reverse", show=False),
        Binding("g", "group", "Group"),
        Binding("x", "clear", "Clear", show=False),
    ]
    DEFAULT_CSS = """
    PathScreen #path-summary { height: 1; background: $panel; padding: 0 1; }
    PathScreen #path-search { height: 1; border: none; padding: 0 1; }
    """

    def compose(self) -> ComposeResult:
        session = self.app.session
        idx = session.timeline
        analysis = session.diagnosis.analysis
        self.table = PathTable(
            analysis.segments.iloc[idx.seg_row],
            idx.seg_start,
            idx.seg_end,
            idx.seg_category,
            idx.seg_rank,
            analysis.length_ns,
        )
        self.query_state = PathQuery()
        self.entries, self.groups = self.table.entries(self.query_state)
        yield Static(id="path-summary")
        yield Input(
            placeholder="/ search category, rank, track, event, op, layer", id="path-search"
        )
        yield RowList(COLUMNS, len(self.entries), self.row_cells, id="segments")
        yield Footer(show_command_palette=False)

    def on_mount(self) -> None:
        self._summary()
        self.query_one(RowList).focus()

    # ---- rows ------------------------------------------------------------------------------
    def _summary(self) -> None:
        shown = (
            int((self.entries >= 0).sum()) if not self.groups else sum(g.count for g in self.groups)
        )
        length = fmt_ns(self.app.session.diagnosis.analysis.length_ns)
        self.query_one("#path-summary", Static).update(
            f"{shown} of {plural(len(self.table), 'segment')}, {length} · {self.query_state.describe()}"
            " · enter opens"
        )

    def _set(self, query: PathQuery, keep_cursor: bool = False) -> None:
        rows = self.query_one(RowList)
        here = rows.cursor
        self.query_state = query
        self.entries, self.groups = self.table.entries(query)
        rows.set_rows(len(self.entries))
        if keep_cursor:
            rows.move_to(here)
        self._summary()

    def row_cells(self, i: int) -> list[tuple[str, str]]:
        """The cells of list row ``i``: a segment, or a group's heading (one cell)."""
        entry = int(self.entries[i])
        if entry < 0:
            group = self.groups[-entry - 1]
            heading = self.table.heading(group, group.key in self.query_state.opened)
            return [(heading, "bold")]
        t = self.table
        cat = t.category[entry]
        rank = int(t.rank[entry])
        return [
            (str(entry + 1), "dim"),
            (fmt_ns(int(t.start[entry]) - self.app.session.path_start), ""),
            (fmt_ns(int(t.duration[entry])), "bold"),
            (cat, CATEGORY_COLOR[cat]),
            (str(rank) if rank >= 0 else "-", ""),
            (t.track[entry], ""),
            (t.what[entry], ""),
            (t.layer[entry], "dim"),
        ]

    # ---- events ----------------------------------------------------------------------------
    def on_row_list_selected(self, event: RowList.Selected) -> None:
        entry = int(self.entries[event.index])
        if entry < 0:
            group = self.groups[-entry - 1]
            self._set(self.query_state.toggled(group.key), keep_cursor=True)
        else:
            self._open(entry)

    def on_input_changed(self, event: Input.Changed) -> None:
        self._set(replace(self.query_state, text=event.value))

    def on_input_submitted(self, _event: Input.Submitted) -> None:
        self.query_one(RowList).focus()

    def on_key(self, event) -> None:
        if event.key == "escape" and self.focused is self.query_one(Input):
            self.query_one(RowList).focus()
            event.stop()

    def _open(self, i: int) -> None:
        if self.app.session.timeline.seg_track[i] >= 0:
            self.app.open_timeline(targets.for_segment(self.app.session, i))
        else:
            self.notify("This segment is a gap no track explains; nothing to show in the timeline")

    # ---- actions ---------------------------------------------------------------------------
    def action_search(self) -> None:
        """Type to keep the segments holding every word."""
        self.query_one(Input).focus()

    def action_sort(self) -> None:
        """Sort by the next column."""
        self._set(self.query_state.next_sort())

    def action_reverse(self) -> None:
        """Flip the sort direction."""
        self._set(self.query_state.reversed())

    def action_group(self) -> None:
        """Group by category, by rank, or not at all."""
        self._set(self.query_state.next_group())

    def action_clear(self) -> None:
        """Back to the chronological list, ungrouped, no search."""
        self.query_one(Input).value = ""
        self._set(PathQuery())
