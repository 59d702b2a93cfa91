"""Pilot tests of the TUI on the straggler sample: navigation, filters, search, the timeline's
path jumps, the ranks heatmap, loading in a worker and the load error screen.

Each test drives a headless app at 80x24 and asserts on the app's state, not on pixels.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from textual.widgets import DataTable, Input, Markdown

from tracediag.engine.diagnose import diagnose
from tracediag.loading.loader import load
from tracediag.model.findings import Severity
from tracediag.tui.app import DARK, LIGHT, make_app
from tracediag.tui.detail_screen import FindingDetailScreen
from tracediag.tui.findings_screen import FindingsScreen
from tracediag.tui.help_screen import HelpScreen
from tracediag.tui.loading_screen import ErrorScreen, LoadingScreen
from tracediag.tui.overview_screen import OverviewScreen
from tracediag.tui.path_screen import PathScreen
from tracediag.tui.ranks_screen import RanksScreen
from tracediag.tui.row_list import RowList
from tracediag.tui.session import planned_stages
from tracediag.tui.timeline_screen import TimelineScreen

ROOT = Path(__file__).resolve().parents[1]
STRAGGLER = ROOT / "sample_traces" / "neuron_parquet_straggler" / "parquet"
SIZE = (80, 24)


@pytest.fixture(scope="module")
def diagnosis():
    return diagnose(load([STRAGGLER]))


def drive(app, script):
    """Run ``script(pilot)`` against ``app`` headless at 80x24."""

    async def main():
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            await script(pilot)

    asyncio.run(main())


async def loaded(app, pilot) -> None:
    """Wait (10 s at most) until the loading worker has handed over a session or an error."""
    for _ in range(500):
        if app.session is not None or app.error_line is not None:
            break
        await pilot.pause(0.02)
    await app.workers.wait_for_complete()
    await pilot.pause()


def test_overview_to_findings_to_detail_to_timeline(diagnosis):
    app = make_app(diagnosis=diagnosis)

    async def script(pilot):
        assert isinstance(app.screen, OverviewScreen)
        top = app.screen.query_one("#top-findings", DataTable)
        assert top.row_count == 3
        await pilot.press("f")
        assert isinstance(app.screen, FindingsScreen)
        assert [f.code for f in app.screen.shown] == ["COL201", "COL202", "DMA101"]
        await pilot.press("enter")
        assert isinstance(app.screen, FindingDetailScreen)
        assert app.screen.finding.code == "COL201"
        markdown = app.screen.query_one(Markdown)
        assert markdown.source.startswith("# COL201 ")
        await pilot.press("t")
        screen = app.screen
        assert isinstance(screen, TimelineScreen)
        st = screen.state
        finding = diagnosis.findings[0]
        assert st.stall == (finding.start_ns, finding.end_ns)
        assert st.ranks == (0, 1)
        # the longest path segment of the stall: rank 1 arriving last at the AllReduce
        assert st.selected == 7375
        assert st.index.seg_category[st.segment] == "collective_skew"
        await pilot.press("escape")
        assert isinstance(app.screen, FindingDetailScreen)
        await pilot.press("escape")
        assert isinstance(app.screen, FindingsScreen)
        await pilot.press("escape")
        assert isinstance(app.screen, OverviewScreen)
        await pilot.press("down", "enter")  # the second of the top findings
        assert isinstance(app.screen, FindingDetailScreen)
        assert app.screen.finding.code == "COL202"

    drive(app, script)


def test_findings_filters_and_sort(diagnosis):
    app = make_app(diagnosis=diagnosis)

    async def script(pilot):
        await pilot.press("f")
        screen = app.screen
        codes = lambda: [f.code for f in screen.shown]  # noqa: E731
        await pilot.press("F")  # family: dma
        assert screen.query_state.family == "dma" and codes() == ["DMA101"]
        await pilot.press("F")  # collective
        assert codes() == ["COL201", "COL202"]
        await pilot.press("V")  # at least warning
        assert screen.query_state.min_severity == Severity.WARNING
        assert codes() == ["COL201"]
        await pilot.press("x")
        assert codes() == ["COL201", "COL202", "DMA101"]
        await pilot.press("R")  # rank 0: the all-reduce both ranks expose names it too
        assert screen.query_state.rank == 0 and codes() == ["COL202"]
        await pilot.press("R")  # rank 1: every finding names it
        assert screen.query_state.rank == 1 and len(codes()) == 3
        await pilot.press("x", "s")  # sort by the next column after saving: code, ascending
        assert screen.query_state.sort == "code" and not screen.query_state.descending
        assert codes() == ["COL201", "COL202", "DMA101"]
        await pilot.press("S")
        assert codes() == ["DMA101", "COL202", "COL201"]
        table = screen.query_one(DataTable)
        assert str(table.ordered_columns[0].label) == "code ▼"

    drive(app, script)


def test_findings_incremental_search(diagnosis):
    app = make_app(diagnosis=diagnosis)

    async def script(pilot):
        await pilot.press("f", "slash")
        screen = app.screen
        assert screen.focused is screen.query_one(Input)
        await pilot.press("d", "m")
        assert [f.code for f in screen.shown] == ["DMA101"]
        await pilot.press("backspace", "backspace", "s", "t", "r", "a", "g")
        assert [f.code for f in screen.shown] == ["COL201"]
        await pilot.press("enter")  # back to the table; enter there opens the finding
        assert screen.focused is screen.query_one(DataTable)
        await pilot.press("enter")
        assert app.screen.finding.code == "COL201"

    drive(app, script)


def test_timeline_keys_zoom_pan_and_jump_along_the_path(diagnosis):
    app = make_app(diagnosis=diagnosis)

    async def script(pilot):
        await pilot.press("f", "t")
        st = app.screen.state
        start = st.segment
        span = st.span
        await pilot.press("p")
        assert st.segment == start - 1
        assert st.selected == 3875  # the MATMUL on rank 1 that made it arrive late
        await pilot.press("n")
        assert (st.segment, st.selected) == (start, 7375)  # back on the late AllReduce
        # its skew and two transfer segments (371-373) are one step: the next press selects
        # the next event, the tensor reduce after the AllReduce, and the event panel follows
        await pilot.press("n")
        assert (st.segment, st.selected) == (start + 3, 3910)
        assert dict(app.screen.info_rows)["event"] == "TENSOR_REDUCE"  # no internal event id
        await pilot.press("p")
        assert (st.segment, st.selected) == (start, 7375)
        await pilot.press("plus")
        assert st.span == span // 2
        t0 = st.t0
        await pilot.press("full_stop")
        assert st.t0 == t0 + st.span // 4
        await pilot.press("a")
        assert st.all_ranks
        await pilot.press("left")
        assert st.segment == -1 and st.selected == 7374  # the AllReduce before on that lane
        info = dict(app.screen.info_rows)
        assert info["event"] == "AllReduce"
        assert info["where"] == "collective  rank 1  track cc stream 0"
        assert info["path"] == "not on the critical path"
        await pilot.press("s")
        assert (st.t0, st.t1) == (app.screen.target.t0, app.screen.target.t1)

    drive(app, script)


def test_critical_path_view_opens_a_segment(diagnosis):
    app = make_app(diagnosis=diagnosis)

    async def script(pilot):
        await pilot.press("c")
        assert isinstance(app.screen, PathScreen)
        rows = app.screen.query_one(RowList)
        assert rows.count == len(diagnosis.analysis.segments)
        await pilot.press("end", "enter")
        assert isinstance(app.screen, TimelineScreen)
        assert app.screen.state.segment == rows.count - 1
        await pilot.press("escape")
        assert isinstance(app.screen, PathScreen)
        await pilot.press("escape")
        assert isinstance(app.screen, OverviewScreen)

    drive(app, script)


def test_ranks_heatmap_shows_the_straggler_and_opens_a_collective(diagnosis):
    app = make_app(diagnosis=diagnosis)

    async def script(pilot):
        await pilot.press("r")
        screen = app.screen
        assert isinstance(screen, RanksScreen)
        assert screen.grid.ranks.tolist() == [0, 1]
        assert screen.grid.last[:, 1].all()  # rank 1 arrives last at every AllReduce
        assert screen.grid.level[:, 1].min() >= 2 and screen.grid.level[:, 0].max() == 0
        await pilot.press("down", "right", "enter")
        assert isinstance(app.screen, TimelineScreen)
        assert app.screen.state.title == f"AllReduce #{screen.grid.keys[1]}"
        assert app.screen.state.ranks == (0, 1)

    drive(app, script)


def test_help_theme_and_commands(diagnosis):
    app = make_app(diagnosis=diagnosis)

    async def script(pilot):
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        assert isinstance(app.screen, OverviewScreen)
        assert app.theme == DARK
        await pilot.press("T")
        assert app.theme == LIGHT
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert {"View: findings", "View: ranks", "Timeline of the step", "Help"} <= set(titles)
        await pilot.press("q")

    drive(app, script)
    assert app.return_code in (0, None)


def test_loading_runs_in_a_worker_with_a_bar_per_stage():
    app = make_app([STRAGGLER])

    async def script(pilot):
        await loaded(app, pilot)
        assert app.error_line is None
        loading = app.loading_screen
        assert isinstance(loading, LoadingScreen)
        assert loading.stages == planned_stages([STRAGGLER], align=True)
        assert isinstance(app.screen, OverviewScreen)
        assert app.session.diagnosis.findings[0].code == "COL201"

    drive(app, script)


def test_load_error_shows_the_cli_line_and_quits_with_2(tmp_path):
    missing = tmp_path / "missing"
    app = make_app([missing])

    async def script(pilot):
        await loaded(app, pilot)
        assert isinstance(app.screen, ErrorScreen)
        line = f"tracediag: error: {missing}: no such file or directory"
        assert app.screen.line == line == app.error_line
        await pilot.press("f")  # nothing loaded: the view keys do nothing
        assert isinstance(app.screen, ErrorScreen)
        await pilot.press("q")

    drive(app, script)
    assert app.return_code == 2


def _shown_text(static) -> str:
    """What a Static shows, as plain text (its rich renderable printed 200 columns wide)."""
    import io

    from rich.console import Console

    console = Console(width=200, file=io.StringIO(), record=True)
    console.print(static.content)
    return console.export_text()


def test_the_detail_pane_names_evidence_in_words(diagnosis):
    # Before: "worst[0].coll_key  2", "worst[0].arrival_ns  4.008 s" (a time since the epoch),
    # "mean_late_ns": field names and our own collective keys.
    app = make_app(diagnosis=diagnosis)

    async def script(pilot):
        await pilot.press("f", "enter")
        assert app.screen.finding.code == "COL201"
        text = _shown_text(app.screen.query_one("#evidence"))
        lines = [" ".join(line.split()) for line in text.splitlines() if line.strip()]
        assert "mean lateness 1.084 ms" in lines
        assert "worst 1, late by 1.455 ms" in lines
        assert "worst 1, arrived at 6.742 ms into the critical path" in lines
        assert "work beyond the median rank's, by engine, tensor 1.448 ms" in lines
        assert "share of collectives it arrives last at 100.0%" in lines
        for internal in ("coll_key", "_ns", "[0]", "arrival_ns", "late_", "by_engine"):
            assert internal not in text, internal

    drive(app, script)


def test_the_overview_shows_the_bounds_and_the_matmul_formats(diagnosis):
    # Issue 19 item 1: the bounds per rank and the matmuls by numeric format on the overview,
    # every number of the table the report's own, no cell cut at 80 columns.
    from tracediag.model.units import fmt_ns

    app = make_app(diagnosis=diagnosis)
    report = diagnosis.to_dict()
    shown = {}

    async def script(pilot):
        for wid in ("bounds", "precision"):
            widget = app.screen.query_one(f"#{wid}")
            widget.scroll_visible(animate=False)
            await pilot.pause()
            shown[wid] = [widget.render_line(y).text.rstrip() for y in range(widget.size.height)]

    drive(app, script)
    bounds = shown["bounds"]
    assert bounds[0].split() == ["rank", "window", "DMA", "active", "DMA@peak", "TE", "active",
                                 "FLOPs@peak", "busiest", "bottleneck"]  # fmt: skip
    assert "…" not in "".join(bounds)
    b1 = report["bounds"][1]  # the straggler: its tensor engine busy 7.187 ms of 8.128 ms
    row = next(line for line in bounds if line.startswith("1 "))
    assert fmt_ns(b1["window"]["total_ns"]) in row and "7.187 ms" in row
    assert fmt_ns(b1["bounds_ns"]["compute_bound"]) == "7.187 ms"
    assert row.endswith("tensor") and bounds[bounds.index(row) + 1].strip() == "(compute)"
    assert shown["precision"] == [
        "rank format matmuls     time       FLOPs",
        "0    bf16        96 5.757 ms 463.9 GFLOP",
        "1    bf16        96 7.187 ms 463.9 GFLOP",
    ]
