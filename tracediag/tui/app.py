"""The Textual app: loads and diagnoses in a worker, then one mode per view.

:func:`make_app` is shared by the CLI (``tracediag PATH...``, ``tracediag tui PATH...``) and the
tests, which may hand it a ready Diagnosis to skip loading.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import partial
from pathlib import Path

from textual import work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.screen import Screen

from tracediag.engine.config import Config
from tracediag.engine.diagnosis import Diagnosis
from tracediag.model.findings import Finding
from tracediag.tui import targets
from tracediag.tui.detail_screen import FindingDetailScreen
from tracediag.tui.findings_screen import FindingsScreen
from tracediag.tui.help_screen import HelpScreen
from tracediag.tui.loading_screen import ErrorScreen, LoadingScreen
from tracediag.tui.overview_screen import OverviewScreen
from tracediag.tui.path_screen import PathScreen
from tracediag.tui.ranks_screen import RanksScreen
from tracediag.tui.session import Session, error_line, open_session, planned_stages
from tracediag.tui.steps_screen import StepsScreen
from tracediag.tui.timeline_screen import TimelineScreen
from tracediag.tui.timeline_state import TimelineTarget

DARK, LIGHT = "textual-dark", "textual-light"
_VIEWS = Binding.Group("views", compact=True)


class FindingsCommands(Provider):
    """The command palette lists every finding by code and title."""

    def _entries(self):
        app = self.app
        if app.session is None:
            return []
        return [
            (f"{f.code} {f.title}", partial(app.open_finding, f), f.message[:120])
            for f in app.session.diagnosis.findings
        ]

    async def discover(self) -> Hits:
        for text, callback, help_text in self._entries():
            yield DiscoveryHit(text, callback, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for text, callback, help_text in self._entries():
            score = matcher.match(text)
            if score > 0:
                yield Hit(score, matcher.highlight(text), callback, help=help_text)


class TracediagApp(App):
    """Overview, findings, detail, critical path, ranks, steps and timeline over one Diagnosis."""

    TITLE = "tracediag"
    COMMANDS = App.COMMANDS | {FindingsCommands}
    MODES = {
        "overview": OverviewScreen,
        "findings": FindingsScreen,
        "path": PathScreen,
        "ranks": RanksScreen,
        "steps": StepsScreen,
    }
    BINDINGS = [
        Binding("o", "view('overview')", "views", group=_VIEWS, tooltip="Overview"),
        Binding("f", "view('findings')", "views", group=_VIEWS, tooltip="Findings"),
        Binding("c", "view('path')", "views", group=_VIEWS, tooltip="Critical path"),
        Binding("r", "view('ranks')", "views", group=_VIEWS, tooltip="Ranks heatmap"),
        Binding("i", "view('steps')", "views", group=_VIEWS, tooltip="Steps (iterations)"),
        Binding("t", "timeline", "Timeline"),
        Binding("question_mark", "help", "Help", key_display="?"),
        Binding("T", "toggle_theme", "Theme", show=False),
        Binding("q", "quit", "Quit"),
    ]

    def __init__(
        self,
        paths: Sequence[str | Path] = (),
        *,
        config: Config | None = None,
        align: bool = True,
        session: Session | None = None,
        reading: dict | None = None,
    ) -> None:
        super().__init__()
        self.paths = [str(p) for p in paths]
        self.config = config or Config()
        self.align = align
        self.reading = reading or {}  # load()'s cache, jobs and scheduler keywords
        self.session = session
        self.error_line: str | None = None  # the load error, also printed by the CLI on exit
        self.loading_screen: LoadingScreen | None = None

    # ---- loading ---------------------------------------------------------------------------
    async def on_mount(self) -> None:
        if self.session is not None:
            self.switch_mode("overview")
            return
        self.loading_screen = LoadingScreen(self.paths)
        await self.push_screen(self.loading_screen)  # mounted before the worker reports to it
        self._load()

    @work(thread=True, exclusive=True)
    def _load(self) -> None:
        loading = self.loading_screen
        try:
            self.call_from_thread(loading.plan, planned_stages(self.paths, self.align))
            session = open_session(
                self.paths,
                self.config,
                self.align,
                partial(self.call_from_thread, loading.stage),
                self.reading,
            )
        except Exception as exc:  # every failure becomes the CLI's one line, on screen
            self.call_from_thread(self._failed, error_line(exc))
            return
        self.call_from_thread(loading.done)
        self.call_from_thread(self._loaded, session)

    def _loaded(self, session: Session) -> None:
        self.session = session
        self.switch_mode("overview")

    def _failed(self, line: str) -> None:
        self.error_line = line
        self.push_screen(ErrorScreen(line))

    # ---- navigation ------------------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # Nothing loaded yet (or the load failed): the view keys are hidden and inert.
        return not (action in ("view", "timeline") and self.session is None)

    def action_view(self, mode: str) -> None:
        """Switch to a top-level view (each keeps its own stack of screens)."""
        self.switch_mode(mode)

    def action_back(self) -> None:
        """Close the screen on top, or go back to the overview."""
        if len(self.screen_stack) > 1:
            self.pop_screen()
        elif self.current_mode != "overview":
            self.switch_mode("overview")

    def action_timeline(self) -> None:
        """The timeline of the whole step (finding screens open their own window with t)."""
        self.open_timeline(targets.for_step(self.session))

    def open_finding(self, finding: Finding) -> None:
        """Push the finding's detail screen."""
        self.push_screen(FindingDetailScreen(finding))

    def open_finding_timeline(self, finding: Finding) -> None:
        """Push the timeline of the finding's window."""
        self.open_timeline(targets.for_finding(self.session, finding))

    def open_timeline(self, target: TimelineTarget) -> None:
        """Push a timeline on ``target``."""
        self.push_screen(TimelineScreen(self.session, target))

    def action_help(self) -> None:
        """Show the keys of every view."""
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_toggle_theme(self) -> None:
        """Dark or light."""
        self.theme = LIGHT if self.theme == DARK else DARK

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield SystemCommand("Help", "Keys of every view", self.action_help)
        yield SystemCommand(
            "Dark / light", "Toggle the dark and light themes", self.action_toggle_theme
        )
        if self.session is None:
            return
        for mode, what in (
            ("overview", "Inputs, ranks, critical path by category, top findings"),
            ("findings", "Every finding: sort, filter, search"),
            ("path", "The critical path, segment by segment"),
            ("ranks", "Arrival lateness per collective and rank"),
            ("steps", "Every step: time, outlier cause; pick one for its path and ranks"),
        ):
            yield SystemCommand(f"View: {mode}", what, partial(self.switch_mode, mode))
        yield SystemCommand(
            "Timeline of the step", "The whole step on every rank", self.action_timeline
        )


def make_app(
    paths: Sequence[str | Path] = (),
    *,
    config: Config | None = None,
    align: bool = True,
    diagnosis: Diagnosis | None = None,
    reading: dict | None = None,
) -> TracediagApp:
    """The app over ``paths`` (loaded in a worker with ``load()``'s ``reading`` keywords), or
    over a ready ``diagnosis``."""
    session = Session(diagnosis) if diagnosis is not None else None
    return TracediagApp(paths, config=config, align=align, session=session, reading=reading)
