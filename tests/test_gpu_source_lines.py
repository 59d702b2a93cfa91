"""Source lines on GPU traces: Kineto ``with_stack`` frames (parsers/kineto_source.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.chrome_helpers import X, read_one, shared, write
from tracediag.cli.main import main
from tracediag.model import schema as S
from tracediag.parsers.kineto_source import user_label

QWEN = "kineto_h100_qwen_inference.json.gz"
NO_FRAMES = "kineto_alexnet_1rank.json.gz"  # recorded without with_stack: no python_function


@pytest.fixture(scope="module")
def qwen():
    return read_one(shared(QWEN))[1]


def test_three_kernels_take_the_line_read_by_hand_from_the_raw_events(qwen):
    """Read by hand from the raw JSON (gzip + json, not this reader): for each kernel, the
    ``cuda_runtime`` call with the same ``args.correlation``, then the ``python_function``
    slices of pid/tid 25286 open at the call's ts, innermost last:

    - pow kernel (corr 682954, ts 1428625747411.779; ``cudaLaunchKernel`` at 1428625747404.034):
      ... ``modeling_qwen2.py(243): forward``, ``nn.Module: Qwen2RMSNorm_0``,
      ``torch/nn/modules/module.py(1743): _call_impl``,
      ``transformers/models/qwen2/modeling_qwen2.py(218): forward``,
      ``<built-in method pow of Tensor ...>``: the innermost user frame is line 218 (the
      RMSNorm's forward).
    - sm90 bf16 GEMM (corr 683059; ``cudaLaunchKernelExC`` at 1428625747650.918): ...
      ``nn.Module: Qwen2Attention_0``, ``module.py(1743): _call_impl``,
      ``transformers/models/qwen2/modeling_qwen2.py(150): forward``, ``nn.Module: Linear_0``,
      ``module.py(1743)``, ``torch/nn/modules/linear.py(124): forward``,
      ``<built-in function linear>``: line 150 (the attention's forward; q_proj).
    - flash-attention forward (corr 683329; ``cudaLaunchKernel`` at 1428625748238.669): ...
      ``modeling_qwen2.py(150): forward``,
      ``transformers/integrations/sdpa_attention.py(18): sdpa_attention_forward``,
      ``<built-in function scaled_dot_product_attention>``: sdpa_attention.py line 18.
    """
    ev = qwen.events
    src = S.strings(ev[S.SOURCE])
    src_id = ev[S.SRC_ID].to_numpy()
    kind = ev[S.KIND].astype(str).to_numpy()
    names = ev[S.NAME].astype(str).to_numpy()
    expected = {
        682954: ("pow", "transformers/models/qwen2/modeling_qwen2.py:218 (forward)"),
        683059: (
            "sm90_xmma_gemm_bf16bf16",
            "transformers/models/qwen2/modeling_qwen2.py:150 (forward)",
        ),
        683329: (
            "flash_fwd_kernel",
            "transformers/integrations/sdpa_attention.py:18 (sdpa_attention_forward)",
        ),
    }
    for corr, (name_part, line) in expected.items():
        rows = np.flatnonzero(src_id == corr)
        kernel = [r for r in rows if kind[r] == "compute"]
        assert len(kernel) == 1 and name_part in names[kernel[0]]
        assert src[kernel[0]] == line
        # its launch call (host) and launching op carry the same line
        assert {src[r] for r in rows} == {line}


def test_every_frame_kind_of_the_rule():
    assert user_label("train.py(42): <module>") == "train.py:42 (<module>)"
    assert user_label("torchvision/models/resnet.py(89): forward") == (
        "torchvision/models/resnet.py:89 (forward)"
    )
    for framework in (
        "torch/nn/modules/linear.py(116): forward",
        "/usr/lib/python3/site-packages/torch/nn/functional.py(1): relu",
        "threading.py(1032): _bootstrap",
        "multiprocessing/spawn.py(122): spawn_main",
        "<frozen os>(808): getenv",
        "<built-in method pow of Tensor object at 0x7d67180cc140>",
        "nn.Module: Linear_0",
    ):
        assert user_label(framework) == "", framework


def test_user_frames_nest_past_framework_frames_and_gpu_work_follows_its_launch(tmp_path):
    gpu = {"pid": 0, "tid": 7}
    events = [
        X("python_function", "train.py(10): <module>", 0, 1000),
        X("python_function", "model.py(20): forward", 10, 400),
        X("python_function", "torch/nn/modules/module.py(1743): _call_impl", 20, 100),
        X("cpu_op", "aten::mm", 30, 20, **{"External id": 1}),
        X("cuda_runtime", "cudaLaunchKernel", 35, 5, correlation=1),
        X("kernel", "gemm", 100, 10, **gpu, correlation=1),
        # after model.py's forward returned: the enclosing user frame is train.py's
        X("cpu_op", "aten::add", 500, 20, **{"External id": 2}),
        X("cuda_runtime", "cudaLaunchKernel", 505, 5, correlation=2),
        X("kernel", "add", 600, 10, **gpu, correlation=2),
        # outside every frame: no line
        X("cpu_op", "aten::zero_", 1500, 20),
    ]
    trace = read_one(write(tmp_path / "t.json", {"traceEvents": events}))[1]
    ev = trace.events
    line = dict(zip(ev[S.NAME].astype(str), S.strings(ev[S.SOURCE]), strict=False))
    assert line["aten::mm"] == line["gemm"] == "model.py:20 (forward)"
    assert line["aten::add"] == line["add"] == "train.py:10 (<module>)"
    assert not line["aten::zero_"]


def test_report_by_source_lists_the_qwen_lines_with_path_time(capsys):
    path = str(shared(QWEN))
    assert main(["report", path, "--by", "source", "--format", "json", "--no-cache", "-q"]) == 0
    section = json.loads(capsys.readouterr().out)["by_source"]
    top = section["critical_path"]["top"]
    lines = [row["source_line"] for row in top]
    assert all(":" in line and "(" in line for line in lines)
    assert not any(line.startswith("torch/") for line in lines)
    assert "transformers/models/qwen2/modeling_qwen2.py:218 (forward)" in lines
    ns = [row["path_ns"] for row in top]
    assert ns == sorted(ns, reverse=True) and ns[0] > 0
    # the lines' path time is part of the path, not more
    assert sum(ns) <= section["critical_path"]["length_ns"]
    assert main(["report", path, "--by", "source", "--no-cache", "-q"]) == 0
    text = capsys.readouterr().out
    assert "Critical path by source line (top 10 of" in text
    assert "modeling_qwen2.py:218 (forward)" in text


def test_trace_without_python_frames_has_no_source_column_and_says_so(capsys):
    trace = read_one(shared(NO_FRAMES))[1]
    assert S.SOURCE not in trace.events  # the reader adds nothing: its reports do not change
    assert main(["report", str(shared(NO_FRAMES)), "--by", "source", "--no-cache", "-q"]) == 0
    tail = capsys.readouterr().out.rstrip().splitlines()
    assert tail[-1] == "no source lines in this trace (its events carry no source location)."


XPLANE = "xplane_jax_gemm_mi300.xplane.pb"


def test_xla_ops_take_the_line_of_their_hlo_instruction():
    """Read by hand from the ``Hlo Proto`` stats of ``/host:metadata`` (decoded field by field
    with a throwaway varint walker: HloProto.hlo_module = 1, computations = 3, instructions = 2,
    metadata = 7, OpMetadata.source_file = 3, source_line = 4): every ``jit_dot`` program's
    ``custom-call.1`` and ``jit_dot(5)``'s ``gemm_fusion_dot_general.1`` are
    ``/workspace/traces/generate_gemm_trace.py`` line 37; ``wrapped_broadcast`` is line 34 in
    programs 3, 19, 32, 45, 60, 75 and line 35 in programs 47, 62, 77. The events carry no
    source stat of their own, so the program id decides the broadcasts' line."""
    from tracediag.loading.loader import load
    from tracediag.parsers.protos.xplane_pb2 import XSpace

    path = shared(XPLANE)
    line_of_program = {3: 34, 19: 34, 32: 34, 45: 34, 60: 34, 75: 34, 47: 35, 62: 35, 77: 35}
    # the expected count per line: the device's wrapped_broadcast events by their program_id
    space = XSpace.FromString(path.read_bytes())
    plane = next(p for p in space.planes if p.name == "/device:GPU:0")
    stat = {m.name: k for k, m in plane.stat_metadata.items()}
    want = {34: 0, 35: 0}
    for line in plane.lines:
        for e in line.events:
            stats = {s.metadata_id: s for s in e.stats}
            op = stats.get(stat["hlo_op"])
            if op is not None and plane.stat_metadata[op.ref_value].name == "wrapped_broadcast":
                want[line_of_program[int(stats[stat["program_id"]].int64_value)]] += 1
    ev = load([path], cache=False).events
    device = ev[ev[S.KIND].astype(str) != "host"]
    op = device[S.OP].astype(str).to_numpy()
    src = S.strings(device[S.SOURCE])
    script = "/workspace/traces/generate_gemm_trace.py"
    for name in ("custom-call.1", "gemm_fusion_dot_general.1"):
        assert set(src[op == name]) == {f"{script}:37"}
    broadcast = src[op == "wrapped_broadcast"]
    got = {n: int((broadcast == f"{script}:{n}").sum()) for n in (34, 35)}
    assert got == want and sum(got.values()) == len(broadcast) > 0
