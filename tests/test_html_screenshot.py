"""The HTML report as a person sees it: rendered by headless Chromium, checked on the screenshot's
pixels (the critical-path bar's proportions, the straggler's row in the skew heatmap, the worst
window). Skips where no Chromium is installed (``.ci/run`` installs Debian's)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests import gate_runs, pixels
from tracediag.report.formats import render
from tracediag.report.svg import CATEGORY_COLORS

run_dirs, diagnosed = gate_runs.run_dirs, gate_runs.diagnosed

PIL = pytest.importorskip("PIL.Image")
BROWSER = next(
    (b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None
)
pytestmark = pytest.mark.skipif(BROWSER is None, reason="no headless Chromium installed")

WIDTH, HEIGHT = 1000, 2600


def _mask(img: np.ndarray, hex_color: str, tol: int = 6) -> np.ndarray:
    return pixels.mask(img, hex_color, tol)


def _screenshot(diagnosis, out: Path) -> np.ndarray:
    """Pixels [y, x, rgb] of ``diagnosis``'s HTML report as headless Chromium draws it."""
    page, png = out / "report.html", out / "report.png"
    page.write_text(render(diagnosis, "html"))
    subprocess.run(
        [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         "--force-device-scale-factor=1", f"--window-size={WIDTH},{HEIGHT}",
         f"--screenshot={png}", page.as_uri()],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    return np.asarray(PIL.open(png).convert("RGB"), dtype=np.int16)


@pytest.fixture(scope="module")
def shot(diagnosed, tmp_path_factory):
    """(report, screenshot pixels [y, x, rgb]) of the straggler run's HTML report."""
    diagnosis = diagnosed("straggler")
    img = _screenshot(diagnosis, tmp_path_factory.mktemp("html"))
    assert img.shape[:2] == (HEIGHT, WIDTH)
    return diagnosis.to_dict(), img


def test_the_critical_path_bar_has_the_reports_proportions(shot):
    report, img = shot
    compute = _mask(img, CATEGORY_COLORS["compute"])
    # the bar is the row where the compute colour runs longest (legend squares are 12 px)
    y = int(np.argmax(compute.sum(axis=1)))
    row = {c: int(_mask(img[y : y + 1], col).sum()) for c, col in CATEGORY_COLORS.items()}
    drawn = sum(row.values())
    assert drawn > 600  # the bar is 860 px wide; edges between parts are anti-aliased
    total = report["critical_path"]["length_ns"]
    for category, ns in report["critical_path"]["by_category_ns"].items():
        assert row[category] / drawn == pytest.approx(ns / total, abs=0.01), category


def test_the_straggler_is_the_dark_row_of_the_skew_heatmap(shot):
    report, img = shot
    latest = _mask(img, "#B71C1C")
    ys, xs = np.nonzero(latest)
    assert len(ys) > 200
    # every "latest" cell lies in one rank's row (18 px high), and there are several of them
    assert ys.max() - ys.min() < 18
    assert len(np.unique(xs // 10)) >= 3
    straggler = next(f for f in report["findings"] if f["code"] == "COL201")
    assert straggler["ranks"] == [1]


def test_the_worst_window_is_drawn_with_its_events(shot):
    report, img = shot
    shade = _mask(img, "#FFF3C4", tol=2)
    assert shade.sum() > 20_000  # the findings timeline's and the worst window's shading
    # the collective lane (cc stream) and DMA queues appear inside the worst window's picture
    rows = np.nonzero(shade.any(axis=1))[0]
    lower = img[rows[len(rows) // 2] :]
    assert _mask(lower, CATEGORY_COLORS["collective_transfer"]).sum() > 50
    assert _mask(lower, CATEGORY_COLORS["dma_transfer"]).sum() > 50


@pytest.fixture(scope="module")
def gloo_shot(tmp_path_factory):
    """(diagnosis, pixels) of the real 4-rank gloo straggler job's report (rank 2 sleeps)."""
    from tracediag.engine.diagnose import diagnose
    from tracediag.loading.loader import load

    root = Path(__file__).resolve().parents[1]
    diagnosis = diagnose(load([root / "tests" / "data" / "real_gloo" / "straggler_sleep"]))
    return diagnosis, _screenshot(diagnosis, tmp_path_factory.mktemp("gloo"))


def _row_of_band(img: np.ndarray, band: tuple[int, int], x_cells: int, row_h: int) -> int:
    """Which row of a rank picture the band is: the text lines of the rank labels left of the
    cells above it (each picture labels its rows ``rank 0``, ``rank 1``... top to bottom)."""
    top, bottom = band
    labels = img[max(top - 6 * row_h, 0) : bottom + 1, max(x_cells - 60, 0) : x_cells - 4]
    lines = pixels.bands(labels.sum(axis=2) < 300)
    above = [line for line in lines if line[1] < top - (max(top - 6 * row_h, 0))]
    # only the lines of this picture's rows: those within row_h of each other going up
    count, edge = 0, top - max(top - 6 * row_h, 0)
    for first, last in reversed(above):
        if edge - last > row_h:
            break
        count, edge = count + 1, first
    return count


def test_the_straggler_is_the_darkest_row_of_the_ranks_table_and_the_skew_grid(gloo_shot):
    diagnosis, img = gloo_shot
    straggler = next(f for f in diagnosis.findings if f.code == "COL201")
    assert straggler.ranks == (2,)  # the rank truth.json says sleeps before each forward
    # Ranks table: shaded by lateness, the straggler's row full red (rgb 255,95,95), one row
    full = _mask(img, "#FF5F5F", tol=3)
    (band,) = pixels.bands(full)
    assert 15 <= band[1] - band[0] <= 22 and full.sum() > 5_000
    x_cells = int(np.flatnonzero(full.any(axis=0)).min())
    assert _row_of_band(img, band, x_cells, 22) == 2
    # skew grid: the latest colour in one row only, the third of four (rank 2)
    latest = _mask(img, "#B71C1C")
    (skew_band,) = pixels.bands(latest)
    assert skew_band[1] - skew_band[0] < 18 and skew_band[0] > band[1]
    x_skew = int(np.flatnonzero(latest.any(axis=0)).min())
    assert _row_of_band(img, skew_band, x_skew, 18) == 2


_MEASURE = """<pre id="boxes"></pre><script>
const out = [];
document.querySelectorAll("svg").forEach((svg) => {
  const width = svg.width.baseVal.value;
  svg.querySelectorAll("text").forEach((t) => {
    const b = t.getBBox();
    out.push([svg.getAttribute("aria-label"), t.textContent, b.x, b.x + b.width, width]);
  });
});
document.getElementById("boxes").textContent = JSON.stringify(out);
</script></body>"""


def _drawn_texts(diagnosis, out: Path) -> list[tuple[str, str, float, float, float]]:
    """(chart, text, left, right, chart width) of every text Chromium lays out in the report's
    charts: the page with a measuring script appended, its DOM dumped after layout."""
    import html
    import json

    page = out / "measure.html"
    page.write_text(render(diagnosis, "html").replace("</body>", _MEASURE))
    dom = subprocess.run(
        [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom",
         "--virtual-time-budget=5000", page.as_uri()],
        check=True, capture_output=True, text=True, timeout=120,
    ).stdout  # fmt: skip
    boxes = re.search(r'<pre id="boxes">(.*?)</pre>', dom, re.S).group(1)
    return [tuple(b) for b in json.loads(html.unescape(boxes))]


@pytest.mark.parametrize("name", ["straggler", "gloo"])
def test_every_axis_states_its_unit_and_no_label_is_cut(diagnosed, tmp_path, name):
    # Before: the time axes' ticks were "0 ns ... 8.128" (the last one's "ms" cut off by the
    # picture's edge), the bar and the skew grid had no scale at all.
    from tracediag.engine.diagnose import diagnose
    from tracediag.loading.loader import load

    root = Path(__file__).resolve().parents[1]
    diagnosis = (
        diagnosed("straggler")
        if name == "straggler"
        else diagnose(load([root / "tests" / "data" / "real_gloo" / "straggler_sleep"]))
    )
    texts = _drawn_texts(diagnosis, tmp_path)
    charts = {chart for chart, *_ in texts}
    assert {"critical path by category", "timeline", "worst window timeline",
            "collective arrival skew"} <= charts  # fmt: skip
    for chart, text, left, right, width in texts:
        assert left >= -0.5 and right <= width + 0.5, (chart, text, left, right, width)
    by_chart = {c: [t for chart, t, *_ in texts if chart == c] for c in charts}
    length = diagnosis.analysis.length_ns
    # the bar's scale: 0% to 100% of the path's length
    from tracediag.model.units import fmt_ns

    bar = by_chart["critical path by category"]
    assert bar[:5] == ["0%", "25%", "50%", "75%", f"100% of {fmt_ns(length)}"]
    # time axes: one unit, named in the caption, and the last tick is the span in that unit
    from tracediag.report.svg import axis_unit

    per, unit = axis_unit(length)
    axis = by_chart["timeline"]
    assert axis[-1] == f"time ({unit}) from the start of the critical path"
    assert axis[-6:-1] == [f"{length * k // 4 / per:.4g}" for k in range(5)]
    window = by_chart["worst window timeline"]
    assert re.fullmatch(r"time \((s|ms|µs|ns)\) from the start of the window", window[-1])
    assert window[-6] == "0" and all(t.startswith("+") for t in window[-5:-1])
    # the skew grid's columns are instances, not times: its caption says so and how many
    assert by_chart["collective arrival skew"][-1].startswith("collective instances 1 to ")
    assert by_chart["collective arrival skew"][-1].endswith(", in time order →")


def test_the_bounds_table_draws_each_bound_as_its_share_of_the_ranks_window(shot):
    # Issue 19 item 1: the bounds per rank in the HTML report, each bound a bar whose length is
    # its share of the rank's window (the numbers of report["bounds"], not recomputed here).
    from tracediag.report.bounds_precision import BOUND_KEYS
    from tracediag.report.html import BOUND_BAR_PX, BOUND_COLORS

    report, img = shot
    bounds = report["bounds"]
    assert [b["rank"] for b in bounds] == [0, 1]
    for key, color in zip(BOUND_KEYS, BOUND_COLORS, strict=True):
        bars = _mask(img, color, tol=3)
        rows = pixels.bands(bars)
        expected = [BOUND_BAR_PX * b["bounds_ns"][key] / b["window"]["total_ns"] for b in bounds]
        assert len(rows) == len(bounds), key  # one bar per rank, one row below the other
        drawn = [int(bars[(top + bottom) // 2].sum()) for top, bottom in rows]
        assert drawn == pytest.approx(expected, abs=1.0), key
    # the straggler's tensor engine is busy longer: its TE-active bar is the longer one
    te = _mask(img, BOUND_COLORS[BOUND_KEYS.index("compute_bound")], tol=3)
    (r0, r1) = [int(te[(a + b) // 2].sum()) for a, b in pixels.bands(te)]
    assert r1 > r0 + 5
