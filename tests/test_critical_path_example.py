"""shared/design/critical-path-example.md, worked through by the code."""

from __future__ import annotations

import numpy as np

from tests.worked_example import example_trace
from tracediag.graph.changes import WhatIf
from tracediag.graph.critical_path import walk
from tracediag.graph.dependencies import build_graph
from tracediag.graph.replay import replay
from tracediag.loading.clock_alignment import align_clocks
from tracediag.model import schema as S


def _path(trace):
    graph = build_graph(trace)
    return graph, walk(graph, trace)


def test_segments_match_the_hand_walk():
    trace = example_trace()
    _, cp = _path(trace)
    seg = cp.segments
    got = [
        (str(c), int(a), int(b))
        for c, a, b in zip(seg["category"], seg["start_ns"], seg["end_ns"], strict=True)
    ]
    assert got == [
        ("compute", 680, 780),
        ("gap", 670, 680),
        ("collective_transfer", 570, 670),
        ("collective_skew", 420, 570),
        ("compute", 320, 420),
        ("compute", 120, 320),
        ("dma_transfer", 20, 120),
        ("dma_wait", 5, 20),
        ("compute", 0, 5),
    ]
    # m2 ties on both ranks: the rule is "lowest rank"; the rest of the path is on rank 1.
    # The skew segment belongs to the late rank.
    assert seg["rank"].tolist() == [0, 0, 0, 1, 1, 1, 1, 1, 1]


def test_by_category_sums_to_step_time():
    trace = example_trace()
    _, cp = _path(trace)
    assert cp.length_ns == 780
    cats = cp.by_category()
    assert cats == {
        "compute": 405,
        "dma_transfer": 100,
        "dma_wait": 15,
        "collective_transfer": 100,
        "collective_skew": 150,
        "host": 0,
        "gap": 10,
    }
    assert sum(cats.values()) == cp.length_ns
    assert cp.compute_by_engine() == {"tensor": 300, "vector": 100, "sync": 5}


def test_replay_of_unchanged_graph_is_exact():
    trace = example_trace()
    graph = build_graph(trace)
    r = replay(graph)
    assert np.array_equal(r.start, graph.start)
    assert np.array_equal(r.end, graph.end)
    assert r.length_ns == 780


def test_straggler_what_if_saves_its_skew():
    trace = example_trace()
    graph = build_graph(trace)
    # Rank 1 arrives with the median of the others (420) instead of 570.
    arrival_r1 = np.flatnonzero((graph.role == 1) & (graph.rank == 1))
    change = WhatIf.gaps(arrival_r1, graph.gap[arrival_r1] - 150)
    r = replay(graph, change)
    assert r.length_ns == 630
    ev = trace.events
    m2 = ev.index[(ev[S.NAME] == "m2") & (ev[S.RANK] == 0)][0]
    node = graph.event_node[m2]
    assert (r.start[node], r.end[node]) == (530, 630)


def test_alignment_recovers_a_shifted_clock():
    trace = example_trace(offset_rank1=1_000_000)
    align_clocks(trace)
    assert trace.meta[1].clock_offset_ns == -1_000_000
    assert trace.meta[0].clock_offset_ns == 0
    _, cp = _path(trace)
    assert cp.length_ns == 780
    assert cp.by_category()["collective_skew"] == 150
