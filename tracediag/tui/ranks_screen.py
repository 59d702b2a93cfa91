"""The ranks view: who arrives late at which collective, as a heatmap; enter opens one."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, Static

from tracediag.analysis.arrival_skew import colour_scale_ns, lateness_grid
from tracediag.model.units import fmt_ns
from tracediag.tui import targets
from tracediag.tui.heatmap import HeatmapView


class RanksScreen(Screen):
    """Arrival lateness per (collective instance x rank) against the others' median."""

    BINDINGS = [Binding("escape", "app.back", "Back", show=False)]
    DEFAULT_CSS = """
    RanksScreen #ranks-title { height: 1; background: $panel; padding: 0 1; }
    RanksScreen #path-waits { height: 1; padding: 0 1; }
    RanksScreen #cell-info { height: 2; padding: 0 1; border-top: solid $panel; }
    """

    def compose(self) -> ComposeResult:
        late = self.app.session.lateness
        analysis = self.app.session.diagnosis.analysis
        scale = colour_scale_ns(late, analysis.length_ns)
        yield Static(
            f"Lateness: arrival - others' median · ▲ last · darkest {fmt_ns(scale)}",
            id="ranks-title",
        )
        if len(late):
            self.grid = lateness_grid(late, scale)
            yield Static(path_waits(analysis.segments), id="path-waits")
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


def path_waits(segments) -> str:
    """What the critical path waits for at collectives, per late rank (its ``collective_skew``
    segments): the number to read the heatmap's colours against."""
    skew = segments[segments["category"] == "collective_skew"]
    if not len(skew):
        return "The critical path never waits for a late arrival (collective skew 0 ns)"
    per_rank = skew.groupby("rank")["dur_ns"].sum().sort_values(ascending=False, kind="stable")
    waits = ", ".join(f"rank {int(r)} {fmt_ns(int(ns))}" for r, ns in per_rank.items())
    return f"The critical path waits for late arrivals of: {waits}"
