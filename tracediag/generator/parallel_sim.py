"""Scheduling a dp x tp x pp step: the list scheduler with group-wise synchronisation.

Like :func:`simulate.list_schedule` (one Python step per node, vectorised over lanes), but a
collective synchronises only its group: a TP AllReduce the lanes of one data-parallel index, a
DP AllReduce the lanes of one tensor-parallel index, a Send/Recv pair the two nodes (on two
stages, same lane), the gradient norm's AllReduce its node on every stage and the lanes of one
data-parallel index. Every stage has its own engines, queues and CC streams; each Send/Recv
direction of each link has its own stream, so transfers of one direction run in order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tracediag.generator import hardware as hw
from tracediag.generator.pipeline import DP_SYNC, MP_SYNC, P2P_SYNC, TP_SYNC, ParallelProgram
from tracediag.generator.program import CC, INSTR, RESOURCES
from tracediag.generator.simulate import (
    DeviceRun,
    Schedule,
    allreduce_bytes_per_ns,
    device_durations,
    rank_origins,
)


@dataclass(frozen=True)
class ParallelRun:
    """One simulated parallel step: program, durations (N, lanes) and true times (N, lanes)."""

    pprog: ParallelProgram
    duration: np.ndarray
    packet_duration: np.ndarray
    schedule: Schedule
    slow_stage: int | None
    slow_factor: float

    @property
    def layout(self):
        """The run's :class:`ParallelLayout`."""
        return self.pprog.layout

    def rank_times(self, rank: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(node indices of the rank's stage, their true starts, their true ends)."""
        stage, lane = divmod(rank, self.layout.lanes)
        nodes = np.flatnonzero(self.pprog.stage == stage)
        return nodes, self.schedule.start[nodes, lane], self.schedule.end[nodes, lane]


def parallel_durations(
    pprog: ParallelProgram, seed: int, slow_stage: int | None, factor: float
) -> tuple[np.ndarray, np.ndarray]:
    """(node durations (N, lanes), packet durations): instruction jitter and DMA as in the
    data-parallel simulation, collectives at their group's bandwidth, a slow stage's
    instructions ``factor`` x longer."""
    p, layout = pprog.program, pprog.layout
    duration, packet = device_durations(p, [], layout.lanes, seed)
    if slow_stage is not None:
        slow = (p.kind == INSTR) & (pprog.stage == slow_stage)
        duration[slow] = np.rint(duration[slow] * factor).astype(np.int64)
    cc = p.kind == CC
    rate = np.full(len(p), hw.CC_BUS_BYTES_PER_NS)  # a Send/Recv moves at the link's rate
    rate[pprog.sync == TP_SYNC] = allreduce_bytes_per_ns(layout.tp)
    rate[pprog.sync == DP_SYNC] = allreduce_bytes_per_ns(layout.dp)
    rate[pprog.sync == MP_SYNC] = allreduce_bytes_per_ns(layout.tp * layout.pp)
    duration[cc] = np.rint(p.nbytes[cc] / rate[cc]).astype(np.int64)[:, None]
    return duration, packet


def _resources(pprog: ParallelProgram) -> tuple[np.ndarray, int]:
    """Per node, its serial resource over all stages (engines, queues, CC and Send/Recv
    streams), and the number of resources per stage."""
    per_stage = len(RESOURCES) + 2 * max(pprog.layout.pp - 1, 0)
    local = np.where(
        pprog.p2p_stream >= 0, len(RESOURCES) + pprog.p2p_stream, pprog.program.resource
    )
    return pprog.stage.astype(np.int64) * per_stage + local, per_stage


def schedule_parallel(pprog: ParallelProgram, duration: np.ndarray, seed: int) -> Schedule:
    """True start/end of every node on every lane (see the module docstring)."""
    p, layout = pprog.program, pprog.layout
    n_nodes, lanes = duration.shape
    resource, per_stage = _resources(pprog)
    origin = rank_origins(layout.world, seed).reshape(layout.pp, lanes)
    free = np.repeat(origin, per_stage, axis=0).astype(np.int64)
    start = np.empty((n_nodes, lanes), dtype=np.int64)
    end = np.empty_like(start)
    issue = np.empty_like(start)
    ptr, res, sync = p.dep_ptr.tolist(), resource.tolist(), pprog.sync.tolist()
    shape = (layout.dp, layout.tp)
    together = {P2P_SYNC: 2, MP_SYNC: layout.pp}  # consecutive nodes that start as one
    pending: list[int] = []  # nodes of such a group waiting for the rest of it
    for n in range(n_nodes):
        a, b = ptr[n], ptr[n + 1]
        f = free[res[n]]
        issue[n] = f
        if a == b:
            ready = f
        else:
            arrivals = end[p.dep_src[a:b]] + p.dep_lat[a:b, None]
            ready = np.maximum(arrivals.max(axis=0), f)
        kind = sync[n]
        if kind in together:
            start[n] = ready  # the arrival, until the group is complete
            pending.append(n)
            if len(pending) < together[kind]:
                continue
            go = start[pending].max(axis=0)
            if kind == MP_SYNC:
                go = np.repeat(go.reshape(shape).max(axis=1), layout.tp)
            go += hw.CC_LATENCY_NS
            for node in pending:
                start[node], end[node] = go, go + duration[node]
                free[res[node]] = end[node]
            pending = []
            continue
        if kind == TP_SYNC:
            ready = np.repeat(ready.reshape(shape).max(axis=1), layout.tp) + hw.CC_LATENCY_NS
        elif kind == DP_SYNC:
            ready = np.tile(ready.reshape(shape).max(axis=0), layout.dp) + hw.CC_LATENCY_NS
        start[n] = ready
        end[n] = ready + duration[n]
        free[res[n]] = end[n]
    return Schedule(start=start, end=end, free=issue)


def run_parallel(
    pprog: ParallelProgram, seed: int, slow_stage: int | None = None, factor: float = 1.0
) -> ParallelRun:
    """Durations and schedule of ``pprog`` (optionally with a slow stage)."""
    duration, packet = parallel_durations(pprog, seed, slow_stage, factor)
    schedule = schedule_parallel(pprog, duration, seed)
    return ParallelRun(pprog, duration, packet, schedule, slow_stage, factor)


def stage_run(run: ParallelRun, stage: int) -> tuple[DeviceRun, np.ndarray]:
    """The stage's nodes as a :class:`DeviceRun` over its lanes, and their global indices."""
    p = run.pprog.program
    nodes = np.flatnonzero(run.pprog.stage == stage)
    new = np.full(len(p), -1, dtype=np.int64)
    new[nodes] = np.arange(len(nodes))
    src, dst = p.edges()
    keep = new[dst] >= 0
    assert (new[src[keep]] >= 0).all(), "stages share no dependency edges"
    counts = np.bincount(new[dst[keep]], minlength=len(nodes))
    packets = np.flatnonzero(new[p.packet_block] >= 0)
    columns = {
        name: getattr(p, name)[nodes]
        for name in (
            "kind",
            "resource",
            "opcode",
            "hlo_name",
            "layer",
            "phase",
            "operands",
            "work_ns",
            "flops",
            "elements",
            "sbuf_read",
            "sbuf_write",
            "hbm_read",
            "hbm_write",
            "nbytes",
            "dma_key",
            "variable",
            "direction",
        )
    }
    program = type(p)(
        shape=p.shape,
        dep_ptr=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
        dep_src=new[src[keep]],
        dep_lat=p.dep_lat[keep],
        packet_block=new[p.packet_block[packets]],
        packet_bytes=p.packet_bytes[packets],
        packet_first=p.packet_first[packets],
        **columns,
    )
    schedule = Schedule(
        start=run.schedule.start[nodes],
        end=run.schedule.end[nodes],
        free=run.schedule.free[nodes],
    )
    device = DeviceRun(program, (), run.duration[nodes], run.packet_duration[packets], schedule)
    return device, nodes
