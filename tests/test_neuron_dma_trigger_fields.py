"""Instruction ``dma_trigger_start_ts``/``dma_trigger_end_ts``/``dma_wait_time_ns`` as DMA edges.

The clean-room writer (``tests/cleanroom/neuron_device_writer.py``, written from the reference
alone) emits the fields in the two readings the reference leaves open: on the triggering
instruction (``slow_weight_dma``: wait = DMA start - trigger end) and also on the consuming
LDWEIGHTS/MATMUL (``slow_weight_dma_consumer``). Removing ``Flow.parquet`` after writing models a
profile without a Flow table, which the reference allows (a table exists only when the profile
has that activity; Flow is the graph's ground truth *where present*). The expected savings are
the writer's simulation; the expected edges are the writer's own Flow ``DGE_TRIGGER`` and
``FLOW_DEPENDENCE`` rows, read from the copy that keeps them.
"""

from __future__ import annotations

import shutil

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

import tracediag
from tests.cleanroom import neuron_device_writer as device_writer
from tracediag.model import schema as S
from tracediag.parsers.neuron_dma_triggers import consumer_waits, field_edges

TOLERANCE = 0.15
FIELDS = ("dma_trigger_start_ts", "dma_trigger_end_ts", "dma_wait_time_ns")
PRESETS = ("slow_weight_dma", "slow_weight_dma_consumer")


def _tables(root, name):
    return [f for f in root.rglob("*.parquet") if f.name.lower().startswith(name)]


@pytest.fixture(scope="module", params=PRESETS)
def preset(request, tmp_path_factory):
    """The preset written three ways: as written, without Flow, and without the three fields."""
    base = tmp_path_factory.mktemp(request.param)
    truth = device_writer.write_scenario(request.param, base / "flow", formats=("parquet",))
    shutil.copytree(base / "flow", base / "no_flow")
    for f in _tables(base / "no_flow", "flow"):
        f.unlink()
    shutil.copytree(base / "flow", base / "no_fields")
    for f in _tables(base / "no_fields", "instruction"):
        table = pq.read_table(f)
        pq.write_table(table.drop_columns([c for c in FIELDS if c in table.column_names]), f)
    jobs = {
        k: tracediag.load(str(base / k / "profiles" / "global"))
        for k in ("flow", "no_flow", "no_fields")
    }
    return request.param, truth, jobs


def _dma101(job):
    found = [f for f in tracediag.diagnose(job).findings if f.code == "DMA101"]
    assert found
    return max(found, key=lambda f: f.saving_ns)


def _edges(job, kind):
    ed = job.edges[job.edges[S.EDGE_KIND].astype(str) == kind]
    return set(zip(ed[S.SRC].to_numpy().tolist(), ed[S.DST].to_numpy().tolist(), strict=True))


def test_without_flow_the_dma_saving_is_the_truths(preset):
    name, truth, jobs = preset
    want = truth["findings"][0]["saving_ns"]  # 32.8 / 31.6 us; Flow-less it was 0.85 / 0.89 x
    f = _dma101(jobs["no_flow"])
    assert f.ranks == (0, 1)
    assert abs(f.saving_ns - want) <= TOLERANCE * want, (name, f.saving_ns, want)


def test_trigger_edges_are_the_writers_dge_triggers(preset):
    name, _truth, jobs = preset
    flow, fields = jobs["flow"], jobs["no_flow"]
    assert np.array_equal(flow.events[S.TS].to_numpy(), fields.events[S.TS].to_numpy())
    want, got = _edges(flow, "dma_trigger"), _edges(fields, "dma_trigger")
    assert len(got) == len(want) == 984  # every packet of the 98 blocks per rank
    # A block in two overlapping windows (the slow layer's transfer keeps its trigger's window
    # open) is the only kind of miss: 8 of 984 packets (two PIOParam blocks per rank).
    assert len(got & want) >= 0.99 * len(want), (name, len(got & want))
    info = fields.meta[0].info["dma_trigger_fields"]
    assert info["triggers"] == 34 and info["blocks_without_trigger"] == 0


def test_consumer_reading_binds_each_ldweights_to_the_dma_it_waited_for(preset):
    name, _truth, jobs = preset
    flow, fields = jobs["flow"], jobs["no_flow"]
    kind = fields.events[S.KIND].astype(str).to_numpy()
    opcode = fields.events[S.NAME].astype(str).to_numpy()

    def dma_to_ldweights(job):
        return {
            (s, d)
            for s, d, *_ in _edges(job, "dependency")
            if kind[s] == "dma" and opcode[d] == "LDWEIGHTS"
        }

    got = dma_to_ldweights(fields)
    if name == "slow_weight_dma":
        assert not got  # the fields are on the triggers only: nothing to bind consumers to
        return
    want = dma_to_ldweights(flow)
    assert len(want) == 960 and got == want  # 480 LDWEIGHTS per rank, each from its block
    assert fields.meta[0].info["dma_trigger_fields"]["consumer_edges"] == 960


def test_with_flow_the_fields_change_nothing(preset):
    _name, _truth, jobs = preset
    flow, without = jobs["flow"], jobs["no_fields"]
    for kind in ("dma_trigger", "dependency"):
        assert _edges(flow, kind) == _edges(without, kind)
    assert np.array_equal(
        np.nan_to_num(flow.events[S.WAIT].to_numpy()),
        np.nan_to_num(without.events[S.WAIT].to_numpy()),
    )
    assert _dma101(flow).saving_ns == _dma101(without).saving_ns


def _instructions(rows):
    cols = (
        "start_ts",
        "end_ts",
        "engine",
        "dma_trigger_start_ts",
        "dma_trigger_end_ts",
        "dma_wait_time_ns",
    )
    frame = pd.DataFrame(rows, columns=cols).astype({c: "Int64" for c in cols if c != "engine"})
    return frame.assign(duration_ns=frame["end_ts"] - frame["start_ts"])


def test_both_readings_on_one_small_profile():
    # Row 0 triggers the block [200, 500] (two packets on two rings) 100 ns after it ends; row 1
    # triggers [300, 350] on the scalar queue; row 2 consumes the first block, having waited
    # 80 ns for it; row 3 carries no fields.
    instr = _instructions(
        [
            (50, 100, "Sync", 200, 500, 100),
            (60, 120, "Activation", 300, 350, 180),
            (580, 700, "Tensor", 200, 500, 80),
            (700, 720, "Tensor", None, None, None),
        ]
    )
    dma = pd.DataFrame(
        {
            "start_ts": [200, 210, 300],
            "end_ts": [490, 500, 350],
            "packet_aggregation_id": [7, 7, 8],
            "queue_name": ["qSyncDynamicHW", "qSyncDynamicHW", "qScalarSpillReload0-Q1-E64"],
            "engine_idx": [0, 1, 5],
        }
    ).astype("Int64", errors="ignore")
    dma["duration_ns"] = dma["end_ts"] - dma["start_ts"]
    meta = S.RankMeta(rank=0)
    trig, cons = field_edges(instr, 0, dma, 10, [], meta)
    assert sorted(zip(trig[S.SRC], trig[S.DST], strict=True)) == [(0, 10), (0, 11), (1, 12)]
    assert (trig[S.EDGE_KIND] == "dma_trigger").all()
    # The consumer depends on the block's last packet (ends at 500).
    assert list(zip(cons[S.SRC], cons[S.DST], strict=True)) == [(11, 2)]
    assert meta.info["dma_trigger_fields"] == {
        "triggers": 2, "consumers": 1, "trigger_edges": 3, "blocks_without_trigger": 0,
        "consumer_edges": 1,
    }  # fmt: skip
    wait = consumer_waits(instr, np.array([0.0, 0.0, np.nan, 5.0]))
    assert np.array_equal(wait, [0.0, 0.0, 80.0, 5.0])  # a trigger's wait is its DMA's, not its own
    # A block a recorded edge already reaches gets no second trigger; a recorded DMA -> compute
    # edge means the profile states its consumers, so none is added.
    recorded = [pd.DataFrame({S.SRC: [0, 12], S.DST: [10, 3], S.EDGE_KIND: "dependency"})]
    assert [len(e) for e in field_edges(instr, 0, dma, 10, recorded, S.RankMeta(rank=0))] == [1]
