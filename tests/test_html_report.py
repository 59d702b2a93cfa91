"""The HTML report: one self-contained page with its pictures (checked by parsing the page and
its SVG; test_html_screenshot.py looks at it in headless Chromium)."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import numpy as np
import pytest

from tests import gate_runs
from tracediag.ci.history import load_history, record
from tracediag.ci.trend import trend
from tracediag.report.html import render_html

# the shared fixtures (see tests/gate_runs.py)
cli, reports, run_dirs = gate_runs.cli, gate_runs.reports, gate_runs.run_dirs
diagnosed = gate_runs.diagnosed

VOID = {"meta", "br", "img", "input", "link", "hr", "circle", "line", "rect", "polyline"}


class _Page(HTMLParser):
    """Collects elements with their attributes and checks that every tag is closed in order."""

    def __init__(self):
        super().__init__()
        self.stack: list[str] = []
        self.elements: list[tuple[str, dict]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        assert self.stack and self.stack[-1] == tag, (self.stack[-3:], tag)
        self.stack.pop()

    def handle_data(self, data):
        self.text.append(data)


def parse(page: str) -> _Page:
    p = _Page()
    p.feed(page)
    p.close()
    assert p.stack == [], p.stack
    return p


def test_the_page_is_self_contained_and_well_formed(reports):
    page = render_html(reports("straggler"))
    p = parse(page)
    assert page.startswith("<!DOCTYPE html>")
    tags = {t for t, _ in p.elements}
    assert not tags & {"script", "link", "img", "iframe", "object"}
    assert not re.search(r"(src|href)\s*=|url\(|@import", page)
    assert sum(1 for t, _ in p.elements if t == "svg") == 3  # path, ranks, timeline


def test_critical_path_bar_is_to_scale(reports):
    report = reports("straggler")
    p = parse(render_html(report))
    cp = report["critical_path"]
    bars = [
        a for t, a in p.elements if t == "rect" and a.get("y") == "0" and a.get("height") == "36"
    ]
    nonzero = [c for c, ns in cp["by_category_ns"].items() if ns]
    assert len(bars) == len(nonzero)
    widths = [float(a["width"]) for a in bars]
    assert sum(widths) == pytest.approx(860, abs=0.05)
    skew = nonzero.index("collective_skew")
    assert widths[skew] == pytest.approx(860 * 1425756 / cp["length_ns"], abs=0.01)


def test_rank_heatmap_from_a_json_report_shades_rows_by_step_time(reports):
    """A saved JSON report has no collectives table: the Ranks rows are shaded by step time
    (the header says so), one shade per row, never by a share a waiting rank inflates."""
    report = reports("straggler")
    page = render_html(report)
    assert "<h2>Ranks, shaded by step time against the median rank</h2>" in page
    p = parse(page)
    cells = [a for t, a in p.elements if t == "rect" and a.get("width") == "108"]
    assert len(cells) == 2 * 6  # two ranks, six columns
    fills = [c["fill"] for c in cells]
    assert len(set(fills[:6])) == 1 and len(set(fills[6:])) == 1  # one shade per row
    # full red at 10% more step time than the median of the two ranks
    steps = [r["step_time_ns"] for r in report["ranks"]]
    mid = float(np.median(steps))
    for row, step in enumerate(steps):
        bad = min(max((step - mid) / (0.10 * mid), 0.0), 1.0)
        g = int(255 - 160 * bad)
        assert fills[6 * row] == f"rgb(255,{g},{g})"


def test_timeline_shades_the_worst_window(reports):
    report = reports("straggler")
    page = render_html(report)
    worst = report["findings"][0]
    assert worst["code"] == "COL201"
    assert "The worst window (largest saving: COL201," in page
    p = parse(page)
    shade = [a for t, a in p.elements if t == "rect" and a.get("fill") == "#FFF3C4"]
    assert len(shade) == 1
    span = report["critical_path"]["end_ns"] - report["critical_path"]["start_ns"]
    expected = 630 * (worst["end_ns"] - worst["start_ns"]) / span  # plot width 860 - 220 - 10
    assert float(shade[0]["width"]) == pytest.approx(expected, abs=0.1)
    lanes = [a for t, a in p.elements if t == "rect" and a.get("height") == "16"]
    assert len(lanes) == len([f for f in report["findings"] if f["start_ns"] or f["end_ns"]])


def test_trend_chart_from_history(reports, tmp_path, cli, run_dirs):
    db = tmp_path / "h.db"
    base = reports("clean0")
    rng = np.random.default_rng(2)
    for s in np.r_[6.68e6 + rng.normal(0, 3e3, 6), 7.2e6 + rng.normal(0, 3e3, 6)]:
        r = {**base, "critical_path": {**base["critical_path"], "length_ns": int(s)}}
        record(db, r)
    page = render_html(base, trend(*load_history(db), ["step-time-ns"]))
    p = parse(page)
    assert "change at run 7: 6.6" in page and "(regression, p = 0.00" in page
    dashed = [a for t, a in p.elements if t == "line" and a.get("stroke-dasharray")]
    assert len(dashed) == 1
    points = [a for t, a in p.elements if t == "circle"]
    assert len(points) == 12
    code, _, _ = cli(
        "report", run_dirs["clean0"], "--format", "html", "--history", db, "-o", "r.html", "-q"
    )
    assert code == 0
    assert "<h2>Trend</h2>" in (tmp_path / "r.html").read_text()
    assert (
        cli("report", "x", "--history", db)[2]
        == "tracediag: error: --history needs --format html\n"
    )


def test_a_report_from_a_trace_draws_the_skew_grid_and_the_worst_window(diagnosed):
    from tracediag.analysis.arrival_skew import lateness
    from tracediag.report.formats import render

    diagnosis = diagnosed("straggler")
    page = render(diagnosis, "html")
    p = parse(page)
    instances = lateness(diagnosis.trace.collectives)["coll_key"].nunique()
    tips = [t for t in p.text if t.startswith("rank ") and "the others' median" in t]
    assert len(tips) == 2 * instances  # one cell per rank and collective instance
    assert sum("rank 1," in t and "(last)" in t for t in tips) == instances
    assert "Worst window: COL201" in page
    lanes = [t for t in p.text if t.startswith("rank 1 ")]
    assert {"rank 1 tensor", "rank 1 vector"} <= set(lanes)
    # a saved JSON report has no trace: the page draws without those pictures
    assert "Collective arrival skew" not in render_html(diagnosis.to_dict())


def _table_after(page: str, heading: str) -> list[list[str]]:
    """The cell texts of the first table after ``<h2>heading</h2>``, row by row."""
    part = page[page.index(f"<h2>{heading}</h2>") :]
    part = part[: part.index("</table>")]
    rows = re.findall(r"<tr>(.*?)</tr>", part)
    return [
        [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", r)]
        for r in rows
    ]


def test_bounds_and_matmul_formats_are_tables_of_the_reports_numbers(reports):
    # Issue 19 item 1: the bounds table and the matmuls by numeric format, as in the text report.
    from tracediag.model.units import fmt_ns

    report = reports("straggler")
    page = render_html(report)
    parse(page)
    bounds = _table_after(page, "Bounds per rank")
    assert bounds[0] == ["rank", "window", "DMA active", "DMA@peak", "TE active", "FLOPs@peak",
                         "busiest", "bottleneck"]  # fmt: skip
    for row, b in zip(bounds[1:], report["bounds"], strict=True):
        assert row[:2] == [str(b["rank"]), fmt_ns(b["window"]["total_ns"])]
        assert row[4] == fmt_ns(b["bounds_ns"]["compute_bound"])
        assert row[-1] == "tensor (compute)"  # the generator's matmuls bound both ranks
    formats = _table_after(page, "Matmuls by numeric format")
    assert formats[0] == ["rank", "format", "matmuls", "time", "FLOPs"]
    # the generator writes 96 bf16 matmuls per rank, the same FLOPs on both ranks
    assert [r[:3] for r in formats[1:]] == [["0", "bf16", "96"], ["1", "bf16", "96"]]
    assert formats[1][4] == formats[2][4] != "-"


def test_a_report_without_bounds_has_neither_table(reports):
    report = {**reports("straggler"), "bounds": [], "precision": []}
    page = render_html(report)
    assert "Bounds per rank" not in page and "numeric format" not in page


def test_header_and_worst_window_say_what_they_cover_on_a_real_five_step_job():
    """straggler_compute (real gloo, 4 ranks, 5 steps): the 584.8 ms critical path is the whole
    window, not a step (the typical step is 115.9 ms), and the worst window's caption gives
    its real place: COL201's window starts 21 ms into the path, not at 0 ns."""
    from pathlib import Path

    from tests.gate_runs import _diagnose
    from tracediag.model.units import fmt_ns
    from tracediag.report.formats import render

    job = Path(__file__).resolve().parent / "data" / "real_gloo" / "straggler_compute"
    diagnosis = _diagnose(job)
    report = diagnosis.to_dict()
    page = render(diagnosis, "html")
    steps = report["step_summary"]
    assert steps["n"] == 5 and fmt_ns(steps["typical_ns"]) == "115.9 ms"
    assert "Critical path (step)" not in page
    assert (
        "<th>Critical path (whole window, 5 steps)</th><td>584.8 ms "
        '<span class="muted">(typical step 115.9 ms: see Steps)</span>'
    ) in page
    t0 = report["critical_path"]["start_ns"]
    worst = report["findings"][0]
    assert worst["code"] == "COL201"
    shaded = f"{fmt_ns(worst['start_ns'] - t0)} to {fmt_ns(worst['end_ns'] - t0)}"
    assert shaded == "21 ms to 557 ms"
    assert f"the finding's window ({shaded}) is shaded" in page
    assert "from 0 ns to 584.8 ms into the critical path" in page  # padding clipped to the path
    # a one-step trace's path is the whole window, and says no more
    one = render_html({**report, "step_summary": {**steps, "n": 1}})
    assert "<th>Critical path (whole window)</th><td>584.8 ms</td>" in one
