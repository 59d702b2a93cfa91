"""Every view names the same straggler (issue 20, item 2), and the timeline and path list are
readable on real multi-rank traces (item 8).

Two straggler jobs whose truth is known from how they were made, not from tracediag: the
generated Chrome job (``truth.json``: rank 1 slowed) and the real 4-rank gloo job
(``truth.json``: rank 2 sleeps 80 ms before each forward). For each, COL201, the TUI heatmap,
the HTML skew grid, the HTML Ranks table and the HTML worst window all name that rank.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import numpy as np
import pytest

from tests.test_html_report import parse
from tracediag.engine.diagnose import diagnose
from tracediag.loading.loader import load
from tracediag.report.formats import render
from tracediag.report.html_views import html_views
from tracediag.tui.app import make_app
from tracediag.tui.path_screen import PathScreen
from tracediag.tui.ranks_screen import RanksScreen
from tracediag.tui.row_list import RowList
from tracediag.tui.timeline_screen import TimelineScreen
from tracediag.tui.timeline_widget import TimelineView

ROOT = Path(__file__).resolve().parents[1]
CHROME = ROOT / "sample_traces" / "chrome_straggler"
GLOO = ROOT / "tests" / "data" / "real_gloo" / "straggler_sleep"


def _truth_rank(name: str) -> int:
    if name == "gloo":
        return int(json.loads((GLOO / "truth.json").read_text())["delayed_rank"])
    faults = json.loads((CHROME / "truth.json").read_text())["chrome"]["faults"]
    (rank,) = {r for f in faults if f["kind"] == "straggler" for r in f["ranks"]}
    return int(rank)


@pytest.fixture(scope="module", params=["chrome", "gloo"])
def job(request):
    path = CHROME / "chrome" if request.param == "chrome" else GLOO
    return request.param, _truth_rank(request.param), diagnose(load([path]))


def drive(app, script, size=(160, 40)):
    async def main():
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            await script(pilot)

    asyncio.run(main())


def test_col201_and_the_html_views_name_the_straggler(job):
    name, rank, d = job
    assert rank == (1 if name == "chrome" else 2)
    col201 = [f for f in d.findings if f.code == "COL201"]
    assert [f.ranks for f in col201] == [(rank,)]
    views = html_views(d)
    # skew grid: the straggler's column is the only one at the darkest level
    darkest = (views.skew.level == 4).any(axis=0)
    assert views.skew.ranks[darkest].tolist() == [rank]
    # Ranks table: shaded by mean lateness, the straggler darkest, everyone else white
    lateness = views.rank_lateness.mean_ns
    assert max(lateness, key=lateness.get) == rank
    page = render(d, "html")
    assert "<h2>Ranks, shaded by mean arrival lateness at collectives</h2>" in page
    p = parse(page)
    cells = [a for t, a in p.elements if t == "rect" and a.get("width") == "98"]
    ranks = sorted(lateness)
    per_row = len(cells) // len(ranks)
    assert per_row == 7  # arrival lateness, step time, compute, communication, memory, idle, MFU
    fills = [cells[i * per_row]["fill"] for i in range(len(ranks))]
    assert fills[ranks.index(rank)] == "rgb(255,95,95)"  # full red
    assert all(f == "rgb(255,255,255)" for i, f in enumerate(fills) if ranks[i] != rank)
    # the whole row carries one shade: no column shades the healthy ranks
    assert {c["fill"] for c in cells[: per_row * len(ranks)]} == {
        "rgb(255,95,95)",
        "rgb(255,255,255)",
    }
    # worst window: the ranks the critical path runs on in it, the straggler first
    w = views.window
    assert w.code == "COL201" and w.ranks[0] == rank
    seg = d.analysis.segments
    inside = (seg["end_ns"] > w.start_ns) & (seg["start_ns"] < w.end_ns) & (seg["rank"] >= 0)
    assert set(w.ranks) == set(seg.loc[inside, "rank"].astype(int))
    drawn = {int(m.group(1)) for lane in w.lanes if (m := re.match(r"rank (\d+) ", lane.label))}
    assert drawn == set(w.ranks)
    assert f"Events of rank{'s' if len(w.ranks) > 1 else ''} " in page


def test_the_tui_heatmap_names_the_straggler_and_the_path_wait(job):
    name, rank, d = job
    app = make_app(diagnosis=d)
    skew = d.analysis.segments.query("category == 'collective_skew'")
    waited = int(skew.loc[skew["rank"] == rank, "dur_ns"].sum())

    async def script(pilot):
        await pilot.press("r")
        screen = app.screen
        assert isinstance(screen, RanksScreen)
        g = screen.grid
        col = g.ranks.tolist().index(rank)
        assert g.last[:, col].all()  # last at every collective
        assert (g.level == 4).any(axis=0).tolist() == [c == col for c in range(len(g.ranks))]
        waits = str(screen.query_one("#path-waits").render())
        assert waits.startswith(f"The critical path waits for late arrivals of: rank {rank} ")
        assert waited > 0

    drive(app, script)


def test_noise_alone_is_not_drawn_as_a_straggler():
    """Lateness far below the path (tens of µs against a 535 ms path) stays pale: the colour
    scale is at least 0.5% of the critical path, the scale every view uses."""
    from tracediag.analysis.arrival_skew import colour_scale_ns, lateness_grid

    d = diagnose(load([GLOO]))
    late = d.analysis.lateness
    # the three ranks that do not sleep, their lateness shrunk a hundredfold: pure noise
    noise = late[late["rank"] != 2].assign(late_ns=lambda f: f["late_ns"] // 100)
    scale = colour_scale_ns(noise, d.analysis.length_ns)
    assert scale == pytest.approx(0.005 * d.analysis.length_ns)
    assert noise["late_ns"].max() < 0.02 * scale
    assert lateness_grid(noise, scale).level.max() == 0
    assert lateness_grid(noise).level.max() == 4  # unscaled, noise took the worst colour


def test_timeline_lanes_fit_their_labels_skip_marker_tracks_and_keep_one_order(job):
    name, rank, d = job
    app = make_app(diagnosis=d)

    async def script(pilot):
        await pilot.press("t", "a")  # the whole step, every rank
        screen = app.screen
        assert isinstance(screen, TimelineScreen)
        st = screen.state
        session = app.session
        tracks = d.trace.tracks
        names = tracks["name"].astype(str).to_numpy()
        # no lane for the profiler's marker-only tracks
        assert not any(n in ("cpu Spans/PyTorch Profiler", "cpu /") for n in names[st.lanes])
        kinds = d.trace.events.groupby("track", observed=True)["kind"].agg(
            lambda k: (k != "marker").any()
        )
        assert kinds.reindex(st.lanes).all()
        # the same order on every rank: the i-th lane of each rank is the same kind of track
        # (a thread's id and its peer number, "cpu 12331 (thread #4)", or the name the trace
        # gives it, "(pt_gloo_runloop)", which gloo's worker threads take late, differ between
        # ranks)
        labels = session.lanes.labels
        per_rank = {}
        for t in st.lanes:
            label = re.sub(r" \((thread #\d+|[^()]*)\)$", "", str(labels[t]))
            per_rank.setdefault(int(tracks.at[t, "rank"]), []).append(
                re.sub(r"^r\d+ (cpu \d+)?", lambda m: "cpu" if m.group(1) else "", label)
            )
        orders = list(per_rank.values())
        assert len(orders) == len(d.trace.ranks)
        assert all(o == orders[0] for o in orders), orders
        if name == "chrome":
            assert orders[0] == ["cpu (thread 1 (python3))", "stream 7", "stream 22",
                                 "stream 23", "stream 28"]  # fmt: skip
        # labels are not cut at 160 columns: each lane's label is drawn whole
        view = screen.query_one(TimelineView)
        assert view.label_width == max(len(labels[t]) for t in st.lanes) + 1
        line = "".join(s.text for s in view.render_line(1))
        assert line.startswith(str(labels[st.lanes[view.offset_lane(1)]]))

    drive(app, script)


def test_the_path_list_sorts_searches_and_groups(job):
    name, rank, d = job
    app = make_app(diagnosis=d)
    seg = d.analysis.segments
    dur = (seg["end_ns"] - seg["start_ns"]).to_numpy()

    async def script(pilot):
        await pilot.press("c")
        screen = app.screen
        assert isinstance(screen, PathScreen)
        rows = screen.query_one(RowList)
        assert rows.count == len(seg)
        # the text columns take the width a 160-column screen leaves
        assert sum(rows.widths) == 160 and rows.widths[6] > 18
        await pilot.press("s")  # by duration, longest first
        shown = screen.entries
        assert (np.diff(screen.table.duration[shown]) <= 0).all()
        assert screen.table.duration[shown[0]] == dur.max()
        await pilot.press("S")
        assert screen.table.duration[screen.entries[0]] == dur.min()
        await pilot.press("x", "g")  # grouped by category: headings only, by path time
        groups = screen.groups
        by_cat = seg.assign(d=dur).groupby(seg["category"].astype(str))["d"].sum()
        assert [g.key for g in groups] == by_cat.sort_values(ascending=False).index.tolist()
        assert [g.total_ns for g in groups] == sorted(by_cat.tolist(), reverse=True)
        assert len(screen.entries) == len(groups)
        skew_at = [g.key for g in groups].index("collective_skew")
        rows.move_to(skew_at)
        await pilot.press("enter")  # opens the skew group: its segments, all on the straggler
        opened = screen.entries[screen.entries >= 0]
        assert len(opened) == (seg["category"] == "collective_skew").sum()
        assert set(screen.table.rank[opened].tolist()) == {rank}
        await pilot.press("g")  # by rank: the straggler holds the most path time
        assert screen.groups[0].key == rank
        await pilot.press("x", "slash", *"skew", "enter")
        hits = screen.entries
        assert len(hits) == (seg["category"] == "collective_skew").sum()
        assert (screen.table.category[hits] == "collective_skew").all()
        await pilot.press("enter")  # the first hit opens in the timeline, selected
        assert isinstance(app.screen, TimelineScreen)
        assert app.screen.state.segment == int(hits[0])

    drive(app, script)
