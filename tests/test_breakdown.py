"""Temporal breakdown: hand-made cases, HTA's published numbers, and real traces re-computed."""

from __future__ import annotations

import gzip
import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.chrome_helpers import shared
from tracediag.analysis.temporal_breakdown import (
    breakdown_of_intervals,
    temporal_breakdown,
    union_lengths,
)
from tracediag.model import schema as S
from tracediag.model.assembly import RankPart, assemble
from tracediag.parsers import chrome_json


def test_union_lengths_hand_cases():
    group = np.array([0, 0, 0, 0, 1, 1, 2])
    start = np.array([10, 0, 5, 40, 0, 10, 7])
    end = np.array([20, 5, 12, 45, 10, 20, 7])
    # group 0: [0,5) [5,12) [10,20) touch and overlap -> [0,20) plus [40,45); group 1: [0,20);
    # group 2: an empty interval; group 3: nothing.
    assert union_lengths(group, start, end, 4).tolist() == [25, 20, 0, 0]


def test_breakdown_splits_non_compute_into_communication_then_memory():
    # compute [0,10) [20,30); collective [5,25) hides [5,10) and [20,25) under compute;
    # memory [24,40) is under the collective until 25 and under compute until 30.
    bd = breakdown_of_intervals(
        np.array([3, 3, 3, 3]),
        np.array([0, 20, 5, 24]),
        np.array([10, 30, 25, 40]),
        np.array(["compute", "compute", "communication", "memory"], dtype=object),
    )
    row = bd.loc[3]
    assert (row.compute_ns, row.communication_ns, row.memory_ns, row.idle_ns, row.total_ns) == (
        20,
        10,
        10,
        0,
        40,
    )
    assert (row.compute_pct, row.communication_pct, row.memory_pct, row.idle_pct) == (
        50.0,
        25.0,
        25.0,
        0.0,
    )


def synthetic_kineto() -> dict:
    """One GPU, three streams, integer µs; HTA 0.5.0 was run on exactly this trace (see below)."""

    def work(cat, name, ts, dur, stream, corr):
        args = {"device": 0, "stream": stream, "correlation": corr, "External id": corr}
        return {
            "ph": "X",
            "cat": cat,
            "name": name,
            "pid": 0,
            "tid": stream,
            "ts": ts,
            "dur": dur,
            "args": args,
        }

    def launch(name, ts, corr):
        args = {"correlation": corr, "External id": corr}
        return {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": name,
            "pid": 10,
            "tid": 10,
            "ts": ts,
            "dur": 2,
            "args": args,
        }

    gpu = [
        work("kernel", "gemm_a", 100, 50, 7, 1),
        work("kernel", "gemm_b", 160, 40, 7, 2),
        work("kernel", "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)", 120, 100, 20, 3),
        work("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 210, 30, 7, 4),
        work("gpu_memset", "Memset (Device)", 300, 10, 13, 5),
        work("kernel", "elementwise_c", 305, 20, 13, 6),
        work("kernel", "gemm_d", 400, 100, 7, 7),
    ]
    cpu = [
        launch(
            "cudaMemcpyAsync" if g["cat"] == "gpu_memcpy" else "cudaLaunchKernel",
            g["ts"] - 10,
            g["args"]["correlation"],
        )
        for g in gpu
    ]
    return {"schemaVersion": 1, "distributedInfo": {"rank": 0}, "traceEvents": cpu + gpu}


#: HTA 0.5.0 ``TraceAnalysis.get_temporal_breakdown`` on the synthetic trace, in µs:
#: idle 135, compute 210, non-compute 55, kernel time 400.
HTA_SYNTHETIC_US = {"idle": 135, "compute": 210, "non_compute": 55, "total": 400}


def test_synthetic_trace_matches_hta_and_hand_computation(tmp_path):
    path = tmp_path / "rank_0.json"
    path.write_text(json.dumps(synthetic_kineto()))
    bd = temporal_breakdown(assemble(chrome_json.read(path)))
    row = bd.loc[0]
    # By hand (µs): compute [100,150) [160,200) [305,325) [400,500) = 210; the all-reduce adds
    # [150,160) and [200,220) = 30; the memcpy adds [220,240) and the memset [300,305) = 25.
    assert (row.compute_ns, row.communication_ns, row.memory_ns, row.idle_ns, row.total_ns) == (
        210_000,
        30_000,
        25_000,
        135_000,
        400_000,
    )
    assert row.compute_ns == HTA_SYNTHETIC_US["compute"] * 1000
    assert row.idle_ns == HTA_SYNTHETIC_US["idle"] * 1000
    assert row.communication_ns + row.memory_ns == HTA_SYNTHETIC_US["non_compute"] * 1000
    assert row.total_ns == HTA_SYNTHETIC_US["total"] * 1000
    assert row[
        ["compute_pct", "communication_pct", "memory_pct", "idle_pct"]
    ].sum() == pytest.approx(100.0)


def test_neuron_ranks_split_core_time():
    tracks = pd.DataFrame(
        {
            S.RANK: [0, 0, 0, 0],
            S.TRACK_NAME: ["tensor", "vector", "qSyncIO0", "cc0"],
            S.TRACK_KIND: pd.Categorical(
                ["compute_engine", "compute_engine", "dma_queue", "cc_core"],
                categories=S.TRACK_KINDS,
            ),
            S.ENGINE: ["tensor", "vector", "dma", "cc"],
            S.DEVICE: ["nd0/nc0"] * 4,
            S.CLOCK: ["nc0"] * 4,
        }
    )
    # compute: tensor [0,100), vector [50,150), tensor [290,300) -> 160; the collective [140,200)
    # adds [150,200) = 50; the DMA [190,260) adds [200,260) = 60; the semaphore wait (kind sync)
    # is not activity: window [0,300) less 270 busy = 30 idle.
    rows = [
        (0, "compute", 0, 100),
        (1, "compute", 50, 100),
        (3, "collective", 140, 60),
        (2, "dma", 190, 70),
        (1, "sync", 260, 30),
        (0, "compute", 290, 10),
    ]
    events = pd.DataFrame(
        {
            "track_label": [tracks[S.TRACK_NAME][t] for t, *_ in rows],
            "track_kind": [tracks[S.TRACK_KIND][t] for t, *_ in rows],
            S.KIND: pd.Categorical([k for _, k, _, _ in rows], categories=S.KINDS),
            S.NAME: pd.Categorical([f"e{i}" for i in range(len(rows))]),
            S.TS: [s for *_, s, _ in rows],
            S.DUR: [d for *_, d in rows],
        }
    )
    trace = assemble([RankPart(meta=S.RankMeta(rank=0, format="neuron"), events=events)])
    row = temporal_breakdown(trace).loc[0]
    assert (row.compute_ns, row.communication_ns, row.memory_ns, row.idle_ns, row.total_ns) == (
        160,
        50,
        60,
        30,
        300,
    )


def test_ranks_without_device_activity_are_left_out(tmp_path):
    path = tmp_path / "cpu_only.json"
    path.write_text(
        json.dumps(
            [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1}]
        )
    )
    bd = temporal_breakdown(assemble(chrome_json.read(path)))
    assert bd.empty and bd.index.name == "rank"


# ---- real traces -------------------------------------------------------------------------------


def _merged_length(intervals: list[tuple[int, int]]) -> int:
    """Union length by the textbook loop (independent of the vectorised code)."""
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + (cur_e - cur_s if cur_e is not None else 0)


def _raw_events(path: Path) -> list[dict]:
    return json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]


def _expected_from_raw(path: Path) -> dict[str, int]:
    """Our definition re-computed from the raw JSON: kernels, memcpy, memset; NCCL by name."""
    by = {"compute": [], "communication": [], "memory": []}
    for e in _raw_events(path):
        if e.get("ph") != "X" or e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        s = round(e["ts"] * 1000)
        iv = (s, s + round(e["dur"] * 1000))
        if e["cat"] != "kernel":
            by["memory"].append(iv)
        elif e["name"].lower().startswith(("nccl", "rccl")):
            by["communication"].append(iv)
        else:
            by["compute"].append(iv)
    everything = by["compute"] + by["communication"] + by["memory"]
    window = max(e for _, e in everything) - min(s for s, _ in everything)
    compute = _merged_length(by["compute"])
    compute_comm = _merged_length(by["compute"] + by["communication"])
    busy = _merged_length(everything)
    return {
        "compute_ns": compute,
        "communication_ns": compute_comm - compute,
        "memory_ns": busy - compute_comm,
        "idle_ns": window - busy,
        "total_ns": window,
    }


@pytest.mark.parametrize(
    "name",
    [
        "kineto_alexnet_1rank.json.gz",
        "kineto_sampled_rank-0.json.gz",
        "kineto_sampled_rank-1.json.gz",
        "kineto_amd_mi250_minitoy.json.gz",
    ],
)
def test_real_traces_agree_with_an_independent_computation(name):
    path = shared(name)
    parts = chrome_json.read(path)
    bd = temporal_breakdown(assemble(parts))
    row = bd.loc[parts[0].meta.rank]
    assert {
        k: int(row[k])
        for k in ("compute_ns", "communication_ns", "memory_ns", "idle_ns", "total_ns")
    } == _expected_from_raw(path)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (
            "kineto_alexnet_1rank.json.gz",
            (10_630_000, 0, 55_511_000, 12_854_103_000, 12_920_244_000),
        ),
        (
            "kineto_sampled_rank-0.json.gz",
            (210_320_000, 336_983_000, 353_000, 675_191_000, 1_222_847_000),
        ),
    ],
)
def test_real_trace_numbers(name, expected):
    bd = temporal_breakdown(assemble(chrome_json.read(shared(name))))
    row = bd.iloc[0]
    assert (
        tuple(
            int(row[c])
            for c in ("compute_ns", "communication_ns", "memory_ns", "idle_ns", "total_ns")
        )
        == expected
    )
    assert row[
        ["compute_pct", "communication_pct", "memory_pct", "idle_pct"]
    ].sum() == pytest.approx(100.0)


#: HTA 0.5.0 ``get_temporal_breakdown`` output (µs) on these files, with HTA's own event selection.
HTA_PUBLISHED_US = {
    "kineto_alexnet_1rank.json.gz": {
        "idle": 12929684,
        "compute": 10637,
        "non_compute": 55690,
        "total": 12996011,
    },
    "kineto_event_sync.json.gz": {"idle": 207, "compute": 49, "non_compute": 7, "total": 263},
}
_HTA_COMM = re.compile(r"^nccl.*Kernel")
_HTA_NOT_COMPUTE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)|(^dma)")


@pytest.mark.parametrize("name", sorted(HTA_PUBLISHED_US))
def test_same_intervals_give_hta_numbers(name):
    """Fed HTA's selection (every event with args.stream != -1, CUPTI sync records included, float
    times rounded to whole µs), our union arithmetic reproduces HTA's published numbers exactly."""
    start, end, category = [], [], []
    for e in _raw_events(shared(name)):
        if (
            e.get("dur") is None
            or e.get("cat") in (None, "Trace")
            or e.get("args", {}).get("stream", -1) == -1
        ):
            continue
        s, t = e["ts"], e["ts"] + e["dur"]
        if isinstance(s, float):
            s, t = math.ceil(s), math.floor(t)
        start.append(s)
        end.append(t)
        n = e["name"]
        category.append(
            "communication"
            if _HTA_COMM.match(n)
            else "memory"
            if _HTA_NOT_COMPUTE.match(n)
            else "compute"
        )
    row = breakdown_of_intervals(
        np.zeros(len(start), dtype=np.int64),
        np.array(start),
        np.array(end),
        np.array(category, dtype=object),
    ).loc[0]
    hta = HTA_PUBLISHED_US[name]
    assert (row.idle_ns, row.compute_ns, row.communication_ns + row.memory_ns, row.total_ns) == (
        hta["idle"],
        hta["compute"],
        hta["non_compute"],
        hta["total"],
    )


def test_alexnet_differs_from_hta_only_by_cupti_sync_records():
    """HTA counts the cuda_sync records (on streams 7, 20 and 'Context Sync' on 4294967295) as GPU
    time; without them its window is ours."""
    path = shared("kineto_alexnet_1rank.json.gz")
    row = temporal_breakdown(assemble(chrome_json.read(path))).loc[0]
    hta_total_ns = HTA_PUBLISHED_US[path.name]["total"] * 1000
    assert row.total_ns < hta_total_ns
    records = [
        e
        for e in _raw_events(path)
        if e.get("cat") == "cuda_sync" and e["args"].get("stream", -1) != -1
    ]
    gpu = [e for e in _raw_events(path) if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    with_records = max(e["ts"] + e["dur"] for e in records + gpu) - min(
        e["ts"] for e in records + gpu
    )
    assert with_records * 1000 == hta_total_ns
