"""Findings issue 17 found wrong on real traces (items 4, 5 and 7's DMA102 / HST401 wording).

- DMA101 compares a GPU copy with the peak of the path its bytes take: host copies with the
  host link (PCIe), device-to-device copies with the HBM bandwidth halved (a copy reads and
  writes every byte), peer copies with the device link; memsets are no transfers. A stream's
  typical bandwidth is its own direction's, never above the peak it is compared with.
- The devices of one XSpace are on its host's clock (no TRC503), and the host lines go to the
  device they launch onto, the Python thread to the device that computes.
- DMA102 never prints "0 B" for transfers whose size was not recorded; HST401 never names a
  "(null)" layer.
- DMA103 compares a GPU stream's copies of one direction with that direction's peak, memsets
  left out; DMA101 never calls a group slow whose rate is above the typical it restores to;
  a saving far below its finding's impact says, from the replay, what holds the path instead.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from tests.chrome_helpers import X, shared, write
from tests.test_xplane import START, PlaneBuilder
from tests.test_xplane import _write as write_xspace
from tracediag.analysis.context import analyse
from tracediag.analysis.dma import copy_direction, typical_bandwidth
from tracediag.engine.diagnose import diagnose
from tracediag.loading.loader import load
from tracediag.model import schema as S
from tracediag.parsers import xplane
from tracediag.parsers.protos.xplane_pb2 import XSpace
from tracediag.parsers.xplane_events import detail_bytes

NEG_QUEUE = "kineto_negative_queue_rank0.json.gz"  # A100-SXM4-80GB: HBM 2039 GB/s
MI300 = "kineto_mi300_resnet_act_checkpoint.json.gz"  # MI300X: HBM 5.3 TB/s
JAX_MI300 = "xplane_jax_gemm_mi300.xplane.pb"
ALEXNET = "kineto_alexnet_1rank.json.gz"  # A100 PG509 (PCIe host link 25 GB/s)


def _findings(paths, code):
    return [f for f in diagnose(load([shared(p) for p in paths])).findings if f.code == code]


@pytest.mark.parametrize(
    ("name", "direction"),
    [
        ("Memcpy HtoD (Pinned -> Device)", "HtoD"),
        ("Memcpy DtoH (Device -> Pageable)", "DtoH"),
        ("Memcpy DtoD (Device -> Device)", "DtoD"),
        ("Memcpy PtoP (Device -> Device)", "PtoP"),
        ("Memset (Device)", "memset"),
        ("Memset (Unknown)", "memset"),
        ("hipMemcpyDtoDAsync", "DtoD"),
        ("hipMemcpyHtoDAsync", "HtoD"),
        ("MemcpyH2D", "HtoD"),
        ("cudaMemcpyPeerAsync", "PtoP"),
        ("__amd_rocclr_copyBuffer.kd", ""),
        ("qSyncIO0 weights", ""),
    ],
)
def test_copy_direction_from_the_names_profilers_write(name, direction):
    assert copy_direction(name) == direction


def test_dma101_device_copies_against_hbm_not_pcie_and_no_memsets():
    """negative_queue (A100-SXM4-80GB) before: "tensor Memset (Unknown) ... transferring at
    614 GB/s (the queue's typical 175 GB/s)", no peak (PCIe's 25 GB/s was below it). Its stream
    7 holds 1,280 DtoD copies (fastest 932 GB/s, under the 1019.5 GB/s copy rate the 2039 GB/s
    HBM allows) and 277 memsets: the path's copies are DtoD, compared with HBM / 2."""
    found = _findings([NEG_QUEUE], "DMA101")
    assert found, "the DtoD copies on the critical path are a DMA101 finding"
    for f in found:
        ev = f.evidence
        assert ev["direction"] != "memset" and "Memset" not in f.message
        assert ev["typical_bw"] <= ev["peak_bw"] and ev["achieved_bw"] <= ev["peak_bw"]
    dtod = [f for f in found if f.evidence["direction"] == "DtoD"]
    assert dtod and all(f.evidence["peak_bw"] == pytest.approx(2039e9 / 2) for f in dtod)
    assert "device-to-device copies on stream 7" in dtod[0].message
    assert "1020 GB/s (device memory (HBM, read and write))" in dtod[0].message


def test_dma101_mi300_device_copies_compared_with_mi300x_hbm():
    """resnet_act_checkpoint (MI300X) copies only DtoD on stream 0; before, the finding had no
    peak at all. Now it is 5.3 TB/s / 2, and the typical is that of the stream's DtoD copies."""
    found = _findings([MI300], "DMA101")
    assert found and {f.evidence["direction"] for f in found} == {"DtoD"}
    for f in found:
        assert f.evidence["peak_bw"] == pytest.approx(2650e9)
        assert f.evidence["typical_bw"] <= f.evidence["peak_bw"]


def _copies_doc(with_bytes: bool) -> dict:
    """A kernel, then 40 copies on stream 7 that the kernel's successor waits for (sizes
    recorded as 0 when ``with_bytes`` is false, as ROCm/MTIA traces do), and memsets."""
    events = [X("kernel", "gemm", 0, 1000, pid=0, tid=7, stream=7, correlation=1)]
    t = 1000
    for i in range(40):
        nbytes = 1024 if with_bytes else 0
        events.append(
            X("gpu_memcpy", "Memcpy DtoD (Device -> Device)", t, 10, pid=0, tid=7, stream=7,
              bytes=nbytes, correlation=100 + i)
        )  # fmt: skip
        t += 12
    events.append(X("kernel", "gemm", t, 1000, pid=0, tid=7, stream=7, correlation=2))
    return {"traceEvents": events}


def test_dma102_says_nothing_of_transfers_without_a_size(tmp_path):
    """40 copies whose size is recorded as 0: DMA102 has nothing to say (their size is not
    known to be small); before, it printed "0 B per rank ... at 0 GB/s". With 1 KiB each the
    same copies are a finding naming 40 KiB."""
    unknown = diagnose(load([write(tmp_path / "a.json", _copies_doc(False))]))
    assert not [f for f in unknown.findings if f.code == "DMA102"]
    assert all(" 0 B" not in f.message for f in unknown.findings)
    known = diagnose(load([write(tmp_path / "b.json", _copies_doc(True))]))
    (f,) = [f for f in known.findings if f.code == "DMA102"]
    assert "40 KiB per rank as device-to-device copies on stream 7" in f.message
    assert f.evidence["bytes"] == 40 * 1024 and f.evidence["direction"] == "DtoD"


def test_typical_bandwidth_per_direction_leaves_memsets_out():
    """One stream, three kinds of work: the typical of each direction is its own median
    (hand-computed), memsets are in none."""
    dma = pd.DataFrame(
        {
            "queue": ["stream 7"] * 7,
            "direction": ["HtoD", "HtoD", "HtoD", "DtoD", "DtoD", "memset", "memset"],
            "bytes": [1e6] * 7,
            "bw": [10e9, 12e9, 11e9, 500e9, 700e9, 3e12, 3e12],
        }
    )
    typical = typical_bandwidth(dma, 32768, by_direction=True)
    assert typical.to_dict() == {("stream 7", "DtoD"): 600e9, ("stream 7", "HtoD"): 11e9}
    # per queue (the Neuron queues' view) it is still one median over the queue
    assert typical_bandwidth(dma, 32768).to_dict() == {"stream 7": 500e9}


def test_no_dma101_bandwidth_above_its_peak_on_any_real_trace():
    """Every shared trace: no DMA101/DMA102 finding compares a bandwidth above the peak it
    names, and none treats a memset as a transfer."""
    import pathlib

    folder = shared("README.md").parent
    traces = sorted(p for p in pathlib.Path(folder).iterdir() if p.name != "README.md")
    for path in traces:
        for f in diagnose(load([path])).findings:
            if f.code not in ("DMA101", "DMA102"):
                continue
            ev = f.evidence
            assert ev.get("direction") != "memset", (path.name, f.message)
            peak = ev.get("peak_bw")
            if peak is not None:
                for key in ("achieved_bw", "typical_bw"):
                    value = ev.get(key)
                    assert value is None or math.isnan(value) or value <= peak, (path.name, key)


def test_xplane_copy_sizes_of_zero_are_unknown_and_copies_have_directions():
    """The MI300 JAX profile's copies are ``__amd_rocclr_copyBuffer`` kernels whose launching
    calls say ``kind:Unknown size:0``: 12 DtoD copies on stream 16 (hipMemcpyDtoDAsync) and 12
    HtoD copies on stream 17 (hipMemcpyHtoDAsync), sizes unknown, never 0 B."""
    assert np.isnan(detail_bytes(np.array(["kind:Unknown size:0 dest:512 async:1"], object))[0])
    assert detail_bytes(np.array(["kind:HtoD size:4096"], object))[0] == 4096.0
    a = analyse(load([shared(JAX_MI300)]))
    dma = a.dma
    got = dma.groupby(["queue", "direction"]).size().to_dict()
    assert got == {("stream 16", "DtoD"): 12, ("stream 17", "HtoD"): 12}
    assert dma["bytes"].isna().all()


def test_real_jax_mi300_profile_one_computing_device_on_the_host_clock():
    """The MI300 JAX profile: one XSpace of host ``tw003`` with 8 device planes, of which only
    GPU 0 holds events. GPU 0 computes (15 GEMM kernels, 3 of each of 5 shapes plus 3 Triton
    ``gemm_fusion`` ones, 12 broadcasts on stream 16) and copies (24 copies on streams 16-17).
    The Python thread dispatches each op only after the previous one finished (it resumes
    34-40 µs after each GEMM ends: a synchronous benchmark loop), so the device computes 3.4 ms
    of the 9.5 ms window and waits for the host's dispatch the rest. Every host line belongs
    to GPU 0 (the only device launched onto); nothing needs clock alignment."""
    trace = load([shared(JAX_MI300)])
    assert trace.ranks == [0]
    assert trace.meta[0].info["clock_domain"] == "host tw003"
    ev = trace.events
    compute = ev[
        (ev[S.KIND] == "compute") & (ev[S.TRACK].map(trace.tracks[S.TRACK_KIND]) == "gpu_stream")
    ]
    assert len(compute) == 30  # 15 Cijk + 3 gemm_fusion GEMMs and 12 broadcasts
    busy_us = compute[S.DUR].sum() / 1e3
    assert 3350 < busy_us < 3400  # 3,387.6 µs of kernels (summed from the file's events)
    d = diagnose(trace)
    assert not [f for f in d.findings if f.code in ("TRC503", "DMA102")]


def _multi_gpu_space() -> XSpace:
    """One host, three GPUs: GPU 0 only receives host-to-device copies (thread 10), GPU 1 runs
    three 1 ms GEMMs (thread 11), GPU 2 two (thread 12); the Python thread dispatches them all
    through the launch threads and launches nothing itself."""
    space = XSpace(hostnames=["node7"])
    host = PlaneBuilder(space, "/host:CPU")
    t10 = host.line("Host Threads/10", START)
    t11 = host.line("Host Threads/11", START)
    t12 = host.line("Host Threads/12", START)
    py = host.line("python", START)
    us = 1_000_000  # ps
    gpus = [PlaneBuilder(space, f"/device:GPU:{k}") for k in range(3)]
    streams = [g.line(f"Stream #{k + 1}(Kernel)", START) for k, g in enumerate(gpus)]
    for i in range(4):  # GPU 0: copies
        host.event(t10, "hipMemcpyHtoDAsync", (10 + 50 * i) * us, 5 * us, correlation_id=1 + i,
                   memcpy_details="kind:HtoD size:1048576")  # fmt: skip
        gpus[0].event(streams[0], "__amd_rocclr_copyBuffer.kd", (20 + 50 * i) * us, 40 * us,
                      correlation_id=1 + i)  # fmt: skip
    for k, n in ((1, 3), (2, 2)):  # GPUs 1 and 2: GEMMs, launched ahead (async)
        line = t11 if k == 1 else t12
        for i in range(n):
            corr = 10 * k + i
            host.event(line, "hipModuleLaunchKernel", (300 + 10 * i) * us, 5 * us,
                       correlation_id=corr)  # fmt: skip
            gpus[k].event(streams[k], "Cijk_Ailk_Bljk_BBS_BH_MT256x224x64", (320 + 1000 * i) * us,
                          1000 * us, correlation_id=corr)  # fmt: skip
    for i in range(5):
        host.event(py, "PjitFunction(dot)", (280 + 10 * i) * us, 8 * us)
    return space


def test_devices_of_one_xspace_share_the_host_clock_and_its_python_thread(tmp_path):
    """Item 5 cut from its description: before, every device but the first got a TRC503 clock
    warning, and the host plane went to GPU 0, which only copies ("GPU idles 100%,
    host-bound" while GPUs 1 and 2 computed). Now: one clock domain, no TRC503; thread 10 is
    GPU 0's, threads 11 and 12 GPU 1's and 2's, and the Python thread GPU 1's (3 of the 5
    compute launches); GPU 0 is not called host-bound."""
    path = write_xspace(_multi_gpu_space(), tmp_path / "node7.xplane.pb")
    parts = xplane.read(path)
    threads = {}
    for part in parts:
        host = part.events[part.events["track_kind"].astype(str) == "cpu_thread"]
        threads[part.meta.rank] = sorted(set(host["track_label"].astype(str)))
        assert part.meta.info["clock_domain"] == "host node7"
    assert threads == {
        0: ["Host Threads/10"],
        1: ["Host Threads/11", "python"],
        2: ["Host Threads/12"],
    }
    trace = load([path])
    assert {r: m.info["clock"] for r, m in trace.meta.items()} == {
        0: "reference",
        1: "shared host clock",
        2: "shared host clock",
    }
    d = diagnose(trace)
    assert not [f for f in d.findings if f.code == "TRC503"]
    for f in d.findings:
        if f.code in ("HST401", "CMP301"):
            assert 0 not in f.ranks, f.message


def test_hst401_never_names_a_null_layer(tmp_path):
    """A launch inside a range PyTorch recorded as "(null)" (an NVTX range pushed with a NULL
    message): HST401 names the stalled op's own layer or none, never "(null)"."""
    events = []
    t = 0
    for i in range(12):
        gap = 5000 if i == 8 else 20  # one 5 ms stall before the 9th launch
        t += gap
        events.append(X("user_annotation", "(null)", t, 10))
        events.append(X("cpu_op", "aten::mm", t, 10, **{"External id": 10 + i}))
        events.append(
            X("cuda_runtime", "cudaLaunchKernel", t + 1, 5, correlation=100 + i,
              **{"External id": 10 + i})
        )  # fmt: skip
        events.append(
            X("kernel", "gemm", t + 8, 15, pid=0, tid=7, stream=7, correlation=100 + i,
              **{"External id": 10 + i})
        )  # fmt: skip
        t += 10
    d = diagnose(load([write(tmp_path / "null.json", {"traceEvents": events})]))
    host = [f for f in d.findings if f.code == "HST401"]
    assert host and all("(null)" not in f.message and f.layer != "(null)" for f in host)
    assert host[0].layer == "aten::mm"  # the stalled launch's op, the next source asked


def test_dma101_without_sizes_claims_no_pace(tmp_path):
    """Copies that record no size (ROCm's, MTIA's ``dma_request``): DMA101 says so, and does
    not claim they "already run at the queue's typical bandwidth" (there is none to compare
    with)."""
    made = diagnose(load([write(tmp_path / "a.json", _copies_doc(False))])).findings
    found = [f for f in made if f.code == "DMA101"]
    assert len(found) == 1  # 40 copies, 400 µs of the 2.48 ms path
    mtia = _findings(["kineto_mtia_inference_rank-0.json.gz"], "DMA101")
    assert len(mtia) == 1
    found += mtia
    for f in found:
        assert "the sizes are not recorded" in f.message and "typical" not in f.message
        assert f.evidence["bytes"] is None and f.saving_ns == 0


def _raw_events(name: str) -> list[dict]:
    """The trace's own events, read with the standard library (the ground truth the tests
    compare with is not computed by tracediag's readers)."""
    import gzip
    import json

    with gzip.open(shared(name)) as fh:
        return json.load(fh)["traceEvents"]


def _copies(name: str, direction: str, stream: int) -> tuple[np.ndarray, np.ndarray]:
    """Bytes and durations (ns) of the Kineto ``gpu_memcpy`` events of one direction on one
    stream."""
    ev = [
        e
        for e in _raw_events(name)
        if e.get("cat") == "gpu_memcpy"
        and direction in e.get("name", "")
        and e.get("args", {}).get("stream") == stream
    ]
    nbytes = np.array([e["args"]["bytes"] for e in ev], dtype=float)
    return nbytes, np.array([round(e["dur"] * 1000) for e in ev], dtype=float)


def test_dma103_host_copies_against_the_host_link_memsets_left_out():
    """alexnet (A100, PCIe 25 GB/s): stream 7 holds 16 pageable host-to-device copies and 2
    memsets. Before, DMA103 named "Queue stream 7" with the memsets' bytes and time in its
    figure. Now the host copies alone, against the host link: 244,403,360 B over 55.503 ms
    (summed from the file, the copies never overlap) is 4.40 GB/s, 18% of 25 GB/s."""
    nbytes, dur = _copies(ALEXNET, "HtoD", 7)
    assert len(nbytes) == 16
    # the 8 copies under 32 KiB are latency-bound (DMA102's): left out of the bandwidth
    large = nbytes >= 32768
    assert large.sum() == 8
    expected = nbytes[large].sum() / dur[large].sum() * 1e9
    (f,) = _findings([ALEXNET], "DMA103")
    ev = f.evidence
    assert ev["direction"] == "HtoD" and ev["transfers"] == 8
    assert ev["small_transfers_left_out"] == 8
    assert ev["bytes_per_rank"] == nbytes[large].sum()
    assert ev["achieved_bw"] == pytest.approx(expected, rel=1e-9)
    assert (ev["peak_bw"], ev["peak_kind"]) == (25e9, "host link")
    assert f.message.startswith("Host-to-device copies on stream 7 move 233 MiB per rank")
    assert "18% of the 25 GB/s host link peak" in f.message
    assert "Queue stream 7" not in f.message
    assert "Pin the host memory" in f.suggestion  # the copies say "Pageable -> Device"


def test_dma101_a_group_faster_than_its_typical_is_not_called_slow():
    """negative_queue, stream 7: its 1,280 device-to-device copies move 16.6 GB at 626 GB/s as
    a whole, while the typical of the stream's DtoD copies (the median copy of at least
    32 KiB) is 175 GB/s: the big copies dominate the bytes, the many medium ones the median.
    Before: "transferring at 626 GB/s (the queue's typical 175 GB/s). These transfers already
    run at the queue's typical bandwidth". Now the message says the group is above that
    typical, and the figure beside the saving is that of the copies of at least 32 KiB below
    it (the 731 smaller ones are latency-bound, DMA102's), all hand-counted from the file."""
    nbytes, dur = _copies(NEG_QUEUE, "DtoD", 7)
    bw = nbytes / np.maximum(dur, 1) * 1e9
    sized = nbytes >= 32768
    typical = np.median(bw[sized])
    slow = sized & (bw < typical)
    assert (len(bw), int(sized.sum()), int(slow.sum())) == (1280, 549, 271)
    (f,) = [f for f in _findings([NEG_QUEUE], "DMA101") if f.evidence["direction"] == "DtoD"]
    ev = f.evidence
    assert ev["typical_bw"] == pytest.approx(typical) and ev["achieved_bw"] > ev["typical_bw"]
    slow_bw = nbytes[slow].sum() / dur[slow].sum() * 1e9
    assert "above the stream's typical bandwidth for device-to-device copies (175 GB/s)" in (
        f.message
    )
    assert f"271 of its 549 transfers run below it (at {slow_bw / 1e9:.0f} GB/s)" in f.message
    assert "731 transfers under 32 KiB among them are left out" in f.message
    assert "already run at" not in f.message and "queue's" not in f.message


def test_findings_that_say_slow_never_show_a_rate_above_their_typical():
    """Every shared trace: a DMA101 finding that restores "to that bandwidth" (its transfers
    are slow) shows an achieved figure below the typical it restores to."""
    import pathlib

    folder = shared("README.md").parent
    for path in sorted(p for p in pathlib.Path(folder).iterdir() if p.name != "README.md"):
        for f in diagnose(load([path])).findings:
            if f.code != "DMA101" or f.evidence.get("typical_bw") is None:
                continue
            ev = f.evidence
            if ev["achieved_bw"] > ev["typical_bw"]:
                assert "Restored to that bandwidth" not in f.message, (path.name, f.message)
                assert "above the" in f.message, (path.name, f.message)


def _stall_then_other_threads_launch():
    """A host stall of 100 µs on thread 1 before a 28 µs GEMM; the kernel after it on the same
    stream is launched by thread 2 at a time of its own (a root of the graph). Cutting the stall
    starts the GEMM 100 µs earlier, but the next kernel still waits for thread 2's launch."""
    from tests.trace_factory import RankSpec, build

    us = 1_000
    r = RankSpec(0, fmt="chrome-json", hardware="NVIDIA H100")
    t = 0
    for _ in range(7):  # ordinary launches: the host's typical delay (2 µs)
        launch = r.add("cudaLaunchKernel", "cpu 1/1", "host", t, t + us)
        r.dep(launch, r.add("relu", "stream 7", "compute", t + 2 * us, t + 3 * us), "launch")
        t += 3 * us
    stalled = r.add("cudaLaunchKernel", "cpu 1/1", "host", t + 100 * us, t + 101 * us)
    r.dep(stalled, r.add("gemm", "stream 7", "compute", t + 102 * us, t + 130 * us), "launch")
    other = r.add("cudaLaunchKernel", "cpu 2/2", "host", t + 120 * us, t + 121 * us)
    r.dep(other, r.add("add", "stream 7", "compute", t + 130 * us, t + 140 * us), "launch")
    return build(r)


def test_hst401_says_why_its_saving_is_far_below_the_stall():
    """A 100 µs host stall before a GEMM shortens the step by only 9 µs when cut to the host's
    typical delay: the kernel after the GEMM waits for another thread's launch, which the change
    does not move (it ends 9 µs after the GEMM would start). The replay says so. (The sampled
    rank-1 trace that showed this on a real file has no host stall to price: it is a sampled
    subset, its gaps hold missing events, see tests/test_sampled_trace.py.) A stall whose saving
    is its impact (alexnet: 269.5 ms both) says nothing more."""
    from tracediag.analysis.context import change_key
    from tracediag.whatif.saving_limit import MUCH_SMALLER, _removed

    d = diagnose(_stall_then_other_threads_launch())
    found = [f for f in d.findings if f.code == "HST401" and f.saving_ns > 0]
    (small,) = [f for f in found if f.saving_ns < 0.2 * f.impact_ns]
    assert (small.impact_ns, small.saving_ns) == (100_000, 9_000)
    assert (
        "; no more, as the replayed path then waits for cudaLaunchKernel on cpu 2/2 (rank 0), "
        "which this change does not move" in small.message
    )
    for f in found:  # exactly the findings whose change removes far more than it saves
        removed = _removed(d.analysis.graph, d.analysis.changes[change_key(f)])[0]
        far = f.saving_ns < MUCH_SMALLER * f.impact_ns and removed >= 2 * f.saving_ns
        assert ("; no more, as " in f.message) == far, (f.impact_ns, f.saving_ns, removed)
    (whole,) = _findings([ALEXNET], "HST401")
    assert whole.saving_ns > 0.99 * whole.impact_ns and "no more" not in whole.message


def test_dma103_says_why_the_peak_saves_little():
    """alexnet: its host copies hold the path 55.5 ms, yet at the host link's peak the step is
    only 0.4 ms shorter: the host thread then waits in cudaStreamSynchronize, which the
    faster copies barely move."""
    (f,) = _findings([ALEXNET], "DMA103")
    # 55.503 ms of copies on the path, 12 µs of them the 8 copies under 32 KiB left out
    assert f.impact_ns == 55_491_000 and f.evidence["peak_saving_ns"] < 0.01 * f.impact_ns
    assert "; no more, as the replayed path then waits for cudaStreamSynchronize" in f.message


LARGE_INT = "kineto_large_integer_rank-70.pt.trace.json.gz"


def test_col202_lone_allreduce_with_no_group_is_not_an_error():
    """large_integer (rank 70 by its file name): the whole trace is one 50 µs
    ``ncclKernel_AllReduce`` and one CPU op, with no group, no world size and no other rank.
    Before: COL202 at error, "100% of the step ... 50 µs shorter". Who else takes part is
    unknown, so the time may be waiting for them: info, and the message says why."""
    raw = [e for e in _raw_events(LARGE_INT) if e.get("cat") == "kernel"]
    assert [(e["name"], e["dur"]) for e in raw] == [("ncclKernel_AllReduce", 50)]
    (f,) = _findings([LARGE_INT], "COL202")
    assert f.severity.name == "INFO" and f.ranks == (70,)
    assert f.impact_ns == 50_000 and f.saving_ns <= f.impact_ns
    assert (f.evidence["group_size"], f.evidence["listed_group_size"]) == (1, 0)
    assert "names neither the collective's group nor the job's world size" in f.message
    assert f.evidence["busbw"] != f.evidence["busbw"]  # NaN: no bus bandwidth for one rank


def test_dma102_impact_holds_the_setup_gaps_its_saving_removes():
    """negative_queue, stream 7: the 731 device-to-device copies under 32 KiB (hand-counted)
    fall in two DMA102 groups. Before: "hold the critical path 876 µs ... 1.268 ms shorter"
    (and 90 µs vs 184 µs, 39 µs vs 62 µs): moving the bytes as one transfer also removes the
    setup gaps between them, which the impact left out. Now the impact is the path time the
    change acts on, said in two parts, and never below the saving."""
    nbytes, dur = _copies(NEG_QUEUE, "DtoD", 7)
    small = nbytes < 32768
    found = _findings([NEG_QUEUE], "DMA102")
    assert found
    # the rank's own stream, as every view names it (the rule groups by "stream 7")
    dtod = [f for f in found if f.evidence["direction"] == "DtoD" and f.track == "gpu0/stream 7"]
    assert sum(f.evidence["transfers"] for f in dtod) == int(small.sum()) == 731
    assert sum(f.evidence["bytes"] for f in dtod) == pytest.approx(nbytes[small].sum())
    for f in found:
        ev = f.evidence
        assert f.saving_ns <= f.impact_ns
        assert f.impact_ns == ev["path_transfer_ns"] + ev["path_setup_gap_ns"]
        assert ev["path_setup_gap_ns"] > 0 and "in the setup gaps between them" in f.message
    (big,) = [f for f in dtod if f.evidence["transfers"] == 601]
    # 1.886 ms of the 601 copies' transfers on the path since the blocking copies' return is
    # bound to the device work (876 µs before): no more than the copies' own time
    transfers = big.evidence["path_transfer_ns"]
    assert 0 < transfers <= dur[small].sum() and big.saving_ns > transfers


def test_dma101_leaves_latency_bound_copies_to_dma102():
    """resnet_act_checkpoint (MI300X), stream 0: 309 device-to-device copies under 32 KiB take
    1,362 µs, the 57 larger ones 272 µs, and those of the large ones below the stream's
    typical (the median large copy, 67.7 GB/s) would save 68.3 µs restored to it (all read
    from the file). Before: DMA101 at warning, "1.4 ms shorter", restoring 323-byte copies to
    67.7 GB/s (5 ns each) and claiming DMA102's saving. Now it prices the large copies only,
    and a group made only of small copies claims no pace saving."""
    ev = [
        e
        for e in _raw_events(MI300)
        if e.get("cat") == "gpu_memcpy" and "DtoD" in e["name"] and "bytes" in e.get("args", {})
    ]
    nbytes = np.array([e["args"]["bytes"] for e in ev], dtype=float)
    dur = np.array([round(e["dur"] * 1000) for e in ev], dtype=float)
    big = nbytes >= 32768
    assert (int((~big).sum()), int(big.sum())) == (309, 57)
    bw = nbytes / dur * 1e9
    typical = np.median(bw[big])
    slow = big & (bw < typical)
    hand = float((dur[slow] - nbytes[slow] / typical * 1e9).sum())
    assert hand == pytest.approx(68_318, rel=1e-3)
    found = _findings([MI300], "DMA101")
    (stream,) = [f for f in found if not f.layer]
    assert stream.severity.name == "INFO"
    assert stream.evidence["typical_bw"] == pytest.approx(typical)
    assert 0 < stream.saving_ns <= hand * 1.01
    assert "308 transfers under 32 KiB among them are left out" in stream.message
    (tiny,) = [f for f in found if f.layer == "DistributedDataParallel.forward"]
    assert tiny.saving_ns == 0 and "latency-bound, so no queue pace applies" in tiny.message
    dma102 = {f.saving_ns for f in _findings([MI300], "DMA102")}
    assert not dma102 & {f.saving_ns for f in found}  # no saving counted by both rules
