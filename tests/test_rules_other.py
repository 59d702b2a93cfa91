"""CMP, HST and TRC rules on hand-made traces with exact expected numbers."""

from __future__ import annotations

from tests.trace_factory import RankSpec, build
from tracediag.engine.config import Config
from tracediag.engine.diagnose import diagnose
from tracediag.loading.clock_alignment import align_clocks
from tracediag.model import schema as S
from tracediag.model.findings import Severity


def _only(d, code):
    found = [f for f in d.findings if f.code == code]
    assert len(found) == 1, [f.code for f in d.findings]
    return found[0]


def _engine_chain(vector_ns: int) -> RankSpec:
    spec = RankSpec(0)
    t, prev = 0, None
    for k in range(4):
        mm = spec.add("MATMUL", "tensor", "compute", t, t + 2500, layer=f"layer_{k}", flops=1e9)
        if prev is not None:
            spec.dep(prev, mm)
        add = spec.add(
            "ADD", "vector", "compute", t + 2500, t + 2500 + vector_ns, layer=f"layer_{k}"
        )
        spec.dep(mm, add)
        prev, t = add, t + 2500 + vector_ns
    return spec


def test_cmp302_vector_engine_bounds_the_step():
    d = diagnose(build(_engine_chain(7500)), Config(select=["CMP302"]))
    f = _only(d, "CMP302")
    assert (f.ranks, f.engine) == ((0,), "vector")
    assert f.impact_ns == 30_000 and f.impact_pct == 75.0
    assert f.saving_ns == 20_000  # vector balanced with the tensor engine's 10 us
    assert f.severity == Severity.ERROR


def test_cmp302_quiet_when_tensor_bounds():
    d = diagnose(build(_engine_chain(1000)), Config(select=["CMP302"]))
    assert d.findings == []


def test_cmp301_reports_idle_tensor_and_mfu():
    d = diagnose(build(_engine_chain(7500)), Config(select=["CMP301"]))
    f = _only(d, "CMP301")
    assert f.impact_ns == 30_000 and f.saving_ns == 0
    assert f.evidence["idle_by_cause_ns"] == {"vector": 30_000}
    # 4 GFLOP in 40 us on a 95 TFLOP/s NeuronCore-v2
    assert abs(f.evidence["mfu_pct"] - 100 * 4e9 / 40e-6 / 95e12) < 1e-9


def _host_bound(stall_ns: int) -> RankSpec:
    spec = RankSpec(0, hardware="NVIDIA H100", fmt="chrome-json")
    prev_k = None
    for i in range(10):
        t = i * 2000 + (stall_ns if i >= 6 else 0)
        launch = spec.add("cudaLaunchKernel", "cpu", "host", t, t + 500)
        k = spec.add("gemm", "stream7", "compute", t + 800, t + 1800)
        spec.dep(launch, k, "launch")
        prev_k = k
    assert prev_k is not None
    return spec


def test_hst401_host_stall_is_priced():
    d = diagnose(build(_host_bound(50_000)), Config(select=["HST401"]))
    f = _only(d, "HST401")
    assert f.ranks == (0,)
    # The stall: from the end of launch 5 (10.5 us) to launch 6 (62 us), all host on the path;
    # the device idles from the end of kernel 5 (11.8 us): 50.2 us of the device waiting.
    assert (f.start_ns, f.end_ns) == (11_800, 62_000)
    assert f.impact_ns == 50_200
    # back to the typical 1.5 us between launches after the 1.3 us the host may have waited
    # for kernel 5 (kept: before, it was traded for the delay and 50.0 us saved)
    assert f.saving_ns == 50_200 - 1_500
    assert f.evidence["stalls"] == 1
    assert f.severity == Severity.ERROR


def test_hst401_evenly_launch_bound_is_info():
    d = diagnose(build(_host_bound(0)), Config(select=["HST401"]))
    f = _only(d, "HST401")
    assert f.severity == Severity.INFO and f.saving_ns == 0
    # The window is the device's busy span (first kernel at 0.8 us to the last's end), as HTA's.
    assert f.impact_ns == (19_800 - 800) - 1000


def test_trc_rules_report_trace_trouble():
    a, b = RankSpec(0), RankSpec(1)
    x = a.add("ADD", "vector", "compute", 0, 100)
    c = a.add("AllReduce", "cc", "collective", 100, 200)
    a.collective(c, "ar0", 100)
    y = a.add("ADD", "vector", "compute", 300, 400)
    a.dep(y, x)  # an edge against time
    b.add("ADD", "vector", "compute", 0, 100)  # rank 1 shares no collective: unalignable
    trace = build(a, b)
    trace.collectives[S.GROUP] = "0,1,2,3"
    trace.meta[1].count("events: dropped, no valid timestamp or duration", 3)
    align_clocks(trace)
    d = diagnose(trace, Config(select=["TRC"]))
    codes = {f.code: f for f in d.findings}
    assert codes["TRC501"].ranks == (1,) and codes["TRC501"].severity == Severity.WARNING
    assert codes["TRC501"].evidence["dropped"] == 3
    assert codes["TRC502"].evidence["missing"] == [2, 3]
    assert codes["TRC503"].ranks == (1,)
    assert codes["TRC504"].evidence["dropped_edges"] == {
        "edges against time (successor starts before its predecessor)": 1
    }
