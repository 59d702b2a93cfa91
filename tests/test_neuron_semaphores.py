"""Semaphore waits read as dependency edges (parsers/neuron_semaphores.py): small tables written
here by hand with the reference's field names, and the clean-room writer's own trigger waits."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tests.cleanroom.neuron_device_writer import write_scenario
from tracediag.loading.loader import load
from tracediag.model import schema as S
from tracediag.parsers.neuron_semaphores import semaphore_edges

FIRST = {"instruction": 0, "dma": 100, "cc": 200}


def _instr(rows):
    """(start, end, engine, compiler_operands, operands) rows -> an Instruction table."""
    start, end, engine, cops, ops = zip(*rows, strict=True)
    return pd.DataFrame(
        {
            "start_ts": pd.array(start, dtype="Int64"),
            "end_ts": pd.array(end, dtype="Int64"),
            "engine": pd.Categorical(engine),
            "compiler_operands": pd.Categorical(cops),
            "operands": pd.Categorical(ops),
        }
    )


def _ops(ends):
    return pd.DataFrame(
        {
            "start_ts": pd.array([e - 50 for e in ends], dtype="Int64"),
            "end_ts": pd.array(ends, dtype="Int64"),
        }
    )


def _updates(rows):
    ts, sid, value = zip(*rows, strict=True)
    return pd.DataFrame({"timestamp": ts, "id": pd.Categorical(sid), "value": value})


def _edges(tables, updates):
    meta = S.RankMeta(rank=0)
    e = semaphore_edges(tables, FIRST, updates, meta)
    return sorted(zip(e[S.SRC].tolist(), e[S.DST].tolist(), strict=True)), meta


def test_wait_binds_to_the_collective_whose_completion_crossed_the_value():
    instr = _instr(
        [
            (3050, 3100, "Vector", "$S[15]>=2 op=add", ""),  # 0: the second completion
            (5000, 5100, "Vector", "$S[15]>=1", ""),  # 1: true since the first completion
            (5200, 5300, "Vector", "$S[15]>=3", ""),  # 2: never reached
            (2900, 3000, "Sync", "", ""),  # 3: ends within the tolerance of no update
        ]
    )
    cc = _ops([1000, 3000])
    updates = _updates([(1000, "S[15] (Pool)", 1), (3000, "S[15] (Pool)", 2)])
    edges, meta = _edges({"instruction": instr, "cc": cc}, updates)
    assert edges == [(200, 1), (201, 0)]
    assert meta.info["semaphore_waits"] == {"read": 3, "edges": 2, "unexplained": 1}


def test_named_incrementer_wins_over_a_collective_ending_at_the_same_time():
    instr = _instr(
        [
            (1900, 2000, "Vector", "", "S[7] (Vector)++@complete src=0x1"),  # 0: increments S[7]
            (2040, 2100, "Tensor", "", "S[7] (Vector)>=1 wait"),  # 1: waits in operands text
        ]
    )
    cc = _ops([2010])  # a collective ending 10 ns after: nearer the update is the instruction
    updates = _updates([(2000, "S[7] (Vector)", 1)])
    edges, _ = _edges({"instruction": instr, "cc": cc}, updates)
    assert edges == [(0, 1)]


def test_a_value_that_fell_and_rose_again_binds_to_the_later_crossing():
    instr = _instr([(4000, 4100, "Vector", "$S[3]>=1", ""), (2500, 2600, "Vector", "$S[3]>=1", "")])
    cc = _ops([1000, 3000])
    updates = _updates([(1000, "3", 1), (2000, "3", 0), (3000, "3", 1)])
    edges, meta = _edges({"instruction": instr, "cc": cc}, updates)
    # The one at 2500 starts while S[3] is 0: nothing satisfied it, so no edge.
    assert edges == [(201, 0)]
    assert meta.info["semaphore_waits"]["unexplained"] == 1


def test_without_an_update_table_the_named_increments_are_counted():
    instr = _instr(
        [
            (0, 100, "Tensor", "S[5] (Tensor)++@complete", ""),
            (120, 200, "Tensor", "S[5] (Tensor)++@complete", ""),
            (250, 300, "Vector", "$S[5]>=2", ""),
            (260, 300, "Scalar", "$S[5]>=3", ""),  # a third increment never came
        ]
    )
    edges, meta = _edges({"instruction": instr}, None)
    assert edges == [(1, 2)]
    assert meta.info["semaphore_waits"] == {"read": 2, "edges": 1, "unexplained": 1}


def test_a_dma_naming_its_semaphore_in_a_column_is_the_producer():
    instr = _instr([(450, 500, "Sync", "$S[10]>=1", "")])
    dma = _ops([300, 400]).assign(semaphore_id=pd.Categorical(["S[11] (qX)", "S[10] (qSyncIO0)"]))
    updates = _updates([(300, "S[11] (qX)", 1), (400, "S[10] (qSyncIO0)", 1)])
    edges, _ = _edges({"instruction": instr, "dma": dma}, updates)
    assert edges == [(101, 0)]


def test_an_update_over_the_axi_bus_is_never_a_collectives():
    instr = _instr([(450, 500, "Sync", "$S[10]>=1", ""), (950, 990, "Sync", "$S[15]>=1", "")])
    updates = _updates([(400, "S[10] (qSyncIO0)", 1), (900, "S[15] (Pool)", 1)])
    updates["update_source"] = pd.Categorical(["AXI", "GpSimd"])
    edges, meta = _edges({"instruction": instr, "cc": _ops([400, 900])}, updates)
    # A DMA's update (AXI) with no DMA naming it explains nothing; the CC core's does.
    assert edges == [(201, 1)]
    assert meta.info["semaphore_waits"]["unexplained"] == 1


def test_no_semaphore_named_means_no_edge():
    instr = _instr([(0, 100, "Tensor", "name=sg0000", "src=0x1")])
    edges, meta = _edges({"instruction": instr, "cc": _ops([50])}, _updates([(50, "S[1]", 1)]))
    assert edges == [] and "semaphore_waits" not in meta.info


@pytest.fixture(scope="module")
def tp_job(tmp_path_factory):
    root = tmp_path_factory.mktemp("tp")
    truth = write_scenario("tp_exposed_allreduce", root, formats=("parquet",))
    return root, truth


def test_writer_trigger_waits_bind_to_the_first_collective_completion(tp_job):
    """The writer's AllReduce triggers carry ``$S[15]>=1``; its SemaphoreUpdate rows count
    every CcOp completion on ``S[15] (Pool)``. Expected edges from the tables (read with
    pandas here): each trigger starting after the first S[15] update waits on the CcOp that
    ended at it."""
    root, truth = tp_job
    dirs = {int(r): root / p for r, p in truth["files"]["parquet"].items()}
    trace = load(list(dirs.values()), cache=False)
    ev = trace.events
    for rank, d in dirs.items():
        ins = pd.read_parquet(d / "Instruction.parquet")
        su = pd.read_parquet(d / "SemaphoreUpdate.parquet")
        cc = pd.read_parquet(d / "CcOp.parquet")
        first = su.loc[su["id"] == "S[15] (Pool)", "timestamp"].min()
        waits = ins["compiler_operands"].fillna("").str.contains("$S[15]>=1", regex=False)
        later = ins.loc[waits & (ins["start_ts"] + 100 >= first), "start_ts"].to_numpy()
        (producer_end,) = cc.loc[cc["end_ts"] == first, "end_ts"].to_numpy()
        assert len(later) > 0
        # Our edges: collective -> compute on this rank from the semaphore reader.
        meta = trace.meta[rank]
        assert meta.info["semaphore_waits"]["edges"] == len(later)
        kind = ev[S.KIND].astype(str).to_numpy()
        compute = (ev[S.RANK].to_numpy() == rank) & (kind == "compute")
        shift = ev.loc[compute, S.TS].min() - ins["start_ts"].min()  # the loader's clock shift
        e = trace.edges
        src, dst = e[S.SRC].to_numpy(), e[S.DST].to_numpy()
        end = ev[S.TS].to_numpy() + ev[S.DUR].to_numpy()
        mine = (ev[S.RANK].to_numpy()[dst] == rank) & (kind[src] == "collective")
        mine &= kind[dst] == "compute"
        got = np.sort(ev[S.TS].to_numpy()[dst[mine]] - shift)
        assert got.tolist() == np.sort(later).tolist()
        assert set((end[src[mine]] - shift).tolist()) == {int(producer_end)}
