"""PIP601, PIP602 and COL203 against the generator's truth and a hand-built pipeline; quiet on
clean pipeline, tensor-parallel and data-parallel jobs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.trace_factory import RankSpec, build
from tracediag.analysis.parallel_layout import infer_layout
from tracediag.engine.config import Config
from tracediag.engine.diagnose import diagnose
from tracediag.generator import generate
from tracediag.loading.loader import load
from tracediag.model.findings import Severity

CODES = ["PIP601", "PIP602", "COL203"]
TOLERANCE = 0.15
SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    root = tmp_path_factory.mktemp("parallel")
    out = {}
    for scenario in ("pipeline_clean", "pipeline_slow_stage", "tp_clean", "tp_exposed"):
        truth = generate(scenario, root / scenario, formats=("parquet", "json"), ranks=4, seed=7)
        out[scenario] = (root / scenario, truth)
    return out


def _one(d, code):
    found = [f for f in d.findings if f.code == code]
    assert len(found) == 1, [(f.code, f.ranks) for f in d.findings]
    return found[0]


@pytest.mark.parametrize("fmt", ["parquet", "json"])
def test_slow_stage_is_named_with_its_bubble_cost(jobs, fmt):
    job, truth = jobs["pipeline_slow_stage"]
    trace = load([job / fmt])
    layout = infer_layout(trace)
    assert layout.to_dict()["ranks"] == truth["layout"]["ranks"] and layout.pp == 4
    d = diagnose(trace, Config(select=CODES))
    (fault,) = truth["faults"]
    f = _one(d, "PIP602")
    assert f.severity == Severity.ERROR
    assert list(f.ranks) == fault["ranks"] == [2]
    assert f.layer == ",".join(fault["layers"])
    # The stage's compute window is the fault's window (same instructions, aligned clocks).
    assert abs(f.start_ns - fault["window_ns"][0]) < 1_000
    assert abs(f.end_ns - fault["window_ns"][1]) < 1_000
    assert abs(f.saving_ns - fault["saving_ns"]) <= TOLERANCE * fault["saving_ns"]
    cost = f.evidence["bubble_cost_ns"]
    assert abs(cost - fault["bubble_cost_ns"]) <= TOLERANCE * fault["bubble_cost_ns"]
    # Impact: the slow stage's excess compute on the critical path, part of what it costs.
    assert 0.3 * fault["saving_ns"] < f.impact_ns <= fault["saving_ns"]
    assert f.evidence["imbalance_pct"] == pytest.approx(40, abs=3)
    truth_bubbles = {s["stage"]: s["bubble_pct"] for s in truth["stages"]}
    for stage, pct in f.evidence["stage_bubble_pct"].items():
        assert pct == pytest.approx(truth_bubbles[stage], abs=0.5)


def test_bubbles_above_the_ideal_on_the_other_stages(jobs):
    job, truth = jobs["pipeline_slow_stage"]
    d = diagnose(load([job / "parquet"]), Config(select=["PIP601"]))
    by_rank = {f.ranks: f for f in d.findings}
    assert set(by_rank) == {(0,), (1,), (3,)}  # the slow stage itself idles least
    for (rank,), f in by_rank.items():
        stage = truth["stages"][rank]
        assert f.severity == Severity.WARNING
        assert f.evidence["ideal_bubble_pct"] == truth["ideal_bubble_pct"]
        assert f.evidence["micro_batches"] == truth["micro_batches"] == 8
        assert f.evidence["bubble_pct"] == pytest.approx(stage["bubble_pct"], abs=0.5)
        excess = stage["bubble_ns"] - truth["ideal_bubble_pct"] / 100 * truth["step_time_ns"]
        assert f.evidence["excess_ns"] == pytest.approx(excess, rel=0.02)
        # The exposed Recv transfers are COL202's, not bubble (their figure is checked against
        # a real job's own readings in test_real_gloo_pipeline).
        assert 0 < f.evidence["p2p_transfer_ns"] < excess
        assert f.impact_ns == f.evidence["excess_ns"] - f.evidence["p2p_transfer_ns"]
        assert f.evidence["recv_wait_ns"] > 0
        assert f.evidence["warmup_ns"] >= 0 and f.evidence["cooldown_ns"] > 0


@pytest.mark.parametrize("fmt", ["parquet", "json"])
def test_exposed_tp_collective_is_found(jobs, fmt):
    job, truth = jobs["tp_exposed"]
    d = diagnose(load([job / fmt]), Config(select=CODES))
    (fault,) = truth["faults"]
    f = _one(d, "COL203")
    assert f.severity == Severity.WARNING and f.op == fault["op"] == "AllReduce"
    assert set(f.ranks) <= set(fault["ranks"])
    assert all(layer in f.layer for layer in fault["layers"])
    assert f.start_ns < fault["window_ns"][1] and fault["window_ns"][0] < f.end_ns
    assert abs(f.saving_ns - fault["saving_ns"]) <= TOLERANCE * fault["saving_ns"]
    assert abs(f.impact_ns - fault["saving_ns"]) <= TOLERANCE * fault["saving_ns"]
    per_layer = f.evidence["per_layer"]
    for layer in fault["layers"]:
        assert 0 < per_layer[layer]["exposed_share"] < 1
        assert per_layer[layer]["compute_to_comm"] > 1
    assert f.evidence["busbw"] == pytest.approx(f.evidence["link_bw"], rel=0.1)
    assert f.evidence["tp"] == 2


@pytest.mark.parametrize("scenario", ["pipeline_clean", "tp_clean"])
@pytest.mark.parametrize("fmt", ["parquet", "json"])
def test_every_rule_is_quiet_on_clean_parallel_jobs(jobs, scenario, fmt):
    job, _ = jobs[scenario]
    d = diagnose(load([job / fmt]))
    assert not d.at_or_above(Severity.WARNING), [(f.code, f.message) for f in d.findings]
    assert not [f for f in d.findings if f.code in CODES]


def test_parallel_rules_say_nothing_on_a_data_parallel_job():
    d = diagnose(load([SAMPLES / "neuron_parquet_clean" / "parquet"]), Config(select=CODES))
    assert d.findings == []


# ---- a pipeline written by hand ------------------------------------------------------------


def _hand_pipeline(busy: tuple[int, int, int]):
    """Three stages, two micro-batches, forward only. Stage s computes each micro-batch in
    ``busy[s]`` ns; a transfer takes 10 ns and starts when both sides arrived (the sender done
    computing, the receiver's previous Recv finished)."""
    specs = [RankSpec(r) for r in range(3)]
    free = [0, 0, 0]  # when each stage's tensor engine is free
    posted = [0, 0, 0]  # when each stage posts its next Recv
    go = 0
    for j in range(2):
        for s, spec in enumerate(specs):
            if s:
                recv = spec.add("Recv", "cc", "collective", go, go + 10)
                spec.collective(recv, f"s{s}m{j}", posted[s], op="Recv")
                posted[s] = go + 10
                free[s] = max(free[s], go + 10)
            t0 = free[s]
            work = spec.add("MATMUL", "tensor", "compute", t0, t0 + busy[s], layer=f"layer_{s}")
            if s:
                spec.dep(recv, work)
            free[s] = t0 + busy[s]
            if s < 2:
                go = max(free[s], posted[s + 1])
                send = spec.add("Send", "cc", "collective", go, go + 10)
                spec.dep(work, send)
                spec.collective(send, f"s{s + 1}m{j}", free[s], op="Send")
    return build(*specs)


def test_hand_built_pipeline_names_its_slow_stage():
    # Stage 1 computes 200 ns per micro-batch, the others 100: the last stage finishes at 620;
    # balanced (stage 1 at 100) it would finish at 420.
    trace = _hand_pipeline((100, 200, 100))
    layout = infer_layout(trace)
    assert layout.pp == 3 and layout.coords["pp"].tolist() == [0, 1, 2]
    d = diagnose(trace, Config(select=CODES))
    assert d.analysis.length_ns == 620
    f = _one(d, "PIP602")
    assert f.ranks == (1,) and (f.start_ns, f.end_ns) == (110, 510)
    assert f.saving_ns == 200 and f.evidence["bubble_cost_ns"] == 200
    assert f.impact_ns == 200  # 400 ns of its compute on the path, half of it excess
    assert f.evidence["stage_busy_ns"] == {0: 200, 1: 400, 2: 200}
    assert f.layer == "layer_1"
    # Stages 0 and 2 idle 420 of 620 ns against the ideal 2 / (2 + 2) = 50%: 110 ns above it.
    # Stage 2's two Recvs each transfer 10 ns with nothing computing beside them: that is
    # exposed communication (COL202's), not bubble, so its impact is 110 - 20 = 90 ns.
    bubbles = [g for g in d.findings if g.code == "PIP601"]
    assert [g.ranks for g in bubbles] == [(0,), (2,)]
    assert [g.evidence["excess_ns"] for g in bubbles] == [110, 110]
    assert [g.evidence["p2p_transfer_ns"] for g in bubbles] == [0, 20]
    assert [g.impact_ns for g in bubbles] == [110, 90]
    assert all(g.evidence["micro_batches"] == 2 for g in bubbles)
    assert all(g.evidence["ideal_bubble_pct"] == 50.0 for g in bubbles)


def test_hand_built_balanced_pipeline_is_quiet():
    d = diagnose(_hand_pipeline((100, 100, 100)), Config(select=CODES))
    assert [f for f in d.findings if f.severity >= Severity.WARNING] == []
    assert json.dumps(d.to_dict()["layout"])
