"""The findings table: every finding, sortable by any column, filtered, searched as you type."""

from __future__ import annotations

from dataclasses import replace

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Input, Static

from tracediag.model.findings import Finding
from tracediag.model.units import fmt_ns
from tracediag.model.wording import plural, rank_list
from tracediag.tui import findings_query as Q
from tracediag.tui.styles import SEVERITY_STYLE

_FILTER = Binding.Group("filter", compact=True)


def finding_cells(f: Finding) -> list:
    """One table row: code, severity, ranks, engine, layer, impact %, saving."""
    return [
        Text(f.code, style="bold"),
        Text(str(f.severity), style=SEVERITY_STYLE[int(f.severity)]),
        rank_list(list(f.ranks)),
        f.engine or "-",
        (f.layer or "-")[:16],
        Text(f"{f.impact_pct:.1f}%", justify="right"),
        Text(fmt_ns(f.saving_ns), justify="right"),
    ]


class FindingsScreen(Screen):
    """All findings of the Diagnosis; enter opens one, t its timeline."""

    BINDINGS = [
        Binding("escape", "app.back", "Back", show=False),
        Binding("t", "timeline", "Timeline"),
        Binding("slash", "search", "Search", key_display="/"),
        Binding("s", "sort", "Sort"),
        Binding("S", "reverse", "Reverse", show=False),
        Binding("F", "family", "filter", group=_FILTER),
        Binding("V", "severity", "filter", group=_FILTER),
        Binding("R", "rank", "filter", group=_FILTER),
        Binding("x", "clear", "Clear", show=False),
    ]
    DEFAULT_CSS = """
    FindingsScreen #query { height: 1; background: $panel; padding: 0 1; }
    FindingsScreen #search { height: 1; border: none; padding: 0 1; }
    FindingsScreen DataTable { height: 1fr; }
    FindingsScreen #preview { height: 4; padding: 0 1; border-top: solid $panel; }
    """

    def __init__(self) -> None:
        super().__init__()
        self.query_state = Q.FindingsQuery()
        self.shown: list[Finding] = []

    @property
    def findings(self) -> list[Finding]:
        return self.app.session.diagnosis.findings

    def compose(self) -> ComposeResult:
        yield Static(id="query")
        yield Input(placeholder="/ search code, title, message, layer, op...", id="search")
        yield DataTable(cursor_type="row", zebra_stripes=True, id="table")
        yield Static(id="preview")
        yield Footer(show_command_palette=False)

    def on_mount(self) -> None:
        self.rank_choices = (None, *sorted({r for f in self.findings for r in f.ranks}))
        self._refill()
        self.query_one(DataTable).focus()

    # ---- the table -------------------------------------------------------------------------
    def _refill(self) -> None:
        table = self.query_one(DataTable)
        keep = self.current
        self.shown = self.query_state.apply(self.findings)
        table.clear(columns=True)
        for key, header in Q.COLUMNS:
            mark = ""
            if key == self.query_state.sort:
                mark = " ▼" if self.query_state.descending else " ▲"
            table.add_column(header + mark, key=key)
        for i, f in enumerate(self.shown):
            table.add_row(*finding_cells(f), key=str(i))
        if keep in self.shown:
            table.move_cursor(row=self.shown.index(keep))
        total = len(self.findings)
        text = f"{len(self.shown)} of {plural(total, 'finding')} · {self.query_state.describe()}"
        if self.query_state.text:
            text += f" · search {self.query_state.text!r}"
        self.query_one("#query", Static).update(text)
        self._preview()

    @property
    def current(self) -> Finding | None:
        """The finding under the cursor, if any."""
        table = self.query_one(DataTable)
        row = table.cursor_row
        return self.shown[row] if self.shown and 0 <= row < len(self.shown) else None

    def _preview(self) -> None:
        f = self.current
        if f is None:
            text = Text("no finding matches: x clears the filters", style="dim")
        else:
            text = Text(f"{f.code} {f.title}. ", style="bold")
            text.append(f.message, style="not bold")
        self.query_one("#preview", Static).update(text)

    def _set(self, query: Q.FindingsQuery) -> None:
        self.query_state = query
        self._refill()

    # ---- events ----------------------------------------------------------------------------
    def on_data_table_row_highlighted(self, _event: DataTable.RowHighlighted) -> None:
        self._preview()

    def on_data_table_row_selected(self, _event: DataTable.RowSelected) -> None:
        self.action_open()

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        self._set(self.query_state.sorted_by(str(event.column_key.value)))

    def on_input_changed(self, event: Input.Changed) -> None:
        self._set(replace(self.query_state, text=event.value))

    def on_input_submitted(self, _event: Input.Submitted) -> None:
        self.query_one(DataTable).focus()

    def on_key(self, event) -> None:
        if event.key == "escape" and self.focused is self.query_one(Input):
            self.query_one(DataTable).focus()
            event.stop()

    # ---- actions ---------------------------------------------------------------------------
    def action_open(self) -> None:
        """Open the finding under the cursor."""
        if self.current is not None:
            self.app.open_finding(self.current)

    def action_timeline(self) -> None:
        """The timeline of the finding under the cursor."""
        if self.current is not None:
            self.app.open_finding_timeline(self.current)

    def action_search(self) -> None:
        """Type to filter the findings."""
        self.query_one(Input).focus()

    def action_sort(self) -> None:
        """Sort by the next column."""
        self._set(self.query_state.next_sort())

    def action_reverse(self) -> None:
        """Flip the sort direction."""
        self._set(self.query_state.sorted_by(self.query_state.sort))

    def action_family(self) -> None:
        """Cycle the family filter."""
        family = Q.cycle(Q.FAMILY_CHOICES, self.query_state.family)
        self._set(replace(self.query_state, family=family))

    def action_severity(self) -> None:
        """Cycle the minimum severity."""
        sev = Q.cycle(Q.SEVERITY_CHOICES, self.query_state.min_severity)
        self._set(replace(self.query_state, min_severity=sev))

    def action_rank(self) -> None:
        """Cycle the rank filter over the ranks findings name."""
        self._set(replace(self.query_state, rank=Q.cycle(self.rank_choices, self.query_state.rank)))

    def action_clear(self) -> None:
        """Drop every filter and the search."""
        self.query_one(Input).value = ""
        self._set(
            Q.FindingsQuery(sort=self.query_state.sort, descending=self.query_state.descending)
        )
