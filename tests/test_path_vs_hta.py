"""Issue 14: our critical-path split agrees with HTA's within 5 points where HTA's graph is
complete, and a host thread's unrecorded idle time (a ``time.sleep``) is a gap, not host.

HTA is not installed in CI, so its figures are recorded below (HTA_RECORDED); ours are computed
live. Produced with HolisticTraceAnalysis in its own venv by

    /work/htavenv/bin/python benchmarks/hta_path_split.py ../shared/traces/FILE [--annotation A]
        [--rename-old-categories]

(``TraceAnalysis.critical_path_analysis(0, "ProfilerStep#N", 0)`` per step, then
``get_critical_path_breakdown()`` summed per ``bound_by``, memcpy/memset kernels split off as
``gpu_memory_bound``; µs, HTA's unit). ``benchmarks/hta_critical_path.py`` prints the whole
table and reruns HTA when its venv is present. HTA's reader drops each trace's last
ProfilerStep, so those have no figure. The windows whose HTA graph is incomplete (a kernel left
without an incoming edge) are recorded with their count and not compared; ResNet-50's file uses
Kineto's older category names, which HTA fails on unchanged (an AssertionError per step), so
HTA read a copy with only those names changed.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks.hta_critical_path import CASES, HTA, OURS, PARTS, complete, our_windows, shares
from tracediag.analysis.context import analyse
from tracediag.loading.loader import load

SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces"
GLOO = Path(__file__).parent / "data" / "real_gloo"

HTA_RECORDED = {
    "resnet50": {
        5: {"success": True, "kernels_without_edge": 0, "by_bound": {"cpu_bound": 156970}},
        6: {"success": True, "kernels_without_edge": 0, "by_bound": {"cpu_bound": 148105}},
        7: {"success": True, "kernels_without_edge": 0, "by_bound": {"cpu_bound": 138982}},
        8: {"success": True, "kernels_without_edge": 0, "by_bound": {"cpu_bound": 158586}},
        9: {"success": True, "kernels_without_edge": 0, "by_bound": {"cpu_bound": 146143}},
    },
    "df_index": {
        2: {"success": True, "kernels_without_edge": 1, "by_bound": {"cpu_bound": 238893}},
        3: {"success": True, "kernels_without_edge": 0, "by_bound": {"cpu_bound": 252853}},
        4: {"success": True, "kernels_without_edge": 1, "by_bound": {"cpu_bound": 238688}},
        5: {"success": True, "kernels_without_edge": 0, "by_bound": {"cpu_bound": 239396}},
    },
    "alexnet": {
        "[param|pytorch.model.alex_net|0|0|0|measure|forward]": {
            "success": True,
            "kernels_without_edge": 0,
            "by_bound": {
                "cpu_bound": 74984,
                "gpu_compute_bound": 3710,
                "gpu_kernel_kernel_overhead": 50,
                "gpu_kernel_launch_overhead": 30,
                "gpu_memory_bound": 2,
            },
        }
    },
    "negative_queue": {
        s: {"success": True, "kernels_without_edge": 4, "by_bound": by}
        for s, by in {
            550: {"gpu_compute_bound": 22384, "gpu_kernel_kernel_overhead": 189177},
            551: {"gpu_compute_bound": 22290, "gpu_kernel_kernel_overhead": 188557},
            552: {"gpu_compute_bound": 22596, "gpu_kernel_kernel_overhead": 189142},
            553: {"gpu_compute_bound": 22240, "gpu_kernel_kernel_overhead": 189303},
        }.items()
    },
    "mi300_act_ckpt": {
        s: {"success": True, "kernels_without_edge": 2, "by_bound": by}
        for s, by in {
            15: {"gpu_compute_bound": 5698, "gpu_kernel_kernel_overhead": 12779},
            16: {"gpu_compute_bound": 5616, "gpu_kernel_kernel_overhead": 12840},
            17: {"gpu_compute_bound": 5704, "gpu_kernel_kernel_overhead": 12361},
        }.items()
    },
    "h100_qwen": {
        6: {
            "success": True,
            "kernels_without_edge": 0,
            "by_bound": {
                "cpu_bound": 1675,
                "gpu_compute_bound": 29167,
                "gpu_kernel_kernel_overhead": 2781,
                "gpu_kernel_launch_overhead": 6,
                "gpu_memory_bound": -16,
            },
        }
    },
}

#: The traces with a complete HTA graph in at least one window, compared live.
_COMPARED = ("resnet50", "df_index", "alexnet", "h100_qwen")


@pytest.mark.parametrize("name", _COMPARED)
def test_split_within_5_points_of_hta_where_its_graph_is_complete(name):
    case = next(c for c in CASES if c.name == name)
    path = SHARED / case.file
    if not path.exists():
        pytest.skip(f"not present: {path}")
    ours = our_windows(path, case.annotation)
    compared = 0
    for window, row in HTA_RECORDED[name].items():
        if complete(row) is not None:
            continue
        o, h = shares(ours[window], OURS), shares(row["by_bound"], HTA)
        diff = {p: round(o[p] - h[p], 1) for p in PARTS}
        assert max(map(abs, diff.values())) <= 5.0, (window, o, h)
        compared += 1
    assert compared >= 1


def test_incomplete_hta_graphs_are_left_out():
    # What the recorded figures say of each trace: the windows kept for the comparison.
    kept = {
        n: [w for w, r in rows.items() if complete(r) is None] for n, rows in HTA_RECORDED.items()
    }
    assert kept["negative_queue"] == [] and kept["mi300_act_ckpt"] == []
    assert kept["df_index"] == [3, 5]
    assert complete(HTA_RECORDED["df_index"][2]) == "HTA left 1 kernels without an incoming edge"


def _path_inside(segments, lo, hi) -> dict[str, int]:
    seg = segments
    inside = np.clip(np.minimum(seg["end_ns"], hi) - np.maximum(seg["start_ns"], lo), 0, None)
    sums = inside.groupby(seg["category"].astype(str)).sum()
    return {k: int(v) for k, v in sums.items() if v}


def test_a_sleep_on_the_straggler_s_thread_is_a_gap_not_host():
    # truth.json: the script's own clock around each injected time.sleep on the delayed rank
    # (nothing of its thread recorded in between but the ProfilerStep range).
    d = GLOO / "straggler_sleep"
    if not (d / "truth.json").exists():
        pytest.skip("no real gloo traces")
    truth = json.loads((d / "truth.json").read_text())
    trace = load([d], cache=False)
    a = analyse(trace)
    base = trace.meta[truth["delayed_rank"]].info["baseTimeNanoseconds"]
    for inj in truth["injected"]:
        lo = max(inj["start_epoch_ns"] - base, a.path.start_ns)  # the first begins before it
        hi = inj["end_epoch_ns"] - base
        on = _path_inside(a.path.segments, lo, hi)
        # The path crosses every sleep: waiting for it (skew) or in it (gap), never host.
        assert sum(on.values()) >= 0.99 * (hi - lo), (inj["step"], on)
        assert on.get("host", 0) <= 0.01 * (hi - lo), (inj["step"], on)
        assert on.get("gap", 0) >= 0.25 * (hi - lo), (inj["step"], on)


def test_data_loading_between_two_runtime_calls_stays_host():
    # Raw: resnet50's single-process DataLoader runs ~43 ms on the main thread between two
    # runtime calls, inside enumerate(DataLoader)#...__next__, which ends before the copy it
    # feeds: recorded host work, not an idle thread.
    f = SHARED / "kineto_resnet50_train_worker0.pt.trace.json.gz"
    if not f.exists():
        pytest.skip(f"not present: {f}")
    with gzip.open(f, "rt") as fh:
        raw = [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X"]
    loads = [e for e in raw if e["name"].startswith("enumerate(DataLoader)#")]
    assert len(loads) == 6
    a = analyse(load([f], cache=False))
    t0 = min(e["ts"] for e in raw if e["cat"] in ("Kernel", "Memcpy", "Memset"))
    shift = a.path.start_ns - round(t0 * 1000)  # our clock: the loader's, in ns
    checked = 0
    for e in loads:
        lo = round(e["ts"] * 1000) + shift
        hi = lo + round(e["dur"] * 1000)
        on = _path_inside(a.path.segments, max(lo, a.path.start_ns), hi)
        if sum(on.values()) < 0.5 * (hi - lo):
            continue  # before the window (the first step's loader)
        assert on.get("host", 0) >= 0.95 * sum(on.values()), on
        checked += 1
    assert checked >= 4
