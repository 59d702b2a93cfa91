"""Picking a step in the HTML report and the TUI.

HTML: the Steps section as headless Chromium draws it, checked on the screenshot's pixels (the
step bars' widths against the report's step times, the outlier's row and bar, the picked
step's panel). TUI: pilot tests of the steps view on the real 4-rank gloo trace (5 steps), its
rows and figures against the report's ``steps``.

The slow-step job is written by the clean-room Kineto writer (``tests/cleanroom``, written
without reading this tool): rank 2's host sleeps 8 ms in step index 3 only, so that step is the
one outlier.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests import pixels
from tracediag.engine.diagnose import diagnose
from tracediag.loading.loader import load
from tracediag.model.units import fmt_ns
from tracediag.report import html_steps
from tracediag.report.formats import render
from tracediag.report.step_lines import typical_index
from tracediag.report.svg import CATEGORY_COLORS

GLOO = Path(__file__).parent / "data" / "real_gloo" / "straggler_sleep"
BROWSER = next(
    (b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None
)
WIDTH, HEIGHT = 1000, 4200


@pytest.fixture(scope="module")
def slow_step(tmp_path_factory):
    """(diagnosis, report, writer's truth): 4 ranks, 6 steps, step index 3 slowed on rank 2."""
    folder = tmp_path_factory.mktemp("slow_step")
    truth = pixels.write_slow_step_job(folder)
    d = diagnose(load([folder], cache=False))
    return d, d.to_dict(), truth


@pytest.fixture(scope="module")
def gloo():
    if not (GLOO / "truth.json").is_file():
        pytest.skip("real gloo traces not present (tests/data/real_gloo)")
    d = diagnose(load([GLOO], cache=False))
    return d, d.to_dict()


# ---- HTML ---------------------------------------------------------------------------------


def test_the_section_lists_every_step_and_checks_the_typical_one(slow_step):
    _, report, truth = slow_step
    page = render(slow_step[0], "html")
    assert page.count('<tr id="step-row-') == 6 == len(truth["steps"])
    # The typical step is the one closest to the median of the writer's own step times.
    want = [np.median([r["step_ns"] for r in st["per_rank"].values()]) for st in truth["steps"]]
    typical = int(np.argmin(np.abs(np.array(want) - np.median(want))))
    assert f'id="step-pick-{typical}" checked' in page and page.count(" checked>") == 1
    assert '<tr id="step-row-3" class="outlier">' in page
    assert report["steps"][3]["cause"]["text"] in page
    assert "<script" not in page and "http://" not in page.replace(
        'xmlns="http://www.w3.org/2000/svg"', ""
    )


def test_one_step_has_no_section():
    report = {"step_summary": {"n": 1}, "steps": [{}]}
    assert html_steps.steps_section(report) == ""


def _mask(img: np.ndarray, hex_color: str, tol: int = 4) -> np.ndarray:
    return pixels.mask(img, hex_color, tol)


def _screenshot(page: str, out: Path) -> np.ndarray:
    if BROWSER is None:
        pytest.skip("no headless Chromium installed")
    pil = pytest.importorskip("PIL.Image")
    html, png = out / "report.html", out / "report.png"
    html.write_text(page)
    subprocess.run(
        [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         "--force-device-scale-factor=1", f"--window-size={WIDTH},{HEIGHT}",
         f"--screenshot={png}", html.as_uri()],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    return np.asarray(pil.open(png).convert("RGB"), dtype=np.int16)


def _bar_widths(img: np.ndarray, colors: dict[str, str]) -> list[tuple[int, str, int]]:
    """(top y, colour name, width px at the bar's middle row) of each bar of those colours: a
    solid run at least 7 px high (bars are 9 or 12 px; text and borders are not solid)."""
    out = []
    for name, color in colors.items():
        mask = _mask(img, color)
        solid = mask[:-6].copy()  # pixels of that colour in 7 rows from there down
        for k in range(1, 7):
            solid &= mask[k : len(mask) - 6 + k]
        for top, _ in pixels.bands(solid):
            out.append((int(top), name, int(solid[top].sum())))
    return sorted(out)


@pytest.fixture(scope="module")
def shots(slow_step, tmp_path_factory):
    """Screenshots of the page as it opens (typical step picked) and with step 3 picked."""
    page = render(slow_step[0], "html")
    typical = slow_step[1]["step_summary"]
    picked = page.replace(" checked>", ">").replace(
        'id="step-pick-3">', 'id="step-pick-3" checked>'
    )
    out = tmp_path_factory.mktemp("steps_html")
    (out / "a").mkdir(), (out / "b").mkdir()
    return typical, _screenshot(page, out / "a"), _screenshot(picked, out / "b")


def test_the_step_bars_are_the_step_times_and_the_outlier_is_marked(slow_step, shots):
    _, report, _ = slow_step
    _, img, _ = shots
    bars = _bar_widths(
        img,
        {
            "step": html_steps.STEP_COLOR,
            "typical": html_steps.TYPICAL_COLOR,
            "outlier": html_steps.OUTLIER_COLOR,
        },
    )
    assert len(bars) == 6  # one bar per step, top to bottom in step order
    times = np.array([st["step_time_ns"] for st in report["steps"]], dtype=float)
    want = html_steps.PLOT_PX * times / times.max()
    got = np.array([w for _, _, w in bars], dtype=float)
    assert np.abs(got - want).max() <= 1.0
    assert [name for _, name, _ in bars].count("outlier") == 1
    assert bars[3][1] == "outlier"  # the slowed step, index 3, and no other
    assert [name for _, name, _ in bars].count("typical") == 1
    # The outlier's table row is shaded, one row high, above the chart.
    (row,) = pixels.bands(_mask(img, html_steps.OUTLIER_ROW, tol=1))
    assert 15 <= row[1] - row[0] <= 30 and row[1] < bars[0][0]


#: The panel's path categories told apart on pixels: not ``gap``, whose grey is also a shade
#: of anti-aliased text.
COLORED = {c: v for c, v in CATEGORY_COLORS.items() if c != "gap"}


def _panel_bars(img: np.ndarray, below: int) -> dict[str, int]:
    """Width of each category's share bar in the step panel's critical-path table: below the
    step chart, above the ranks table (whose bars are the breakdown's grey)."""
    ranks = _bar_widths(img[below:], {"rank": "#78909C"})
    part = img[below : below + ranks[0][0]] if ranks else img[below:]
    return {name: w for _, name, w in _bar_widths(part, COLORED)}


def _want_panel(step: dict) -> dict[str, int]:
    path = step["critical_path_ns"]
    total = sum(path.values())
    want = {c: round(html_steps.SHARE_BAR_PX * path[c] / total) for c in COLORED}
    return {c: w for c, w in want.items() if w}


def test_picking_a_step_shows_its_critical_path(slow_step, shots):
    _, report, _ = slow_step
    typical, opened, picked = shots
    i = typical_index(report["steps"], typical["typical_ns"])
    chart_end = max(t for t, _, _ in _bar_widths(opened, {"s": html_steps.OUTLIER_COLOR})) + 20
    got_typical, got_picked = _panel_bars(opened, chart_end), _panel_bars(picked, chart_end)
    for got, step in ((got_typical, report["steps"][i]), (got_picked, report["steps"][3])):
        want = _want_panel(step)
        assert got.keys() == want.keys()
        assert all(abs(got[c] - want[c]) <= 1 for c in want), (got, want)
    assert got_typical != got_picked


# ---- TUI ----------------------------------------------------------------------------------


def drive(app, script, size=(100, 40)):
    """Run ``script(pilot)`` against ``app`` headless."""

    async def main():
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            await script(pilot)

    asyncio.run(main())


def _shown(static) -> list[str]:
    """What a Static shows, as lines of plain text with single spaces."""
    import io

    from rich.console import Console

    console = Console(width=200, file=io.StringIO(), record=True)
    console.print(static.content)
    return [" ".join(line.split()) for line in console.export_text().splitlines() if line.strip()]


def _cells(table, row: int) -> list[str]:
    return [str(c) for c in table.get_row_at(row)]


def _path_lines(step: dict) -> list[str]:
    """The path lines the view should show for ``step``, from the JSON alone."""
    path = step["critical_path_ns"]
    total = sum(path.values())
    return [f"■ {c} {fmt_ns(ns)} {100.0 * ns / total:.1f}%" for c, ns in path.items() if ns]


def test_the_steps_view_lists_the_gloo_steps_and_picking_one_shows_its_figures(gloo):
    from textual.widgets import DataTable

    from tracediag.tui.app import make_app
    from tracediag.tui.steps_screen import StepsScreen

    d, report = gloo
    steps = report["steps"]
    app = make_app(diagnosis=d)

    async def script(pilot):
        await pilot.press("i")
        screen = app.screen
        assert isinstance(screen, StepsScreen)
        table = screen.query_one("#steps", DataTable)
        assert table.row_count == 5
        # The rows are the ProfilerStep#2..6 of every rank, with the JSON's step times.
        for i, st in enumerate(steps):
            cells = _cells(table, i)
            assert cells[0] == f"step {i + 2}" and cells[1] == fmt_ns(st["step_time_ns"])
        typical = report["step_summary"]["typical_ns"]
        assert steps[2]["step_time_ns"] == typical  # 5 steps: the median is one of them
        assert table.cursor_row == 2 and _cells(table, 2)[3] == "typical"
        assert not any(_cells(table, i)[3] == "outlier" for i in range(5))
        head = _shown(screen.query_one("#step-head"))
        assert head[0].startswith(f"step 4 (typical): {fmt_ns(typical)}")
        assert _shown(screen.query_one("#step-path")) == _path_lines(steps[2])
        await pilot.press("down", "down")  # to step 6, the last
        assert table.cursor_row == 4
        head = _shown(screen.query_one("#step-head"))
        assert head[0] == (
            f"step 6: {fmt_ns(steps[4]['step_time_ns'])} · span on every rank "
            f"{fmt_ns(steps[4]['span_ns'])}"
        )
        assert _shown(screen.query_one("#step-path")) == _path_lines(steps[4])
        assert _shown(screen.query_one("#step-path")) != _path_lines(steps[2])
        ranks = _shown(screen.query_one("#step-ranks"))
        # A host-only trace (gloo on CPU): each rank's own step time, no device breakdown.
        assert ranks[0].startswith("No device activity")
        assert ranks[1:] == [
            f"rank {r['rank']}: {fmt_ns(r['step_time_ns'])}" for r in steps[4]["ranks"]
        ]
        # The findings in step 6: those whose window shares 5% of the shorter with its span,
        # by hand from the JSON's windows and spans.
        want = []
        for f in report["findings"]:
            if not (f["start_ns"] or f["end_ns"]):
                continue
            s, e = f["start_ns"], max(f["end_ns"], f["start_ns"] + 1)
            share = min(e, steps[4]["end_ns"]) - max(s, steps[4]["start_ns"])
            if share >= 0.05 * min(e - s, steps[4]["span_ns"]):
                want.append(f["code"])
        found = _shown(screen.query_one("#step-findings"))
        assert found[0] == f"{len(want)} of {len(report['findings'])} findings in this step:"
        assert [line.split()[0] for line in found[1:]] == want
        assert "COL201" in want  # the straggler stalls every step
        await pilot.press("enter")
        from tracediag.tui.timeline_screen import TimelineScreen

        assert isinstance(app.screen, TimelineScreen)

    drive(app, script)


def test_each_finding_is_listed_in_as_many_steps_as_the_report_says(gloo):
    from tracediag.tui.session import Session
    from tracediag.tui.steps_screen import findings_in_step

    d, report = gloo
    session = Session(d)
    counts = {}
    for i in range(len(report["steps"])):
        for f in findings_in_step(session, i):
            counts[id(f)] = counts.get(id(f), 0) + 1
    by_finding = [counts.get(id(f), 0) for f in d.findings]
    assert by_finding == [f["steps_seen"] or 0 for f in report["findings"]]
    assert by_finding[0] == 5  # COL201, the straggler, in every step


def test_the_outlier_step_shows_its_cause_and_its_ranks_breakdown(slow_step):
    from textual.widgets import DataTable

    from tracediag.tui.app import make_app

    d, report, _ = slow_step
    app = make_app(diagnosis=d)
    step = report["steps"][3]

    async def script(pilot):
        await pilot.press("i")
        table = app.screen.query_one("#steps", DataTable)
        cells = _cells(table, 3)
        assert cells[3] == "outlier" and cells[4] == step["cause"]["text"]  # 100 columns
        assert cells[4].endswith("on rank 2")
        while table.cursor_row != 3:
            await pilot.press("up" if table.cursor_row > 3 else "down")
        head = _shown(app.screen.query_one("#step-head"))
        assert head[0].startswith(f"step 13 (outlier): {fmt_ns(step['step_time_ns'])}")
        assert head[1] == f"cause: {step['cause']['text']}"
        rows = _shown(app.screen.query_one("#step-ranks"))
        assert rows[0].split() == ["rank", "step", "time", *html_steps.BREAKDOWN, "host", "gap"]
        for line, r in zip(rows[1:], step["ranks"], strict=True):
            bd = r["breakdown_ns"]
            want = [
                str(r["rank"]),
                fmt_ns(r["step_time_ns"]),
                *(fmt_ns(bd[k]) for k in html_steps.BREAKDOWN),
                fmt_ns(r["host_gap_ns"]),
            ]
            assert line == " ".join(want)
        # rank 2's device idles the 8 ms its host slept: the largest idle of the step
        idle = {r["rank"]: r["breakdown_ns"]["idle"] for r in step["ranks"]}
        assert max(idle, key=idle.get) == 2 and idle[2] > 8_000_000

    drive(app, script)


def test_a_trace_of_one_step_says_so_and_shows_the_window_as_its_step():
    from textual.widgets import DataTable

    from tracediag.tui.app import make_app

    d = diagnose(
        load([Path(__file__).parents[1] / "sample_traces" / "neuron_parquet_straggler" / "parquet"])
    )
    report = d.to_dict()
    assert report["step_summary"]["n"] == 1
    cp, (step,) = report["critical_path"], report["steps"]
    app = make_app(diagnosis=d)

    async def script(pilot):
        await pilot.press("i")
        assert app.screen.query_one("#steps", DataTable).row_count == 1
        assert _shown(app.screen.query_one("#steps-title"))[0].startswith("One step")
        # The step is the critical path's window: the same length, split the same way.
        head = _shown(app.screen.query_one("#step-head"))[0]
        assert head.startswith(f"step [0] (typical): {fmt_ns(cp['length_ns'])}")
        path = _shown(app.screen.query_one("#step-path"))
        assert [line.split()[1] for line in path] == [
            c for c, ns in cp["by_category_ns"].items() if ns
        ]
        await pilot.press("enter")
        from tracediag.tui.timeline_screen import TimelineScreen

        assert isinstance(app.screen, TimelineScreen)
        t = app.screen.target
        assert t.stall == (step["start_ns"], step["end_ns"]) and t.t0 < t.stall[0]

    drive(app, script)


def _step_finding_lines(d) -> list[tuple[str, str]]:
    """(code, line) of every step's findings in the TUI's steps screen."""
    from tracediag.tui.app import make_app
    from tracediag.tui.steps_screen import findings_in_step

    app = make_app(diagnosis=d)
    lines = []

    async def script(pilot):
        await pilot.press("i")
        for row in range(5):
            app.screen.show_step(row)
            codes = [f.code for f in findings_in_step(app.session, row)]
            shown = _shown(app.screen.query_one("#step-findings"))
            lines.extend(zip(codes, shown[1:] if codes else [], strict=True))

    drive(app, script)
    return lines


def test_a_steps_finding_saving_is_a_per_step_share_only_when_seen_in_every_step(gloo):
    """straggler_sleep: COL201's 283.5 ms saving is over the whole 5-step window (each step is
    about 116 ms), so a step shows its fifth, as for the all-reduces every rank exposes
    (COL202, in every step too); in the clean run COL202 is seen in 4 of the 5 steps and keeps
    the whole figure, said to be over the 5 steps. Before, a step showed the whole-window
    saving alone."""
    d, report = gloo
    by_code = [(f["code"], f["saving_ns"], f["steps_seen"]) for f in report["findings"]]
    assert by_code == [("COL201", 283484572, 5), ("COL202", 10267924, 5)]
    assert report["step_summary"]["n"] == 5
    assert fmt_ns(283484572 // 5) == "56.7 ms" and fmt_ns(10267924 // 5) == "2.054 ms"
    lines = _step_finding_lines(d)
    for code, want in (
        ("COL201", "saving 56.7 ms/step (283.5 ms over the 5 steps)"),
        ("COL202", "saving 2.054 ms/step (10.27 ms over the 5 steps)"),
    ):
        shown = [line for c, line in lines if c == code]
        assert len(shown) == 5 and all(want in line for line in shown)
    clean = diagnose(load([GLOO.parent / "clean"], cache=False))
    (job,) = [f for f in clean.findings if f.code == "COL202" and len(f.ranks) == 4]
    assert (job.saving_ns, job.severity.name) == (29470857, "WARNING")
    col202 = [line for c, line in _step_finding_lines(clean) if c == "COL202"]
    assert sum("saving 29.47 ms over the 5 steps" in line for line in col202) == 4
    assert not any("/step" in line for line in col202)
