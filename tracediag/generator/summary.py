"""Derived device-profile tables: ActiveTime, Summary and Metadata of one rank.

Everything is computed from the rank's written events (never from the simulation's settings),
so a reader that recomputes a metric from the events gets the number the Summary reports.
Summary times are float seconds and ``*_percent`` are 0-100, as the schema documents.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracediag.generator import hardware as hw
from tracediag.generator.device_tables import RankTables
from tracediag.generator.program import ENGINES

SCHEMA_VERSION = "7.4.0"
NS = 1e-9


def merge_intervals(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of intervals as sorted, disjoint (start, end) arrays."""
    if len(start) == 0:
        return start, end
    order = np.argsort(start, kind="stable")
    start, end = start[order], end[order]
    reach = np.maximum.accumulate(end)
    new = np.ones(len(start), dtype=bool)
    new[1:] = start[1:] > reach[:-1]
    return start[new], np.maximum.reduceat(end, np.flatnonzero(new))


def union_ns(start: np.ndarray, end: np.ndarray) -> int:
    """Total length of the union of intervals."""
    s, e = merge_intervals(np.asarray(start), np.asarray(end))
    return int((e - s).sum())


def active_time(tables: RankTables) -> pd.DataFrame:
    """Merged busy intervals per compute engine (waits excluded: only executing time)."""
    parts = []
    instr = tables.instructions
    for engine in ENGINES:
        rows = instr[instr["engine"] == engine]
        s, e = merge_intervals(rows["start_ts"].to_numpy(), rows["end_ts"].to_numpy())
        parts.append(pd.DataFrame({"start_ts": s, "end_ts": e, "engine": engine}))
    frame = pd.concat(parts, ignore_index=True)
    frame["pcore_idx"] = 0
    frame["duration_ns"] = frame["end_ts"] - frame["start_ts"]
    return frame


def span(tables: RankTables) -> tuple[int, int]:
    """(first start, last end) over every event of the rank."""
    frames = (tables.instructions, tables.dma_packets, tables.cc_ops)
    first = min(int(f["start_ts"].min()) for f in frames if len(f))
    last = max(int(f["end_ts"].max()) for f in frames if len(f))
    return first, last


def summary(tables: RankTables) -> dict:
    """The one-row Summary of a rank, as a dict of field -> value."""
    instr, packets, blocks, cc = (
        tables.instructions,
        tables.dma_packets,
        tables.dma_blocks,
        tables.cc_ops,
    )
    first, last = span(tables)
    total = (last - first) * NS
    out: dict = {
        "total_time": total,
        "total_exec_time": total,
        "neuroncore_cycle_count": int(round(total * hw.ENGINE_CLOCK_GHZ * 1e9)),
        "event_count": len(instr) + len(packets) + len(cc),
        "total_row_count": len(instr) + len(packets) + len(blocks) + len(cc),
    }
    busy = union_ns(instr["start_ts"].to_numpy(), instr["end_ts"].to_numpy()) * NS
    out.update(total_active_time=busy, total_active_time_percent=100 * busy / total)
    for engine in ENGINES:
        rows = instr[instr["engine"] == engine]
        active = union_ns(rows["start_ts"].to_numpy(), rows["end_ts"].to_numpy()) * NS
        out[f"{engine}_engine_instruction_time"] = int(rows["duration_ns"].sum()) * NS
        out[f"{engine}_engine_active_time"] = active
        out[f"{engine}_engine_active_time_percent"] = 100 * active / total
        out[f"{engine}_engine_instruction_count"] = len(rows)
    out["matmul_instruction_count"] = int((instr["opcode"] == "MATMUL").sum())
    activate = instr[instr["opcode"] == "ACTIVATE"]
    out["activate_instruction_time"] = int(activate["duration_ns"].sum()) * NS
    out["activate_instruction_count"] = len(activate)

    dma_active = union_ns(packets["start_ts"].to_numpy(), packets["end_ts"].to_numpy()) * NS
    dma_bytes = int(packets["transfer_bytes"].sum())
    out.update(
        dma_active_time=dma_active,
        dma_active_time_percent=100 * dma_active / total,
        dma_packet_time=int(packets["duration_ns"].sum()) * NS,
        dma_transfer_time=int(blocks["duration_ns"].sum()) * NS,
        dma_transfer_count=len(packets),
        dma_transfer_total_bytes=dma_bytes,
        dma_transfer_average_bytes=dma_bytes / max(len(packets), 1),
        dma_queue_count=int(packets["queue_name"].nunique()),
    )
    hbm_read = int(instr["hbm_read_bytes"].sum())
    hbm_write = int(instr["hbm_write_bytes"].sum())
    flops = int(instr["raw_flops"].sum())
    peak = hw.TENSOR_PEAK_FLOPS_PER_NS * 1e9
    hbm = hw.HBM_BYTES_PER_NS * 1e9
    out.update(
        hbm_read_bytes=hbm_read,
        hbm_write_bytes=hbm_write,
        sbuf_read_bytes=int(instr["sbuf_read_bytes"].sum()),
        sbuf_write_bytes=int(instr["sbuf_write_bytes"].sum()),
        spill_save_bytes=0,
        spill_reload_bytes=0,
        model_flops=flops,
        hardware_flops=flops,
        transpose_flops=0,
        adjusted_hardware_flops=flops,
        mfu_estimated_percent=100 * flops / (total * peak),
        hfu_estimated_percent=100 * flops / (total * peak),
        mbu_estimated_percent=100 * (hbm_read + hbm_write) / (total * hbm),
        mm_arithmetic_intensity=flops / max(hbm_read + hbm_write, 1),
        peak_flops_bandwidth_ratio=peak / hbm,
    )
    cc_active = union_ns(cc["start_ts"].to_numpy(), cc["end_ts"].to_numpy()) * NS
    out.update(
        cc_op_time=int(cc["duration_ns"].sum()) * NS,
        cc_op_active_time=cc_active,
        cc_op_active_time_percent=100 * cc_active / total,
        cc_op_count=len(cc),
    )
    return out


def metadata(tables: RankTables) -> dict:
    """The one-row Metadata of a rank's profile."""
    first, last = span(tables)
    return {
        "profile_schema_version": SCHEMA_VERSION,
        "ntff_version": 5,
        "num_physical_cores": 1,
        "vnc_enabled": False,
        "first_hw_timestamp": first,
        "last_hw_timestamp": last,
        "first_ts": str(pd.Timestamp(first, unit="ns", tz="UTC")),
        "last_ts": str(pd.Timestamp(last, unit="ns", tz="UTC")),
        "dma_ddr_bandwidth": hw.HBM_BYTES_PER_NS * 1e9,
        "num_dma_engines_per_neuroncore": hw.NUM_DMA_ENGINES,
        "hbm_ddr_bandwidth": hw.HBM_BYTES_PER_NS * 1e9,
        "tensor_engine_num_rows": hw.TENSOR_ROWS,
        "tensor_engine_num_cols": hw.TENSOR_COLS,
        "tensor_engine_clock_freq": hw.TENSOR_CLOCK_GHZ,
        "vector_engine_clock_freq": hw.ENGINE_CLOCK_GHZ,
        "vector_engine_num_channels": hw.LANES,
        "scalar_engine_clock_freq": hw.ENGINE_CLOCK_GHZ,
        "scalar_engine_num_channels": hw.LANES,
        "gpsimd_engine_clock_freq": hw.ENGINE_CLOCK_GHZ,
        "gpsimd_engine_num_channels": hw.LANES,
        "neuroncore_clock_freq": hw.ENGINE_CLOCK_GHZ,
        "ticks_per_nanosec": 1,
        "instance_type": hw.INSTANCE_TYPE,
        "runtime_version": "2.27.23",
        "collectives_version": "2.27.20",
        "driver_version": "2.23.9",
        "explorer_version": "2.31.0",
        "compiler_version": "2.20.0",
        "neuroncore_idx": tables.rank % hw.CORES_PER_DEVICE,
        "neuron_device_idx": tables.rank // hw.CORES_PER_DEVICE,
        "profile_name": f"rank_{tables.rank}",
        "is_simulation": True,  # written by tracediag's generator, not captured on hardware
    }
