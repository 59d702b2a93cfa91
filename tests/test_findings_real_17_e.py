"""Issue 17 left-overs (review R17) on real traces, each checked against the raw events read
with gzip + json (or the XSpace protobuf), not with our readers.

- HST401 names a stall by what the host ran in it (resnet50: the DataLoader's ``__next__``,
  not the ``aten::copy_`` launched after) and one cause seen in several steps is one finding.
- HST401's severity follows the share of the step it costs (event_sync: 57 µs of a 3.154 ms
  step is info, not error), as every rule's does (``Analysis.cost_pct``).
- HST401's typical host delay is the launch threads' (XPlane: 155.61 µs between HIP calls),
  not a Python tracer line's 130 ns between nested frames.
- DMA103 leaves GPU copies under 32 KiB (latency-bound, DMA102's) out of its bandwidth.
- A profile without BF16 (V100) names its peak by the format it is (FP16).
"""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from tests.chrome_helpers import shared
from tracediag.analysis.hardware import PROFILES
from tracediag.engine.diagnose import diagnose
from tracediag.loading.loader import load

RESNET = "kineto_resnet50_train_worker0.pt.trace.json.gz"
EVENT_SYNC = "kineto_event_sync.json.gz"
JAX = "xplane_jax_gemm_mi300.xplane.pb"
MI300 = "kineto_mi300_resnet_act_checkpoint.json.gz"


def _raw(name):
    return json.load(gzip.open(shared(name)))["traceEvents"]


def _findings(name, code):
    return [f for f in diagnose(load([shared(name)])).findings if f.code == code]


def test_hst401_names_the_dataloader_and_groups_its_steps_into_one_finding():
    raw = _raw(RESNET)
    loader = sorted(
        (e["ts"], e["dur"])
        for e in raw
        if e.get("name") == "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    )
    assert len(loader) == 6  # the first one opens the trace, before the critical path's stalls
    found = _findings(RESNET, "HST401")
    named = [f for f in found if "DataLoader" in f.op]
    assert len(named) == 1, [f.message for f in found]
    f = named[0]
    assert f.op == "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    assert f.evidence["instances"] == 5 and f.evidence["stalls"] == 5
    # the DataLoader calls 2 to 6 fill the stalls: 43.83 + 42.92 + 62.86 + 40.37 + 44.11 ms
    raw_ns = sum(d for _, d in loader[1:]) * 1000
    assert raw_ns == 234_086_000
    assert f.evidence["host_op_ns"] == pytest.approx(raw_ns, rel=0.001)
    assert f.evidence["max_stall_ns"] == pytest.approx(63.1e6, rel=0.005)  # raw 62.86 ms call
    assert "it runs enumerate(DataLoader)" in f.message and "stalls 5 times" in f.message
    # replay-backed and never above what it acts on
    assert 0 < f.saving_ns <= f.impact_ns
    assert f.impact_ns >= raw_ns
    assert not any("aten::copy_" in x.op for x in found)


def test_hst401_severity_follows_the_share_of_the_step():
    raw = _raw(EVENT_SYNC)
    (step,) = [e for e in raw if e.get("name", "").startswith("ProfilerStep#")]
    assert step["dur"] == 3154  # µs; the critical path starts at the first launch: 263 µs
    found = _findings(EVENT_SYNC, "HST401")
    assert found
    worst = max(found, key=lambda f: f.saving_ns)
    assert worst.impact_ns == 64_000 and worst.saving_ns == 57_000
    # 57 µs of a 3,154 µs step is 1.8%: below the rule's 2% warning threshold
    assert 100 * worst.saving_ns / (step["dur"] * 1000) < 2.0
    assert all(str(f.severity) != "error" and f.severity.name == "INFO" for f in found)


def test_hst401_typical_delay_is_the_launch_threads_not_the_python_tracer():
    from tracediag.parsers.protos.xplane_pb2 import XSpace

    xs = XSpace()
    xs.ParseFromString(shared(JAX).read_bytes())
    (host,) = [p for p in xs.planes if p.name == "/host:CPU"]
    lines = {ln.name: ln for ln in host.lines}
    launch = lines["Host Threads/1083"]  # hipModuleLaunchKernel / hipMemcpyDtoDAsync
    start = np.array([e.offset_ps for e in launch.events], np.int64)
    o = np.argsort(start)
    end = (start + np.array([e.duration_ps for e in launch.events], np.int64))[o]
    gaps_ns = (start[o][1:] - end[:-1]) / 1000
    assert np.median(gaps_ns) == pytest.approx(155_610)  # raw: 155.61 µs between launches
    # the stalls' findings (the dispatch gaps' pattern: tests/test_hst40x_review_s3.py)
    found = [f for f in _findings(JAX, "HST401") if "max_stall_ns" in f.evidence]
    assert found
    for f in found:
        assert f.evidence["typical_ns"] == pytest.approx(155_610, abs=1)
        assert 0 < f.saving_ns <= f.impact_ns
    # the 335.4 µs stall before copy.1, cut to the typical launch delay, not to 130 ns
    top = max(found, key=lambda f: f.impact_ns)
    assert top.impact_ns == pytest.approx(335_391, abs=1)
    assert top.saving_ns < top.impact_ns - 100_000


def test_dma103_leaves_latency_bound_copies_to_dma102():
    raw = _raw(MI300)
    # the copies' sizes are on their runtime calls (hipMemcpyAsync), joined by correlation
    size_of = {
        e["args"]["correlation"]: int(e["args"]["bytes"])
        for e in raw
        if e.get("cat") == "cuda_runtime" and "bytes" in e.get("args", {})
    }
    copies = [
        dict(e, size=size_of[e["args"]["correlation"]])
        for e in raw
        if e.get("cat") == "gpu_memcpy" and e["args"]["correlation"] in size_of
    ]
    assert {e["args"]["stream"] for e in copies} == {0}
    size = np.array([e["size"] for e in copies])
    assert (size < 32768).sum() == 309 and (size >= 32768).sum() == 57
    (f,) = _findings(MI300, "DMA103")
    ev = f.evidence
    assert ev["transfers"] == 57 and ev["small_transfers_left_out"] == 309
    large = [e for e in copies if e["size"] >= 32768]
    iv = sorted((e["ts"], e["ts"] + e["dur"]) for e in large)
    busy_us, reach = 0.0, -np.inf
    for s, e in iv:  # union of the large copies' time (57 rows)
        busy_us += max(0.0, e - max(s, reach))
        reach = max(reach, e)
    rate = sum(e["size"] for e in large) / (busy_us * 1e-6)
    assert ev["achieved_bw"] == pytest.approx(rate, rel=0.01)  # 257.6 GB/s, not 43 GB/s
    assert "309 copies under 32 KiB" in f.message


def test_every_profile_names_its_peak_by_its_format():
    for key, hw in PROFILES.items():
        assert hw.peak_flops == hw.flops[hw.peak_dtype], key
        assert hw.peak_label == f"{hw.peak_dtype.upper()} peak", key
    v100 = PROFILES["v100-sxm2"]
    assert "bf16" not in v100.flops
    assert v100.peak_label == "FP16 peak" and v100.peak_flops == 125e12
    assert PROFILES["a100"].peak_label == "BF16 peak"
