"""The TUI's pure parts on the worked example: timeline index and state, findings query,
event description, lateness grid, loading stages. No Textual app runs here.

The worked example (shared/design/critical-path-example.md): rank 1's vector work ends at 570
instead of 420, so rank 0 waits at the AllReduce. Tracks: rank 0 = 0 cc, 1 q0, 2 sync,
3 tensor, 4 vector; rank 1 = 5..9 in the same order.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.worked_example import example_trace
from tracediag.analysis.arrival_skew import lateness_grid
from tracediag.engine.config import Config
from tracediag.engine.diagnose import diagnose
from tracediag.model.errors import TraceInputError
from tracediag.model.findings import Severity
from tracediag.tui import event_info, targets
from tracediag.tui.findings_query import FindingsQuery
from tracediag.tui.session import (
    INDEX_STAGE,
    Session,
    error_line,
    open_session,
    planned_stages,
)
from tracediag.tui.timeline_state import TimelineState, TimelineTarget

ROOT = Path(__file__).resolve().parents[1]
STRAGGLER = ROOT / "sample_traces" / "neuron_parquet_straggler" / "parquet"


@pytest.fixture(scope="module")
def session() -> Session:
    return Session(diagnose(example_trace()))


def state(session: Session, ranks=(1,), t0=0, t1=800, **kw) -> TimelineState:
    return TimelineState(session.timeline, session.track_ranks, TimelineTarget(t0, t1, ranks, **kw))


# ---- timeline index ------------------------------------------------------------------------
def test_index_sorts_events_by_track_then_start(session):
    idx = session.timeline
    assert idx.track_ptr.tolist() == [0, 1, 2, 3, 5, 6, 7, 8, 9, 11, 12]
    # rank 0's tensor track (3) holds m1 (event 2) then m2 (event 5)
    assert idx.order[3:5].tolist() == [2, 5]
    assert idx.visible(3, 400, 600) == (4, 4)  # nothing of track 3 runs in [400, 600)
    assert idx.visible(3, 300, 700) == (3, 5)
    assert idx.nearest(3, 200) == 2  # running then
    assert idx.nearest(3, 400) == 2 and idx.nearest(3, 600) == 5  # the closer neighbour
    assert idx.step(2, 1) == 5 and idx.step(5, 1) == 5 and idx.step(5, -1) == 2


def test_lane_cells_draw_blocks_busy_fraction_and_path(session):
    idx = session.timeline
    cells = idx.lane(3, 0, 800, 8)  # 100 ns a column; m1 120-320, m2 680-780
    assert cells.event.tolist() == [-1, 2, 2, 2, -1, -1, 5, 5]
    assert np.allclose(cells.busy, [0, 0.8, 1, 0.2, 0, 0, 0.2, 0.8])
    assert cells.path.tolist() == [False] * 6 + [True, True]  # m2's gap and m2 are on the path
    # rank 1's cc track: the path waits there (collective_skew 420-570) before AR runs 570-670
    cc = idx.lane(5, 0, 800, 80)
    assert np.flatnonzero(cc.path).tolist() == list(range(42, 57))
    assert np.flatnonzero(cc.event >= 0).tolist() == list(range(57, 67))
    assert cc.labels == [(57, 67, 10)]  # AR is 10 columns wide: its name is written inside


def test_on_path_and_chronological_segments(session):
    idx = session.timeline
    assert idx.seg_event.tolist() == [6, 7, 7, 8, 9, 10, 4, 5, 5]
    assert idx.seg_category.tolist()[:3] == ["compute", "dma_wait", "dma_transfer"]
    assert np.flatnonzero(idx.on_path).tolist() == [4, 5, 6, 7, 8, 9, 10]


# ---- timeline state ------------------------------------------------------------------------
def test_lanes_are_the_tracks_of_the_ranks_involved(session):
    st = state(session)
    assert st.lanes == [5, 6, 7, 8, 9]
    assert st.selected == 10 and st.lane == 0  # nearest to t0 on the first lane: rank 1's AR
    st.toggle_all_ranks()
    assert st.lanes == list(range(10))
    st.toggle_all_ranks()
    assert st.lanes == [5, 6, 7, 8, 9]


def test_jump_along_the_critical_path_crosses_ranks(session):
    st = state(session, segment=0)
    assert (st.selected, st.segment) == (6, 0)
    seen = [(st.selected, st.segment)]
    for _ in range(6):
        st.jump_path(1)
        seen.append((st.selected, st.segment))
    # segments 1-2 (d1's wait and transfer) and 7-8 (m2's gap and body) are one step each:
    # every jump selects another event
    assert seen == [(6, 0), (7, 1), (8, 3), (9, 4), (10, 5), (4, 6), (5, 7)]
    assert st.ranks == (0, 1)  # jumping to rank 0's AR gave rank 0 its lanes
    assert st.lanes[st.lane] == 3  # m2 on rank 0's tensor track
    st.jump_path(1)
    assert (st.selected, st.segment) == (5, 7)  # the last event stays put
    st.jump_path(-1)
    st.jump_path(-1)
    assert (st.selected, st.segment) == (10, 5)
    st = state(session, segment=8)  # opened on m2's second segment: back is rank 0's AR
    st.jump_path(-1)
    assert (st.selected, st.segment) == (4, 6)


def test_jump_from_a_selected_event_uses_its_time(session):
    st = state(session, ranks=(0, 1), event=2)  # rank 0's m1 (120-320), not on the path
    assert st.segment == -1
    st.jump_path(1)
    assert (st.segment, st.selected) == (4, 9)  # the first segment starting after 120: v1
    st = state(session, ranks=(0, 1), event=2)
    st.jump_path(-1)
    assert (st.segment, st.selected) == (3, 8)  # the last starting before: rank 1's m1


def test_zoom_pan_and_moves(session):
    st = state(session, t0=0, t1=800, event=9)  # v1 on rank 1: 320-570, middle 445
    st.zoom(0.5)
    assert (st.t0, st.t1) == (222, 622)  # around the selected event, keeping its place
    st.pan(0.25)
    assert (st.t0, st.t1) == (322, 722)
    st.move_event(-1)  # v1 is alone on its track
    assert st.selected == 9
    st.move_lane(-1)  # rank 1's tensor track: at 445 m1 (ended 320) is closer than m2 (680)
    assert st.lanes[st.lane] == 8 and st.selected == 8
    st.fit_all()
    assert (st.t0, st.t1) == (0, 780)


# ---- targets -------------------------------------------------------------------------------
def test_finding_target_opens_on_the_stall(session):
    col201 = next(f for f in session.diagnosis.findings if f.code == "COL201")
    t = targets.for_finding(session, col201)
    assert t.stall == (320, 570)
    assert t.ranks == (0, 1)  # a collective finding shows every rank
    assert t.segment == 5  # the longest path segment in the window: the 150 ns skew
    st = TimelineState(session.timeline, session.track_ranks, t)
    assert st.selected == 10


def test_collective_target(session):
    t = targets.for_collective(session, 0, 0)
    assert t.ranks == (0, 1) and t.event == 4
    assert t.stall == (495, 570)  # median of the arrivals (420, 570) to the last arrival


# ---- event description ---------------------------------------------------------------------
def test_describe_event_on_the_path(session):
    rows = dict(event_info.describe(session, 4))
    assert rows["event"] == "AR"  # the name, not our row number
    assert rows["where"] == "collective  rank 0  track cc"
    assert rows["time"] == "start 570 ns  dur 100 ns  end 670 ns"
    assert rows["path"] == "segment 7 of 9: collective_transfer 100 ns"
    assert rows["path before"] == "collective_skew: AR (rank 1, cc)"
    assert rows["bound by"] == "the last arrival at this collective: AR (rank 1, cc), gap 0 ns"


def test_describe_event_off_the_path(session):
    rows = dict(event_info.describe(session, 2))
    assert rows["path"] == "not on the critical path"
    assert rows["bound by"] == "d0 (rank 0, q0) via a dependency the trace records, gap 0 ns"


# ---- findings query ------------------------------------------------------------------------
def test_findings_filters_search_and_sort(session):
    fs = session.diagnosis.findings
    codes = lambda q: [f.code for f in q.apply(fs)]  # noqa: E731
    assert codes(FindingsQuery()) == ["COL201", "COL202", "CMP301", "DMA101", "CMP301"]
    assert codes(FindingsQuery(family="collective")) == ["COL201", "COL202"]
    assert codes(FindingsQuery(rank=0)) == ["COL202", "CMP301"]
    assert codes(FindingsQuery(min_severity=Severity.ERROR)) == [
        f.code for f in fs if f.severity == Severity.ERROR
    ]
    assert codes(FindingsQuery(text="straggler")) == ["COL201"]
    assert codes(FindingsQuery(text="OVERLAPPED transfer")) == ["COL202"]  # every word, any case
    by_code = FindingsQuery().sorted_by("code")
    assert (by_code.sort, by_code.descending) == ("code", False)
    assert codes(by_code) == ["CMP301", "CMP301", "COL201", "COL202", "DMA101"]
    assert by_code.sorted_by("code").descending is True
    assert FindingsQuery().next_sort().sort == "code"  # after the last column, the first


# ---- lateness grid -------------------------------------------------------------------------
def test_lateness_grid_makes_the_straggler_the_hot_column(session):
    g = lateness_grid(session.lateness)
    assert g.keys.tolist() == [0] and g.ranks.tolist() == [0, 1]
    assert g.late.tolist() == [[-150.0, 150.0]]
    assert g.last.tolist() == [[False, True]]
    assert g.level.tolist() == [[0, 4]]


# ---- loading -------------------------------------------------------------------------------
def test_loading_announces_every_stage_in_order():
    planned = planned_stages([STRAGGLER], align=True)
    assert planned == [
        f"reading {STRAGGLER} (neuron-parquet)",
        "aligning clocks",
        "building the dependency graph",
        "walking the critical path",
        "running the rules",
        INDEX_STAGE,
    ]
    seen: list[str] = []
    got = open_session([STRAGGLER], Config(), True, seen.append)
    assert seen == planned
    assert [f.code for f in got.diagnosis.findings][:1] == ["COL201"]


def test_the_tui_session_applies_per_trace_ignores_like_report():
    """The TUI diagnoses through the engine's one diagnose: a config that ignores every code on
    every rank leaves the TUI with no findings, as ``tracediag report`` and the API have."""
    chrome = ROOT / "sample_traces" / "chrome_straggler" / "chrome"
    plain = open_session([chrome], Config(), True, lambda stage: None)
    assert len(plain.diagnosis.findings) >= 1
    ignoring = Config(per_trace_ignores={"rank:*": ["ALL"]})
    got = open_session([chrome], ignoring, True, lambda stage: None)
    assert got.diagnosis.findings == []
    assert got.diagnosis.ignored_findings == len(plain.diagnosis.findings)
    assert diagnose(plain.trace, ignoring).findings == []


def test_load_errors_are_the_cli_line(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(TraceInputError) as exc:
        planned_stages([missing], align=True)
    assert error_line(exc.value) == f"tracediag: error: {missing}: no such file or directory"
    assert error_line(ValueError("bad\nthing")) == (
        "tracediag: error: internal error: ValueError: bad thing"
    )
