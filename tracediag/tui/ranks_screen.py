"""The ranks view: who arrives late at which collective, as a heatmap; enter opens one."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, Static

from tracediag.analysis.arrival_skew import lateness_grid
from tracediag.model.units import fmt_ns
from tracediag.tui import targets
from tracediag.tui.heatmap import HeatmapView


class RanksScreen(Screen):
    """Arrival lateness per (collective instance x rank) against the others' median."""

    BINDINGS = [Binding("escape", "app.back", "Back", show=False)]
    DEFAULT_CSS = """
    RanksScreen #ranks-title { height: 1; background: $panel; padding: 0 1; }
    RanksScreen #cell-info { height: 2; padding: 0 1; border-top: solid $panel; }
    """

    def compose(self) -> ComposeResult:
        late = self.app.session.lateness
        yield Static(
            "Arrival lateness: arrival minus the others' median arrival (▲ arrived last)",
            id="ranks-title",
        )
        if len(late):
            self.grid = lateness_grid(late)
            yield HeatmapView(self.grid, id="heatmap")
            yield Static(id="cell-info")
        else:
            self.grid = None
            yield Static(
                "No collective has two or more participants in this trace: nothing to compare.",
                id="no-collectives",
            )
        yield Footer(show_command_palette=False)

    def on_mount(self) -> None:
        if self.grid is not None:
            self.query_one(HeatmapView).focus()
            self._describe(0, 0)

    def _describe(self, row: int, col: int) -> None:
        g = self.grid
        value = g.late[row, col]
        who = f"{g.ops[row]} #{g.keys[row]} · rank {g.ranks[col]}"
        if value != value:
            text = f"{who}: not a participant"
        else:
            when = "after" if value > 0 else "before"
            text = f"{who}: arrived {fmt_ns(abs(value))} {when} the median of the others"
            if g.last[row, col]:
                text += " (last)"
        self.query_one("#cell-info", Static).update(text)

    def on_heatmap_view_moved(self, event: HeatmapView.Moved) -> None:
        self._describe(event.row, event.col)

    def on_heatmap_view_selected(self, event: HeatmapView.Selected) -> None:
        g = self.grid
        if g.late[event.row, event.col] == g.late[event.row, event.col]:
            target = targets.for_collective(
                self.app.session, int(g.keys[event.row]), int(g.ranks[event.col])
            )
            self.app.open_timeline(target)
