"""Windowed replay (only the part of the anchor loop a change can move) against the plain
reference, and the compiled loop's fallbacks when numba or its disk cache is unusable."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from tests.test_replay import _random_trace, _reference
from tracediag.graph import replay as replay_module
from tracediag.graph.changes import WhatIf
from tracediag.graph.dependencies import build_graph
from tracediag.graph.replay import replay

REPO = Path(__file__).resolve().parents[1]


def _check(graph, change):
    dur, gap = graph.dur.copy(), graph.gap.copy()
    if change.dur_nodes is not None:
        dur[change.dur_nodes] = np.maximum(change.dur_values, 0)
    if change.gap_nodes is not None:
        gap[change.gap_nodes] = change.gap_values
    want_start, want_end = _reference(graph, dur, gap)
    got = replay(graph, change)
    assert np.array_equal(got.start, want_start) and np.array_equal(got.end, want_end)
    return got


@pytest.mark.parametrize("compiled", [False, True], ids=["interpreted", "numba"])
@pytest.mark.parametrize("seed", range(6))
def test_every_kind_of_change_replays_as_the_reference(seed, compiled, monkeypatch):
    monkeypatch.setattr(replay_module, "_COMPILE_ABOVE_EDGES", -1 if compiled else 1 << 62)
    graph = build_graph(_random_trace(seed))
    npred = np.diff(graph.pred_ptr)
    rng = np.random.default_rng(7 + seed)
    chain = rng.choice(np.flatnonzero(npred == 1), 3, replace=False)
    joins = rng.choice(np.flatnonzero(npred >= 2), 3, replace=False)
    roots = np.flatnonzero(npred == 0)
    # One replay after another on the same graph: the plan and unchanged replay are kept.
    for change in (
        WhatIf.gaps(chain[:1], [0]),  # one chain member: its chain's offsets move
        WhatIf.durations(chain, [1, 500, 3]),
        WhatIf.durations(joins[:1], [0]),  # a join's end moves, its chain with it
        WhatIf.gaps(joins, [40, 0, 7]),
        WhatIf.durations(roots[:2], [0, 900]),  # a root keeps its start, not its end
        WhatIf.durations(roots[:1], graph.dur[roots[:1]]),  # same value: nothing moves
        WhatIf.gaps(chain, graph.gap[chain]) + WhatIf.durations(chain, graph.dur[chain]),
        WhatIf.durations(np.r_[chain, chain], [5, 6, 7, 0, 0, 0]),  # a node twice: last wins
        WhatIf.durations(np.arange(len(graph)), np.zeros(len(graph), np.int64)),
    ):
        _check(graph, change)
    assert graph.replay_plan.windowed and graph.replay_plan.base_end_a is not None


def test_a_late_change_replays_only_the_loop_from_it(monkeypatch):
    monkeypatch.setattr(replay_module, "_COMPILE_ABOVE_EDGES", 1 << 62)
    graph = build_graph(_random_trace(3))
    replay(graph)
    plan = graph.replay_plan
    windows = []
    loop = replay_module._listed_anchor_ends  # (the interpreted loop)

    def spy(*args):
        windows.append(args[-2:])  # (first loop index, initial horizon)
        return loop(*args)

    monkeypatch.setattr(replay_module, "_listed_anchor_ends", spy)
    last = plan.loop[-1]
    got = _check(graph, WhatIf.durations([last], [graph.dur[last] + 1000]))
    n = len(plan.loop)
    assert windows == [(n - 1, n - 1)]  # the last join alone, not the n before it
    assert got.end[last] == graph.end[last] + 1000
    # A change nothing reads (the very last node of a chain with no successor) runs no loop.
    windows.clear()
    readers = np.zeros(len(graph), bool)
    readers[graph.pred_src] = True
    sink = np.flatnonzero(~readers & (np.diff(graph.pred_ptr) == 1))[0]
    _check(graph, WhatIf.gaps([sink], [graph.gap[sink] + 25]))
    assert windows == []


def test_a_plan_that_cannot_window_replays_fully(monkeypatch):
    # Edges left in a cycle make the loop read ends not yet replayed: every replay is a full
    # pass then, which is what the plan's flag says; forced here on an ordinary graph.
    monkeypatch.setattr(replay_module, "_COMPILE_ABOVE_EDGES", 1 << 62)
    graph = build_graph(_random_trace(5))
    replay_module._plan(graph).windowed = False
    nodes = np.arange(0, len(graph), 7)
    _check(graph, WhatIf.durations(nodes, graph.dur[nodes] // 2))
    assert graph.replay_plan.base_end_a is None


_CHILD = textwrap.dedent(
    """
    import sys
    {setup}
    import numpy as np
    from tests.test_replay import _random_trace
    from tracediag.graph import replay as R
    from tracediag.graph.changes import WhatIf
    from tracediag.graph.dependencies import build_graph

    R._COMPILE_ABOVE_EDGES = -1  # the compiled path, on a small graph
    g = build_graph(_random_trace(2))
    nodes = np.arange(0, len(g), 5)
    change = WhatIf.durations(nodes, g.dur[nodes] // 3)
    got = R.replay(g, change)
    R._COMPILE_ABOVE_EDGES = 1 << 62
    g.replay_plan = None
    want = R.replay(g, change)
    assert np.array_equal(got.end, want.end) and np.array_equal(got.start, want.start)
    print("kernel", "compiled" if R._anchor_kernel() is not None else "none", got.length_ns)
    """
)


def _child(setup: str, env: dict | None = None) -> subprocess.CompletedProcess:
    code = _CHILD.format(setup=textwrap.dedent(setup))
    return subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )


def test_without_numba_the_loop_runs_interpreted():
    # numba missing (or failing on import): the same ends, no traceback, nothing printed.
    out = _child("sys.modules['numba'] = None")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("kernel none ") and out.stderr == ""


def test_with_no_writable_cache_the_loop_compiles_in_memory(tmp_path):
    pytest.importorskip("numba")
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(ro), "NUMBA_CACHE_DIR": str(ro / "numba")}
    # A read-only directory stops root from nothing, so every cache location numba tries is
    # also refused the way a read-only file system refuses it.
    deny = """
    import numba.core.caching as caching
    def _refuse(self):
        raise PermissionError(13, "Read-only file system", self.get_cache_path())
    caching._CacheLocator.ensure_cache_path = _refuse
    """
    out = _child(deny, env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("kernel compiled ") and "Traceback" not in out.stderr
    assert not (ro / "numba").exists()
    # Without the guard numba refuses the cached kernel outright: the case is a real one.
    probe = textwrap.dedent(deny) + "from tracediag.graph.replay import _anchor_ends\n"
    probe += "import numba\nnumba.njit(cache=True)(_anchor_ends)\n"
    refused = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(probe)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert refused.returncode != 0 and "cannot cache function" in refused.stderr
