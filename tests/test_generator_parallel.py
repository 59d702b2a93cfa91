"""The dp x tp x pp generator: 1F1B order, group-wise synchronisation, written tables, truth."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from tracediag.generator import SCENARIOS, generate
from tracediag.generator.parallel_layout import PARALLEL_SCENARIOS, ParallelLayout
from tracediag.generator.parallel_sim import run_parallel
from tracediag.generator.parallel_write import generate_parallel, simulate_scenario
from tracediag.generator.pipeline import (
    DP_SYNC,
    MP_SYNC,
    P2P_SYNC,
    TP_SYNC,
    build_parallel_program,
    one_f_one_b,
)
from tracediag.generator.program import CC, INSTR, WorkloadShape
from tracediag.generator.scenarios import scenario_faults

SMALL = WorkloadShape(layers=4, tokens=256, hidden=1024, tiles=2, k_splits=1)


def test_one_f_one_b_order():
    assert one_f_one_b(0, 3, 4) == [
        ("F", 0),
        ("F", 1),
        ("F", 2),
        ("B", 0),
        ("F", 3),
        ("B", 1),
        ("B", 2),
        ("B", 3),
    ]
    assert one_f_one_b(2, 3, 2) == [("F", 0), ("B", 0), ("F", 1), ("B", 1)]
    # Fewer micro-batches than the warm-up needs: all forwards first.
    assert one_f_one_b(0, 4, 2) == [("F", 0), ("F", 1), ("B", 0), ("B", 1)]


@pytest.fixture(scope="module")
def run():
    layout = ParallelLayout(dp=2, tp=2, pp=2)
    return run_parallel(build_parallel_program(SMALL, layout, 3), seed=1)


def test_program_has_every_kind_of_collective(run):
    pp = run.pprog
    cc = pp.program.kind == CC
    assert set(np.unique(pp.sync[cc]).tolist()) == {TP_SYNC, DP_SYNC, P2P_SYNC, MP_SYNC}
    p2p = pp.sync == P2P_SYNC
    # 3 micro-batches x (forward + backward) on the one link, a Send and a Recv each.
    assert p2p.sum() == 12
    assert pp.program.opcode[p2p].tolist()[:2] == ["Send", "Recv"]
    # Each stage holds half the layers.
    for stage, layers in ((0, {"layer_0", "layer_1"}), (1, {"layer_2", "layer_3"})):
        mine = (pp.stage == stage) & (pp.program.kind == INSTR)
        named = {x for x in pp.program.layer[mine] if x.startswith("layer")}
        assert named == layers


def test_pairs_and_groups_start_together(run):
    pp, s = run.pprog, run.schedule
    pairs = np.flatnonzero((pp.sync == P2P_SYNC) & (pp.program.opcode == "Send"))
    assert (s.start[pairs] == s.start[pairs + 1]).all()
    assert (s.end[pairs] == s.end[pairs + 1]).all()
    # TP AllReduces: the two lanes of one dp index (lanes 0,1 and 2,3) start together,
    # the two TP groups independently.
    tp = np.flatnonzero(pp.sync == TP_SYNC)
    assert (s.start[tp, 0] == s.start[tp, 1]).all() and (s.start[tp, 2] == s.start[tp, 3]).all()
    assert (s.start[tp, 0] != s.start[tp, 2]).any()
    dp = np.flatnonzero(pp.sync == DP_SYNC)
    assert (s.start[dp, 0] == s.start[dp, 2]).all() and (s.start[dp, 1] == s.start[dp, 3]).all()
    # A Recv's consumers start after its transfer.
    src, dst = pp.program.edges()
    recv = pp.program.opcode[src] == "Recv"
    assert (s.start[dst[recv]] >= s.end[src[recv]]).all()


def test_slow_stage_only_slows_its_instructions(run):
    slow = run_parallel(run.pprog, seed=1, slow_stage=1, factor=1.5)
    instr = run.pprog.program.kind == INSTR
    on = instr & (run.pprog.stage == 1)
    off = instr & (run.pprog.stage == 0)
    assert np.allclose(slow.duration[on] / run.duration[on], 1.5, atol=0.01)
    assert (slow.duration[off] == run.duration[off]).all()
    assert slow.schedule.step_ns > run.schedule.step_ns


def test_parallel_scenarios_are_registered():
    assert set(PARALLEL_SCENARIOS) <= set(SCENARIOS)
    with pytest.raises(ValueError, match="parallel scenario"):
        scenario_faults("pipeline_clean", 4, 8)
    with pytest.raises(ValueError, match="multiple of 4"):
        generate("pipeline_clean", "/nonexistent", ranks=6)
    with pytest.raises(ValueError, match="parquet, json"):
        generate("tp_clean", "/nonexistent", formats=("chrome",))


@pytest.fixture(scope="module")
def slow_job(tmp_path_factory):
    out = tmp_path_factory.mktemp("pipeline_slow_stage")
    return out, generate("pipeline_slow_stage", out, ranks=4, seed=5)


def test_truth_of_the_slow_stage(slow_job):
    out, truth = slow_job
    assert json.loads((out / "truth.json").read_text()) == truth
    assert truth["formats"] == ["parquet", "json"] and "chrome" in truth["skipped_formats"]
    assert not (out / "chrome").exists()
    assert (truth["layout"]["dp"], truth["layout"]["tp"], truth["layout"]["pp"]) == (1, 1, 4)
    assert truth["layout"]["ranks"]["3"] == {"dp": 0, "tp": 0, "pp": 3, "ep": 0}
    assert truth["ideal_bubble_pct"] == round(100 * 3 / 11, 2)
    (fault,) = truth["faults"]
    assert fault["kind"] == "slow_stage" and fault["stage"] == 2 and fault["ranks"] == [2]
    layout = ParallelLayout(1, 1, 4)
    faulty = simulate_scenario("pipeline_slow_stage", layout, 5)
    clean = simulate_scenario("pipeline_slow_stage", layout, 5, faults=False)
    assert fault["saving_ns"] == faulty.schedule.step_ns - clean.schedule.step_ns > 0
    assert truth["step_time_without_faults_ns"] == clean.schedule.step_ns
    # The other stages' bubbles grow by the saving: their own work did not change.
    assert abs(fault["bubble_cost_ns"] - fault["saving_ns"]) < 0.01 * fault["saving_ns"]
    bubbles = [s["bubble_pct"] for s in truth["stages"]]
    assert bubbles[2] == min(bubbles)


def test_written_collectives_name_their_groups(slow_job):
    out, _ = slow_job
    cc = pd.read_parquet(out / "parquet" / "rank_1" / "CcOp.parquet")
    sends = cc[cc["operation"] == "Send"]
    recvs = cc[cc["operation"] == "Recv"]
    assert set(sends["replica_group"]) == {"[[0, 1]]", "[[1, 2]]"}
    assert set(recvs["replica_group"]) == {"[[0, 1]]", "[[1, 2]]"}
    assert len(sends) == len(recvs) == 16  # 8 micro-batches, forward and backward
    norm = cc[cc["operation"] == "AllReduce"]
    assert norm["replica_group"].tolist() == ["[[0, 1, 2, 3]]"]
    # Both ends of a transfer use one stream and one op id (the parser matches on them).
    cc0 = pd.read_parquet(out / "parquet" / "rank_0" / "CcOp.parquet")
    fwd0 = cc0[cc0["operation"] == "Send"].iloc[0]
    twin = recvs[recvs["op_id"] == fwd0["op_id"]].iloc[0]
    assert twin["stream_id"] == fwd0["stream_id"] == 1
    flows = pq.read_table(out / "parquet" / "rank_1" / "Flow.parquet").to_pandas()
    cc_in = flows.loc[flows["in_table"] == "cc_op", "in_id"]
    assert set(cc_in) <= set(cc["op_id"])


def test_combined_layout_writes_tp_and_dp_groups(tmp_path):
    truth = generate_parallel(
        "pipeline_clean", tmp_path, ("parquet",), 8, 2, 0.5, layout=ParallelLayout(2, 2, 2)
    )
    assert truth["ranks"] == 8 and truth["layout"]["ranks"]["6"] == {
        "dp": 1,
        "tp": 0,
        "pp": 1,
        "ep": 0,
    }
    cc = pd.read_parquet(tmp_path / "parquet" / "rank_6" / "CcOp.parquet")
    groups = set(cc["replica_group"])
    assert {"[[6, 7]]", "[[4, 6]]", "[[2, 6]]", "[[2, 3, 6, 7]]"} <= groups
