"""A replay's length measured by the compiled one-pass kernel equals the array expression's."""

from __future__ import annotations

import numpy as np
import pytest

from tests.test_replay import _random_trace, _reference
from tracediag.graph import replay as replay_module
from tracediag.graph.changes import WhatIf
from tracediag.graph.dependencies import build_graph
from tracediag.graph.replay import _window_span, replay


def _want_length(graph, change):
    dur, gap = graph.dur.copy(), graph.gap.copy()
    if change is not None and change.dur_nodes is not None:
        dur[change.dur_nodes] = np.maximum(change.dur_values, 0)
    if change is not None and change.gap_nodes is not None:
        gap[change.gap_nodes] = change.gap_values
    start, end = _reference(graph, dur, gap)
    w = graph.window
    return int(end[w].max() - start[w].min())


@pytest.mark.parametrize("compiled", [False, True], ids=["arrays", "kernel"])
@pytest.mark.parametrize("seed", range(4))
def test_length_of_every_replay_matches_the_reference(seed, compiled, monkeypatch):
    if compiled:
        pytest.importorskip("numba")
    monkeypatch.setattr(replay_module, "_COMPILE_ABOVE_NODES", -1 if compiled else 1 << 62)
    graph = build_graph(_random_trace(seed))
    rng = np.random.default_rng(seed)
    # A window that leaves nodes out, first and last ones included, so the mask matters.
    graph.window = rng.random(len(graph)) < 0.6
    graph.window[[0, -1]] = False
    npred = np.diff(graph.pred_ptr)
    chain = rng.choice(np.flatnonzero(npred == 1), 3, replace=False)
    roots = np.flatnonzero(npred == 0)
    lengths = []
    for change in (
        None,
        WhatIf.durations(chain, [0, 900, 3]),
        WhatIf.gaps(chain[:1], [0]),
        WhatIf.durations(roots[:2], [0, 5000]),  # a root's end moves past everything
        WhatIf.durations(np.arange(len(graph)), np.zeros(len(graph), np.int64)),
    ):
        got = replay(graph, change).length_ns
        assert got == _want_length(graph, change)
        lengths.append(got)
    assert len(set(lengths)) > 2  # the changes do move the window's ends


def test_the_span_kernel_reports_an_empty_window():
    one = np.array([7], dtype=np.int64)
    found, _, _ = _window_span(one, np.zeros(1, np.int64), one, one, np.zeros(1, bool))
    assert not found
    found, last, first = _window_span(
        np.array([10, 20]),
        np.array([0, 1, 1]),
        np.array([0, 5, -3]),
        np.array([4, 1, 30]),
        np.array([True, False, True]),
    )
    assert found and (last, first) == (17, -13)
