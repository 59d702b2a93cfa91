"""The overview: inputs, ranks, step times, the critical path by category, the top findings."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from tracediag.model.units import fmt_ns
from tracediag.model.wording import plural, rank_list
from tracediag.report.bounds_precision import bounds_note, bounds_rows, precision_rows
from tracediag.report.labels import layout_label, severity_counts
from tracediag.tui.findings_screen import finding_cells
from tracediag.tui.styles import CATEGORY_COLOR

TOP_FINDINGS = 5
BAR_WIDTH = 56


def category_bar(by_category: dict[str, int], width: int = BAR_WIDTH) -> Text:
    """One stacked bar of the path's categories (largest remainders get the spare cells)."""
    total = sum(by_category.values())
    bar = Text()
    if not total:
        return bar
    exact = {c: width * ns / total for c, ns in by_category.items()}
    cells = {c: int(v) for c, v in exact.items()}
    spare = width - sum(cells.values())
    for c in sorted(exact, key=lambda c: cells[c] - exact[c])[:spare]:
        cells[c] += 1
    for c, n in cells.items():
        bar.append("█" * n, style=CATEGORY_COLOR[c])
    return bar


def _legend(by_category: dict[str, int], length: int) -> Text:
    """Two categories a line: colour, name, time and share of the path."""
    text = Text()
    for i, (c, ns) in enumerate(by_category.items()):
        pct = 100.0 * ns / length if length else 0.0
        text.append(f"■ {c:<19}", style=CATEGORY_COLOR[c])
        text.append(f"{fmt_ns(ns):>9} {pct:5.1f}%")
        text.append("\n" if i % 2 else "  ")
    text.rstrip()
    return text


def _parallel_dims(report: dict) -> list[str]:
    """The layout's dimensions of more than one rank (dp, tp, pp, ep), in that order."""
    layout = report.get("layout") or {}  # reports saved before layouts existed have none
    return [d for d in ("dp", "tp", "pp", "ep") if layout.get(d, 1) > 1]


def _coordinates(report: dict, rank: int, dims: list[str]) -> str:
    coords = report["layout"]["ranks"].get(str(rank), {})
    return " ".join(f"{d}{coords[d]}" for d in dims if d in coords) or "-"


def _ranks_line(report: dict) -> str:
    """The hardware (when every rank has the same) and the parallel layout."""
    parts = []
    hardware = {r["hardware"] for r in report["ranks"]}
    if len(hardware) == 1:
        parts.append(f"hardware: {hardware.pop() or '-'}")
    if report.get("layout"):
        parts.append(f"parallel layout: {layout_label(report['layout'])}")
    return "; ".join(parts)


def _ranks_table(report: dict) -> Table:
    table = Table(box=None, padding=(0, 1), header_style="bold")
    dims = _parallel_dims(report)
    # one hardware for every rank goes in the line above: the breakdown columns keep their room
    per_rank_hw = len({r["hardware"] for r in report["ranks"]}) > 1
    optional = (["coordinates"] if dims else []) + (["hardware"] if per_rank_hw else [])
    for col in ("rank", *optional, "step time", "clock offset"):
        table.add_column(col, no_wrap=True)
    for col in ("compute", "comm", "memory", "idle"):
        table.add_column(col, justify="right")
    for r in report["ranks"]:
        pct = r["breakdown_pct"]
        table.add_row(
            str(r["rank"]),
            *([_coordinates(report, r["rank"], dims)] if dims else []),
            *([r["hardware"] or "-"] if per_rank_hw else []),
            fmt_ns(r["step_time_ns"]),
            fmt_ns(r["clock_offset_ns"]),
            *(
                f"{pct[k]:.1f}%" if k in pct else "-"
                for k in ("compute", "communication", "memory", "idle")
            ),
        )
    return table


def rows_table(header: list[str], rows: list[list[str]], text: tuple[int, ...]) -> Table:
    """A plain table of text rows: the columns ``text`` left-aligned, the others numbers; one
    space between columns and the last column wrapping, so that 80 columns hold the bounds."""
    table = Table(box=None, padding=(0, 1, 0, 0), header_style="bold")
    for i, col in enumerate(header):
        table.add_column(
            col, justify="left" if i in text else "right", no_wrap=i != len(header) - 1
        )
    for row in rows:
        table.add_row(*row)
    return table


def _inputs_table(report: dict) -> Table:
    table = Table(box=None, padding=(0, 1), header_style="bold")
    for col in ("input", "format", "ranks"):
        table.add_column(col)
    for i in report["inputs"]:
        table.add_row(i["path"], i["format"], rank_list(i["ranks"]))
    return table


class OverviewScreen(Screen):
    """The first screen after loading."""

    BINDINGS = [
        Binding("escape", "app.back", "Back", show=False),
        # The top-findings table keeps the focus (enter opens one); these scroll the page.
        Binding("pagedown,space", "scroll(1)", "Scroll", show=False, priority=True),
        Binding("pageup", "scroll(-1)", "Scroll", show=False, priority=True),
    ]
    DEFAULT_CSS = """
    OverviewScreen VerticalScroll { padding: 0 1; }
    OverviewScreen .heading { text-style: bold; margin-top: 1; }
    OverviewScreen DataTable { height: auto; max-height: 8; }
    """

    def compose(self) -> ComposeResult:
        report = self.app.session.report
        cp = report["critical_path"]
        summary = report["summary"]
        headline = Text(
            f"{plural(len(report['ranks']), 'rank')}, critical path {fmt_ns(cp['length_ns'])}, "
            f"{plural(summary['findings'], 'finding')} ({severity_counts(summary)})",
            style="bold",
        )
        engines = ", ".join(f"{e} {fmt_ns(ns)}" for e, ns in cp["compute_by_engine_ns"].items())
        with VerticalScroll(id="overview"):
            yield Static(headline, id="headline")
            yield Static("Top findings by what-if saving (enter opens)", classes="heading")
            yield DataTable(cursor_type="row", id="top-findings")
            yield Static("Critical path by category", classes="heading")
            yield Static(category_bar(cp["by_category_ns"]), id="path-bar")
            yield Static(_legend(cp["by_category_ns"], cp["length_ns"]), id="path-legend")
            yield Static(f"compute by engine: {engines or '-'}", id="engines")
            yield Static(
                "Ranks (step time; share of device time: compute, comm, memory, idle)",
                classes="heading",
            )
            yield Static(_ranks_line(report), id="layout")
            yield Static(_ranks_table(report), id="ranks")
            header, rows = bounds_rows(report)  # none in reports saved before bounds existed
            note = bounds_note(report)  # the ranks without device work, in one line
            if rows or note:
                yield Static("Bounds per rank (tracediag bounds: gaps, sources)", classes="heading")
            if rows:
                yield Static(rows_table(header, rows, (0, len(header) - 1)), id="bounds")
            if note:
                yield Static(note, id="bounds-note")
            header, rows = precision_rows(report)
            if rows:
                yield Static("Matmuls by numeric format", classes="heading")
                yield Static(rows_table(header, rows, (0, 1)), id="precision")
            yield Static("Inputs", classes="heading")
            yield Static(_inputs_table(report), id="inputs")
        yield Footer(show_command_palette=False)

    def on_mount(self) -> None:
        table = self.query_one("#top-findings", DataTable)
        for col in ("code", "severity", "rank", "impact", "saving", "title"):
            table.add_column(col)
        room = max(self.app.size.width - 52, 20)  # the title takes what the numbers leave
        for i, f in enumerate(self.top_findings):
            cells = finding_cells(f)
            title = f.title if len(f.title) <= room else f.title[: room - 1] + "…"
            table.add_row(*cells[:3], *cells[5:7], title, key=str(i))
        table.focus()

    def action_scroll(self, pages: int) -> None:
        """Scroll the overview by a page."""
        view = self.query_one(VerticalScroll)
        (view.scroll_page_down if pages > 0 else view.scroll_page_up)(animate=False)

    @property
    def top_findings(self):
        """The findings with the largest savings (the Diagnosis keeps them sorted)."""
        return self.app.session.diagnosis.findings[:TOP_FINDINGS]

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.app.open_finding(self.top_findings[event.cursor_row])
