"""Replay against a plain reference implementation on random graphs and what-ifs."""

from __future__ import annotations

import numpy as np
import pytest

from tests.trace_factory import RankSpec, build
from tracediag.graph import replay as replay_module
from tracediag.graph.changes import WhatIf
from tracediag.graph.dependencies import build_graph
from tracediag.graph.replay import replay


def _reference(graph, dur, gap):
    """start[v] = max(end of preds) + gap[v], roots fixed: one node at a time."""
    start = graph.start.copy()
    end = start + dur
    for v in graph.order:
        lo, hi = graph.pred_ptr[v], graph.pred_ptr[v + 1]
        if hi > lo:
            start[v] = end[graph.pred_src[lo:hi]].max() + gap[v]
            end[v] = start[v] + dur[v]
    return start, end


def _random_trace(seed: int):
    rng = np.random.default_rng(seed)
    specs = [RankSpec(r) for r in range(3)]
    for spec in specs:
        t = {"tensor": 0, "vector": 0, "q0": 0}
        ids = []
        for _ in range(60):
            track = rng.choice(list(t))
            kind = "dma" if track == "q0" else "compute"
            start = t[track] + int(rng.integers(0, 50))
            end = start + int(rng.integers(1, 100))
            t[track] = end
            ids.append((spec.add("x", str(track), kind, start, end), end))
            # An explicit edge from an earlier event that ended before this one starts.
            done = [i for i, e in ids[:-1] if e <= start]
            if done and rng.random() < 0.5:
                spec.dep(int(rng.choice(done)), ids[-1][0])
    return build(*specs)


@pytest.mark.parametrize("compiled", [False, True], ids=["interpreted", "numba"])
@pytest.mark.parametrize("seed", range(8))
def test_replay_matches_the_reference(seed, compiled, monkeypatch):
    # Small graphs run the anchor loop interpreted, big ones compiled: force each path here.
    monkeypatch.setattr(replay_module, "_COMPILE_ABOVE_EDGES", -1 if compiled else 1 << 62)
    graph = build_graph(_random_trace(seed))
    r = replay(graph)
    assert np.array_equal(r.start, graph.start) and np.array_equal(r.end, graph.end)
    rng = np.random.default_rng(100 + seed)
    nodes = rng.choice(len(graph), size=20, replace=False)
    change = WhatIf.durations(nodes[:10], rng.integers(0, 200, 10)) + WhatIf.gaps(
        nodes[10:], rng.integers(-5, 50, 10)
    )
    dur, gap = graph.dur.copy(), graph.gap.copy()
    dur[nodes[:10]] = change.dur_values
    gap[nodes[10:]] = change.gap_values
    want_start, want_end = _reference(graph, dur, gap)
    got = replay(graph, change)
    assert np.array_equal(got.start, want_start) and np.array_equal(got.end, want_end)
