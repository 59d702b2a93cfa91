"""Chrome/Kineto JSON writer: the GPU flavour of the step as PyTorch's profiler records it.

One gzip file per rank (``rank_<i>.json.gz``). The CPU thread shows ``cpu_op`` ranges with the
``cuda_runtime`` launch calls inside them, inside ``user_annotation`` ranges naming their layer
(as ``record_function("layer_1")`` writes them); GPU work shows as ``kernel`` and
``gpu_memcpy`` events on ``pid`` = device, ``tid`` = stream, joined to their launch by
``args.correlation`` and by ``ac2g`` flow events. NCCL kernels and the ``record_param_comms`` op
carry the collective arguments. Cross-stream dependencies show as CUDA event records and stream
waits (:mod:`chrome_sync`). ``ts``/``dur`` are µs with up to three decimals (ns precision)
relative to ``baseTimeNanoseconds``. Events are rendered column-wise into JSON text, never one
dict each.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import orjson
import pandas as pd

from tracediag.generator import chrome_names as names
from tracediag.generator import hardware as hw
from tracediag.generator.chrome_render import complete, flows
from tracediag.generator.chrome_sync import CallIds, call_ids, sync_events
from tracediag.generator.clocks import CHROME_BASE_TIME_NS
from tracediag.generator.gpu_flavour import (
    COLL_LAUNCH,
    COPY_LAUNCH,
    HOST_COST,
    KERNEL,
    LAUNCH,
    MEMCPY,
    NCCL,
    STALL,
    STREAM_IDS,
    SYNC,
    GpuRun,
)

STEP_NUMBER = 5  # the profiled step, after warm-up steps
HOST_PID_BASE = 2_117_400
_COST = pd.DataFrame(HOST_COST, index=["pre", "call", "post"]).T  # host op role -> costs


def _collective_args(run: GpuRun, rank: int, nodes: np.ndarray) -> pd.DataFrame:
    """The collective arguments of NCCL kernels / record_param_comms (``nodes``: NCCL nodes)."""
    ranks = run.device.ranks
    elements = run.device.program.elements[run.origin[nodes]]
    seq = STEP_NUMBER * len(nodes) + np.arange(len(nodes))  # earlier steps ran the same ones
    return pd.DataFrame(
        {
            "Collective name": "allreduce",
            "In msg nelems": elements,
            "Out msg nelems": elements,
            "In msg size": elements * 2,
            "Out msg size": elements * 2,
            "Group size": ranks,
            "dtype": "BFloat16",
            "In split size": "[]",
            "Out split size": "[]",
            "Process Group Name": "0",
            "Process Group Description": "default_pg",
            "Process Group Ranks": "[" + ", ".join(str(r) for r in range(ranks)) + "]",
            "Rank": rank,
            "Seq": seq,
        }
    )


def _external_ids(run: GpuRun) -> np.ndarray:
    """The ``External id`` of every node's host op (1 is the step annotation)."""
    return np.arange(len(run.role)) + 2


def _layer_annotations(run: GpuRun, start, end, pid: int) -> pd.Series:
    """``record_function`` ranges around each run of consecutive host ops of one layer.

    Named like the device formats' layers (``layer_0``, ..., ``loss``, ``optimizer``). A layer's
    code may open several ranges: the next layer's weight prefetch runs in between. A host stall
    sits in the range of the layer it delays. Ranges only wrap host ops: they cost no time.
    """
    cpu = np.flatnonzero(np.isin(run.role, [LAUNCH, COPY_LAUNCH, COLL_LAUNCH, STALL]))
    layer = run.layer[cpu]
    opens = np.flatnonzero(np.r_[True, layer[1:] != layer[:-1]])
    first, last = cpu[opens], cpu[np.r_[opens[1:] - 1, len(cpu) - 1]]
    external = len(run.role) + 2 + np.arange(len(opens))  # after every host op's id
    return complete(
        "user_annotation",
        layer[opens],
        pid,
        pid,
        start[first],
        end[last] - start[first],
        pd.DataFrame({"External id": external}),
    )


def _cpu_events(run: GpuRun, rank: int, start, end, pid: int, ids: CallIds) -> list[pd.Series]:
    p = run.device.program
    role, external = run.role, _external_ids(run)
    host = np.flatnonzero(np.isin(role, [LAUNCH, COPY_LAUNCH, COLL_LAUNCH]))
    sync = np.flatnonzero(role == SYNC)
    first, last = start[host].min(), end[sync].max()
    op = pd.Series(p.hlo_name[run.origin[host]]).str.rsplit(".", n=1).str[0]
    aten = op.map({k: v[0] for k, v in names.OPS.items()}).to_numpy()
    cpu_name = np.select(
        [role[host] == COPY_LAUNCH, role[host] == COLL_LAUNCH],
        ["aten::copy_", "c10d::allreduce_"],
        aten,
    )
    coll = host[role[host] == COLL_LAUNCH]
    comms_start = start[coll] + hw.COLLECTIVE_PRE_NS // 2
    comms_args = _collective_args(run, rank, np.flatnonzero(role == NCCL))
    comms_args.insert(0, "External id", external[coll])
    return [
        complete(
            "user_annotation",
            f"ProfilerStep#{STEP_NUMBER}",
            pid,
            pid,
            [first],
            [last - first],
            pd.DataFrame({"External id": [1]}),
        ),
        _layer_annotations(run, start, end, pid),
        complete(
            "cpu_op",
            cpu_name,
            pid,
            pid,
            start[host],
            end[host] - start[host],
            pd.DataFrame({"External id": external[host]}),
        ),
        complete(
            "cpu_op",
            "record_param_comms",
            pid,
            pid,
            comms_start,
            end[coll] - hw.COLLECTIVE_POST_NS // 2 - comms_start,
            comms_args,
        ),
        complete(
            "cuda_runtime",
            "cudaDeviceSynchronize",
            pid,
            pid,
            start[sync],
            end[sync] - start[sync],
            pd.DataFrame({"External id": external[sync], "correlation": ids.node[sync]}),
        ),
    ]


def _gpu_events(
    run: GpuRun, rank: int, start, end, pid: int, device: int, ids: CallIds
) -> list[pd.Series]:
    """Launch calls, kernels, memcpys and their ac2g flows."""
    p = run.device.program
    role, origin = run.role, run.origin
    external = _external_ids(run)
    gpu = np.flatnonzero(np.isin(role, [KERNEL, MEMCPY, NCCL]))
    corr = ids.node[gpu]
    launcher = run.launcher[gpu]
    cost = _COST.reindex(role[launcher])
    call_ts = start[launcher] + run.call_offset[gpu]
    is_copy = role[gpu] == MEMCPY
    stream = STREAM_IDS[run.resource[gpu]]
    events = [
        complete(
            "cuda_runtime",
            np.where(is_copy, "cudaMemcpyAsync", "cudaLaunchKernel"),
            pid,
            pid,
            call_ts,
            cost["call"].to_numpy(),
            pd.DataFrame(
                {
                    "External id": external[launcher],
                    "correlation": corr,
                    "cbid": np.where(is_copy, 41, 211),
                }
            ),
        ),
        flows("s", corr, pid, pid, call_ts),
        flows("f", corr, device, stream, start[gpu]),
    ]
    op = pd.Series(p.hlo_name[origin[gpu]]).str.rsplit(".", n=1).str[0].to_numpy()
    for kind in (KERNEL, MEMCPY, NCCL):
        rows = role[gpu] == kind
        nodes = gpu[rows]
        base = pd.DataFrame(
            {
                "External id": external[launcher[rows]],
                "queued": 0,
                "device": device,
                "context": 1,
                "stream": stream[rows],
                "correlation": corr[rows],
            }
        )
        dur = end[nodes] - start[nodes]
        if kind == MEMCPY:
            nbytes = p.nbytes[origin[nodes]]
            args = base.assign(bytes=nbytes, **{"memory bandwidth (GB/s)": nbytes / dur})
            name = pd.Series(p.direction[origin[nodes]]).map(names.MEMCPY).to_numpy()
            events.append(
                complete("gpu_memcpy", name, device, stream[rows], start[nodes], dur, args)
            )
            continue
        if kind == KERNEL:
            name = pd.Series(op[rows]).map({k: v[1] for k, v in names.OPS.items()}).to_numpy()
            family = np.where(name == names.GEMM, "gemm", "elementwise")
            extra = pd.DataFrame(
                [names.GEMM_ARGS, names.ELEMENTWISE_ARGS], index=["gemm", "elementwise"]
            ).reindex(family)
        else:
            name = names.NCCL_KERNEL
            extra = pd.concat(
                [pd.DataFrame([names.NCCL_ARGS] * len(nodes)), _collective_args(run, rank, nodes)],
                axis=1,
            )
        args = pd.concat([base, extra.reset_index(drop=True)], axis=1)
        events.append(complete("kernel", name, device, stream[rows], start[nodes], dur, args))
    return events


def _header(rank: int, ranks: int, device: int) -> dict:
    members = list(range(ranks))
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": device, **names.DEVICE_PROPERTIES}],
        "distributedInfo": {
            "backend": "nccl",
            "rank": rank,
            "world_size": ranks,
            "pg_count": 1,
            "pg_config": [
                {
                    "pg_name": "0",
                    "pg_desc": "default_pg",
                    "backend_config": "cuda:nccl",
                    "pg_size": ranks,
                    "ranks": members,
                }
            ],
            "nccl_version": "2.21.5",
        },
        "baseTimeNanoseconds": CHROME_BASE_TIME_NS,
        "displayTimeUnit": "ms",
        "traceName": f"rank_{rank}.json.gz",
    }


def _metadata_events(pid: int, device: int, streams: list[int]) -> list[str]:
    rows = [
        {
            "name": "process_name",
            "ph": "M",
            "ts": 0,
            "pid": pid,
            "tid": 0,
            "args": {"name": f"python3 {pid}"},
        },
        {
            "name": "thread_name",
            "ph": "M",
            "ts": 0,
            "pid": pid,
            "tid": pid,
            "args": {"name": "thread 1 (python3)"},
        },
        {
            "name": "process_name",
            "ph": "M",
            "ts": 0,
            "pid": device,
            "tid": 0,
            "args": {"name": f"GPU {device}"},
        },
    ]
    rows += [
        {
            "name": "thread_name",
            "ph": "M",
            "ts": 0,
            "pid": device,
            "tid": s,
            "args": {"name": f"stream {s}"},
        }
        for s in streams
    ]
    return [orjson.dumps(r).decode() for r in rows]


def rank_json(run: GpuRun, rank: int, offset: int) -> bytes:
    """The Kineto JSON document of ``rank``, times on its host clock (true time + ``offset``)."""
    start = run.schedule.start[:, rank] + offset
    end = run.schedule.end[:, rank] + offset
    pid, device = HOST_PID_BASE + rank, rank % hw.GPUS_PER_HOST
    streams = sorted(int(s) for s in STREAM_IDS[np.unique(run.resource)] if s >= 0)
    text = _metadata_events(pid, device, streams)
    ids = call_ids(run)
    for series in (
        *_cpu_events(run, rank, start, end, pid, ids),
        *_gpu_events(run, rank, start, end, pid, device, ids),
        *sync_events(run, ids, start, pid, device, _external_ids(run)),
    ):
        text += series.tolist()
    header = orjson.dumps(_header(rank, run.device.ranks, device)).decode()
    return (header[:-1] + ',"traceEvents":[\n' + ",\n".join(text) + "\n]}\n").encode()


def write_rank(run: GpuRun, rank: int, offset: int, path: Path) -> Path:
    """Write one rank's trace as gzip with a fixed header (same trace, same bytes)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as f:
        f.write(rank_json(run, rank, offset))
    return path
