"""Neuron Explorer Parquet profiles: every table mapping, ranks, splits, edges and bad input."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.neuron_fixtures import (
    CC_OP,
    DMA_PACKET,
    FLOW,
    INSTRUCTION,
    METADATA,
    write_profile,
    write_table,
)
from tracediag.model import schema as S
from tracediag.model.assembly import assemble
from tracediag.model.errors import TraceInputError
from tracediag.parsers import neuron_parquet


@pytest.fixture(scope="module")
def rank5(tmp_path_factory):
    """The standard profile read once, as rank 5 (named by its directory)."""
    return _one(write_profile(tmp_path_factory.mktemp("std") / "rank_5"))


def _one(path):
    parts = neuron_parquet.read(path)
    assert len(parts) == 1
    return parts[0]


def _row(part, kind, src_id):
    ev = part.events
    rows = np.flatnonzero((ev[S.KIND] == kind).to_numpy() & (ev[S.SRC_ID] == src_id).to_numpy())
    assert len(rows) == 1
    return int(rows[0])


def _edge_set(part):
    ed = part.edges
    return {
        (int(s), int(d), str(k))
        for s, d, k in zip(ed[S.SRC], ed[S.DST], ed[S.EDGE_KIND], strict=True)
    }


def test_sniff_accepts_profiles_and_parents_only(tmp_path):
    profile = write_profile(tmp_path / "runs" / "rank_0")
    assert neuron_parquet.sniff(profile)
    assert neuron_parquet.sniff(tmp_path / "runs")
    assert not neuron_parquet.sniff(profile / "Instruction.parquet")
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "notes.txt").write_text("x")
    assert not neuron_parquet.sniff(tmp_path / "plain")
    write_table(tmp_path / "other", "customers", {"a": [1]})  # not a Neuron table name
    assert not neuron_parquet.sniff(tmp_path / "other")
    (tmp_path / "fake").mkdir()
    (tmp_path / "fake" / "Instruction.parquet").write_bytes(b"not parquet at all")
    assert not neuron_parquet.sniff(tmp_path / "fake")


def test_parent_with_another_trace_beside_is_left_to_the_loader(tmp_path):
    write_profile(tmp_path / "rank_0")
    (tmp_path / "trace.json").write_text('{"traceEvents": []}')
    assert not neuron_parquet.sniff(tmp_path)
    assert neuron_parquet.sniff(tmp_path / "rank_0")


def test_instruction_events(rank5):
    part = rank5
    ev = part.events
    compute = ev[ev[S.KIND] == "compute"]
    assert compute[S.SRC_ID].tolist() == [10, 11, 12, 13]
    assert compute[S.NAME].tolist() == [
        "MATMUL",
        "TENSOR_TENSOR",
        "PSEUDO_TRIGGER_COLLECTIVE",
        "NOP",
    ]
    assert compute["track_label"].tolist() == ["tensor", "vector", "gpsimd", "sync"]
    assert compute["track_engine"].tolist() == ["tensor", "vector", "gpsimd", "sync"]
    assert set(compute["track_kind"]) == {"compute_engine"}
    assert set(compute["track_device"]) == {"nd0/nc1"}
    assert compute[S.TS].tolist() == [1000, 1100, 1200, 1300]
    assert compute[S.DUR].tolist() == [100, 50, 10, 20]  # the last from end_ts - start_ts
    assert compute[S.OP].tolist()[:2] == ["dot.1", "add.2"]
    assert compute[S.LAYER].tolist()[0] == "layer_1"
    assert compute[S.SOURCE].tolist()[0] == "k.py:3"
    np.testing.assert_array_equal(compute[S.WAIT].to_numpy(), [5.0, np.nan, 0.0, 7.0])
    np.testing.assert_array_equal(compute[S.FLOPS].to_numpy(), [1e6, 2048.0, np.nan, np.nan])
    np.testing.assert_array_equal(compute[S.BYTES].to_numpy(), [96.0, np.nan, np.nan, np.nan])


def test_several_pcores_get_their_own_tracks(tmp_path):
    instr = {**INSTRUCTION, "pcore_idx": [0, 1, 0, None]}
    part = _one(write_profile(tmp_path / "p", Instruction=instr))
    compute = part.events[part.events[S.KIND] == "compute"]
    assert compute["track_label"].tolist() == [
        "tensor/pcore0",
        "vector/pcore1",
        "gpsimd/pcore0",
        "sync",
    ]
    assert compute["track_engine"].tolist() == ["tensor", "vector", "gpsimd", "sync"]


def test_dma_packet_events(rank5):
    part = rank5
    dma = part.events[part.events[S.KIND] == "dma"]
    assert dma[S.SRC_ID].tolist() == [1, 2, 3]
    assert dma["track_label"].tolist() == ["qSyncIO0", "qSyncIO0", "dma engine 3"]
    assert dma[S.NAME].tolist() == ["input0", "input0", "dma engine 3"]  # "unknown" variable
    assert dma[S.BYTES].tolist() == [1024.0, 2048.0, 4096.0]
    assert dma[S.TS].tolist() == [1160, 1170, 1400]
    assert dma[S.DUR].tolist() == [10, 20, 50]
    assert set(dma["track_kind"]) == {"dma_queue"} and set(dma["track_engine"]) == {"dma"}
    assert part.meta.info["dma_granularity"] == "packet"


def test_dma_blocks_stand_in_when_packets_are_absent(tmp_path):
    blocks = {
        "start_ts": [1160, 1400], "end_ts": [1190, 1450], "duration_ns": [30, 50], "id": [500, 501],
        "block_id": [0, 1], "queue_idx": [0, 1], "queue_name": ["qSyncIO0", "qScalarIO1"],
        "op": ["read", "write"], "variable": ["input0", "out"], "transfer_bytes": [3072, 4096],
    }  # fmt: skip
    # Flow may name a block by either table name, in any case.
    names = {"dma_block": "DMA_PACKET_AGGREGATED", "instruction": "Instruction"}
    flow = {
        **FLOW,
        "in_table": [names.get(t, t) for t in FLOW["in_table"]],
        "out_table": [
            "dma_packet_aggregated" if t == "dma_block" else t for t in FLOW["out_table"]
        ],
    }
    d = write_profile(tmp_path / "p", DmaPacket=None, DmaPacketAggregated=blocks, Flow=flow)
    part = _one(d)
    dma = part.events[part.events[S.KIND] == "dma"]
    assert dma[S.NAME].tolist() == ["input0", "out"] and dma[S.BYTES].tolist() == [3072.0, 4096.0]
    assert part.meta.info["dma_granularity"] == "block"
    block = _row(part, "dma", 500)
    assert (_row(part, "compute", 11), block, "dma_trigger") in _edge_set(part)
    assert (block, _row(part, "compute", 13), "dependency") in _edge_set(part)
    assert part.meta.repairs["Flow: edges whose id matches no event"] == 2  # + dma_packet 3


def test_flow_edges_resolve_blocks_packets_and_cc_ops(rank5):
    part = rank5
    i10, i11, i12, i13 = (_row(part, "compute", i) for i in (10, 11, 12, 13))
    p1, p2, p3 = (_row(part, "dma", i) for i in (1, 2, 3))
    c7, c8 = _row(part, "collective", 7), _row(part, "collective", 8)
    assert _edge_set(part) == {
        (i11, p1, "dma_trigger"),  # into block 500: every packet of it (rings serve them
        (i11, p2, "dma_trigger"),  # in parallel, each waits for the trigger)
        (p2, i13, "dependency"),  # out of block 500: its last packet
        (p3, i13, "dependency"),  # a packet named directly
        (i10, i11, "dependency"),
        (i13, c8, "dependency"),  # Flow into cc_op 8
        (i12, c7, "dependency"),  # no Flow into op 7: its pseudo trigger instruction
    }
    repairs = part.meta.repairs
    assert repairs["Flow: edges whose id matches no event"] == 1  # instruction 99
    assert repairs["Flow: edges naming a table no event comes from"] == 1  # "semaphore"
    assert part.meta.info["flow_unknown_tables"] == ["semaphore"]


def test_block_first_and_last_packet_follow_time_not_row_order(tmp_path):
    packets = {
        **DMA_PACKET,
        "start_ts": [1175, 1160, 1400],
        "end_ts": [1195, 1170, 1450],
        "duration_ns": [20, 10, 50],
    }
    part = _one(write_profile(tmp_path / "p", DmaPacket=packets))
    p1, p2 = _row(part, "dma", 1), _row(part, "dma", 2)
    edges = _edge_set(part)
    assert (_row(part, "compute", 11), p2, "dma_trigger") in edges  # packet 2 starts first
    assert (p1, _row(part, "compute", 13), "dependency") in edges  # packet 1 ends last


def test_cc_op_events_and_collectives(rank5):
    part = rank5
    cc = part.events[part.events[S.KIND] == "collective"]
    assert cc[S.NAME].tolist() == ["AllReduce", "AllGather"]
    assert cc["track_label"].tolist() == ["cc stream 0", "cc stream 1"]
    assert set(cc["track_kind"]) == {"cc_core"} and set(cc["track_engine"]) == {"cc"}
    assert cc[S.BYTES].tolist() == [8192.0, 16384.0]
    co = part.collectives
    assert co[S.EVENT].tolist() == [_row(part, "collective", 7), _row(part, "collective", 8)]
    # The stream as ranks share it: execution (none without ExecutionInfo) and stream_index.
    assert co[S.MATCH_KEY].tolist() == ["[[0,1,2,3],[4,5,6,7]]|x.0|7", "[[0,1,2,3,4,5,6,7]]|x.0|8"]
    assert co[S.GROUP].tolist() == ["4,5,6,7", "0,1,2,3,4,5,6,7"]  # the sub-list holding rank 5
    assert co[S.COLL_OP].tolist() == ["AllReduce", "AllGather"]
    assert co[S.SEQ].tolist() == [7, 8]
    assert co[S.ARRIVAL].tolist() == [1200, 1330]
    assert co[S.START].tolist() == [1250, 1500] and co[S.END].tolist() == [1290, 1600]
    assert co[S.ALGORITHM].tolist() == ["Ring", "Mesh"] and co[S.DTYPE].tolist() == ["bf16", "fp32"]
    assert co[S.ALGBW].tolist() == [2.0e8, 1.6e8] and co[S.BUSBW].tolist() == [3.0e8, 1.2e8]
    assert co[S.BYTES].tolist() == [8192.0, 16384.0]


def test_collective_outside_every_group_and_without_trigger(tmp_path):
    cc = {**CC_OP, "replica_group": ["[[0, 1], [2, 3]]", None], "trigger_start_ts": [1201, None]}
    part = _one(write_profile(tmp_path / "rank_9", CcOp=cc, Flow=None))
    assert part.collectives[S.GROUP].tolist() == ["[[0,1],[2,3]]", ""]
    assert part.collectives[S.ARRIVAL].tolist() == [1201, 1500]  # start when no trigger time
    assert part.collectives[S.MATCH_KEY].tolist()[1] == "|x.0|8"
    assert part.meta.info["collective_trigger_unmatched"] == 1  # 1201 matches no instruction
    assert not len(part.edges)


def test_summary_metadata_active_time_and_semaphores(rank5):
    part = rank5
    meta = part.meta
    assert meta.format == "neuron-parquet" and meta.sources[0].endswith("rank_5")
    assert meta.summary == {
        "total_time": 1.5e-6,
        "tensor_engine_active_time": 1.0e-7,
        "dma_transfer_count": 3.0,
        "mfu_estimated_percent": 12.5,
    }
    assert meta.hardware == "trn1.32xlarge"
    for key in (
        "profile_schema_version",
        "neuroncore_idx",
        "neuron_device_idx",
        "tensor_engine_clock_freq",
    ):
        assert meta.info[key] == METADATA[key][0]
    assert meta.info["dma_ddr_bandwidth"] == 1.0e11 and meta.info["hbm_ddr_bandwidth"] == 4.0e11
    assert meta.info["active_time_ns"] == {"tensor": 90, "vector": 50}
    assert meta.info["semaphore_update_count"] == 3
    assert "schema_warning" not in meta.info and not meta.repairs.get(
        "unknown schema major version"
    )


def test_unknown_schema_major_version_warns(tmp_path):
    part = _one(
        write_profile(tmp_path / "p", Metadata={**METADATA, "profile_schema_version": ["8.0.1"]})
    )
    assert "8.0.1" in part.meta.info["schema_warning"]
    assert part.meta.repairs["unknown schema major version"] == 1


def test_split_tables_are_concatenated_in_part_order(tmp_path):
    whole = _one(write_profile(tmp_path / "whole"))
    split_dir = write_profile(tmp_path / "split", Instruction=None, DmaPacket=None)
    write_table(split_dir, "Instruction", INSTRUCTION, parts=3)
    write_table(split_dir, "DmaPacket", DMA_PACKET, parts=2)
    assert sorted(p.name for p in split_dir.glob("Instruction*")) == [
        f"Instruction_{k}.parquet" for k in range(3)
    ]
    split = _one(split_dir)
    cols = [S.KIND, S.NAME, S.TS, S.DUR, S.SRC_ID, "track_label"]
    assert split.events[cols].equals(whole.events[cols])
    assert _edge_set(split) == _edge_set(whole)


def test_split_parts_with_different_integer_widths(tmp_path):
    d = write_profile(tmp_path / "p", Instruction=None)
    paths = write_table(d, "Instruction", INSTRUCTION, parts=2)
    first = pq.read_table(paths[0])
    pq.write_table(
        first.set_column(
            first.schema.get_field_index("id"), "id", first.column("id").cast("int32")
        ),
        paths[0],
    )
    part = _one(d)
    assert part.events[part.events[S.KIND] == "compute"][S.SRC_ID].tolist() == [10, 11, 12, 13]


def test_missing_tables_are_normal(tmp_path):
    only_instr = _one(write_profile(tmp_path / "a", tables={"Instruction": INSTRUCTION}))
    assert (
        len(only_instr.events) == 4
        and not len(only_instr.edges)
        and not len(only_instr.collectives)
    )
    assert only_instr.meta.summary == {} and only_instr.meta.info["semaphore_update_count"] == 0
    assert only_instr.meta.info["rank_source"] == "default" and only_instr.meta.rank == 0
    summary_only = _one(write_profile(tmp_path / "b", tables={"Summary": {"total_time": [2.0]}}))
    assert not len(summary_only.events) and summary_only.meta.summary == {"total_time": 2.0}
    trace = assemble([summary_only])
    assert len(trace.events) == 0 and trace.ranks == [0]


@pytest.mark.parametrize(("name", "rank"), [("rank_3", 3), ("profile_rank_5", 5), ("rank7", 7)])
def test_rank_from_directory_name(tmp_path, name, rank):
    part = _one(write_profile(tmp_path / name))
    assert part.meta.rank == rank and part.meta.info["rank_source"] == "filename"


def test_rank_from_metadata_worker_gid(tmp_path):
    part = _one(write_profile(tmp_path / "capture", Metadata={**METADATA, "worker_gid": [6]}))
    assert part.meta.rank == 6 and part.meta.info["rank_source"] == "metadata"
    default = _one(write_profile(tmp_path / "other"))
    assert default.meta.rank == 0 and default.meta.info["rank_source"] == "default"


def test_parent_of_named_rank_directories(tmp_path):
    for r in (10, 2):
        write_profile(tmp_path / f"profile_rank_{r}")
    parts = neuron_parquet.read(tmp_path)
    assert [p.meta.rank for p in parts] == [2, 10]
    assert [p.meta.info["rank_source"] for p in parts] == ["filename", "filename"]
    trace = assemble(parts)
    assert trace.ranks == [2, 10] and len(trace.events) == 18
    keys = trace.collectives.groupby(S.MATCH_KEY)[S.COLL_KEY].nunique()
    assert keys.tolist() == [1, 1]  # one instance key per op, shared by both ranks
    by_rank = trace.collectives.sort_values([S.RANK, S.SEQ])[S.GROUP].tolist()
    # rank 10 is in no sub-list: the whole group string stands in
    assert by_rank == ["0,1,2,3", "0,1,2,3,4,5,6,7", "[[0,1,2,3],[4,5,6,7]]", "[[0,1,2,3,4,5,6,7]]"]


def test_parent_of_unnamed_profiles_uses_worker_gid_then_natural_order(tmp_path):
    write_profile(tmp_path / "node10")
    write_profile(tmp_path / "node2")
    write_profile(tmp_path / "nodeX", Metadata={**METADATA, "worker_gid": [0]})
    (tmp_path / "neff").mkdir()  # not a profile
    parts = neuron_parquet.read(tmp_path)
    got = {
        p.meta.sources[0].rsplit("/", 1)[1]: (p.meta.rank, p.meta.info["rank_source"])
        for p in parts
    }
    assert got == {
        "nodeX": (0, "metadata"),
        "node2": (1, "directory order"),
        "node10": (2, "directory order"),
    }


def test_corrupt_parquet_names_the_file(tmp_path):
    d = write_profile(tmp_path / "rank_0")
    bad = d / "DmaPacket.parquet"
    bad.write_bytes(b"PAR1" + b"\x00" * 64)
    assert neuron_parquet.sniff(d)
    with pytest.raises(TraceInputError) as err:
        neuron_parquet.read(d)
    assert err.value.path == str(bad) and "Parquet" in err.value.problem


def test_truncated_parquet_names_the_file(tmp_path):
    d = write_profile(tmp_path / "rank_0")
    target = d / "Flow.parquet"
    target.write_bytes(target.read_bytes()[:-40])
    with pytest.raises(TraceInputError) as err:
        neuron_parquet.read(d)
    assert err.value.path == str(target)


def test_missing_required_column_names_the_file(tmp_path):
    instr = {k: v for k, v in INSTRUCTION.items() if k != "engine"}
    d = write_profile(tmp_path / "p", Instruction=instr)
    with pytest.raises(TraceInputError, match="engine") as err:
        neuron_parquet.read(d)
    assert err.value.path == str(d / "Instruction.parquet")


def test_rows_without_time_are_dropped_and_counted_with_their_edges(tmp_path):
    instr = {**INSTRUCTION, "start_ts": [1000, None, 1200, 1300]}
    part = _one(write_profile(tmp_path / "p", Instruction=instr))
    assert part.events[part.events[S.KIND] == "compute"][S.SRC_ID].tolist() == [10, 12, 13]
    assert part.meta.repairs["Instruction: dropped, no valid timestamp or duration"] == 1
    assert (
        part.meta.repairs["edges: dropped, an end event had no valid time"] == 3
    )  # 10->11, 11->blk (both of its packets)
    assemble([part])


def test_device_clock_timestamps_and_unsigned_ids_stay_exact(tmp_path):
    base = 1_700_000_000_000_000_001
    instr = {**INSTRUCTION, "start_ts": [base + t for t in INSTRUCTION["start_ts"]], "end_ts": [base + t for t in INSTRUCTION["end_ts"]],
             "id": [2**64 - 1, 2**63 + 5, 12, 13]}  # fmt: skip
    flow = {
        "in_id": [-1],
        "in_table": ["instruction"],
        "out_id": [-(2**63) + 5],
        "out_table": ["instruction"],
    }
    d = write_profile(tmp_path / "p", tables={"Flow": flow})
    write_table(d, "Instruction", instr, types={"id": pa.uint64()})
    part = _one(d)
    trace = assemble([part])
    assert trace.events[S.TS].tolist() == [base + 1000, base + 1100, base + 1200, base + 1300]
    assert trace.events[S.SRC_ID].tolist()[:2] == [-1, -(2**63) + 5]
    assert trace.edges[[S.SRC, S.DST]].values.tolist() == [[0, 1]]


def test_whole_profile_passes_assemble(tmp_path):
    trace = assemble(neuron_parquet.read(write_profile(tmp_path / "rank_1")))
    # 7 edges: the trigger into block 500 binds both its packets.
    assert len(trace.events) == 9 and len(trace.edges) == 7 and len(trace.collectives) == 2
    assert sorted(trace.tracks[S.TRACK_NAME]) == [
        "cc stream 0", "cc stream 1", "dma engine 3", "gpsimd", "qSyncIO0", "sync", "tensor", "vector",
    ]  # fmt: skip
    assert (
        FLOW["in_table"].count("semaphore")
        == trace.meta[1].repairs["Flow: edges naming a table no event comes from"]
    )
