"""The steps view: every step with its time and outlier cause; the step under the cursor's
critical path by category, its breakdown per rank and the findings seen in it.

Reads the report's ``steps`` and ``step_summary`` (the same figures as the JSON, text and HTML
reports) and decides which findings are in a step by :meth:`JobSteps.seen`'s own rule, so a
finding counted "in 3 of 5 steps" is listed under exactly those 3 steps.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from tracediag.model.findings import Finding
from tracediag.model.units import fmt_ns
from tracediag.model.wording import plural, rank_list
from tracediag.report.step_lines import (
    has_steps,
    no_outlier_text,
    step_name,
    steps_headline,
    typical_index,
)
from tracediag.tui.overview_screen import category_bar
from tracediag.tui.styles import CATEGORY_COLOR, SEVERITY_STYLE
from tracediag.tui.timeline_state import TimelineTarget

BREAKDOWN = ("compute", "communication", "memory", "idle")
BAR_WIDTH = 48


def findings_in_step(session, index: int) -> list[Finding]:
    """The findings whose window is in the job step ``index`` (``JobSteps.seen``'s rule, on
    that step alone); findings without a window are in no step."""
    steps = session.diagnosis.analysis.job_steps
    findings = session.diagnosis.findings
    timed = [f for f in findings if f.start_ns or f.end_ns]
    if not timed:
        return []
    one = replace(steps, table=steps.table.iloc[[index]].reset_index(drop=True))
    seen = one.seen(np.array([f.start_ns for f in timed]), np.array([f.end_ns for f in timed]))
    return [f for f, n in zip(timed, seen.tolist(), strict=True) if n]


def path_lines(path: dict[str, int]) -> Text:
    """The step's critical path per category (those it spends time in): time and share."""
    total = sum(path.values())
    text = Text()
    for c, ns in path.items():
        if ns:
            pct = 100.0 * ns / total if total else 0.0
            text.append(f"■ {c:<19}", style=CATEGORY_COLOR.get(c, ""))
            text.append(f"{fmt_ns(ns):>10} {pct:5.1f}%\n")
    text.rstrip()
    return text


def ranks_table(step: dict) -> Table:
    """Per rank: its own step time and the breakdown of its device time in the step."""
    table = Table(box=None, padding=(0, 1), header_style="bold")
    for col in ("rank", "step time", *BREAKDOWN, "host gap"):
        table.add_column(col, justify="left" if col == "rank" else "right", no_wrap=True)
    for r in step["ranks"]:
        bd = r["breakdown_ns"]
        cells = (
            [fmt_ns(bd[k]) for k in BREAKDOWN] + [fmt_ns(r["host_gap_ns"] or 0)]
            if bd
            else ["-"] * (len(BREAKDOWN) + 1)
        )
        table.add_row(str(r["rank"]), fmt_ns(r["step_time_ns"]), *cells)
    return table


def saving_text(saving_ns: int, steps_seen: int | None, steps_total: int) -> str:
    """A finding's saving as the steps view can say it: its what-if saving is over the whole
    window, so a step gets an even share only when the finding is seen in every step;
    otherwise the whole figure, saying it is over the window's steps."""
    if steps_total <= 1:
        return f"saving {fmt_ns(saving_ns)}"
    over = f"over the {steps_total} steps"
    if steps_seen == steps_total:
        return f"saving {fmt_ns(saving_ns // steps_total)}/step ({fmt_ns(saving_ns)} {over})"
    return f"saving {fmt_ns(saving_ns)} {over}"


def findings_lines(found: list[tuple[Finding, int | None]], total: int, steps_total: int) -> Text:
    """The findings seen in the step, a line each: ``found`` pairs each with the number of
    steps it is seen in (the report's ``steps_seen``)."""
    if not found:
        return Text(f"None of the {plural(total, 'finding')} is in this step.")
    text = Text(f"{len(found)} of {plural(total, 'finding')} in this step:\n")
    for f, seen in found:
        text.append(f"{f.code:<7}", style="bold")
        text.append(f"{str(f.severity):<8}", style=SEVERITY_STYLE[int(f.severity)])
        ranks = rank_list(list(f.ranks)) if f.ranks else "job"
        saving = saving_text(f.saving_ns, seen, steps_total)
        text.append(f"{ranks:<8} {saving}  {f.title}\n")
    text.rstrip()
    return text


def _cut(text: str, room: int) -> str:
    return text if len(text) <= room else text[: room - 1] + "…"


class StepsScreen(Screen):
    """The job's steps; the cursor picks one, enter (or t) opens it in the timeline."""

    BINDINGS = [
        Binding("escape", "app.back", "Back", show=False),
        Binding("t", "timeline", "Timeline"),
        # The table keeps the focus (the cursor picks the step); these scroll the detail.
        Binding("pagedown,space", "scroll_detail(1)", "Scroll", show=False, priority=True),
        Binding("pageup", "scroll_detail(-1)", "Scroll", show=False, priority=True),
    ]
    DEFAULT_CSS = """
    StepsScreen #steps-title { height: auto; background: $panel; padding: 0 1; }
    StepsScreen #steps { height: auto; max-height: 9; }
    StepsScreen #step-detail { height: 1fr; padding: 0 1; border-top: solid $panel; }
    StepsScreen .heading { text-style: bold; margin-top: 1; }
    """

    def compose(self) -> ComposeResult:
        report = self.app.session.report
        self.steps = report.get("steps") or []
        if has_steps(report):
            s = report["step_summary"]
            rule = (
                f"{plural(len(s['outliers']), 'outlier step')} (slower than "
                f"{fmt_ns(s['outlier_above_ns'])}; the cause is what grew most)"
                if s["outliers"]
                else no_outlier_text(report)
            )
            yield Static(f"{steps_headline(report)}\n{rule}", id="steps-title")
        else:
            yield Static(
                "One step: the trace numbers no iterations (or holds one), so the step is "
                "the analysed window, as on the overview.",
                id="steps-title",
            )
        yield DataTable(cursor_type="row", zebra_stripes=True, id="steps")
        with VerticalScroll(id="step-detail"):
            yield Static(id="step-head")
            yield Static("Critical path in the step", classes="heading")
            yield Static(id="step-bar")
            yield Static(id="step-path")
            yield Static("Ranks (own step time; device time by category)", classes="heading")
            yield Static(id="step-ranks")
            yield Static("Findings seen in the step", classes="heading")
            yield Static(id="step-findings")
        yield Footer(show_command_palette=False)

    def on_mount(self) -> None:
        table = self.query_one("#steps", DataTable)
        for col in ("step", "time", "vs typ.", "", "cause"):
            table.add_column(col)
        if not self.steps:
            return
        typical_ns = self.app.session.report["step_summary"]["typical_ns"]
        self.typical = typical_index(self.steps, typical_ns)
        room = max(self.app.size.width - 40, 20)  # the cause takes what the figures leave
        for i, st in enumerate(self.steps):
            mark = (
                Text("outlier", style="bold red")
                if st["outlier"]
                else Text("typical", style="bold green")
                if i == self.typical
                else ""
            )
            ratio = f"{st['step_time_ns'] / typical_ns:.2f}x" if typical_ns else "-"
            table.add_row(
                step_name(st),
                Text(fmt_ns(st["step_time_ns"]), justify="right"),
                Text(ratio, justify="right"),
                mark,
                _cut((st.get("cause") or {}).get("text", ""), room),
                key=str(i),
            )
        table.move_cursor(row=self.typical)
        table.focus()
        self.show_step(self.typical)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if self.steps:
            self.show_step(event.cursor_row)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.action_timeline()

    def show_step(self, index: int) -> None:
        """Fill the detail pane with step ``index``'s figures."""
        self.picked = index
        st = self.steps[index]
        what = " (typical)" if index == self.typical else " (outlier)" if st["outlier"] else ""
        cause = (st.get("cause") or {}).get("text")
        head = Text(f"{step_name(st)}{what}: {fmt_ns(st['step_time_ns'])}", style="bold")
        head.append(f" · span on every rank {fmt_ns(st['span_ns'])}", style="")
        if cause:
            head.append(f"\ncause: {cause}", style="")
        self.query_one("#step-head", Static).update(head)
        self.query_one("#step-bar", Static).update(category_bar(st["critical_path_ns"], BAR_WIDTH))
        self.query_one("#step-path", Static).update(path_lines(st["critical_path_ns"]))
        ranks = ranks_table(st)
        if st["ranks"] and not any(r["breakdown_ns"] for r in st["ranks"]):
            ranks = Text("No device activity on these ranks: no breakdown.\n").append_text(
                Text("\n".join(f"rank {r['rank']}: {fmt_ns(r['step_time_ns'])}"
                               for r in st["ranks"]))
            )  # fmt: skip
        self.query_one("#step-ranks", Static).update(ranks)
        session = self.app.session
        # the report's findings are the diagnosis's, in order, with their steps_seen
        seen = {
            id(f): d.get("steps_seen")
            for f, d in zip(session.diagnosis.findings, session.report["findings"], strict=True)
        }
        found = [(f, seen[id(f)]) for f in findings_in_step(session, index)]
        steps_total = (session.report.get("step_summary") or {}).get("n", len(self.steps))
        self.query_one("#step-findings", Static).update(
            findings_lines(found, len(session.diagnosis.findings), steps_total)
        )

    def action_scroll_detail(self, pages: int) -> None:
        """Scroll the picked step's detail by a page."""
        view = self.query_one("#step-detail", VerticalScroll)
        (view.scroll_page_down if pages > 0 else view.scroll_page_up)(animate=False)

    def action_timeline(self) -> None:
        """The picked step on every rank, its span shaded."""
        if not self.steps:
            return
        st = self.steps[self.picked]
        s, e = st["start_ns"], st["end_ns"]
        pad = max((e - s) // 20, 1)
        self.app.open_timeline(
            TimelineTarget(
                s - pad,
                e + pad,
                tuple(self.app.session.trace.ranks),
                stall=(s, e),
                title=step_name(st),
            )
        )
