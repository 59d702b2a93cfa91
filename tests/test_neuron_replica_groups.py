"""Replica groups of Neuron collectives, on the clean-room writer's tp=2 x dp=2 job with
sequence parallelism (tests/cleanroom/neuron_device_writer.py, ``tp_sequence_parallel``): every
op runs once per replica group ([[0, 1], [2, 3]] is two instances, not one of four ranks), and
an op shown with ``Replica group: []`` takes the group its stream's (or, without streams, its
kind's) other ops name. Truth: the writer's groups and its re-simulated saving."""

from __future__ import annotations

import pytest

from tests.cleanroom.neuron_device_writer import write_scenario
from tracediag.analysis.parallel_layout import infer_layout
from tracediag.engine.diagnose import diagnose
from tracediag.loading.loader import load
from tracediag.model import schema as S

TOLERANCE = 0.15


@pytest.fixture(scope="module", params=["parquet", "json", "csv"])
def job(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(f"tpsp_{request.param}")
    truth = write_scenario("tp_sequence_parallel", root, formats=(request.param,))
    paths = [root / p for p in truth["files"][request.param].values()]
    return request.param, load(paths, cache=False), truth


def test_each_replica_group_runs_its_own_instance(job):
    """An op over [[0, 1], [2, 3]] is two instances, not one of four ranks; a rank showing
    ``[]`` takes the groups the other ranks state for the op, or its same-kind ops name. The
    one op no rank names groups for and no same-kind op explains (the ZeRO-1 gradient
    ReduceScatter, ``[]`` on every rank) stays one instance of all four."""
    fmt, trace, truth = job
    co = trace.collectives
    members = co.groupby(S.COLL_KEY)[S.RANK].agg(lambda r: tuple(sorted(r)))
    tp = {tuple(g) for g in truth["layout"]["tp_groups"]}
    dp = {tuple(g) for g in truth["layout"]["dp_groups"]}
    assert tp == {(0, 1), (2, 3)} and dp == {(0, 2), (1, 3)}
    whole = members[members == (0, 1, 2, 3)].index
    ops = [op for op in truth["collectives"]["ops"] if len(op["ranks"]) == 2]
    if fmt == "csv":
        # The triggers' group_id numbers each family's groups ({0, 1} and {0, 2} are both 0):
        # with the op's ordinal on its stream it tells every instance apart.
        assert len(whole) == 0 and len(members) == len(ops)
    else:
        assert len(whole) == 1
        assert set(co.loc[co[S.COLL_KEY].isin(whole), S.COLL_OP]) == {"ReduceScatter"}
        assert len(members.drop(whole)) == len(ops) - 2  # the whole one is two ops of the truth
    assert set(members.drop(whole)) == tp | dp


def test_layout_and_exposed_tp_saving(job):
    _, trace, truth = job
    layout = infer_layout(trace)
    assert (layout.dp, layout.tp, layout.pp) == (2, 2, 1)
    (fault,) = truth["findings"]
    (f,) = [f for f in diagnose(trace).findings if f.code == "COL203"]
    assert abs(f.saving_ns - fault["saving_ns"]) <= TOLERANCE * fault["saving_ns"]
