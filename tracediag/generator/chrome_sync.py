"""The CPU thread's CUDA API calls in call order, and the cross-stream event syncs among them.

Correlation ids number every CUDA API call of a rank's CPU thread in call order, as CUPTI's do:
launches, ``cudaEventRecord``, ``cudaStreamWaitEvent`` and the final ``cudaDeviceSynchronize``.
A reader finds what a wait waited for by that order: the work recorded is the last work launched
on ``wait_on_stream`` before the record call, the work released the first work launched on the
waiting stream after the wait call.

Each cross-stream dependency of the simulated program is written as Kineto writes it (compare
``kineto_event_sync.json.gz`` and Kineto's ``CudaSyncActivity``): a ``cudaEventRecord`` right
after the producer's launch (``cbid`` 135, with the ``f`` flow point Kineto gives it), a
``cudaStreamWaitEvent`` before the consumer's launch (``cbid`` 147, a flow start), and the CUPTI
``Stream Wait Event`` record on the waiting stream (``cat: cuda_sync``) naming the stream, the
producer's stream and the correlation id of the matching record call.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracediag.generator import hardware as hw
from tracediag.generator.chrome_render import complete, flows
from tracediag.generator.gpu_flavour import HOST_COST, STREAM_IDS, SYNC, GpuRun

CORRELATION_BASE = 100_000
EVENT_RECORD_CBID = 135  # CUPTI_RUNTIME_TRACE_CBID_cudaEventRecord_v3020
STREAM_WAIT_EVENT_CBID = 147  # CUPTI_RUNTIME_TRACE_CBID_cudaStreamWaitEvent_v3020
#: CUPTI's synchronisation record starts inside the API call and ends with it (as real traces show).
CUPTI_SYNC_LAG_NS = 1_000


@dataclass(frozen=True)
class CallIds:
    """Correlation ids of a rank's CUDA API calls (the same on every rank)."""

    node: np.ndarray  # int64 (M,): launch call of a GPU node, the call of the SYNC node, else -1
    producers: np.ndarray  # int64 (R,): GPU nodes recorded by an event, in call order
    record: np.ndarray  # int64 (R,): their cudaEventRecord
    wait: np.ndarray  # int64 (S,): cudaStreamWaitEvent of each (producer, consumer) pair


def _launch_call_ns(run: GpuRun) -> np.ndarray:
    """Duration of each node's launch call (its launcher's call cost; 0 for non-launched)."""
    per_role = np.zeros(int(run.role.max()) + 1, dtype=np.int64)
    for role, (_, call, _) in HOST_COST.items():
        per_role[role] = call
    return np.where(run.launcher >= 0, per_role[run.role[np.maximum(run.launcher, 0)]], 0)


def record_offsets(run: GpuRun, producers: np.ndarray) -> np.ndarray:
    """ns from the host op's start to each producer's cudaEventRecord (its launch returned)."""
    return run.call_offset[producers] + _launch_call_ns(run)[producers]


def call_ids(run: GpuRun) -> CallIds:
    """Number every CUDA API call of the CPU thread in call order."""
    launched = np.flatnonzero(run.launcher >= 0)
    syncs = np.flatnonzero(run.role == SYNC)
    producers = np.unique(run.sync_producer)
    # Host ops run one after another in node order; calls inside one in offset order.
    host = np.concatenate(
        [run.launcher[launched], syncs, run.launcher[producers], run.launcher[run.sync_consumer]]
    )
    offset = np.concatenate(
        [
            run.call_offset[launched],
            np.zeros(len(syncs), dtype=np.int64),
            record_offsets(run, producers),
            run.wait_offset,
        ]
    )
    corr = np.empty(len(host), dtype=np.int64)
    corr[np.lexsort((offset, host))] = CORRELATION_BASE + np.arange(len(host))
    node = np.full(len(run.role), -1, dtype=np.int64)
    cut = np.cumsum([len(launched), len(syncs), len(producers)])
    node[launched], node[syncs] = corr[: cut[0]], corr[cut[0] : cut[1]]
    return CallIds(
        node=node, producers=producers, record=corr[cut[1] : cut[2]], wait=corr[cut[2] :]
    )


def sync_events(
    run: GpuRun, ids: CallIds, start: np.ndarray, pid: int, device: int, external: np.ndarray
) -> list[pd.Series]:
    """Event records, stream waits and their CUPTI records (``start``: node starts, this rank)."""
    producers, consumer = ids.producers, run.sync_consumer
    record_host, wait_host = run.launcher[producers], run.launcher[consumer]
    record_ts = start[record_host] + record_offsets(run, producers)
    wait_ts = start[wait_host] + run.wait_offset
    which = np.searchsorted(producers, run.sync_producer)  # the record each wait waits on
    waiting = STREAM_IDS[run.resource[consumer]]
    cupti_ts = wait_ts + CUPTI_SYNC_LAG_NS
    cupti_args = pd.DataFrame(
        {
            "External id": external[wait_host],
            "cuda_sync_kind": "Stream Wait Event",
            "wait_on_stream": STREAM_IDS[run.resource[run.sync_producer]],
            "wait_on_cuda_event_record_corr_id": ids.record[which],
            "wait_on_cuda_event_id": which + 1,  # one CUDA event per recorded producer
            "stream": waiting,
            "correlation": ids.wait,
            "device": device,
            "context": 1,
        }
    )
    return [
        complete(
            "cuda_runtime",
            "cudaEventRecord",
            pid,
            pid,
            record_ts,
            hw.EVENT_RECORD_CALL_NS,
            pd.DataFrame(
                {
                    "External id": external[record_host],
                    "cbid": EVENT_RECORD_CBID,
                    "correlation": ids.record,
                }
            ),
        ),
        flows("f", ids.record, pid, pid, record_ts),
        complete(
            "cuda_runtime",
            "cudaStreamWaitEvent",
            pid,
            pid,
            wait_ts,
            hw.STREAM_WAIT_CALL_NS,
            pd.DataFrame(
                {
                    "External id": external[wait_host],
                    "cbid": STREAM_WAIT_EVENT_CBID,
                    "correlation": ids.wait,
                }
            ),
        ),
        flows("s", ids.wait, pid, pid, wait_ts),
        complete(
            "cuda_sync",
            "Stream Wait Event",
            device,
            waiting,
            cupti_ts,
            hw.STREAM_WAIT_CALL_NS - CUPTI_SYNC_LAG_NS,
            cupti_args,
        ),
        flows("f", ids.wait, device, waiting, cupti_ts),
    ]
