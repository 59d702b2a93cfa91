"""Layers of Kineto events from record_function annotations and nn.Module ranges."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tests.chrome_helpers import X, read_one, shared, write
from tracediag.model import schema as S

GPU = {"pid": 0, "tid": 7}


def _layers(trace: S.Trace) -> dict[str, object]:
    """Event name -> its layer (None where it has none); names are unique in these traces."""
    ev = trace.events
    layer = S.strings(ev[S.LAYER])
    names = ev[S.NAME].astype(str).to_numpy()
    assert len(set(names)) == len(names)
    return dict(zip(names, layer, strict=True))


def _launch(op: str, ts: int, corr: int, kernel: str, tid: int = 100) -> list[dict]:
    """A cpu_op with a launch call inside and the kernel it launches."""
    return [
        X("cpu_op", op, ts, 20, tid=tid, **{"External id": corr}),
        X("cuda_runtime", f"launch {kernel}", ts + 5, 5, tid=tid, correlation=corr),
        X("kernel", kernel, ts + 100, 10, **GPU, correlation=corr),
    ]


def test_innermost_annotation_wins_and_modules_fill_in(tmp_path):
    events = [
        X("user_annotation", "ProfilerStep#7", 0, 2000),
        X("user_annotation", "## forward ##", 10, 990),
        X("user_annotation", "layer_0", 20, 180),
        *_launch("aten::mm", 30, 1, "gemm_in_layer_0"),
        # Inside "## forward ##" only.
        *_launch("aten::add", 250, 2, "add_in_forward"),
        # Two annotations opening together: the op is in the shorter (inner) one.
        X("user_annotation", "layer_1", 300, 200),
        X("user_annotation", "layer_1.attention", 300, 100),
        *_launch("aten::bmm", 300, 3, "bmm_in_attention"),
        # An annotation beats an enclosing module range.
        X("python_function", "nn.Module: Encoder", 500, 400),
        X("user_annotation", "layer_2", 550, 100),
        *_launch("aten::relu", 560, 4, "relu_in_layer_2"),
        # Inside "## forward ##" (an annotation) although a module range is nearer.
        X("python_function", "nn.Module: Head_0", 700, 100),
        X("cpu_op", "aten::sum", 710, 20),
        # Outside every annotation but the step: the innermost nn.Module range names the layer;
        # other Python frames are not layers.
        X("python_function", "nn.Module: Decoder", 1100, 500),
        X("python_function", "nn.Module: DecoderBlock_3", 1150, 200),
        X("python_function", "models/block.py(42): forward", 1160, 100),
        *_launch("aten::gelu", 1170, 5, "gelu_in_block_3"),
        *_launch("aten::copy_", 1400, 6, "copy_in_decoder"),
        # In the step only: no layer.
        *_launch("aten::zero_", 1700, 7, "zero_in_step_only"),
        # Another thread: the annotations of thread 100 do not reach it.
        *_launch("aten::mul", 40, 8, "mul_on_thread_200", tid=200),
        # GPU work without a launch call: its op (by External id) names the layer; GPU-side
        # annotations are not layers.
        X("kernel", "orphan_of_gemm", 450, 5, **GPU, **{"External id": 1}),
        X("kernel", "orphan_unknown", 460, 5, **GPU),
        X("gpu_user_annotation", "layer_0 (gpu)", 100, 50, **GPU),
        X("gpu_memcpy", "Memcpy HtoD", 600, 10, **GPU, correlation=9, bytes=64),
        X("cuda_runtime", "cudaMemcpyAsync", 590, 3, correlation=9),
    ]
    _, trace = read_one(write(tmp_path / "layers.json", {"traceEvents": events}))
    assert isinstance(trace.events[S.LAYER].dtype, pd.CategoricalDtype)
    got = _layers(trace)
    assert got == {
        "ProfilerStep#7": None,
        "## forward ##": "## forward ##",
        "layer_0": "layer_0",
        "aten::mm": "layer_0",
        "launch gemm_in_layer_0": "layer_0",
        "gemm_in_layer_0": "layer_0",
        "aten::add": "## forward ##",
        "launch add_in_forward": "## forward ##",
        "add_in_forward": "## forward ##",
        "layer_1": "layer_1",
        "layer_1.attention": "layer_1.attention",
        "aten::bmm": "layer_1.attention",
        "launch bmm_in_attention": "layer_1.attention",
        "bmm_in_attention": "layer_1.attention",
        "nn.Module: Encoder": "## forward ##",
        "layer_2": "layer_2",
        "aten::relu": "layer_2",
        "launch relu_in_layer_2": "layer_2",
        "relu_in_layer_2": "layer_2",
        "nn.Module: Head_0": "## forward ##",
        "aten::sum": "## forward ##",
        "nn.Module: Decoder": "Decoder",
        "nn.Module: DecoderBlock_3": "DecoderBlock_3",
        "models/block.py(42): forward": "DecoderBlock_3",
        "aten::gelu": "DecoderBlock_3",
        "launch gelu_in_block_3": "DecoderBlock_3",
        "gelu_in_block_3": "DecoderBlock_3",
        "aten::copy_": "Decoder",
        "launch copy_in_decoder": "Decoder",
        "copy_in_decoder": "Decoder",
        "aten::zero_": None,
        "launch zero_in_step_only": None,
        "zero_in_step_only": None,
        "aten::mul": None,
        "launch mul_on_thread_200": None,
        "mul_on_thread_200": None,
        "orphan_of_gemm": "layer_0",
        "orphan_unknown": None,
        "layer_0 (gpu)": None,
        "Memcpy HtoD": "layer_2",
        "cudaMemcpyAsync": "layer_2",
    }


def test_a_trace_without_annotations_has_no_layers(tmp_path):
    events = [*_launch("aten::mm", 30, 1, "gemm"), X("user_annotation", "ProfilerStep#1", 0, 99)]
    _, trace = read_one(write(tmp_path / "plain.json", {"traceEvents": events}))
    assert trace.events[S.LAYER].isna().all()
    assert isinstance(trace.events[S.LAYER].dtype, pd.CategoricalDtype)


#: Real traces: events with a layer, by kind, and the most common layer.
REAL = {
    "kineto_alexnet_1rank.json.gz": (
        825,
        {"compute": 79, "dma": 19, "sync": 20, "host": 340, "marker": 367},
        "[param|pytorch.model.alex_net|0|0|0|warmup|forward]",
    ),
    "kineto_amd_mi250_minitoy.json.gz": (
        6,
        {"compute": 1, "host": 1, "marker": 4},
        "Optimizer.step#SGD.step",
    ),
    "kineto_event_sync.json.gz": (0, {}, None),  # its only annotation is ProfilerStep#100
    "kineto_sampled_rank-0.json.gz": (
        2533,
        {"compute": 633, "dma": 42, "collective": 10, "host": 685, "marker": 1163},
        "DistributedDataParallel.forward",
    ),
    "kineto_sampled_rank-1.json.gz": (
        2429,
        {"compute": 612, "dma": 40, "collective": 10, "host": 662, "marker": 1105},
        "DistributedDataParallel.forward",
    ),
    "kineto_torch_compile_triton.json.gz": (
        107,
        {"compute": 12, "host": 57, "marker": 38},
        "## Call CompiledFxGraph fal4xpiah2v6blbfmwwonu52dvevbsmlh743q5tkclrt4gcqpzea ##",
    ),
}


@pytest.mark.parametrize("name", sorted(REAL))
def test_real_traces_get_layers_from_their_annotations(name):
    part, trace = read_one(shared(name))
    ev = trace.events
    has = ev[S.LAYER].notna().to_numpy()
    by_kind = ev.loc[has].groupby(S.KIND, observed=True).size().to_dict()
    top = ev[S.LAYER].value_counts()
    print(f"{name}: {has.sum()} of {len(ev)} events have a layer; by kind {by_kind}")
    count, kinds, most = REAL[name]
    assert (int(has.sum()), by_kind) == (count, kinds)
    assert (top.index[0] if len(top) else None) == most
    assert not ev[S.LAYER].astype(str).str.startswith("ProfilerStep").any()
    # Launched GPU work is in the layer of its launch call.
    launch = trace.edges[trace.edges[S.EDGE_KIND].astype(str) == "launch"]
    layer = S.strings(ev[S.LAYER])
    src, dst = launch[S.SRC].to_numpy(), launch[S.DST].to_numpy()
    assert (pd.isna(layer[src]) == pd.isna(layer[dst])).all()
    both = ~pd.isna(layer[src])
    assert np.array_equal(layer[src][both], layer[dst][both])
