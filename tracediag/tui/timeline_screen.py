"""The timeline screen: lanes of a window, the selected event's fields, keys to move along."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, Static

from tracediag.model.units import fmt_ns
from tracediag.model.wording import rank_list
from tracediag.tui import event_info
from tracediag.tui.session import Session
from tracediag.tui.timeline_state import TimelineState, TimelineTarget
from tracediag.tui.timeline_widget import TimelineView

_MOVE = Binding.Group("move", compact=True)
_ZOOM = Binding.Group("zoom", compact=True)
_PAN = Binding.Group("pan", compact=True)
_PATH = Binding.Group("path", compact=True)


class TimelineScreen(Screen):
    """Lanes per track of the ranks involved; the critical path highlighted, the stall shaded."""

    BINDINGS = [
        Binding("escape", "app.back", "Back", show=False),
        Binding("left", "event(-1)", "move", group=_MOVE, key_display="←"),
        Binding("right", "event(1)", "move", group=_MOVE, key_display="→"),
        Binding("up", "lane(-1)", "move", group=_MOVE, key_display="↑"),
        Binding("down", "lane(1)", "move", group=_MOVE, key_display="↓"),
        Binding("plus,equals_sign", "zoom(0.5)", "zoom", group=_ZOOM, key_display="+"),
        Binding("minus", "zoom(2)", "zoom", group=_ZOOM, key_display="-"),
        Binding("comma,shift+left", "pan(-0.25)", "pan", group=_PAN, key_display=","),
        Binding("full_stop,shift+right", "pan(0.25)", "pan", group=_PAN, key_display="."),
        Binding("p", "path(-1)", "path", group=_PATH),
        Binding("n", "path(1)", "path", group=_PATH),
        Binding("a", "all_ranks", "ranks"),
        Binding("s", "stall", "stall", show=False),
        Binding("t", "app.timeline", "whole step", show=False),
        Binding("0", "fit_all", "all", show=False),
        Binding("z", "zoom_event", "zoom to event", show=False),
    ]
    DEFAULT_CSS = """
    TimelineScreen #timeline-title { height: 1; background: $panel; color: $foreground; }
    TimelineScreen #event-info { height: 7; border-top: solid $panel; padding: 0 1; }
    """

    def __init__(self, session: Session, target: TimelineTarget) -> None:
        super().__init__()
        self.session = session
        self.target = target
        self.state = TimelineState(session.timeline, session.track_ranks, target, session.lanes)
        self.info_rows: list[tuple[str, str]] = []  # what the event panel shows

    def compose(self) -> ComposeResult:
        yield Static(id="timeline-title")
        yield TimelineView(self.session, self.state, id="timeline")
        yield Static(id="event-info")
        yield Footer(show_command_palette=False)

    def on_mount(self) -> None:
        self.query_one(TimelineView).focus()
        self._update()

    def _update(self) -> None:
        st = self.state
        base = self.session.path_start
        title = Text(f" {st.title or 'timeline'}", style="bold")
        title.append(
            f"  {fmt_ns(st.t0 - base)} to {fmt_ns(st.t1 - base)}  ranks {rank_list(list(st.ranks))}"
            f"  {len(st.lanes)} lanes",
        )
        self.query_one("#timeline-title", Static).update(title)
        self.query_one("#event-info", Static).update(self._info())
        self.query_one(TimelineView).refresh()

    def _info(self):
        st = self.state
        self.info_rows = []
        if st.selected < 0:
            return Text("no event selected: ← → pick one on this lane", style="dim")
        self.info_rows = event_info.describe(self.session, st.selected, st.segment)
        table = Table.grid(padding=(0, 1))
        table.add_column(style="bold", no_wrap=True, min_width=11)
        table.add_column(overflow="ellipsis", no_wrap=True)
        for label, value in self.info_rows:
            table.add_row(label, value)
        return table

    # ---- actions ---------------------------------------------------------------------------
    def action_event(self, delta: int) -> None:
        """Select the previous/next event on the cursor's lane."""
        self.state.move_event(delta)
        self._update()

    def action_lane(self, delta: int) -> None:
        """Move the cursor to the lane above/below."""
        self.state.move_lane(delta)
        self._update()

    def action_zoom(self, factor: float) -> None:
        """Zoom around the selected event."""
        self.state.zoom(factor)
        self._update()

    def action_pan(self, fraction: float) -> None:
        """Pan by a quarter of the window."""
        self.state.pan(fraction)
        self._update()

    def action_path(self, delta: int) -> None:
        """Jump to the previous/next critical-path segment."""
        self.state.jump_path(delta)
        self._update()

    def action_all_ranks(self) -> None:
        """Lanes for every rank, or only the ranks involved."""
        self.state.toggle_all_ranks()
        self._update()

    def action_stall(self) -> None:
        """Back to the window the view opened on."""
        self.state.fit(self.target.t0, self.target.t1, margin=0.0)
        self._update()

    def action_fit_all(self) -> None:
        """The whole trace."""
        self.state.fit_all()
        self._update()

    def action_zoom_event(self) -> None:
        """Fit the window to the selected event."""
        if self.state.selected >= 0:
            self.state.fit(*self.state.event_times(self.state.selected), margin=0.5)
            self._update()
