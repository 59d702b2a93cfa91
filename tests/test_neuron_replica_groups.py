"""Replica groups of Neuron collectives, on the clean-room writer's tp=2 x dp=2 job with
sequence parallelism (tests/cleanroom/neuron_device_writer.py, ``tp_sequence_parallel``): every
op shown with ``Replica group: []`` takes the group its stream's (or, without streams, its
kind's) other ops name. Truth: the writer's groups and its re-simulated saving."""

from __future__ import annotations

import pytest

from tests.cleanroom.neuron_device_writer import write_scenario
from tracediag.analysis.parallel_layout import infer_layout
from tracediag.engine.diagnose import diagnose
from tracediag.loading.loader import load
from tracediag.model import schema as S

TOLERANCE = 0.15


@pytest.fixture(scope="module", params=["parquet", "json"])
def job(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(f"tpsp_{request.param}")
    truth = write_scenario("tp_sequence_parallel", root, formats=(request.param,))
    paths = [root / p for p in truth["files"][request.param].values()]
    return request.param, load(paths, cache=False), truth


def test_an_empty_group_takes_the_group_its_kind_names(job):
    """Without streams (legacy JSON ``cc_ops``) an op shown as ``[]`` takes the group the
    rank's other ops of the same operation and sizes name; the one op no row of its kind names
    (the ZeRO-1 gradient ReduceScatter) stays unnamed on every rank and is left out of the
    layout."""
    fmt, trace, _ = job
    co = trace.collectives
    unnamed = co.loc[co[S.GROUP].astype(str) == "[]"]
    if fmt == "json":
        assert sorted(unnamed[S.RANK]) == [0, 1, 2, 3]
        assert unnamed[S.COLL_KEY].nunique() == 1
        filled = {
            r: m.repairs.get("CcOp: empty replica group taken from its stream's other ops")
            for r, m in trace.meta.items()
        }
        assert all(n and n > 0 for n in filled.values())
    else:
        assert not len(unnamed)


def test_layout_and_exposed_tp_saving(job):
    _, trace, truth = job
    layout = infer_layout(trace)
    assert (layout.dp, layout.tp, layout.pp) == (2, 2, 1)
    (fault,) = truth["findings"]
    (f,) = [f for f in diagnose(trace).findings if f.code == "COL203"]
    assert abs(f.saving_ns - fault["saving_ns"]) <= TOLERANCE * fault["saving_ns"]
