"""The scheduler: a deterministic list scheduler over the program, all ranks at once.

Every resource (engine, DMA queue, CC stream, CUDA stream, CPU thread) is serial and runs its
nodes in program order. A node starts when its resource is free and every dependency has ended
(plus the edge's latency). A collective starts on every rank when the last rank has arrived plus
a handshake latency, and ends at the same true time on every rank. Nothing here knows about
faults: they only change the durations (and, for fragmented DMA, the program) fed in.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tracediag.generator import hardware as hw
from tracediag.generator.faults import Fault, bandwidth, duration_factors
from tracediag.generator.program import CC, DMA, INSTR, Program, WorkloadShape
from tracediag.generator.workload import build_program


@dataclass(frozen=True)
class Schedule:
    """True times (ns since the step's origin) of every node on every rank, shape (N, ranks)."""

    start: np.ndarray
    end: np.ndarray
    free: np.ndarray  # when the node's resource became free for it (ready to issue)

    @property
    def step_ns(self) -> int:
        """First start to last end over all ranks."""
        return int(self.end.max() - self.start.min())


def list_schedule(
    resource: np.ndarray,
    collective: np.ndarray,
    blocking: np.ndarray,
    dep_ptr: np.ndarray,
    dep_src: np.ndarray,
    dep_lat: np.ndarray,
    duration: np.ndarray,
    origin: np.ndarray,
    cc_local_start: bool,
) -> Schedule:
    """Schedule nodes in program order; one Python step per node, vectorised over ranks.

    ``collective`` nodes synchronise all ranks: the transfer starts at the last arrival plus
    ``CC_LATENCY_NS``; with ``cc_local_start`` each rank's node starts at its own arrival (a GPU
    kernel spinning on its peers), else at the common transfer start (Neuron CcOp). A
    ``blocking`` node (a host call waiting on the device) starts when its resource is free and
    ends ``duration`` after its dependencies.
    """
    n_nodes, ranks = duration.shape
    free = np.tile(origin.astype(np.int64), (int(resource.max()) + 1, 1))
    start = np.empty((n_nodes, ranks), dtype=np.int64)
    end = np.empty_like(start)
    issue = np.empty_like(start)
    ptr = dep_ptr.tolist()
    res = resource.tolist()
    coll = collective.tolist()
    block = blocking.tolist()
    for n in range(n_nodes):
        a, b = ptr[n], ptr[n + 1]
        f = free[res[n]]
        issue[n] = f
        if a == b:
            ready = f
        elif b - a == 1:
            ready = np.maximum(end[dep_src[a]] + dep_lat[a], f)
        else:
            arrivals = end[dep_src[a:b]] + dep_lat[a:b, None]
            ready = np.maximum(arrivals.max(axis=0), f)
        if coll[n]:
            go = ready.max() + hw.CC_LATENCY_NS
            start[n] = ready if cc_local_start else go
            end[n] = go + duration[n]
        elif block[n]:
            start[n] = f
            end[n] = ready + duration[n]
        else:
            start[n] = ready
            end[n] = ready + duration[n]
        free[res[n]] = end[n]
    return Schedule(start=start, end=end, free=issue)


def instruction_jitter(n_instr: int, ranks: int, seed: int) -> np.ndarray:
    """(n_instr, ranks) seeded per-instruction speed noise (~1 %): no two ranks are identical."""
    rng = np.random.default_rng([seed, 1])
    return np.clip(1.0 + 0.01 * rng.standard_normal((n_instr, ranks)), 0.97, 1.03)


def rank_origins(ranks: int, seed: int) -> np.ndarray:
    """True time at which each rank starts the step (a few µs of launch skew)."""
    return np.random.default_rng([seed, 2]).integers(0, 3_000, ranks).astype(np.int64)


def allreduce_bytes_per_ns(ranks: int) -> float:
    """Ring AllReduce algorithm bandwidth: bus bandwidth x n / (2 (n - 1))."""
    if ranks < 2:
        return hw.CC_BUS_BYTES_PER_NS
    return hw.CC_BUS_BYTES_PER_NS * ranks / (2 * (ranks - 1))


@dataclass(frozen=True)
class DeviceRun:
    """One simulated step on the NeuronCores: program, durations and schedule."""

    program: Program
    faults: tuple[Fault, ...]
    duration: np.ndarray  # (N, ranks) int64
    packet_duration: np.ndarray  # (P, ranks) int64
    schedule: Schedule

    @property
    def ranks(self) -> int:
        """Number of ranks simulated."""
        return self.duration.shape[1]


def device_durations(
    program: Program, faults: list[Fault], ranks: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """(node durations (N, ranks), packet durations (P, ranks)), int64 ns."""
    duration = np.zeros((len(program), ranks), dtype=np.int64)
    instr = np.flatnonzero(program.kind == INSTR)
    factors = duration_factors(faults, program, ranks)[instr]
    jitter = instruction_jitter(len(instr), ranks, seed)
    duration[instr] = np.rint(program.work_ns[instr, None] * factors * jitter).astype(np.int64)

    blocks = program.packet_block
    rate = bandwidth(faults, program, ranks)[blocks]
    packet = hw.DMA_PACKET_OVERHEAD_NS + program.packet_bytes[:, None] / rate
    packet += np.where(program.packet_first, hw.DMA_TRANSFER_SETUP_NS, 0)[:, None]
    packet = np.rint(packet).astype(np.int64)
    starts = np.flatnonzero(program.packet_first)
    duration[blocks[starts]] = np.add.reduceat(packet, starts, axis=0)

    cc = np.flatnonzero(program.kind == CC)
    transfer = np.rint(program.nbytes[cc] / allreduce_bytes_per_ns(ranks)).astype(np.int64)
    duration[cc] = transfer[:, None]
    assert (duration[program.kind == DMA] > 0).all()
    return duration, packet


def run_device(shape: WorkloadShape, faults: list[Fault], ranks: int, seed: int) -> DeviceRun:
    """Build the program with ``faults`` and schedule it on ``ranks`` NeuronCores."""
    program = build_program(shape, faults)
    duration, packet = device_durations(program, faults, ranks, seed)
    schedule = list_schedule(
        program.resource,
        program.kind == CC,
        np.zeros(len(program), dtype=bool),
        program.dep_ptr,
        program.dep_src,
        program.dep_lat,
        duration,
        rank_origins(ranks, seed),
        cc_local_start=False,
    )
    return DeviceRun(program, tuple(faults), duration, packet, schedule)
