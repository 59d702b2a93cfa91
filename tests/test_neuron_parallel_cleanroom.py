"""Tensor-parallel and pipeline Neuron profiles written by the clean-room writer
(tests/cleanroom/neuron_device_writer.py, made without reading our code): the layout, the clock
alignment and the findings against the truth its simulation computed (savings re-simulated
without the injected cause, clock offsets drawn by the writer)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tests.cleanroom.neuron_device_writer import write_scenario
from tracediag.analysis.context import change_key
from tracediag.analysis.parallel_layout import infer_layout
from tracediag.engine.diagnose import diagnose
from tracediag.graph.inferred_edges import infer_edges
from tracediag.graph.replay import replay
from tracediag.loading.loader import load
from tracediag.model import schema as S
from tracediag.model.collective_ops import one_sided_sources
from tracediag.model.findings import Severity

TOLERANCE = 0.15


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    """name -> (loaded trace, truth), written once."""
    out = {}
    for name in (
        "tp_exposed_allreduce",
        "pipeline_1f1b_slow_stage",
        "pipeline_1f1b_slow_stage_semaphores",
    ):
        root = tmp_path_factory.mktemp(name)
        truth = write_scenario(name, root, formats=("parquet",))
        paths = [root / p for p in truth["files"]["parquet"].values()]
        out[name] = (load(paths, cache=False), truth)
    return out


def _fault(truth, kind):
    (fault,) = [f for f in truth["findings"] if f["kind"] == kind]
    return fault


def test_tp_allreduce_between_layers_is_read_as_tensor_parallel(jobs):
    trace, truth = jobs["tp_exposed_allreduce"]
    layout = infer_layout(trace)
    assert (layout.dp, layout.tp, layout.pp) == (truth["layout"]["dp"], 2, 1)
    assert layout.coords["tp"].tolist() == [
        truth["layout"]["rank_coords"][str(r)]["tp"] for r in range(2)
    ]


def test_exposed_tp_allreduce_is_one_finding_with_the_true_saving(jobs):
    trace, truth = jobs["tp_exposed_allreduce"]
    fault = _fault(truth, "exposed_allreduce")
    d = diagnose(trace)
    exposed = [f for f in d.findings if f.code in ("COL202", "COL203")]
    # One finding for the job's TP AllReduces (not one per rank the path happens to cross).
    assert [(f.code, f.ranks, f.op) for f in exposed] == [("COL203", (0, 1), "AllReduce")]
    f = exposed[0]
    assert f.severity >= Severity.WARNING
    assert abs(f.saving_ns - fault["saving_ns"]) <= TOLERANCE * fault["saving_ns"]
    # Its saving is what its own change removes, at most: the transfer time cut from each
    # instance (one rank's share, as every participant's body shrinks together), plus gaps.
    change = d.analysis.changes[change_key(f)]
    g = d.analysis.graph
    cut = g.dur[change.dur_nodes] - change.dur_values
    per_rank = max(int(cut[g.rank[change.dur_nodes] == r].sum()) for r in (0, 1))
    gaps = int((g.gap[change.gap_nodes] - change.gap_values).clip(min=0).sum())
    assert 0 < f.saving_ns <= per_rank + gaps
    assert (
        f.saving_ns == g.end[g.window].max() - g.start[g.window].min() - replay(g, change).length_ns
    )


def test_pipeline_stages_aligned_by_their_permute_transfers(jobs):
    trace, truth = jobs["pipeline_1f1b_slow_stage"]
    clock = {int(r): v for r, v in truth["time"]["clock_offset_ns"].items()}
    for rank, meta in trace.meta.items():
        assert meta.info["clock"] == ("reference" if rank == 0 else "transfers")
        # offset added = reference clock - own clock (the writer's draws), within 1 us
        assert abs(meta.clock_offset_ns - (clock[0] - clock[rank])) <= 1_000
    # Every transfer pairs its two sides: 8 micro-batches x 3 links x 2 directions.
    sizes = trace.collectives.groupby("coll_key")["rank"].nunique()
    assert len(sizes) == 48 and (sizes == 2).all()
    layout = infer_layout(trace)
    assert (layout.dp, layout.tp, layout.pp) == (1, 1, 4)
    assert layout.coords["pp"].tolist() == [
        truth["layout"]["rank_coords"][str(r)]["pp"] for r in range(4)
    ]


def test_slow_stage_is_named_by_pip602_and_pip601(jobs):
    trace, truth = jobs["pipeline_1f1b_slow_stage"]
    fault = _fault(truth, "slow_pipeline_stage")
    d = diagnose(trace)
    (slow,) = [f for f in d.findings if f.code == "PIP602"]
    assert slow.ranks == tuple(fault["ranks"]) == (2,) and slow.severity >= Severity.WARNING
    assert slow.evidence["imbalance_pct"] == pytest.approx(100 * (fault["factor"] - 1), abs=3)
    # The saving is the bubble the slow stage costs.
    assert 0.5 * fault["saving_ns"] < slow.saving_ns < 1.5 * fault["saving_ns"]
    bubbles = {f.ranks: f for f in d.findings if f.code == "PIP601"}
    warned = {r for r, f in bubbles.items() if f.severity >= Severity.WARNING}
    assert warned == {(0,), (1,), (3,)}  # the slow stage itself idles least
    assert not [f for f in d.findings if f.code in ("COL201", "TRC503")]


def test_slow_stage_saving_within_tolerance_of_the_truth(jobs):
    trace, truth = jobs["pipeline_1f1b_slow_stage"]
    fault = _fault(truth, "slow_pipeline_stage")
    (slow,) = [f for f in diagnose(trace).findings if f.code == "PIP602"]
    assert abs(slow.saving_ns - fault["saving_ns"]) <= TOLERANCE * fault["saving_ns"]


def test_slow_stage_saving_when_consumers_name_their_semaphore_waits(jobs):
    """The same job, its consumers naming the CC completion they wait on (`S[15] (Pool)>=v` in
    `operands`, as the reference shows): every wait binds and PIP602 is within tolerance."""
    trace, truth = jobs["pipeline_1f1b_slow_stage_semaphores"]
    fault = _fault(truth, "slow_pipeline_stage")
    (slow,) = [f for f in diagnose(trace).findings if f.code == "PIP602"]
    assert slow.ranks == (2,)
    assert abs(slow.saving_ns - fault["saving_ns"]) <= TOLERANCE * fault["saving_ns"]
    for r in trace.ranks:
        waits = trace.meta[r].info["semaphore_waits"]
        assert waits["read"] > 0 and waits["unexplained"] == 0 and waits["edges"] == waits["read"]


def test_permute_sides_are_one_sided_in_the_graph(jobs):
    """A permute's target waits for its source's arrival; the source waits for nobody."""
    trace, _ = jobs["pipeline_1f1b_slow_stage"]
    from tracediag.analysis.context import analyse
    from tracediag.graph.dependencies import COLL_ARRIVAL, INSTANCE

    g = analyse(trace).graph
    inst = np.flatnonzero(g.role == INSTANCE)
    lo, hi = g.pred_ptr[inst], g.pred_ptr[inst + 1]
    assert ((hi - lo) == 1).all()  # one arrival each: the source's
    assert (g.pred_code[lo] == COLL_ARRIVAL).all()


def _receive_readers(trace, edges: pd.DataFrame) -> dict[str, set]:
    """Per receive (match key @ rank): the (name, start from the trace's first event) of the
    compute events ``edges`` make wait for it."""
    ev, coll = trace.events, trace.collectives
    t0 = int(ev[S.TS].min())
    side = one_sided_sources(coll[S.COLL_OP], coll[S.GROUP], coll[S.RANK])
    recv = coll[side == 0]
    key = dict(zip(recv[S.EVENT], recv[S.MATCH_KEY] + "@" + recv[S.RANK].astype(str), strict=True))
    edges = edges[edges[S.SRC].isin(key)]
    out: dict[str, set] = {k: set() for k in key.values()}
    for s, d in zip(edges[S.SRC], edges[S.DST], strict=True):
        if ev[S.KIND].iat[d] == "compute":
            out[key[s]].add((str(ev[S.NAME].iat[d]), int(ev[S.TS].iat[d]) - t0))
    return out


def test_every_received_buffer_has_the_reader_the_operands_name(jobs):
    """Without named waits, a receive that arrived before its reader was ready binds to the
    reader the link's other receives show (``receive_use``). The readers found are the ones the
    same job states when its operands name the waits (``S[15] (Pool)>=v``), and each of the 48
    receives has one (9 of them had none before)."""
    unnamed, _ = jobs["pipeline_1f1b_slow_stage"]
    named, _ = jobs["pipeline_1f1b_slow_stage_semaphores"]
    inferred_edges = infer_edges(unnamed)
    found = _receive_readers(
        unnamed, pd.concat([unnamed.edges[[S.SRC, S.DST]], inferred_edges[[S.SRC, S.DST]]])
    )
    stated = _receive_readers(named, named.edges)
    assert len(found) == len(stated) == 48
    assert all(found.values()) and all(stated.values())
    assert all(found[k] <= stated[k] for k in stated)
    # the named job states every wait: nothing is left to infer there
    assert not (infer_edges(named)[S.EDGE_KIND] == "receive_use").any()
    uses = inferred_edges[inferred_edges[S.EDGE_KIND] == "receive_use"]
    assert len(uses) == 24 and (uses["gap_ns"] >= 0).all()


def test_slow_stage_saving_from_the_legacy_json_profile(tmp_path):
    """The same job as legacy JSON (``cc_ops`` rows name no CC stream, no Flow table): each
    replica group's transfers are one track, so a stage's sends never wait in program order for
    its receives from the other side (one track for all made PIP602 12,122 ns of the 32,027)."""
    truth = write_scenario("pipeline_1f1b_slow_stage", tmp_path, formats=("json",))
    files = truth["files"]["json"]
    trace = load([tmp_path / p for p in (files.values() if isinstance(files, dict) else files)])
    fault = _fault(truth, "slow_pipeline_stage")
    coll = trace.collectives
    tracks = S.strings(trace.tracks[S.TRACK_NAME])[trace.events[S.TRACK].to_numpy()[coll[S.EVENT]]]
    on_rank_2 = sorted(set(tracks[coll[S.RANK].to_numpy() == 2]))
    assert on_rank_2 == [
        "cc group [[1, 2]]",
        "cc group [[2, 1]]",
        "cc group [[2, 3]]",
        "cc group [[3, 2]]",
    ]
    (slow,) = [f for f in diagnose(trace).findings if f.code == "PIP602"]
    assert slow.ranks == (2,)
    assert abs(slow.saving_ns - fault["saving_ns"]) <= TOLERANCE * fault["saving_ns"]
