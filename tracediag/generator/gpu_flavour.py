"""The same step seen as a PyTorch GPU job: a CPU thread launches every device operation.

Compute instructions (tensor, vector, scalar) become kernels on one compute stream, DMA transfers
become memcpys on a copy stream per queue, AllReduces become NCCL kernels on their own stream.
Each one is launched from the CPU thread, in program order: a kernel may start only after its
launch call returned (plus the launch latency), so a stalled CPU leaves the GPU idle. DMA and
collective triggers become the CPU calls that launch them. Durations are the device run's.

Work that depends on work of another stream is ordered by a CUDA event, as PyTorch does it: the
host op launching the producer calls ``cudaEventRecord`` right after that launch, and the host op
launching the consumer calls ``cudaStreamWaitEvent`` before its launch; both calls take CPU time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracediag.generator import hardware as hw
from tracediag.generator.faults import Fault, layer_name
from tracediag.generator.program import CC, DMA, INSTR
from tracediag.generator.simulate import DeviceRun, Schedule, list_schedule, rank_origins

# Node roles of the GPU program.
LAUNCH, COPY_LAUNCH, COLL_LAUNCH, KERNEL, MEMCPY, NCCL, STALL, SYNC = range(8)
CPU = "cpu"
GPU_RESOURCES = (
    CPU,
    f"stream {hw.COMPUTE_STREAM}",
    *(f"stream {s}" for s in hw.COPY_STREAMS.values()),
    f"stream {hw.NCCL_STREAM}",
)
#: CUDA stream number of each GPU resource (-1 for the CPU thread).
STREAM_IDS = np.array([-1, hw.COMPUTE_STREAM, *hw.COPY_STREAMS.values(), hw.NCCL_STREAM])


def gpu_stream(resource: str) -> str:
    """The CUDA stream ("stream <id>") running what the device runs on ``resource`` (an
    engine, a DMA queue or the CC stream)."""
    if resource in hw.COPY_STREAMS:
        return f"stream {hw.COPY_STREAMS[resource]}"
    if resource == hw.CC_STREAM:
        return f"stream {hw.NCCL_STREAM}"
    return f"stream {hw.COMPUTE_STREAM}"


#: CPU time of a launching host op: (before the first call, one call, after the last call).
HOST_COST = {
    LAUNCH: (hw.CPU_OP_PRE_NS, hw.LAUNCH_CALL_NS, hw.CPU_OP_POST_NS),
    COPY_LAUNCH: (hw.MEMCPY_PRE_NS, hw.MEMCPY_CALL_NS, hw.MEMCPY_POST_NS),
    COLL_LAUNCH: (hw.COLLECTIVE_PRE_NS, hw.LAUNCH_CALL_NS, hw.COLLECTIVE_POST_NS),
}


@dataclass(frozen=True)
class GpuRun:
    """One simulated step of the GPU flavour."""

    device: DeviceRun  # the device run whose program and durations this flavour re-times
    role: np.ndarray  # int8 (M,)
    origin: np.ndarray  # int64 (M,): device node, -1 for stalls and the final sync
    resource: np.ndarray  # int16 (M,) into GPU_RESOURCES
    launcher: np.ndarray  # int64 (M,): host node that launched a GPU node, else -1
    slot: np.ndarray  # int64 (M,): index of the launch call within its host op
    calls: np.ndarray  # int64 (M,): launch calls a host op makes (0 for other nodes)
    stall_fault: np.ndarray  # int64 (M,): index into faults of a stall node, else -1
    layer: np.ndarray  # object (M,): the layer of a node's work; a stall's fault layer; "" (sync)
    call_offset: np.ndarray  # int64 (M,): GPU node's launch call, ns after its launcher starts
    sync_producer: np.ndarray  # int64 (S,): GPU node another stream waits for (event recorded)
    sync_consumer: np.ndarray  # int64 (S,): first GPU node launched after the stream wait
    wait_offset: np.ndarray  # int64 (S,): the cudaStreamWaitEvent, ns after its host op starts
    duration: np.ndarray  # int64 (M, ranks)
    schedule: Schedule


class _GpuProgram:
    """Accumulates GPU-program nodes and their dependencies."""

    def __init__(self):
        self.cols: dict[str, list[int]] = {
            k: [] for k in ("role", "origin", "resource", "launcher", "slot", "calls", "stall")
        }
        self.deps: list[list[tuple[int, int]]] = []
        self.sync: list[tuple[int, int]] = []  # (producer, consumer) across streams

    def add(
        self,
        role: int,
        origin: int,
        resource: str,
        deps: list[tuple[int, int]],
        launcher: int = -1,
        slot: int = 0,
        calls: int = 0,
        stall: int = -1,
    ) -> int:
        values = (role, origin, GPU_RESOURCES.index(resource), launcher, slot, calls, stall)
        for key, value in zip(self.cols, values, strict=True):
            self.cols[key].append(value)
        self.deps.append(deps)
        return len(self.deps) - 1

    def wait_for(self, consumer: int, producers: list[int]) -> None:
        """``consumer`` is the first work its host op launches after waiting on ``producers``."""
        self.sync += [(p, consumer) for p in producers]


def _stall_points(run: DeviceRun, faults: list[Fault]) -> dict[int, list[int]]:
    """Device node -> host_gaps faults whose stall precedes its launch."""
    program = run.program
    compute = (program.kind == INSTR) & np.isin(program.engine, ["tensor", "vector", "scalar"])
    points: dict[int, list[int]] = {}
    for index, fault in enumerate(faults):
        if fault.kind != "host_gaps":
            continue
        hits = compute & (program.phase == fault.phase)
        hits &= program.layer == layer_name(fault.layers[0])
        points.setdefault(int(np.flatnonzero(hits)[0]), []).append(index)
    return points


def run_gpu(run: DeviceRun, faults: list[Fault], seed: int) -> GpuRun:
    """Re-time ``run``'s program as a GPU job launched from one CPU thread per rank."""
    p = run.program
    g = _GpuProgram()
    mapped = np.full(len(p), -1, dtype=np.int64)  # device node -> GPU node that completes it
    trigger_host: dict[int, int] = {}
    stalls = _stall_points(run, faults)
    triggered = np.zeros(len(p), dtype=np.int64)  # DMA transfers each trigger starts
    src, dst = p.edges()
    dma_edges = p.kind[dst] == DMA
    np.add.at(triggered, src[dma_edges], 1)
    launched: dict[int, int] = {}  # trigger -> transfers launched so far
    engine = p.engine

    def waits(n: int, stream: str) -> tuple[list[tuple[int, int]], list[int]]:
        """GPU-side dependencies of device node ``n``, and the producers on other streams
        (each a cross-stream event wait, which pays the event resolution latency)."""
        out, other = [], []
        for d in p.dep_src[p.dep_ptr[n] : p.dep_ptr[n + 1]]:
            if mapped[d] < 0:  # a trigger: its CPU call is already a dependency
                continue
            node = int(mapped[d])
            same = GPU_RESOURCES[g.cols["resource"][node]] == stream
            out.append((node, 0 if same else hw.CROSS_STREAM_LATENCY_NS))
            if not same and node not in other:
                other.append(node)
        return out, other

    # A launched node's first dependency is its launch call; _schedule sets its latency.
    for n in range(len(p)):
        for fault_index in stalls.get(n, []):
            g.add(STALL, -1, CPU, [], stall=fault_index)
        if p.kind[n] == INSTR and p.opcode[n] in (
            "PSEUDO_DMA_TRIGGER",
            "PSEUDO_TRIGGER_COLLECTIVE",
        ):
            role = COPY_LAUNCH if p.opcode[n] == "PSEUDO_DMA_TRIGGER" else COLL_LAUNCH
            calls = int(triggered[n]) if role == COPY_LAUNCH else 1
            trigger_host[n] = g.add(role, n, CPU, [], calls=calls)
            mapped[n] = -1
            continue
        if p.kind[n] == INSTR:
            host = g.add(LAUNCH, n, CPU, [], calls=1)
            stream = gpu_stream(engine[n])
            deps, other = waits(n, stream)
            mapped[n] = g.add(KERNEL, n, stream, [(host, 0), *deps], launcher=host)
            g.wait_for(int(mapped[n]), other)
            continue
        trigger = int(p.dep_src[p.dep_ptr[n]])
        host = trigger_host[trigger]
        if p.kind[n] == DMA:
            slot = launched.get(trigger, 0)
            launched[trigger] = slot + 1
            stream = gpu_stream(engine[n])
            deps, other = waits(trigger, stream)
            mapped[n] = g.add(MEMCPY, n, stream, [(host, 0), *deps], launcher=host, slot=slot)
            if slot == 0:  # the host op waits once, before its first copy
                g.wait_for(int(mapped[n]), other)
        else:
            assert p.kind[n] == CC
            stream = gpu_stream(engine[n])
            deps, other = waits(trigger, stream)
            mapped[n] = g.add(NCCL, n, stream, [(host, 0), *deps], launcher=host)
            g.wait_for(int(mapped[n]), other)
    resource = np.array(g.cols["resource"])
    last_per_stream = [int(np.flatnonzero(resource == r)[-1]) for r in np.unique(resource) if r]
    g.add(SYNC, -1, CPU, [(i, 0) for i in last_per_stream])
    return _schedule(run, g, faults, seed)


def _host_timing(cols: dict[str, np.ndarray], sync: np.ndarray) -> dict[str, np.ndarray]:
    """Host op durations and where each CUDA call sits inside its host op.

    A host op runs: its pre time, one ``cudaStreamWaitEvent`` per producer its work waits for,
    then per launched node the launch call followed by a ``cudaEventRecord`` when another stream
    waits for that node, then its post time.
    """
    role, launcher, slot = cols["role"], cols["launcher"], cols["slot"]
    cost = np.zeros((len(role), 3), dtype=np.int64)
    for kind, costs in HOST_COST.items():
        cost[role == kind] = costs
    pre, call, post = cost.T
    producer, consumer = sync[:, 0], sync[:, 1]
    waits = np.bincount(launcher[consumer], minlength=len(role))
    recorded = np.zeros(len(role), dtype=bool)
    recorded[producer] = True
    records = np.bincount(launcher[recorded], minlength=len(role))
    host_ns = pre + waits * hw.STREAM_WAIT_CALL_NS + cols["calls"] * call + post
    host_ns += records * hw.EVENT_RECORD_CALL_NS
    gpu = np.flatnonzero(launcher >= 0)
    host = launcher[gpu]
    rec = pd.Series(recorded[gpu])
    records_before = (rec.groupby(host).cumsum() - rec).to_numpy(dtype=np.int64)
    call_offset = np.zeros(len(role), dtype=np.int64)
    call_offset[gpu] = pre[host] + waits[host] * hw.STREAM_WAIT_CALL_NS + slot[gpu] * call[host]
    call_offset[gpu] += records_before * hw.EVENT_RECORD_CALL_NS
    nth_wait = pd.Series(consumer).groupby(launcher[consumer]).cumcount().to_numpy()
    return {
        "host_ns": host_ns,
        "call_offset": call_offset,
        # GPU node may start LAUNCH_LATENCY after its call returns: latency from host op end.
        "launch_lat": hw.LAUNCH_LATENCY_NS - (host_ns[host] - call_offset[gpu] - call[host]),
        "wait_offset": pre[launcher[consumer]] + nth_wait * hw.STREAM_WAIT_CALL_NS,
    }


def _schedule(run: DeviceRun, g: _GpuProgram, faults: list[Fault], seed: int) -> GpuRun:
    cols = {k: np.array(v, dtype=np.int64) for k, v in g.cols.items()}
    role, origin = cols["role"], cols["origin"]
    sync = np.array(g.sync, dtype=np.int64).reshape(-1, 2)
    timing = _host_timing(cols, sync)
    duration = np.zeros((len(role), run.ranks), dtype=np.int64)
    on_device = origin >= 0
    duration[on_device] = run.duration[origin[on_device]]
    hosts = np.isin(role, list(HOST_COST))
    duration[hosts] = timing["host_ns"][hosts, None]
    layer = np.where(on_device, run.program.layer[np.maximum(origin, 0)], "").astype(object)
    for node in np.flatnonzero(role == STALL):  # a stall lasts its fault's time on its ranks
        fault = faults[cols["stall"][node]]
        duration[node] = np.where(fault.rank_mask(run.ranks), fault.stall_ns, 0)
        layer[node] = layer_name(fault.layers[0])  # it pauses the code of the layer it delays
    duration[role == SYNC] = hw.DEVICE_SYNC_NS
    lengths = np.array([len(d) for d in g.deps], dtype=np.int64)
    flat = [edge for deps in g.deps for edge in deps]
    dep_src = np.array([e[0] for e in flat], dtype=np.int64)
    dep_lat = np.array([e[1] for e in flat], dtype=np.int64)
    dep_ptr = np.concatenate([[0], np.cumsum(lengths)])
    gpu = np.flatnonzero(cols["launcher"] >= 0)
    assert (dep_src[dep_ptr[gpu]] == cols["launcher"][gpu]).all()
    dep_lat[dep_ptr[gpu]] = timing["launch_lat"]
    schedule = list_schedule(
        cols["resource"],
        role == NCCL,
        role == SYNC,
        dep_ptr,
        dep_src,
        dep_lat,
        duration,
        rank_origins(run.ranks, seed),
        cc_local_start=True,
    )
    return GpuRun(
        device=run,
        role=role.astype(np.int8),
        origin=origin,
        resource=cols["resource"].astype(np.int16),
        launcher=cols["launcher"],
        slot=cols["slot"],
        calls=cols["calls"],
        stall_fault=cols["stall"],
        layer=layer,
        call_offset=timing["call_offset"],
        sync_producer=sync[:, 0],
        sync_consumer=sync[:, 1],
        wait_offset=timing["wait_offset"],
        duration=duration,
        schedule=schedule,
    )
