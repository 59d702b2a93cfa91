"""One finding: its message, evidence, what-if saving, suggestion and the rule's document."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Markdown, Static

from tracediag.engine.rule import all_rules
from tracediag.model.findings import Finding
from tracediag.model.units import fmt_ns
from tracediag.model.wording import rank_list
from tracediag.report.evidence_words import evidence_rows
from tracediag.tui.styles import SEVERITY_STYLE


class FindingDetailScreen(Screen):
    """Everything about one finding; t opens its timeline."""

    BINDINGS = [
        Binding("escape", "app.back", "Back", show=False),
        Binding("t", "timeline", "Timeline"),
    ]
    DEFAULT_CSS = """
    FindingDetailScreen VerticalScroll { padding: 0 1; }
    FindingDetailScreen .heading { text-style: bold; margin-top: 1; }
    FindingDetailScreen #message, FindingDetailScreen #numbers { margin-top: 1; }
    FindingDetailScreen Markdown { margin: 1 0 0 0; padding: 0; }
    """

    def __init__(self, finding: Finding) -> None:
        super().__init__()
        self.finding = finding

    def compose(self) -> ComposeResult:
        f = self.finding
        base = self.app.session.path_start
        head = Text()
        head.append(f"{f.code} ", style="bold")
        head.append(str(f.severity), style=SEVERITY_STYLE[int(f.severity)])
        head.append(f" · {f.family} · {f.title}")
        numbers = Table.grid(padding=(0, 2))
        numbers.add_column(style="bold")
        numbers.add_column()
        for label, value in (
            ("ranks", rank_list(list(f.ranks))),
            ("engine / track", f"{f.engine or '-'} / {f.track or '-'}"),
            ("layer / op", f"{f.layer or '-'} / {f.op or '-'}"),
            ("window", f"{fmt_ns(f.start_ns - base)} to {fmt_ns(f.end_ns - base)}"),
            # A share of the path, not always time on it (COL201: the others' wait, wherever).
            ("impact", f"{fmt_ns(f.impact_ns)} ({f.impact_pct:.2f}% of the critical path)"),
            ("what-if saving", f"{fmt_ns(f.saving_ns)} shorter step if fixed"),
        ):
            numbers.add_row(label, value)
        evidence = Table.grid(padding=(0, 2))
        evidence.add_column(style="dim")
        evidence.add_column()
        for key, value in evidence_rows(f.evidence, base):  # words, not field names
            evidence.add_row(key, value)
        rule = all_rules().get(f.code)
        with VerticalScroll(id="detail"):
            yield Static(head, id="detail-title")
            yield Static(f.message, id="message")
            yield Static(numbers, id="numbers")
            yield Static("Evidence", classes="heading")
            yield Static(evidence, id="evidence")
            yield Static("Suggestion", classes="heading")
            yield Static(f.suggestion or "-", id="suggestion")
            yield Markdown(rule.document() if rule else f"No rule {f.code} is installed.")
        yield Footer(show_command_palette=False)

    def on_mount(self) -> None:
        self.query_one(VerticalScroll).focus()

    def action_timeline(self) -> None:
        """The finding's window in the timeline."""
        self.app.open_finding_timeline(self.finding)
