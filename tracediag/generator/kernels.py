"""Kernel micro-benchmark scenarios: simulate, write as Neuron Explorer Parquet, and the truth.

Each scenario is one NKI-style matmul kernel on one NeuronCore (:mod:`kernel_program`) with one
known cause. The truth's ``saving_ns`` is the kernel's time minus the time of the same kernel
re-simulated with the cause removed (never a formula); ``window_ns`` spans the nodes the cause
concerns (on the profile's clock), ``source_line`` is their NKI line and ``bottleneck`` the
engine busiest in the simulation. The profile has what AWS's investigations read: Metadata
hardware constants, ``TensorInfo`` (IN/OUT tensors and their sizes), the instructions'
``bir_debug_info_source_location``, ``operands`` with the tile shapes, and
``tensor_instruction_type``/``flops_transpose`` on transposes.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from tracediag.generator import write_parquet
from tracediag.generator.clocks import device_offsets
from tracediag.generator.device_tables import NODE_ID_BASE, rank_tables
from tracediag.generator.kernel_program import (
    KernelCause,
    KernelProgram,
    KernelShape,
    build_kernel,
    packet_durations,
)
from tracediag.generator.program import DMA, INSTR
from tracediag.generator.simulate import DeviceRun, Schedule, list_schedule

KERNEL_SCENARIOS = {
    "kernel_clean": "kernel micro-benchmark (one NeuronCore): a tiled bf16 matmul, full tiles, "
    "B resident in SBUF",
    "dma_reloads": "kernel: the matmul reloads every B tile for each row block: DMA-bound",
    "small_tiles": "kernel: each MATMUL contracts 32 of the PE array's 128 rows: TE-bound",
    "transpose_heavy": "kernel: A is transposed on the tensor engine, each tile again for every "
    "column block",
    "slow_vector_engine": "kernel: the PSUM evacuations run 6x slower: the vector engine bounds it",
    "strided_dma": "kernel: A's tile loads read 32-byte descriptors (a strided layout)",
}
#: Scenario -> (cause, the truth's kind, family, engine, what the cause's nodes are).
_CAUSES = {
    "kernel_clean": (KernelCause(), None, None, None, None),
    "dma_reloads": (KernelCause(reload_b=True), "dma_reloads", "dma", "dma", "redundant"),
    "small_tiles": (KernelCause(k_slice=32), "small_tiles", "compute", "tensor", "matmul"),
    "transpose_heavy": (
        KernelCause(transposes="every"), "redundant_transposes", "compute", "tensor", "redundant",
    ),
    "slow_vector_engine": (
        KernelCause(vector_factor=6.0), "slow_vector_engine", "compute", "vector", "evacuate",
    ),
    "strided_dma": (KernelCause(strided=True), "strided_dma", "dma", "dma", "load_a"),
}  # fmt: skip


@dataclass(frozen=True)
class KernelRun:
    """One simulated kernel: its program, the run the table writers read, and its times."""

    kernel: KernelProgram
    run: DeviceRun

    @property
    def time_ns(self) -> int:
        return self.run.schedule.step_ns


def simulate_kernel(shape: KernelShape, cause: KernelCause) -> KernelRun:
    """Build and schedule the kernel (one rank, no jitter: a micro-benchmark repeats exactly)."""
    kp = build_kernel(shape, cause)
    p = kp.program
    packet = packet_durations(kp)
    duration = np.zeros((len(p), 1), dtype=np.int64)
    instr = p.kind == INSTR
    duration[instr, 0] = np.rint(p.work_ns[instr]).astype(np.int64)
    duration[p.packet_block, 0] = packet  # one packet per transfer
    schedule: Schedule = list_schedule(
        p.resource,
        np.zeros(len(p), dtype=bool),
        np.zeros(len(p), dtype=bool),
        p.dep_ptr,
        p.dep_src,
        p.dep_lat,
        duration,
        np.zeros(1, dtype=np.int64),
        cc_local_start=False,
    )
    run = DeviceRun(p, (), duration, packet[:, None], schedule)
    return KernelRun(kp, run)


def _cause_mask(kr: KernelRun, what: str | None) -> np.ndarray:
    kp = kr.kernel
    if what is None:
        return np.zeros(len(kp.role), dtype=bool)
    if what == "redundant":
        return kp.redundant & ((kp.program.kind == DMA) | kp.transpose)
    return (kp.role == what) & (kp.program.opcode != "PSEUDO_DMA_TRIGGER")


def busiest_engine(kr: KernelRun) -> str:
    """The resource busiest over the kernel (``dma`` for the DMA queues together)."""
    p, s = kr.kernel.program, kr.run.schedule
    engine = np.where(p.kind == DMA, "dma", p.engine)
    busy = {}
    for name in np.unique(engine):
        rows = engine == name
        start, end = s.start[rows, 0], s.end[rows, 0]
        order = np.argsort(start)
        start, end = start[order], end[order]
        reach = np.maximum.accumulate(end)
        new = np.r_[True, start[1:] > reach[:-1]]
        busy[str(name)] = int((np.maximum.reduceat(end, np.flatnonzero(new)) - start[new]).sum())
    return max(busy, key=busy.get)


def kernel_truth(scenario: str, shape: KernelShape, kr: KernelRun, offset: int) -> dict:
    """What the scenario injected and what removing it saves, by re-simulation."""
    cause, kind, family, engine, what = _CAUSES[scenario]
    faults = []
    if kind is not None:
        fixed = simulate_kernel(shape, cause.removed())
        mask = _cause_mask(kr, what)
        s = kr.run.schedule
        lines = sorted(set(kr.kernel.source[mask].tolist()))
        queues = sorted(set(kr.kernel.program.engine[mask & (kr.kernel.program.kind == DMA)]))
        faults.append(
            {
                "kind": kind,
                "family": family,
                "ranks": [0],
                "all_ranks": True,
                "engines": [engine],
                "queue": queues[0] if queues else None,
                "tracks": sorted(set(kr.kernel.program.engine[mask].tolist())),
                "window_ns": [
                    int(s.start[mask, 0].min()) + offset,
                    int(s.end[mask, 0].max()) + offset,
                ],
                "saving_ns": int(kr.time_ns - fixed.time_ns),
                "source_lines": lines,
                "nodes": int(mask.sum()),
                "params": _params(cause),
            }
        )
    return {
        "clock_offset_ns": [int(offset)],
        "align_to_rank0_ns": [0],
        "step_time_ns": kr.time_ns,
        "step_time_without_faults_ns": simulate_kernel(shape, cause.removed()).time_ns,
        "bottleneck": busiest_engine(kr),
        "faults": faults,
    }


def _params(cause: KernelCause) -> dict:
    return {
        "reload_b": cause.reload_b,
        "k_slice": cause.k_slice,
        "transposes": cause.transposes,
        "vector_factor": cause.vector_factor,
        "strided": cause.strided,
    }


def kernel_tables(kr: KernelRun, offset: int):
    """The rank's tables (as :func:`device_tables.rank_tables`) with the kernel's own fields:
    source lines, transposes and the TensorInfo table."""
    tables = rank_tables(kr.run, 0, offset)
    kp = kr.kernel
    instr = tables.instructions
    node = instr["id"].to_numpy() - NODE_ID_BASE
    transpose = kp.transpose[node]
    flops = instr["raw_flops"].to_numpy()
    instr["bir_debug_info_source_location"] = kp.source[node]
    instr["nki_source_location"] = kp.source[node]
    instr["tensor_instruction_type"] = np.where(
        instr["opcode"].to_numpy() == "MATMUL", np.where(transpose, "TRANSPOSE", "REGULAR"), None
    )
    instr["flops_transpose"] = np.where(transpose, flops, 0)
    instr["adjusted_flops_transpose"] = np.where(transpose, flops, 0)
    tensors = pd.DataFrame(
        [
            {"variable_name": name, "type": kind, "format": "NC", "size": size, "pcore_idx": 0}
            for name, (kind, size) in kp.tensors.items()
        ]
    )
    return tables, tensors


def generate_kernel(scenario: str, out: Path, formats, ranks, seed: int) -> dict:
    """Write kernel scenario ``scenario`` (Parquet, one rank) under ``out``; return its truth."""
    if ranks not in (None, 1):
        raise ValueError(f"{scenario} is a kernel micro-benchmark: it runs on one NeuronCore")
    if "parquet" not in formats:
        raise ValueError(f"{scenario} is written as Neuron Explorer Parquet only")
    shape = KernelShape()
    cause = _CAUSES[scenario][0]
    kr = simulate_kernel(shape, cause)
    offset = int(device_offsets(1, seed)[0])
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(out / "parquet", ignore_errors=True)
    tables, tensors = kernel_tables(kr, offset)
    directory = out / "parquet" / "rank_0"
    write_parquet.write_rank(tables, directory)
    write_parquet.write_table(tensors, directory, "TensorInfo")
    truth = {
        "scenario": scenario,
        "description": KERNEL_SCENARIOS[scenario],
        "seed": seed,
        "ranks": 1,
        "kernel": {"m": shape.m, "k": shape.k, "n": shape.n},
        "formats": ["parquet"],
        "flavour": "device",
    }
    skipped = [f for f in formats if f != "parquet"]
    if skipped:
        truth["skipped_formats"] = {f: "kernel scenarios are written as Parquet" for f in skipped}
    truth["device"] = kernel_truth(scenario, shape, kr, offset)
    truth.update(truth["device"])
    (out / "truth.json").write_text(json.dumps(truth, indent=2) + "\n")
    return truth
