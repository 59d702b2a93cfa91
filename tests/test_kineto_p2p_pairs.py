"""NCCL point-to-point transfers of a Kineto trace matched by the range that names them.

PyTorch's ProcessGroupNCCL launches a send inside ``nccl:send <rank>-><dst>`` and a receive
inside ``nccl:recv <rank><-<src>``, and records both with its group's collective count as
``Seq``, which the two sides need not share: matched by ``Seq`` a pipeline's sends paired with
unrelated ops of every rank. The clean-room Kineto writer's 4-stage pipeline with send/recv on
the compute stream (tests/cleanroom/kineto_writer.py, written from the reference alone) states
each transfer's pair; its clocks are aligned."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.cleanroom.kineto_writer import write_scenario
from tracediag.engine.diagnose import diagnose
from tracediag.loading.loader import load
from tracediag.model import schema as S
from tracediag.model.findings import Severity


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    root = tmp_path_factory.mktemp("kineto_pp")
    truth = write_scenario("pipeline_sendrecv_compute_stream", root, seed=0)
    files = sorted(p for p in root.rglob("*.json") if p.name != "truth.json")
    return load(files, cache=False), truth


def test_every_transfer_pairs_its_sender_with_its_receiver(job):
    trace, truth = job
    co = trace.collectives
    pairs = co.groupby(S.COLL_KEY)[S.RANK].agg(lambda r: tuple(sorted(r)))
    want = Counter(tuple(sorted(op["participants"])) for op in truth["collectives"])
    assert Counter(pairs.tolist()) == want
    for _, inst in co.groupby(S.COLL_KEY):
        assert sorted(inst[S.COLL_OP]) == ["Recv", "Send"]


def test_the_stages_are_read_and_nothing_is_unmatched(job):
    trace, _ = job
    d = diagnose(trace)
    layout = d.analysis.layout
    assert (layout.dp, layout.tp, layout.pp) == (1, 1, 4)
    assert not [f.code for f in d.findings if f.severity >= Severity.WARNING]
    assert not any(m.repairs for m in trace.meta.values())
