"""Backward ops and their kernels take their forward op's source line through the autograd
``Sequence number`` (parsers/kineto_source.py), on a real trace read by hand.

``kineto_mi300_resnet_act_checkpoint.json.gz`` (MI300X ResNet training, ``with_stack=True``)
runs its forward ops on tid 542 under ``python_function`` frames and its backward ops on the
autograd thread, tid 639, where no user frame encloses them. The expected lines are read from
the raw JSON below (gzip + json, not tracediag's reader).
"""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from tests.chrome_helpers import read_one, shared
from tracediag.model import schema as S

TRACE = "kineto_mi300_resnet_act_checkpoint.json.gz"
#: The fc layer's backward GEMMs: ``AddmmBackward0`` (Sequence number 1198, tid 639) runs
#: ``aten::mm`` twice, External ids 1039 and 1044, whose ``hipExtModuleLaunchKernel`` calls have
#: correlations 5509 and 5513. The forward op of number 1198 is ``aten::addmm`` on tid 542 at
#: ts 3743411229218.73, inside ``torchvision/models/resnet.py(284): forward`` >
#: ``resnet.py(266): _forward_impl`` > ``nn.Module: Linear_0`` > ``torch/nn/modules/module.py
#: (1743): _call_impl`` > ``torch/nn/modules/linear.py(124): forward`` > ``<built-in function
#: linear>``: the innermost user frame (torch's own and built-ins are not) is line 266.
FC_LINE = "torchvision/models/resnet.py:266 (_forward_impl)"
FC_CORRELATIONS = (5509, 5513)


@pytest.fixture(scope="module")
def raw():
    with gzip.open(shared(TRACE)) as fh:
        return json.load(fh)["traceEvents"]


@pytest.fixture(scope="module")
def trace():
    return read_one(shared(TRACE))[1]


def test_the_raw_trace_links_the_fc_backward_to_its_forward_op(raw):
    """The facts the expected line rests on, checked in the raw events."""
    seq = [e for e in raw if (e.get("args") or {}).get("Sequence number") == 1198]
    backward = [e for e in seq if e["args"].get("Fwd thread id", 0) > 0]
    forward = [e for e in seq if e["args"].get("Fwd thread id", 0) == 0]
    assert {e["name"] for e in backward} == {
        "AddmmBackward0",
        "autograd::engine::evaluate_function: AddmmBackward0",
    }
    assert {e["tid"] for e in backward} == {639}
    assert [(e["name"], e["tid"], e["ts"]) for e in forward] == [
        ("aten::addmm", 542, 3743411229218.73)
    ]
    ts = forward[0]["ts"]
    frames = sorted(
        (e for e in raw if e.get("cat") == "python_function" and e["tid"] == 542),
        key=lambda e: e["ts"],
    )
    enclosing = [e["name"] for e in frames if e["ts"] <= ts < e["ts"] + e["dur"]]
    assert enclosing[-5:] == [
        "torchvision/models/resnet.py(266): _forward_impl",
        "nn.Module: Linear_0",
        "torch/nn/modules/module.py(1743): _call_impl",
        "torch/nn/modules/linear.py(124): forward",
        "<built-in function linear>",
    ]
    # No frame encloses the backward op on its own thread.
    op = next(e for e in backward if e["name"] == "AddmmBackward0")
    assert not [
        e
        for e in raw
        if e.get("cat") == "python_function"
        and e["tid"] == 639
        and e["ts"] <= op["ts"] < e["ts"] + e["dur"]
    ]
    launches = [
        e
        for e in raw
        if e.get("cat") == "cuda_runtime" and e["args"].get("correlation") in FC_CORRELATIONS
    ]
    assert sorted(e["args"]["External id"] for e in launches) == [1039, 1044]
    assert all(op["ts"] <= e["ts"] < op["ts"] + op["dur"] for e in launches)


def test_the_fc_backward_kernels_take_the_forward_ops_line(trace):
    ev = trace.events
    src = S.strings(ev[S.SOURCE])
    kind = ev[S.KIND].astype(str).to_numpy()
    src_id = ev[S.SRC_ID].to_numpy()
    for corr in FC_CORRELATIONS:
        rows = np.flatnonzero(src_id == corr)
        kernel = [r for r in rows if kind[r] == "compute"]
        assert len(kernel) == 1, corr
        assert src[kernel[0]] == FC_LINE
        assert {src[r] for r in rows if kind[r] == "host"} == {FC_LINE}  # and its launch call


def test_backward_ops_with_a_forward_op_all_get_a_line(trace, raw):
    """Every backward op whose forward op has a user frame gets a line; the ones with no
    forward op (``AccumulateGrad``) get none. Counted by hand: the backward ops of the raw
    trace whose Sequence number a forward op with a frame shares."""
    ev = trace.events
    names = ev[S.NAME].astype(str).to_numpy()
    src = S.strings(ev[S.SOURCE])
    has = np.array([isinstance(s, str) and s != "" for s in src])
    bwd = np.char.startswith(names.astype(str), "autograd::engine::evaluate_function: ")
    accumulate = np.char.endswith(names.astype(str), "AccumulateGrad")
    assert bwd.sum() == sum(
        1
        for e in raw
        if e.get("name", "").startswith("autograd::engine::evaluate_function: ")
        and e.get("ph") == "X"
    )
    assert has[bwd & ~accumulate].mean() == 1.0
    assert not has[bwd & accumulate].any()
