"""One name per track in every view (issue 17): text, Markdown, HTML, JSON and the TUI.

Before, COL201 on the real gloo job said ``track cpu thread #3`` (the name it matches threads
across ranks by) in Markdown, HTML and JSON, the text report named no track, and the TUI and
the HTML timeline said ``cpu 12217/12217``; on the public 2-rank PyTorch trace the finding said
``stream 7`` where the views said ``gpu1/stream 7``. Now every view shows the rank's own track,
named as the trace names the thread (``thread 12217 (python)``): ``cpu 12217/12217 (python)``;
before, ``(thread #3)``, tracediag's own peer number, which no profiler viewer shows.

The expected names come from the raw files (``truth.json``'s pid of the delayed rank, the
thread ids and first timestamps of the JSON events), not from tracediag.
"""

from __future__ import annotations

import asyncio
import gzip
import io
import json
from pathlib import Path

from rich.console import Console

from tests.chrome_helpers import shared
from tracediag.engine.diagnose import diagnose
from tracediag.loading.loader import load
from tracediag.report.formats import render
from tracediag.report.html_views import html_views
from tracediag.tui.app import make_app
from tracediag.tui.detail_screen import FindingDetailScreen
from tracediag.tui.findings_screen import FindingsScreen
from tracediag.tui.timeline_screen import TimelineScreen

ROOT = Path(__file__).resolve().parents[1]
GLOO = ROOT / "tests" / "data" / "real_gloo" / "straggler_compute"
SAMPLED = ["kineto_sampled_rank-0.json.gz", "kineto_sampled_rank-1.json.gz"]


def _raw_events(path: Path) -> list[dict]:
    with gzip.open(path, "rt") as fh:
        return json.load(fh)["traceEvents"]


def _gloo_expected() -> str:
    """Rank 1's main thread (truth.json: the extra matmuls run on its main thread, pid = tid),
    named as the raw file's ``thread_name`` metadata names it (``thread 12217 (python)``: the
    part after its id), not by tracediag's own peer number."""
    truth = json.loads((GLOO / "truth.json").read_text())
    rank = truth["delayed_rank"]
    pid = truth["ranks"][str(rank)]["pid"]
    (name,) = {
        e["args"]["name"]
        for e in _raw_events(GLOO / f"rank-{rank}.json.gz")
        if e.get("ph") == "M" and e.get("name") == "thread_name" and e["tid"] == pid
    }
    assert name == f"thread {pid} (python)"
    return f"cpu {pid}/{pid} (python)"


def _shown(static) -> str:
    console = Console(width=200, file=io.StringIO(), record=True)
    console.print(static.content)
    return " ".join(console.export_text().split())


def _tui_texts(d, code: str) -> dict[str, str]:
    """What the TUI shows of the finding (its detail pane) and of the event its timeline
    opens on (the event panel), and the lane labels of that timeline."""
    app = make_app(diagnosis=d)
    out: dict[str, str] = {}

    async def main():
        async with app.run_test(size=(160, 40)) as pilot:
            await pilot.pause()
            await pilot.press("f")
            assert isinstance(app.screen, FindingsScreen)
            n = [f.code for f in app.screen.shown].index(code)
            await pilot.press(*["down"] * n, "enter")
            assert isinstance(app.screen, FindingDetailScreen) and app.screen.finding.code == code
            out["detail"] = _shown(app.screen.query_one("#numbers"))
            await pilot.press("t")
            assert isinstance(app.screen, TimelineScreen)
            out["event"] = _shown(app.screen.query_one("#event-info"))
            out["track"] = int(d.trace.events["track"].iat[app.screen.state.selected])

    asyncio.run(main())
    return out


def _views(d, code: str) -> dict:
    """The finding's track as each report format writes it."""
    report = json.loads(render(d, "json"))
    (f,) = [f for f in report["findings"] if f["code"] == code]
    return {
        "json": f["track"],
        "text": render(d, "text"),
        "markdown": render(d, "markdown"),
        "html": render(d, "html"),
    }


def _assert_one_name(d, code: str, expected: str) -> None:
    (f,) = [f for f in d.findings if f.code == code]
    assert f.track == expected
    views = _views(d, code)
    assert views["json"] == expected
    assert f"track {expected} |" in " ".join(views["text"].split())
    assert f"track `{expected}`" in views["markdown"]
    assert f"track {expected}," in views["html"]  # the finding's summary line
    tui = _tui_texts(d, code)
    assert f"engine / track {f.engine} / {expected}" in tui["detail"]
    # the event the timeline opens on is named by its track's label, the same one
    label = str(d.analysis.track_labels[tui["track"]])
    assert f"track {label}" in tui["event"]
    # the HTML worst window draws the finding's track under the same name
    lanes = [lane.label for lane in html_views(d).window.lanes]
    assert f"rank {f.ranks[0]} {expected}" in lanes


def test_gloo_straggler_track_has_one_name_in_every_view():
    d = diagnose(load([GLOO]))
    expected = _gloo_expected()
    assert expected == "cpu 12217/12217 (python)"
    _assert_one_name(d, "COL201", expected)
    # no view keeps the name the ranks are matched by
    for fmt in ("text", "markdown", "html", "json"):
        assert "cpu thread #" not in render(d, fmt), fmt


def test_public_two_rank_trace_names_the_ranks_own_stream():
    """kineto_sampled: rank 1 is late on its GPU; COL201 compares streams by ``stream 7`` on
    both ranks and now names rank 1's own ``gpu1/stream 7``, the name the views show."""
    paths = [shared(p) for p in SAMPLED]
    devices = {
        e["args"]["device"] for e in _raw_events(paths[1]) if e.get("cat") == "kernel"
    }  # the raw file's GPU of rank 1 (the stream's prefix)
    assert devices == {1}
    d = diagnose(load(paths))
    _assert_one_name(d, "COL201", "gpu1/stream 7")


def test_a_single_thread_per_rank_needs_no_number():
    """The chrome sample runs one CPU thread per rank: its name stays as the trace gives it."""
    d = diagnose(load([ROOT / "sample_traces" / "chrome_straggler" / "chrome"]))
    tracks = d.trace.tracks
    cpu = (tracks["kind"] == "cpu_thread").to_numpy()
    labels = d.analysis.track_labels
    assert list(labels[cpu]) == list(tracks["name"].astype(str)[cpu])
    assert not any("(thread #" in str(x) for x in labels)
