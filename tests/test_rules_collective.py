"""COL201 and COL202 on the worked example and a four-rank straggler step."""

from __future__ import annotations

import pytest

from tests.trace_factory import RankSpec, build
from tests.worked_example import example_trace, rank_part
from tracediag.engine.config import Config
from tracediag.engine.diagnose import diagnose
from tracediag.model.assembly import assemble
from tracediag.model.findings import Severity
from tracediag.rules.col201_collective_straggler import _binomial_tail

WORK, SLOW, AR = 10_000, 13_000, 1_000


def _straggler_job(slow_rank: int | None = 2, n_ranks: int = 4, n_steps: int = 3):
    late = [SLOW - WORK if r == slow_rank else 0 for r in range(n_ranks)]
    return _job_with_arrivals([late] * n_steps)


def test_col201_names_the_straggler_and_saves_its_skew():
    d = diagnose(_straggler_job(), Config(select=["COL201"]))
    assert len(d.findings) == 1
    f = d.findings[0]
    assert f.ranks == (2,)
    assert f.impact_ns == 3 * (SLOW - WORK)
    assert f.saving_ns == 3 * (SLOW - WORK)
    assert f.evidence["late_instances"] == 3 and f.evidence["mean_late_ns"] == SLOW - WORK
    assert f.evidence["excess_over_peers_by_engine_ns"] == {"vector": 3 * (SLOW - WORK)}
    assert f.evidence["slowest_layers"] == ["layer_0", "layer_1", "layer_2"]
    # The cause's engine and layers, from its first slow work to its last late arrival.
    assert (f.engine, f.layer) == ("vector", "layer_0, layer_1, layer_2")
    assert (f.start_ns, f.end_ns) == (0, 2 * (SLOW + AR) + SLOW)
    assert f.severity == Severity.ERROR  # 9 us of a 42 us step


def test_col201_clean_job_is_quiet():
    d = diagnose(_straggler_job(slow_rank=None), Config(select=["COL201"]))
    assert d.findings == []


def test_worked_example_skew_and_exposed_transfer():
    d = diagnose(example_trace(), Config(select=["COL"]))
    by_code = {f.code: f for f in d.findings}
    skew = by_code["COL201"]
    assert (skew.ranks, skew.impact_ns, skew.saving_ns) == ((1,), 150, 150)
    assert (skew.start_ns, skew.end_ns, skew.engine) == (320, 570, "vector")
    exposed = by_code["COL202"]
    # both ranks transfer 570-670 ns with no compute beside it: the job's, not rank 0's
    assert (exposed.ranks, exposed.impact_ns, exposed.saving_ns) == ((0, 1), 100, 100)
    assert exposed.message.startswith("On ranks 0-1 (every participant), 1 AllReduce transfer")


def test_worked_example_without_straggler_has_no_skew():
    trace = assemble([rank_part(0), rank_part(1)])
    d = diagnose(trace, Config(select=["COL201"]))
    assert d.findings == []


def _async_wait_job():
    """Two ranks at one AllReduce: rank 0 arrives at 100 ns and computes on to 250 ns beside
    its wait; rank 1 arrives at 400 ns."""
    specs = [RankSpec(r) for r in range(2)]
    for r, spec in enumerate(specs):
        arrival = 400 if r else 100
        work = spec.add("MATMUL", "tensor", "compute", 0, arrival)
        coll = spec.add("AllReduce", "cc", "collective", 400, 450)
        spec.collective(coll, "ar0", arrival)
        spec.dep(work, coll)
    specs[0].add("ADD", "vector", "compute", 100, 250)
    return build(*specs)


def test_col201_impact_is_the_wait_and_says_what_runs_beside_it():
    d = diagnose(_async_wait_job(), Config(select=["COL201"]))
    (f,) = d.findings
    # Rank 0 waits from its arrival (100) to rank 1's (400); its vector work runs 100-250.
    assert (f.ranks, f.impact_ns) == ((1,), 300)
    assert f.evidence["wait_by_rank_ns"] == {"0": 300}
    assert f.evidence["wait_beside_own_work_ns"] == {"0": 150}
    assert "rank 0 waits 300 ns for it" in f.message
    assert "Its own work runs beside 150 ns of that wait" in f.message


def _job_with_arrivals(extra: list[list[int]]):
    """One AllReduce per step after WORK on every rank; ``extra[k][r]``: rank r's extra work
    before step k's."""
    specs = [RankSpec(r) for r in range(len(extra[0]))]
    t = 0
    prev_coll: dict[int, int] = {}
    for k, row in enumerate(extra):
        arrivals = [t + WORK + x for x in row]
        start = max(arrivals)
        for r, spec in enumerate(specs):
            v = spec.add("ADD", "vector", "compute", t, arrivals[r], layer=f"layer_{k}")
            c = spec.add("AllReduce", "cc", "collective", start, start + AR)
            spec.collective(c, f"ar{k}", arrivals[r])
            spec.dep(v, c)
            if r in prev_coll:
                spec.dep(prev_coll[r], v)
            prev_coll[r] = c
        t = start + AR
    return build(*specs)


def test_col201_last_by_jitter_at_2_of_3_is_info_but_far_later_is_not():
    # Rank 0 last at 2 of the 3 AllReduces, by about what rank 1 is late at the third: on 4
    # ranks one is last at 2 of 3 with a 62% chance (binomial), so it is noise: info.
    assert _binomial_tail(2, 3, 0.25) == pytest.approx(3 / 16 * 3 / 4 + 1 / 64)  # 10/64
    assert _binomial_tail(3, 3, 0.25) == pytest.approx(1 / 64)
    assert _binomial_tail(1, 3, 0.25) == pytest.approx(1 - (3 / 4) ** 3)
    assert _binomial_tail(1, 4, 0.25) == 1.0  # at or below the expected count: no evidence
    jitter = [[400, 100, 0, 200], [300, 0, 100, 0], [0, 450, 100, 200]]
    (f,) = [f for f in _col201(jitter) if f.ranks == (0,)]
    assert f.evidence["late_instances"] == 2 and f.severity == Severity.INFO
    assert "with a chance of 6" in f.message and "too few instances" in f.message  # 4 x 10/64
    # The same count, but 3 µs late each time against the third's 450 ns: no noise, an error
    # (5.7 µs saved of a 38 µs step).
    late = [[3_000, 100, 0, 200], [3_000, 0, 100, 0], [0, 450, 100, 200]]
    (f,) = [f for f in _col201(late) if f.ranks == (0,)]
    assert f.severity == Severity.ERROR and "chance" not in f.message
    assert (f.impact_ns, f.saving_ns) == (5_900, 5_700)


def _col201(extra):
    return diagnose(_job_with_arrivals(extra), Config(select=["COL201"])).findings
