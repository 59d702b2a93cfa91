"""The report's and the rules' shortcuts give what the long way gives: MFU by track and kind
code, duration tables of device-only traces, busy time by sorted runs, the binding chain
walked item by item, dtype patterns searched on GPU kernels' names only, path runs by code."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd

from tests.trace_factory import RankSpec, build
from tracediag.analysis.durations import layer_durations, op_durations
from tracediag.analysis.intervals import busy_ns_by_group
from tracediag.analysis.path_runs import runs
from tracediag.analysis.utilization import _equals, mfu_by_rank
from tracediag.graph.critical_path import _bind_chain
from tracediag.model import numeric_formats as dtypes
from tracediag.model import schema as S


def test_mfu_counts_the_tensor_engine_else_all_compute():
    r0, r1, r2 = RankSpec(0), RankSpec(1), RankSpec(2)
    r0.add("mm", "tensor", "compute", 0, 10, flops=3e5)
    r0.add("mm", "tensor", "compute", 10, 20, flops=2e5)
    r0.add("mm", "tensor", "compute", 20, 30, flops=np.nan)  # no FLOPs recorded: not counted
    r0.add("add", "vector", "compute", 0, 10, flops=1e5)  # a tensor engine is the main unit
    r1.add("add", "vector", "compute", 0, 10, flops=2.5e5)  # none: all compute counts
    r1.add("w", "q0", "dma", 0, 10, flops=1e9)  # not compute
    r2.add("mm", "tensor", "compute", 0, 10)
    trace = build(r0, r1, r2)
    peak = SimpleNamespace(peak_flops=1e12)  # 1e6 FLOPs per 1000 ns step
    got = mfu_by_rank(trace, {0: 1000, 1: 1000, 2: 1000}, {0: peak, 1: peak, 2: peak})
    assert got == {0: 50.0, 1: 25.0, 2: None}
    assert mfu_by_rank(trace, {0: 1000, 1: 0, 2: 1000}, {0: None, 1: peak, 2: peak}) == {
        0: None,
        1: None,
        2: None,
    }


def test_text_equality_by_category_or_by_row():
    values = ["compute", None, "dma", "compute"]
    for col in (pd.Series(values, dtype="category"), pd.Series(values, dtype=object)):
        assert _equals(col, "compute").tolist() == [True, False, False, True]


def _device_trace() -> S.Trace:
    """Device events only (the duration tables read every row), one without an operator."""
    specs = []
    for r in (0, 1):
        s = RankSpec(r)
        s.add("MATMUL", "tensor", "compute", 0, 10 + r, op="dot.1", layer="layer_0")
        s.add("MATMUL", "tensor", "compute", 20, 50, op="dot.1", layer="layer_1")
        s.add("w", "q0", "dma", 0, 5, layer="layer_0")
        specs.append(s)
    return build(*specs)


def test_duration_tables_of_a_device_only_trace():
    trace = _device_trace()
    assert op_durations(trace) == [
        {"op": "dot.1", "kind": "compute", "count": 4, "total_ns": 81, "mean_ns": 20.2,
         "std_ns": 11.3},
        {"op": "w", "kind": "dma", "count": 2, "total_ns": 10, "mean_ns": 5.0, "std_ns": 0.0},
    ]  # fmt: skip
    assert layer_durations(trace) == [
        {"layer": "layer_1", "count": 2, "total_ns": 60, "mean_ns": 30.0, "std_ns": 0.0},
        {"layer": "layer_0", "count": 2, "total_ns": 31, "mean_ns": 15.5, "std_ns": 0.7},
    ]  # fmt: skip


def test_duration_tables_skip_host_work():
    r0 = RankSpec(0)
    r0.add("launch", "main", "host", 0, 100, op="dot.1")
    r0.add("MATMUL", "tensor", "compute", 100, 130, op="dot.1")
    r0.add("note", "main", "marker", 5, 5)
    assert op_durations(build(r0)) == [
        {"op": "dot.1", "kind": "compute", "count": 1, "total_ns": 30, "mean_ns": 30.0,
         "std_ns": 0.0}
    ]  # fmt: skip


def _union_by_brute_force(group, start, end) -> dict[int, int]:
    out = {}
    for g in np.unique(group).tolist():
        covered = set()
        for s, e in zip(start[group == g].tolist(), end[group == g].tolist(), strict=True):
            covered.update(range(s, e))
        out[g] = len(covered)
    return out


def test_busy_time_per_group_is_the_union_of_its_intervals():
    rng = np.random.default_rng(7)
    for dtype in (np.int32, np.int64):
        group = rng.integers(3, 9, 300).astype(dtype)
        start = rng.integers(0, 2000, 300)
        end = start + rng.integers(0, 60, 300)
        busy = busy_ns_by_group(group, start, end)
        assert busy.index.dtype == dtype and busy.dtype == np.int64
        assert busy.to_dict() == _union_by_brute_force(group, start, end)
    assert busy_ns_by_group(np.array([5]), np.array([10]), np.array([25])).to_dict() == {5: 15}


def _chain_by_list(bind, start, node, t0) -> list[int]:
    parent = np.where(start <= t0, -1, bind).tolist()
    chain = []
    for _ in range(len(parent)):
        chain.append(node)
        node = parent[node]
        if node < 0:
            break
    return chain


def test_binding_chain_short_long_and_cyclic():
    n = 64
    start = np.arange(n, dtype=np.int64) * 10
    bind = np.arange(n, dtype=np.int64) - 1  # one chain: node k waits for k - 1
    short = _bind_chain(bind, start, 3, 0)  # shorter than n / 16: item by item
    assert short.tolist() == [3, 2, 1, 0] == _chain_by_list(bind, start, 3, 0)
    assert _bind_chain(bind, start, 3, 10).tolist() == [3, 2, 1]  # node 1 starts at t0: the end
    long = _bind_chain(bind, start, n - 1, -1)  # past n / 16: by a list of every parent
    assert long.tolist() == list(range(n - 1, -1, -1)) == _chain_by_list(bind, start, n - 1, -1)
    cycle = np.roll(np.arange(n, dtype=np.int64), 1)  # 0 <- n-1 <- ... <- 1 <- 0
    looped = _bind_chain(cycle, start, 5, -1)
    assert len(looped) == n  # one step per node, then stopped
    assert looped.tolist() == _chain_by_list(cycle, start, 5, -1)


def _gpu_trace() -> S.Trace:
    s = RankSpec(0, fmt="chrome", hardware="H100")
    s.add("aten::mm gemm", "main", "host", 0, 50)  # a host op named like a kernel
    s.add("sm90_xmma_gemm_bf16bf16_bf16f32", "gpu0/stream 7", "compute", 10, 40)
    s.add("ampere_fp16_s16816gemm_fp16_128x128", "gpu0/stream 7", "compute", 40, 60)
    s.add("sm90_xmma_gemm_bf16bf16_bf16f32", "gpu0/stream 7", "compute", 60, 90, dtype="fp32")
    s.add("vectorized_elementwise_kernel", "gpu0/stream 7", "compute", 90, 95)
    return build(s)


def test_gpu_kernel_names_give_matmuls_and_dtypes():
    trace = _gpu_trace()
    assert dtypes.matmul_events(trace).tolist() == [False, True, True, True, False]
    assert dtypes.names(dtypes.event_dtypes(trace)).tolist() == [
        "unknown", "bf16", "fp16", "fp32", "unknown"
    ]  # fmt: skip


def test_neuron_trace_has_tensor_matmuls_without_kernel_names():
    trace = _device_trace()
    assert dtypes.matmul_events(trace).tolist() == [True, True, False] * 2
    assert (dtypes.event_dtypes(trace).codes == -1).all()


def test_path_runs_by_category_code():
    cats = ["compute", "dma_wait", "dma_transfer", "compute", "dma_wait", "gap"]
    seg = pd.DataFrame(
        {
            "category": pd.Categorical(cats, categories=["compute", "dma_wait", "dma_transfer",
                                                          "gap"]),
            "rank": [0, 0, 1, 1, 1, 0],
            "start_ns": [50, 40, 30, 20, 10, 0],
            "end_ns": [60, 50, 40, 30, 20, 10],
            "dur_ns": [10, 10, 10, 10, 10, 10],
        }
    )  # fmt: skip
    out = runs(seg, {"dma_wait", "dma_transfer"})
    assert out["first"].tolist() == [1, 4] and out["last"].tolist() == [2, 4]
    assert out["ns_dma_wait"].tolist() == [10, 10]
    assert out["ns_dma_transfer"].tolist() == [10, 0]
    assert out["waiter"].tolist() == [0, 3] and out["rank"].tolist() == [1, 1]
    assert runs(seg, {"idle"}).empty
