"""Stragglers measured on arrivals (COL201) against the clean-room Kineto writer's truth.

The writer (``tests/cleanroom/kineto_writer.py``, written without reading this tool) simulates a
job with one injected late rank and writes per rank what a PyTorch profiler writes, with random
clock offsets. Its truth, computed from the simulation: each collective's ``last_rank`` and
``lateness_ns`` (last arrival minus the median of the others', in true time), and
``straggler_saving_ns.per_step``: how much shorter each step is when the same simulation runs
with the slowdown removed. COL201 must name the truth's rank, with its lateness and a saving
within 15% of the truth's saving over the steps of the analysed window; HST401 must not blame
the hosts for the time a late rank spent (only the host that really sleeps, in
``straggler_host``).
"""

from __future__ import annotations

from collections import Counter

import pytest

from tests.cleanroom.kineto_writer import write_scenario
from tests.trace_factory import RankSpec, build
from tracediag.engine.config import Config
from tracediag.engine.diagnose import diagnose
from tracediag.loading.loader import load
from tracediag.model.findings import Severity

PRESETS = ("straggler_compute", "straggler_host", "all_to_all_dlrm_like")
SAVING_TOLERANCE = 0.15


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    """Per preset: (diagnosis, truth), each written, read and diagnosed once."""
    out = {}
    for name in PRESETS:
        folder = tmp_path_factory.mktemp(name)
        truth = write_scenario(name, folder)
        out[name] = (diagnose(load([folder], cache=False)), truth)
    return out


def _col201(d, at_least=Severity.WARNING):
    return [f for f in d.findings if f.code == "COL201" and f.severity >= at_least]


def _truth_late(truth) -> tuple[int, list[int]]:
    """The rank the truth has last most often, and its lateness at each of those instances."""
    counts = Counter(c["last_rank"] for c in truth["collectives"] if c["lateness_ns"] > 0)
    rank = counts.most_common(1)[0][0]
    late = [c["lateness_ns"] for c in truth["collectives"] if c["last_rank"] == rank]
    return rank, late


def _window_saving(d, truth) -> int:
    """The truth's saving over the analysed window: its per-step savings, summed over the
    steps the window holds (every profiled step: asserted). The typical saving times the steps
    would miss that the DLRM-like job's warm-up step saves nothing (its lateness is hidden by
    the slower warm-up), so the per-step values are summed."""
    steps = max(d.analysis.steps.values())
    per_step = truth["straggler_saving_ns"]["per_step"]
    assert steps == len(per_step) == len(truth["steps"])
    return sum(per_step[:steps])


@pytest.mark.parametrize("preset", PRESETS)
def test_col201_names_the_truths_late_rank_with_its_lateness(jobs, preset):
    d, truth = jobs[preset]
    rank, late = _truth_late(truth)
    assert truth["straggler"]["ranks"] == [rank]
    (f,) = _col201(d)  # one rank at warning or above: the truth's
    assert f.ranks == (rank,)
    assert f.evidence["late_instances"] == len(late)
    # Measured on aligned arrivals, against the truth's true-clock lateness.
    assert f.evidence["mean_late_ns"] == pytest.approx(sum(late) / len(late), rel=0.01)
    assert f.evidence["max_late_ns"] == pytest.approx(max(late), rel=0.01)


@pytest.mark.parametrize("preset", PRESETS)
def test_col201_saving_is_the_truths_within_15_percent(jobs, preset):
    d, truth = jobs[preset]
    (f,) = _col201(d)
    want = _window_saving(d, truth)
    assert abs(f.saving_ns - want) <= SAVING_TOLERANCE * want, (f.saving_ns, want)


def _merged_wait(intervals: list[tuple[int, int]]) -> int:
    """Length of the union of [start, end) intervals."""
    total, reach = 0, None
    for a, b in sorted(intervals):
        if reach is None or b > reach:
            total += b - (a if reach is None else max(a, reach))
            reach = b
    return total


@pytest.mark.parametrize("preset", PRESETS)
def test_col201_impact_is_the_truths_wait_for_the_late_rank(jobs, preset):
    # Truth: per collective the simulation's true arrivals and each rank's wait for the last.
    # Per waiting rank, its waits at the late rank's collectives merged in time; the median rank.
    d, truth = jobs[preset]
    rank, _ = _truth_late(truth)
    waits: dict[str, list[tuple[int, int]]] = {}
    for c in truth["collectives"]:
        if c["last_rank"] != rank or c["lateness_ns"] <= 0:
            continue
        for r, t in c["arrival_true_ns"].items():
            if int(r) != rank:
                waits.setdefault(r, []).append((t, t + c["wait_ns"][r]))
    merged = sorted(_merged_wait(v) for v in waits.values())
    want = (merged[(len(merged) - 1) // 2] + merged[len(merged) // 2]) / 2
    (f,) = _col201(d)
    assert f.impact_ns == pytest.approx(want, rel=0.02)


def test_col201_prices_the_straggler_beyond_the_waits_on_todays_path(jobs):
    # The DLRM-like job's path crosses few of the waits for rank 5 (the others' own all_to_all
    # work is longer); the impact, measured on arrivals, holds all of them, and the replay at
    # the median pace still finds the whole saving.
    d, truth = jobs["all_to_all_dlrm_like"]
    (f,) = _col201(d)
    assert f.evidence["path_wait_ns"] < 0.25 * f.saving_ns < f.impact_ns
    assert f.saving_ns >= (1 - SAVING_TOLERANCE) * _window_saving(d, truth)


def _off_path_straggler():
    """Three ranks; rank 1 arrives 100 ns late at the AllReduce, but the critical path is its
    own 1000 ns of vector work beside it (500 ns on the others), not the others' wait."""
    specs = [RankSpec(r) for r in range(3)]
    arrival = {0: 100, 1: 200, 2: 100}
    vector = {0: 500, 1: 1000, 2: 500}
    for r, spec in enumerate(specs):
        work = spec.add("MATMUL", "tensor", "compute", 0, arrival[r])
        coll = spec.add("AllReduce", "cc", "collective", 200, 210)
        spec.collective(coll, "ar0", arrival[r])
        spec.dep(work, coll)
        spec.add("ADD", "vector", "compute", 0, vector[r])
    return build(*specs)


def test_col201_reports_a_straggler_whose_wait_is_off_todays_path():
    d = diagnose(_off_path_straggler(), Config(select=["COL201"]))
    assert [seg for seg in d.analysis.path.segments["category"]] == ["compute"]
    (f,) = d.findings
    assert f.ranks == (1,) and f.evidence["mean_late_ns"] == 100
    # Ranks 0 and 2 wait 100 ns for it, off today's path; at the median pace rank 1's vector
    # work ends at 500 ns: its 500 ns excess on the path is the impact, as large as the saving.
    ev = f.evidence
    assert (ev["wait_ns"], ev["path_wait_ns"], f.impact_ns, f.saving_ns) == (100, 0, 500, 500)
    assert "The impact is the late rank's excess on today's critical path, 500 ns" in f.message
    assert "does not run through" in f.message


def _hst401(d):
    return [f for f in d.findings if f.code == "HST401"]


@pytest.mark.parametrize("preset", ["straggler_compute", "all_to_all_dlrm_like"])
def test_hst401_does_not_blame_the_hosts_for_a_late_rank(jobs, preset):
    # The late rank computes longer (no host delay in the truth): what the others lose waiting
    # for it is COL201's, not a host stall.
    d, truth = jobs[preset]
    assert truth["host_delays"] == []
    host = _hst401(d)
    assert not [f for f in host if f.severity >= Severity.WARNING]
    assert sum(f.saving_ns for f in host) <= 0.1 * _window_saving(d, truth)


def test_hst401_names_only_the_host_that_sleeps(jobs):
    # Rank 1 sleeps 5 ms before each backward: HST401 names rank 1 alone (the other ranks'
    # ordinary launch gaps overlap the sleep in time but hold nothing up), once per sleep.
    d, truth = jobs["straggler_host"]
    delays = truth["host_delays"]
    stalls = [f for f in _hst401(d) if f.saving_ns > 0]
    assert len(stalls) == len(delays) == 3
    for f in stalls:
        assert f.ranks == (1,) and f.severity >= Severity.WARNING
        (delay,) = [
            x for x in delays if f.start_ns < x["end_true_ns"] and x["start_true_ns"] < f.end_ns
        ]
        assert abs(f.saving_ns - delay["dur_ns"]) <= SAVING_TOLERANCE * delay["dur_ns"]
