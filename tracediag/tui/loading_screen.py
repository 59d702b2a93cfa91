"""The loading screen (one progress bar per stage) and the error screen a failed load shows."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Center, Horizontal, Middle, Vertical
from textual.screen import Screen
from textual.widgets import Footer, Label, ProgressBar, Static


class LoadingScreen(Screen):
    """Stages appear as they start; a finished stage's bar fills, the running one pulses."""

    DEFAULT_CSS = """
    LoadingScreen #loading { width: 90%; max-width: 100; height: auto; padding: 1 2;
                             border: round $primary; }
    LoadingScreen #stages { height: auto; }
    LoadingScreen .stage { height: 1; }
    LoadingScreen .stage Label { width: 1fr; padding-right: 2; }
    LoadingScreen .stage ProgressBar { width: 30; }
    LoadingScreen #overall-row { height: 1; margin-top: 1; }
    LoadingScreen #overall-row Label { width: 1fr; }
    """

    def __init__(self, paths: Sequence[str]) -> None:
        super().__init__()
        self.paths = list(paths)
        self.stages: list[str] = []

    def compose(self) -> ComposeResult:
        with Middle(), Center(), Vertical(id="loading"):
            yield Static(Text("tracediag: loading " + ", ".join(self.paths), style="bold"))
            yield Vertical(id="stages")
            with Horizontal(id="overall-row"):
                yield Label("overall", id="overall-label")
                yield ProgressBar(total=None, show_eta=False, id="overall")
        yield Footer(show_command_palette=False)

    def plan(self, stages: Sequence[str]) -> None:
        """The stages the load will go through (sets the overall bar's total)."""
        self.query_one("#overall", ProgressBar).update(total=len(stages), progress=0)

    def stage(self, label: str) -> None:
        """``label`` started: the previous stage is done."""
        self._finish_current()
        self.stages.append(label)
        bar = ProgressBar(total=None, show_eta=False, show_percentage=False)
        row = Horizontal(Label(label), bar, classes="stage")
        self.query_one("#stages", Vertical).mount(row)

    def _finish_current(self) -> None:
        rows = self.query(".stage")
        if rows:
            rows.last().query_one(ProgressBar).update(total=1, progress=1)
            self.query_one("#overall", ProgressBar).advance(1)

    def done(self) -> None:
        """Every stage finished."""
        self._finish_current()


class ErrorScreen(Screen):
    """A load failed: the CLI's one-line message, and q to quit."""

    BINDINGS = [Binding("q,escape", "quit", "Quit")]
    DEFAULT_CSS = """
    ErrorScreen #error-box { width: 90%; height: auto; padding: 1 2; border: round $error; }
    ErrorScreen #error-line { color: $error; text-style: bold; }
    """

    def __init__(self, line: str) -> None:
        super().__init__()
        self.line = line

    def compose(self) -> ComposeResult:
        with Middle(), Center(), Vertical(id="error-box"):
            yield Static(Text(self.line), id="error-line")
            yield Static("Nothing to show. Press q to quit.", id="error-hint")
        yield Footer(show_command_palette=False)

    def action_quit(self) -> None:
        """Leave with the CLI's exit code for an input error."""
        self.app.exit(return_code=2)
