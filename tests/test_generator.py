"""Tests of the synthetic workload generator: simulation, ground truth and the three writers."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from tracediag.generator import SCENARIOS, generate
from tracediag.generator.program import WorkloadShape
from tracediag.generator.samples import write_samples
from tracediag.generator.scenarios import scenario_faults
from tracediag.generator.simulate import run_device

REFERENCE = Path(__file__).resolve().parents[2] / "shared" / "reference"
RANKS = 2

# Transcribed from neuron-parquet-fields.md (schema 7.4.0) for the tables the generator writes:
# name:type, "!" = required. i64/i32 integers, f64 numbers, str strings, bool booleans.
DOCUMENTED = {
    "Instruction": """
        start_ts:i64! end_ts:i64! duration_ns:i64! engine:str! timeline_track:str pcore_idx:i64
        opcode:str! operands:str! compiler_opcode:str compiler_operands:str id:i64! pc:i64!
        compiler_pc:i64 penguin_id:str raw_penguin_id:i64 bir_id:str! raw_bir_id:i64
        bir_instruction_name:str kernel_instruction_name:str crc_in:i64 crc_out:i64
        evt_wait_time_ns:i64 hlo_attrs:str hlo_name:str raw_hlo_id:i64 raw_framework_id:i64
        layer:str stack_frame_ids:str nki_source_location:str bir_debug_info_source_location:str
        dma_trigger_start_ts:i64 dma_trigger_end_ts:i64 dma_wait_time_ns:i64 instruction_chain:str
        hbm_read_bytes:i64 hbm_write_bytes:i64 sbuf_read_bytes:i64 sbuf_write_bytes:i64
        spill_save_bytes:i64 spill_reload_bytes:i64 psum_read_bytes:i64 psum_write_bytes:i64
        psum_read_sbuf_write_bytes:i64 input_queue_bytes:i64 output_queue_bytes:i64
        weight_queue_bytes:i64 performance_mode:str tensor_instruction_type:str
        tensor_elements:i64 raw_flops:i64 adjusted_flops:i64 tensor_elements_transpose:i64
        flops_transpose:i64 adjusted_flops_transpose:i64 scalar_activation_fn:str
    """,
    "DmaPacket": """
        start_ts:i64! end_ts:i64! duration_ns:i64! pcore_idx:i64 id:i64! packet_idx:i32!
        packet_aggregation_id:i64! engine_idx:i64 read_bytes:i64! write_bytes:i64!
        transfer_bytes:i64! throughput:f64! queue_type:str! variable:str queue_name:str
        queue_idx:i64 crc:i64!
    """,
    "DmaPacketAggregated": """
        start_ts:i64! end_ts:i64! duration_ns:i64! id:i64! pcore_idx:i64 block_id:i32!
        queue_idx:i64! queue_name:str! queue_type:str op:str! variable:str! read_bytes:i64!
        write_bytes:i64! transfer_bytes:i64! throughput:f64! source:str! dest:str!
        semaphore_id:str! modular_flow_function:str read_sbuf_partitions:str!
        read_num_sbuf_partitions:i32! read_shape:str! read_offset:str! read_steps:str!
        write_sbuf_partitions:str! write_num_sbuf_partitions:i32! write_shape:str!
        write_offset:str! write_steps:str! is_transpose_mode:bool transpose_element_size:str
        transpose_shape:str transpose_from_shape:str transpose_to_shape:str
        transpose_unroll_factor:str trigger:i64 completion:i64
    """,
    "Flow": """
        in_id:i64! out_id:i64! in_table:str! out_table:str! dependency_type:str gap_time:i64
    """,
    "CcOp": """
        start_ts:i64! end_ts:i64! duration_ns:i64! operation:str! algorithm:str! num_elements:i64!
        dtype:str! op_id:i64! stream_id:i64! stream_index:i64! trigger_engine:str! input_size:i64
        output_size:i64 algorithm_bandwidth:f64 bus_bandwidth:f64 trigger_start_ts:i64
        cc_trigger_start_delay:i64 replica_group_id:i64 replica_group:str
    """,
    "CcStream": """
        stream_id:i64! stream_index:i64! cc_core_ids:str!
    """,
    "ActiveTime": """
        start_ts:i64! end_ts:i64! engine:str! pcore_idx:i64! duration_ns:i64!
    """,
    "Summary": """
        total_time:f64 neuroncore_cycle_count:i64 model_flops:i64 hardware_flops:i64
        transpose_flops:i64 adjusted_hardware_flops:i64 adjusted_transpose_flops:i64
        mm_arithmetic_intensity:f64 peak_flops_bandwidth_ratio:f64 trace_count:i64 event_count:i64
        total_row_count:i64 dma_active_cycles:i64 dma_active_time:f64 dma_active_time_percent:f64
        static_dma_active_time:f64 dynamic_dma_active_time_percent:f64
        static_dma_active_time_percent:f64 dma_transfer_average_bytes:f64 dma_packet_time:f64
        dma_transfer_time:f64 dma_transfer_count:i64 dma_transfer_total_bytes:i64
        dma_queue_count:i64 inputs_and_weights_size_bytes:i64
        inputs_outputs_weights_size_bytes:i64 weight_size_bytes:i64 static_dma_packet_count:i64
        static_dma_size:i64 dynamic_dma_packet_percent:f64 static_dma_packet_percent:f64
        dynamic_dma_size_percent:f64 static_dma_size_percent:f64 mbu_estimated_percent:f64
        mbu_min_read_util_percent:f64 hbm_write_bytes:i64 hbm_read_bytes:i64 sbuf_write_bytes:i64
        sbuf_read_bytes:i64 spill_save_bytes:i64 spill_reload_bytes:i64 psum_write_bytes:i64
        psum_read_bytes:i64 psum_read_sbuf_write_count:i64 psum_read_sbuf_write_bytes:i64
        input_queue_bytes:i64 output_queue_bytes:i64 weight_queue_bytes:i64
        software_dynamic_dma_active_time:f64 software_dynamic_dma_active_time_percent:f64
        software_dynamic_dma_packet_count:i64 software_dynamic_dma_size:i64
        software_dynamic_dma_packet_percent:f64 software_dynamic_dma_size_percent:f64
        hardware_dynamic_dma_active_time:f64 hardware_dynamic_dma_active_time_percent:f64
        hardware_dynamic_dma_packet_count:i64 hardware_dynamic_dma_size:i64
        hardware_dynamic_dma_packet_percent:f64 hardware_dynamic_dma_size_percent:f64
        tensor_engine_instruction_time:f64 tensor_engine_active_time:f64
        tensor_engine_active_time_percent:f64 tensor_engine_instruction_count:i64
        matmul_instruction_count:i64 mfu_estimated_percent:f64
        mfu_max_achievable_estimated_percent:f64 mfu_hlo_estimated_percent:f64
        mfu_hlo_max_achievable_estimated_percent:f64 mfu_inst_estimated_percent:f64
        mfu_inst_max_achievable_estimated_percent:f64 hfu_estimated_percent:f64
        vector_engine_instruction_time:f64 vector_engine_active_time:f64
        vector_engine_active_time_percent:f64 vector_engine_instruction_count:i64
        scalar_engine_instruction_time:f64 scalar_engine_active_time:f64
        scalar_engine_active_time_percent:f64 scalar_engine_instruction_count:i64
        activate_instruction_time:f64 activate_instruction_count:i64
        sync_engine_instruction_time:f64 sync_engine_active_time:f64
        sync_engine_active_time_percent:f64 sync_engine_instruction_count:i64
        gpsimd_engine_instruction_time:f64 gpsimd_engine_active_time:f64
        gpsimd_engine_active_time_percent:f64 gpsimd_engine_instruction_count:i64 cc_op_time:f64
        cc_op_active_time:f64 cc_op_active_time_percent:f64 cc_op_count:i64
        cc_cores_instruction_time:f64 cc_cores_instruction_active_time:f64
        cc_cores_instruction_active_time_percent:f64 cc_cores_instruction_count:i64
        total_exec_time:f64 total_active_time:f64 total_active_time_percent:f64
    """,
    "Metadata": """
        profile_schema_version:str! ntff_version:i32! num_physical_cores:i32! vnc_enabled:bool!
        first_hw_timestamp:i64! last_hw_timestamp:i64! first_ts:str! last_ts:str!
        dma_ddr_bandwidth:f64! num_dma_engines_per_neuroncore:i32! hbm_ddr_bandwidth:f64!
        tensor_engine_num_rows:i64! tensor_engine_num_cols:i64! tensor_engine_clock_freq:f64!
        vector_engine_clock_freq:f64! vector_engine_num_channels:i64!
        scalar_engine_clock_freq:f64! scalar_engine_num_channels:i64!
        gpsimd_engine_clock_freq:f64! gpsimd_engine_num_channels:i64! neuroncore_clock_freq:f64!
        ticks_per_nanosec:i64! instance_type:str runtime_version:str collectives_version:str
        driver_version:str explorer_version:str compiler_version:str neuroncore_idx:i64
        neuron_device_idx:i64 ultraserver_id:i64 ultraserver_type:str ultraserver_size:i32
        ultraserver_instance_index:i32 s3_bucket_path:str profile_name:str explorer_build_time:str
        is_simulation:bool
    """,
}
ARROW = {"i64": "int64", "i32": "int32", "f64": "double", "str": "string", "bool": "bool"}


def documented(table: str) -> dict[str, tuple[str, bool]]:
    """Field -> (arrow type, required) of a transcribed table."""
    fields = {}
    for token in DOCUMENTED[table].split():
        name, code = token.split(":")
        fields[name] = (ARROW[code.rstrip("!")], code.endswith("!"))
    return fields


# ---- fixtures: each scenario generated once per test session ------------------------------
@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    made = {}

    def get(scenario: str, formats=("parquet", "json", "chrome")) -> tuple[Path, dict]:
        key = (scenario, formats)
        if key not in made:
            out = tmp_path_factory.mktemp(scenario)
            made[key] = (out, generate(scenario, out, formats=formats, ranks=RANKS, seed=3))
        return made[key]

    return get


def read_table(rank_dir: Path, name: str) -> pd.DataFrame:
    files = sorted(rank_dir.glob(f"{name}.parquet")) + sorted(rank_dir.glob(f"{name}_*.parquet"))
    return pd.concat([pq.read_table(f).to_pandas() for f in files], ignore_index=True)


def chrome_events(out: Path, rank: int) -> tuple[dict, pd.DataFrame]:
    doc = json.loads(gzip.decompress((out / "chrome" / f"rank_{rank}.json.gz").read_bytes()))
    return doc, pd.DataFrame(doc["traceEvents"])


def device_span(out: Path, truth: dict) -> int:
    """True step time read back from the Parquet files: aligned first start to last end."""
    first, last = [], []
    for rank in range(truth["ranks"]):
        offset = truth["device"]["clock_offset_ns"][rank]
        for name in ("Instruction", "DmaPacket", "CcOp"):
            table = read_table(out / "parquet" / f"rank_{rank}", name)
            first.append(table["start_ts"].min() - offset)
            last.append(table["end_ts"].max() - offset)
    return int(max(last) - min(first))


# ---- simulation and ground truth -----------------------------------------------------------
def test_generation_is_deterministic(tmp_path):
    files = {}
    for name in ("a", "b"):
        generate("mixed", tmp_path / name, ranks=RANKS, seed=7, gzip_json=True)
        root = tmp_path / name
        files[name] = {p.relative_to(root): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    assert files["a"].keys() == files["b"].keys()
    assert len(files["a"]) > 20
    assert all(files["a"][k] == files["b"][k] for k in files["a"])


def test_clean_scenario_has_no_fault(outputs):
    out, truth = outputs("clean")
    for flavour in ("device", "chrome"):
        section = truth[flavour]
        assert section["faults"] == []
        assert section["step_time_ns"] == section["step_time_without_faults_ns"]
    # A compute-bound step of a few ms, exactly as the Parquet files show it.
    assert 5_000_000 < truth["step_time_ns"] < 9_000_000
    assert device_span(out, truth) == truth["step_time_ns"]


@pytest.mark.parametrize("scenario", ["slow_dma", "fragmented_dma", "straggler", "mixed"])
def test_saving_is_the_resimulated_difference(outputs, scenario):
    out, truth = outputs(scenario)
    shape = WorkloadShape(layers=truth["layers"])
    faults = scenario_faults(scenario, RANKS, shape.layers)
    section = truth["device"]
    assert device_span(out, truth) == section["step_time_ns"]
    assert len(section["faults"]) == len(faults)
    for index, entry in enumerate(section["faults"]):
        rest = faults[:index] + faults[index + 1 :]
        again = run_device(shape, rest, RANKS, seed=3).schedule.step_ns
        assert entry["saving_ns"] == section["step_time_ns"] - again
        assert entry["saving_ns"] > 100_000  # every fault costs the step at least 0.1 ms
        assert entry["family"] in ("dma", "collective")
        start, end = entry["window_ns"]
        assert section["clock_offset_ns"][0] < start < end
    clean = run_device(shape, [], RANKS, seed=3).schedule.step_ns
    assert section["step_time_without_faults_ns"] == clean < section["step_time_ns"]


def test_slow_dma_saving_is_bounded_by_the_extra_transfer_time(outputs):
    out, truth = outputs("slow_dma")
    (entry,) = truth["device"]["faults"]
    _, clean = outputs("clean")
    blocks = read_table(out / "parquet" / "rank_0", "DmaPacketAggregated")
    slow = blocks[blocks["variable"] == "layer_1.weight"].iloc[0]
    normal = blocks[blocks["variable"] == "layer_0.weight"].iloc[0]
    # The window spans the slow transfer on every rank (a few µs of launch skew apart).
    window = entry["window_ns"][1] - entry["window_ns"][0]
    assert slow["duration_ns"] <= window < slow["duration_ns"] + 5_000
    # 25 % of the bandwidth: four times the transfer time, minus the fixed per-packet costs.
    assert 3.5 * normal["duration_ns"] < slow["duration_ns"] < 4 * normal["duration_ns"]
    extra = slow["duration_ns"] - normal["duration_ns"]
    assert 0.5 * extra < entry["saving_ns"] <= extra
    assert truth["step_time_ns"] - clean["step_time_ns"] == entry["saving_ns"]


def test_evt_wait_time_is_the_stall_on_the_slow_dma(outputs):
    out, _ = outputs("slow_dma")
    instr = read_table(out / "parquet" / "rank_1", "Instruction")
    blocks = read_table(out / "parquet" / "rank_1", "DmaPacketAggregated")
    dma_end = blocks.loc[blocks["variable"] == "layer_1.weight", "end_ts"].iloc[0]  # forward
    tensor = instr[instr["engine"] == "tensor"].sort_values("start_ts")
    first = tensor[tensor["layer"] == "layer_1"].iloc[0]
    before = tensor[tensor["end_ts"] <= first["start_ts"]].iloc[-1]
    assert first["start_ts"] == dma_end  # the weights are the binding dependency
    assert first["evt_wait_time_ns"] == first["start_ts"] - before["end_ts"] > 500_000


def test_straggler_makes_peers_wait_at_every_later_allreduce(outputs):
    out, truth = outputs("straggler")
    (entry,) = truth["device"]["faults"]
    assert entry["ranks"] == [1] and entry["engines"] == ["tensor", "vector"]
    delay = {r: read_table(out / "parquet" / f"rank_{r}", "CcOp") for r in range(RANKS)}
    # The straggler arrives last at every AllReduce: it only pays the handshake latency, its
    # peer waits for it (growing as the slow layers accumulate).
    assert (delay[1]["cc_trigger_start_delay"].between(8_000, 8_500)).all()
    waits = delay[0]["cc_trigger_start_delay"].to_numpy()
    assert (waits > 400_000).all() and waits[2] > 2 * waits[0]


def test_engine_bottleneck_moves_the_bound_to_the_vector_engine(outputs):
    out, truth = outputs("engine_bottleneck", ("parquet",))
    (entry,) = truth["faults"]
    assert entry["family"] == "compute" and entry["tracks"] == ["vector"]
    clean_out, clean = outputs("clean")
    slow, normal = (
        pq.read_table(d / "parquet" / "rank_0" / "Summary.parquet").to_pandas().iloc[0]
        for d in (out, clean_out)
    )
    assert slow["tensor_engine_active_time"] == pytest.approx(normal["tensor_engine_active_time"])
    assert normal["vector_engine_active_time"] < 0.3 * normal["tensor_engine_active_time"]
    assert slow["vector_engine_active_time"] > slow["tensor_engine_active_time"]
    assert entry["saving_ns"] == truth["step_time_ns"] - clean["step_time_ns"] > 2_000_000


def test_scale_multiplies_depth():
    small = run_device(WorkloadShape(layers=4), [], 2, 0)
    large = run_device(WorkloadShape(layers=8), [], 2, 0)
    assert 1.8 < large.schedule.step_ns / small.schedule.step_ns < 2.1
    assert len(large.program) > 1.9 * len(small.program)


def test_bad_requests_raise():
    with pytest.raises(ValueError, match="unknown scenario"):
        scenario_faults("nope", 2, 4)
    with pytest.raises(ValueError, match="ranks"):
        scenario_faults("straggler", 1, 4)
    with pytest.raises(ValueError, match="unknown formats"):
        generate("clean", Path("/nonexistent"), formats=("pdf",))
    assert set(SCENARIOS) >= {
        "clean",
        "slow_dma",
        "fragmented_dma",
        "straggler",
        "engine_bottleneck",
        "host_gaps",
        "mixed",
    }


# ---- Parquet ---------------------------------------------------------------------------------
def test_parquet_columns_are_documented(outputs):
    out, _ = outputs("fragmented_dma")
    rank_dir = out / "parquet" / "rank_0"
    written = {re.sub(r"_\d+$", "", p.stem) for p in rank_dir.glob("*.parquet")}
    assert written == set(DOCUMENTED)
    for path in rank_dir.glob("*.parquet"):
        fields = documented(re.sub(r"_\d+$", "", path.stem))
        schema = {f.name: str(f.type) for f in pq.read_schema(path)}
        assert set(schema) <= set(fields), f"{path.name}: {set(schema) - set(fields)}"
        assert {k: fields[k][0] for k in schema} == schema, path.name
        required = {k for k, (_, req) in fields.items() if req}
        assert required <= set(schema), f"{path.name} lacks {required - set(schema)}"


def test_transcription_matches_the_reference():
    text = REFERENCE / "neuron-parquet-fields.md"
    if not text.exists():
        pytest.skip("shared reference folder absent")
    sections = re.split(r"^### ", text.read_text(), flags=re.M)
    for table in DOCUMENTED:
        body = next(s for s in sections if s.startswith(table + "\n"))
        names = re.findall(r"^\| `([^`]+)` \|", body, flags=re.M)
        assert names == list(documented(table)), table


def test_instruction_table_is_split_and_complete(outputs):
    out, truth = outputs("clean")
    rank_dir = out / "parquet" / "rank_0"
    parts = sorted(p.name for p in rank_dir.glob("Instruction*.parquet"))
    assert parts == ["Instruction_0.parquet", "Instruction_1.parquet"]
    instr = read_table(rank_dir, "Instruction")
    assert instr["id"].is_unique
    summary = pq.read_table(rank_dir / "Summary.parquet").to_pandas().iloc[0]
    engines = ("tensor", "vector", "scalar", "gpsimd", "sync")
    assert sum(summary[f"{e}_engine_instruction_count"] for e in engines) == len(instr)
    assert summary["model_flops"] == instr["raw_flops"].sum() > 0
    assert summary["total_time"] == pytest.approx(
        (instr["end_ts"].max() - instr["start_ts"].min()) * 1e-9, rel=0.01
    )
    meta = pq.read_table(rank_dir / "Metadata.parquet").to_pandas().iloc[0]
    assert meta["profile_schema_version"] == "7.4.0"
    assert meta["instance_type"] == "trn1.32xlarge"


def test_clock_offsets_show_in_timestamps(outputs):
    out, truth = outputs("straggler")
    offsets = truth["device"]["clock_offset_ns"]
    assert len(set(offsets)) == RANKS and abs(offsets[1] - offsets[0]) > 100_000
    cc = {r: read_table(out / "parquet" / f"rank_{r}", "CcOp") for r in range(RANKS)}
    # A collective ends at one true instant on every rank: the end times differ by the offsets.
    diff = cc[1]["end_ts"].to_numpy() - cc[0]["end_ts"].to_numpy()
    assert (diff == offsets[1] - offsets[0]).all()
    assert truth["device"]["align_to_rank0_ns"][1] == offsets[0] - offsets[1]


def test_flow_ids_resolve_and_gaps_match(outputs):
    out, _ = outputs("fragmented_dma")
    rank_dir = out / "parquet" / "rank_1"
    tables = {
        "instruction": read_table(rank_dir, "Instruction").set_index("id"),
        "dma_block": read_table(rank_dir, "DmaPacketAggregated").set_index("id"),
        "cc_op": read_table(rank_dir, "CcOp").set_index("op_id"),
    }
    flow = read_table(rank_dir, "Flow")
    assert set(flow["dependency_type"]) == {"FLOW_DEPENDENCE"}
    kinds = set(zip(flow["in_table"], flow["out_table"], strict=True))
    assert kinds == {
        ("instruction", "instruction"),
        ("instruction", "dma_block"),
        ("dma_block", "instruction"),
        ("instruction", "cc_op"),
        ("cc_op", "instruction"),
    }
    for (src, dst), edges in flow.groupby(["in_table", "out_table"]):
        ends = tables[src].loc[edges["in_id"], "end_ts"].to_numpy()
        starts = tables[dst].loc[edges["out_id"], "start_ts"].to_numpy()
        assert (starts - ends == edges["gap_time"].to_numpy()).all()
        assert (edges["gap_time"] >= 0).all()


def test_packets_tile_their_transfers(outputs):
    out, _ = outputs("fragmented_dma")
    rank_dir = out / "parquet" / "rank_0"
    packets = read_table(rank_dir, "DmaPacket")
    blocks = read_table(rank_dir, "DmaPacketAggregated").set_index("id")
    per_block = packets.groupby("packet_aggregation_id").agg(
        start=("start_ts", "min"),
        end=("end_ts", "max"),
        size=("transfer_bytes", "sum"),
        busy=("duration_ns", "sum"),
    )
    assert set(per_block.index) == set(blocks.index)
    blocks = blocks.loc[per_block.index]
    assert (per_block["start"] == blocks["start_ts"]).all()
    assert (per_block["end"] == blocks["end_ts"]).all()
    assert (per_block["busy"] == blocks["duration_ns"]).all()  # back to back
    assert (per_block["size"] == blocks["transfer_bytes"]).all()
    layer_2 = blocks[blocks["variable"] == "layer_2.weight"]
    small = layer_2[layer_2["transfer_bytes"] < 32 * 1024]
    assert len(small) == 3072 * 3072 * 2 // 16384 == len(layer_2) - 1  # forward fragmented only
    assert (small["transfer_bytes"] == 16384).all()
    assert (small["duration_ns"] > 800).all()  # 16 KiB at 50 GB/s is 328 ns: setup dominates
    assert (blocks.loc[blocks["variable"] == "layer_0.weight", "transfer_bytes"] > 1 << 20).all()


# ---- legacy JSON -----------------------------------------------------------------------------
def test_legacy_json_matches_parquet(outputs):
    out, _ = outputs("mixed")
    doc = json.loads((out / "json" / "rank_1.json").read_text())
    assert set(doc) == {"instruction", "dma", "cc_op", "summary", "metadata"}
    instr, dma = pd.DataFrame(doc["instruction"]), pd.DataFrame(doc["dma"])
    parquet = read_table(out / "parquet" / "rank_1", "Instruction")
    assert sorted(instr["timestamp"]) == sorted(parquet["start_ts"])
    assert set(instr["subgroup"]) == {"Tensor", "Vector", "Scalar", "GpSimd", "Sync"}
    known = set(instr["id"]) | set(dma["id"])
    deps = [d for row in instr["inst_dep_ids"] for d in row] + [
        d for row in dma["inst_dep_ids"] for d in row
    ]
    assert deps and set(deps) <= known
    assert len(doc["summary"]) == 1 and doc["summary"][0]["total_time"] < 0.02  # seconds
    assert [row["op_id"] for row in doc["cc_op"]] == list(range(4))


# ---- Chrome ----------------------------------------------------------------------------------
def test_chrome_trace_has_the_documented_shape(outputs):
    out, truth = outputs("straggler")
    seqs = []
    for rank in range(RANKS):
        doc, events = chrome_events(out, rank)
        assert doc["distributedInfo"] == doc["distributedInfo"] | {
            "rank": rank,
            "world_size": RANKS,
            "backend": "nccl",
        }
        assert doc["deviceProperties"][0]["name"].startswith("NVIDIA")
        assert {"cpu_op", "cuda_runtime", "kernel", "gpu_memcpy", "ac2g", "user_annotation"} <= set(
            events["cat"].dropna()
        )
        assert (events["name"] == "ProfilerStep#5").sum() == 1
        assert events["name"].notna().all() and events["ph"].isin(["X", "M", "s", "f"]).all()
        gpu = events[events["cat"].isin(["kernel", "gpu_memcpy"])]
        args = pd.DataFrame(list(gpu["args"]))
        calls = events[events["cat"] == "cuda_runtime"]
        call_args = pd.DataFrame(list(calls["args"]))
        launch_end = dict(zip(call_args["correlation"], calls["ts"] + calls["dur"], strict=True))
        latency = gpu["ts"].to_numpy() - args["correlation"].map(launch_end).to_numpy()
        # µs from the launch call's return: 2.5 when the stream is idle, more when it is busy.
        assert latency.min() == pytest.approx(2.5) and (latency >= 2.5 - 1e-6).all()
        nccl = args[gpu["name"].str.startswith("ncclDevKernel_AllReduce").to_numpy()]
        assert len(nccl) == 4 and (nccl["Group size"] == RANKS).all()
        assert (nccl["In msg nelems"] == 3072 * 3072).all()
        seqs.append(nccl["Seq"].tolist())
        flows = events[events["cat"] == "ac2g"]
        # Kineto: launches and stream waits start a flow; GPU work, the waits' CUPTI records
        # and event records finish one.
        name = calls["name"].to_numpy()
        waits = call_args["correlation"][name == "cudaStreamWaitEvent"].tolist()
        records = call_args["correlation"][name == "cudaEventRecord"].tolist()
        launches = call_args["correlation"][np.isin(name, ["cudaLaunchKernel", "cudaMemcpyAsync"])]
        assert len(waits) > len(records) > 0
        assert sorted(flows.loc[flows["ph"] == "s", "id"]) == sorted([*launches, *waits])
        finish = [*args["correlation"], *waits, *records]
        assert sorted(flows.loc[flows["ph"] == "f", "id"]) == sorted(finish)
        assert (np.round(events["ts"].dropna() * 1000) == events["ts"].dropna() * 1000).all()
    assert seqs[0] == seqs[1]  # one collective matches across ranks by Seq


def test_host_gaps_leave_the_gpu_idle(outputs):
    out, truth = outputs("host_gaps", ("chrome",))
    assert truth["flavour"] == "chrome" and "device" not in truth
    gaps = truth["faults"]
    assert [g["family"] for g in gaps] == ["host", "host"]
    assert all(g["saving_ns"] > 1_000_000 for g in gaps)
    _, events = chrome_events(out, 0)
    gpu = events[events["cat"].isin(["kernel", "gpu_memcpy"])]
    start = np.round(gpu["ts"].to_numpy() * 1000).astype(np.int64)
    end = start + np.round(gpu["dur"].to_numpy() * 1000).astype(np.int64)
    for gap in gaps:
        lo, hi = gap["window_ns"]
        stall = gap["params"]["stall_ns"]
        assert stall <= hi - lo < stall + 5_000  # every rank stalls, µs of launch skew apart
        covered = np.zeros(hi - lo, dtype=bool)
        for s, e in zip(np.clip(start, lo, hi), np.clip(end, lo, hi), strict=True):
            covered[s - lo : e - lo] = True
        # The GPU drains the work launched before the stall, then idles on every stream.
        assert 0.3 * stall < (~covered).sum() < stall
    # One host, one clock: the ranks' ProfilerStep annotations span the true step together.
    steps = [
        chrome_events(out, r)[1].query("name == 'ProfilerStep#5'").iloc[0] for r in range(RANKS)
    ]
    first = min(round(s["ts"] * 1000) for s in steps)
    last = max(round((s["ts"] + s["dur"]) * 1000) for s in steps)
    assert last - first == truth["step_time_ns"]


# ---- samples -------------------------------------------------------------------------------
def test_samples_are_small_and_complete(tmp_path):
    written = write_samples(tmp_path)
    assert len(written) >= 5
    formats = set()
    for directory in written:
        truth = json.loads((directory / "truth.json").read_text())
        formats.update(truth["formats"])
        size = sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())
        assert size < 1_000_000, directory.name
    assert formats == {"parquet", "json", "chrome"}
    assert (tmp_path / "README.md").exists()
    committed = Path(__file__).resolve().parents[1] / "sample_traces"
    for directory in written:  # the committed samples are what the generator makes today
        stored = committed / directory.name / "truth.json"
        if stored.exists():
            assert stored.read_text() == (directory / "truth.json").read_text(), directory.name
