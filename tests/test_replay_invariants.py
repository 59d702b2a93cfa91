"""Replay invariants on every real trace we have and on generated jobs of every scenario.

Inputs: the real public traces in ``../shared/traces`` (Kineto, Perfetto, XPlane; skipped when
the folder is absent), the real gloo DDP traces (``tests/data/real_gloo``) and the 13 generator
scenarios at a small scale in three formats. On each, diagnosed once:

1. Replaying the unchanged graph gives back every node's observed start and end, exactly.
2. No what-if any rule prices (every ``Analysis.what_if`` call, recorded) moves the step's
   start earlier than observed. (A rank's own first start may move up: a pipeline stage's
   first work starts earlier when the stage before it sends sooner.)
3. A finding's saving is the replay of its own change (``Analysis.changes``), and no what-if
   saves more than its change removes: the sum of the durations and gaps it shortens, bounded
   by the critical path. (Replay cannot do better: every node's end moves up by at most the
   time removed from the nodes before it.)
4. Two findings report the same saving only when the replay of both changes together saves
   less than the sum (one bottleneck behind both), and then each names the other
   (``evidence["shared_with"]``, tracediag/engine/shared_savings.py).

All inputs together take about 30 s on 2 cores (the largest real trace, 3 MB gzipped, 2 s).
"""

from __future__ import annotations

from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from tests.chrome_helpers import TRACES
from tracediag.analysis.context import Analysis, change_key
from tracediag.engine.diagnose import diagnose
from tracediag.engine.shared_savings import label
from tracediag.generator import SCENARIOS, generate
from tracediag.graph.changes import WhatIf, joint
from tracediag.graph.dependencies import SYNC_DONE
from tracediag.graph.replay import replay
from tracediag.loading.loader import load
from tracediag.whatif.saving_limit import most_saved_ns

GLOO = Path(__file__).parent / "data" / "real_gloo"
REAL_PATTERNS = ("kineto_*.json.gz", "*.perfetto-trace", "*.xplane.pb")
#: Formats of the generated jobs: Neuron Parquet, the GPU-flavoured Chrome JSON, Perfetto.
GENERATED_FORMATS = ("parquet", "chrome", "perfetto")
SCALE = 0.5  # 2 layers: the smallest workload the generator writes
SLACK_NS = 1  # rounding of savings from integer replays


def _real_inputs() -> list:
    found = sorted(p.name for pattern in REAL_PATTERNS for p in TRACES.glob(pattern))
    if not found:
        return [pytest.param("real:absent", marks=pytest.mark.skip(f"{TRACES} not available"))]
    return [f"real:{name}" for name in found]


def _gloo_inputs() -> list:
    found = sorted(p.name for p in GLOO.iterdir() if (p / "truth.json").is_file())
    return [f"gloo:{name}" for name in found]


INPUTS = [
    *_real_inputs(),
    *_gloo_inputs(),
    *(f"gen:{s}:{fmt}" for s in SCENARIOS for fmt in GENERATED_FORMATS),
]


@dataclass
class Checked:
    analysis: Analysis
    findings: list
    calls: list[tuple[WhatIf, int]]  # every what-if priced while diagnosing, with its saving


@contextmanager
def _recorded_what_ifs(calls: list):
    """Record every ``Analysis.what_if`` call (change, saving) made inside the block."""
    priced = Analysis.what_if

    def recording(self, change):
        saving = priced(self, change)
        calls.append((change, saving))
        return saving

    Analysis.what_if = recording
    try:
        yield calls
    finally:
        Analysis.what_if = priced


_CACHE: dict[str, Checked | None] = {}


@pytest.fixture
def checked(request, tmp_path_factory) -> Checked:
    """The input of the test's id, read and diagnosed once for every test that checks it."""
    key = request.param
    if key not in _CACHE:
        _CACHE[key] = _diagnosed(key, tmp_path_factory)
    if _CACHE[key] is None:
        pytest.skip(f"{key}: the generator writes no such format for this scenario")
    return _CACHE[key]


def _diagnosed(key: str, tmp_path_factory) -> Checked | None:
    kind, _, rest = key.partition(":")
    if kind == "real":
        path = TRACES / rest
    elif kind == "gloo":
        path = GLOO / rest
    else:
        scenario, fmt = rest.split(":")
        path = _generated(scenario, tmp_path_factory) / fmt
        if not path.exists():
            return None
    calls: list = []
    with _recorded_what_ifs(calls):
        d = diagnose(load([path], cache=False))
    return Checked(d.analysis, d.findings, calls)


_JOBS: dict[str, Path] = {}


def _generated(scenario: str, tmp_path_factory) -> Path:
    if scenario not in _JOBS:
        out = tmp_path_factory.mktemp(scenario)
        generate(scenario, out, formats=GENERATED_FORMATS, scale=SCALE)
        _JOBS[scenario] = out
    return _JOBS[scenario]


def _released_gaps(graph, nodes) -> np.ndarray:
    """Gaps with the completion ``nodes`` waiting only for their call's begin (the
    ``sync_completion`` edge), no longer for the device work: their start less that begin's
    end, read off the predecessor lists here rather than from ``changes.released_graph``."""
    gap = graph.gap.copy()
    for v in np.unique(nodes).tolist():
        lo, hi = graph.pred_ptr[v], graph.pred_ptr[v + 1]
        begin = graph.pred_src[lo:hi][graph.pred_code[lo:hi] == SYNC_DONE]
        gap[v] = graph.start[v] - graph.end[begin].max()
    return gap


def _applied(graph, change: WhatIf) -> tuple[np.ndarray, np.ndarray]:
    """Durations and gaps with ``change`` made, as the replay makes it."""
    dur, gap = graph.dur.copy(), graph.gap.copy()
    if change.release_nodes is not None and len(change.release_nodes):
        gap = _released_gaps(graph, change.release_nodes)
    if change.dur_nodes is not None and len(change.dur_nodes):
        dur[change.dur_nodes] = np.maximum(change.dur_values, 0)
    if change.gap_nodes is not None and len(change.gap_nodes):
        gap[change.gap_nodes] = change.gap_values
    return dur, gap


def removable_ns(graph, change: WhatIf) -> int:
    """What ``change`` removes at most: the time it takes off durations and gaps."""
    dur, gap = _applied(graph, change)
    base = graph.gap
    if change.release_nodes is not None and len(change.release_nodes):
        base = _released_gaps(graph, change.release_nodes)  # what the call blocked
    return int(np.maximum(graph.dur - dur, 0).sum() + np.maximum(base - gap, 0).sum())


pytestmark = pytest.mark.parametrize("checked", INPUTS, indirect=True)


def test_the_unchanged_replay_reproduces_every_observed_time(checked):
    g = checked.analysis.graph
    r = replay(g)
    assert np.array_equal(r.start, g.start) and np.array_equal(r.end, g.end)
    assert r.length_ns == checked.analysis.length_ns


def test_no_what_if_moves_the_step_start_earlier(checked):
    g = checked.analysis.graph
    if not len(g):
        return
    for change, _ in checked.calls:
        assert replay(g, change).start[g.window].min() >= g.start[g.window].min()


def test_each_saving_is_its_own_change_and_within_what_it_removes(checked):
    a = checked.analysis
    length = a.length_ns
    for change, saving in checked.calls:
        assert 0 <= saving <= min(removable_ns(a.graph, change), length) + SLACK_NS
        # The bound rules use to skip replays that cannot reach their threshold is this one.
        bound = most_saved_ns(a.graph, change)
        assert bound is None or bound >= removable_ns(a.graph, change)
    for f in checked.findings:
        if f.saving_ns <= 0:
            continue
        change = a.changes.get(change_key(f))
        assert change is not None, f"{f.code} {f.ranks}: no change recorded for its saving"
        assert max(0, length - replay(a.graph, change).length_ns) == f.saving_ns, f.code
        assert f.saving_ns <= min(removable_ns(a.graph, change), length) + SLACK_NS


def test_equal_savings_name_the_bottleneck_they_share(checked):
    a = checked.analysis
    by_saving = defaultdict(list)
    for f in checked.findings:
        if f.saving_ns > 0:
            by_saving[f.saving_ns].append(f)
    for saving, group in by_saving.items():
        for i, f in enumerate(group):
            for other in group[i + 1 :]:
                both = joint([a.changes[change_key(f)], a.changes[change_key(other)]])
                together = max(0, a.length_ns - replay(a.graph, both).length_ns)
                # Equal savings either share a bottleneck (together less than their sum) and name
                # each other, or are equal by chance (times in whole µs: two 9 µs stalls on
                # event_sync) and add up, naming nothing.
                shared = together < 2 * saving
                assert (label(other) in f.evidence.get("shared_with", [])) == shared, f.code
                assert (label(f) in other.evidence.get("shared_with", [])) == shared, other.code
    # And only those: a finding names others of its own saving.
    labels = {label(f): f.saving_ns for f in checked.findings}
    for f in checked.findings:
        for name in f.evidence.get("shared_with", []):
            assert labels.get(name) == f.saving_ns, (f.code, name)
