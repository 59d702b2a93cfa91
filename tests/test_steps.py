"""Per-step analysis (tracediag.analysis.steps) against hand computations from the trace files.

The hand computations read the JSON with json/gzip and numpy only (never this tool's reader):
a step's time on a rank is its ``ProfilerStep#N`` range's duration, a job step's time the
median over the ranks, the typical step the median over the steps. The slow-step fixture is
written by the clean-room Kineto writer (``tests/cleanroom``, written without reading this
tool), which sleeps a known time on one rank's host in one step.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from tests import pixels
from tests.chrome_helpers import shared
from tracediag.ci.metrics import report_metrics
from tracediag.engine.diagnose import diagnose
from tracediag.loading.loader import load
from tracediag.report.text import render_text

GLOO = Path(__file__).parent / "data" / "real_gloo"
SCHEMA = Path(__file__).parents[1] / "docs" / "report.schema.json"
PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")


def _profiler_steps(path: Path) -> dict[int, float]:
    """Step number -> duration (ns) of the file's host ``ProfilerStep#N`` ranges."""
    with gzip.open(path) as f:
        doc = json.loads(f.read())
    return {
        int(PROFILER_STEP.match(e["name"]).group(1)): float(e["dur"]) * 1000.0
        for e in doc["traceEvents"]
        if e.get("ph") == "X"
        and e.get("cat") != "gpu_user_annotation"  # the GPU timeline's copy of the range
        and PROFILER_STEP.match(str(e.get("name", "")))
    }


def _hand_job_steps(files: list[Path]) -> np.ndarray:
    """Per step (by number): the median over the files (ranks) of their step's duration."""
    per_rank = [_profiler_steps(f) for f in files]
    numbers = sorted(per_rank[0])
    assert all(sorted(r) == numbers for r in per_rank)
    return np.array([np.median([r[n] for r in per_rank]) for n in numbers])


@pytest.fixture(scope="module")
def gloo():
    """The straggler gloo jobs (4 ranks, 5 steps), diagnosed once each."""
    if not (GLOO / "straggler_sleep" / "truth.json").is_file():
        pytest.skip("real gloo traces not present (tests/data/real_gloo)")
    return {
        s: diagnose(load([GLOO / s], cache=False)) for s in ("straggler_sleep", "straggler_compute")
    }


@pytest.fixture(scope="module")
def resnet():
    path = shared("kineto_resnet50_train_worker0.pt.trace.json.gz")
    return path, diagnose(load([path], cache=False))


@pytest.mark.parametrize("scenario", ["straggler_sleep", "straggler_compute"])
def test_gloo_steps_are_the_profiler_steps_of_every_rank(gloo, scenario):
    d = gloo[scenario]
    hand = _hand_job_steps(sorted((GLOO / scenario).glob("rank-*.json.gz")))
    report = d.to_dict()
    s = report["step_summary"]
    assert s["n"] == len(hand) == 5 and s["marked"]
    assert [st["number"] for st in report["steps"]] == [2, 3, 4, 5, 6]
    assert s["typical_ns"] == pytest.approx(np.median(hand), rel=0.01)
    assert s["p90_ns"] == pytest.approx(np.percentile(hand, 90), rel=0.01)
    assert s["max_ns"] == pytest.approx(hand.max(), rel=0.01)
    for st, want in zip(report["steps"], hand, strict=True):
        assert st["step_time_ns"] == pytest.approx(want, rel=0.01)
        assert sorted(r["rank"] for r in st["ranks"]) == [0, 1, 2, 3]
        # Host-only ranks: no device breakdown; the path inside the step fills its span.
        assert all(r["breakdown_ns"] == {} and r["host_gap_ns"] is None for r in st["ranks"])
        cp = report["critical_path"]
        inside = min(st["end_ns"], cp["end_ns"]) - max(st["start_ns"], cp["start_ns"])
        assert sum(st["critical_path_ns"].values()) == inside
    assert s["outliers"] == []  # the delay is in every step: no step stands out
    # The straggler's COL201 spans the job: it is in every step.
    (col201,) = [f for f in report["findings"] if f["code"] == "COL201"]
    assert (col201["steps_seen"], col201["steps_total"]) == (5, 5)
    # The metrics compare the typical step.
    assert report_metrics(report)["step-time-ns"] == s["typical_ns"]
    assert report_metrics(report)["step-time-ns"] < 0.25 * report["critical_path"]["length_ns"]
    jsonschema.validate(report, json.loads(SCHEMA.read_text()))


def test_resnet50_six_steps_none_an_outlier(resnet):
    path, d = resnet
    durs = _profiler_steps(path)
    assert sorted(durs) == [5, 6, 7, 8, 9, 10]
    hand = np.array([durs[n] for n in sorted(durs)])
    report = d.to_dict()
    s = report["step_summary"]
    assert s["n"] == 6 and [st["number"] for st in report["steps"]] == [5, 6, 7, 8, 9, 10]
    assert s["typical_ns"] == pytest.approx(np.median(hand), rel=0.01)  # 155.0 ms
    assert s["p90_ns"] == pytest.approx(np.percentile(hand, 90), rel=0.01)
    assert s["max_ns"] == pytest.approx(hand.max(), rel=0.01)  # step 10, 167.7 ms
    # The first step is not slow here (159.2 ms against the median 155.0 ms), nor is any other:
    # the slowest is 8% above the median.
    assert hand[0] / np.median(hand) < 1.05 and hand.max() / np.median(hand) < 1.1
    assert s["outliers"] == [] and not any(st["outlier"] for st in report["steps"])
    assert d.step_time_by_rank[0] == s["typical_ns"]  # one rank: its median is the job's
    for st in report["steps"]:
        (r,) = st["ranks"]
        assert sum(r["breakdown_ns"].values()) == r["step_time_ns"] == st["step_time_ns"]
        assert r["breakdown_ns"]["compute"] > 0.5 * r["step_time_ns"]
    # The DataLoader stalls of steps 6 to 10 (one per step) are one cause: one HST401 finding
    # seen in 5 of the 6 steps (step 5's DataLoader call runs before the critical path starts).
    # (the stalls' finding; the other HST401 is the ordinary launch gaps of zero_grad & co.)
    hst = [f for f in report["findings"] if f["code"] == "HST401" and "stalls" in f["evidence"]]
    assert len(hst) == 1 and hst[0]["steps_seen"] == 5 and hst[0]["evidence"]["instances"] == 5
    text = render_text(report)
    assert "Steps\n  6 steps (5 to 10): typical (median) 155 ms" in text
    assert "No outlier step" in text and "in 5 of 6 steps" in " ".join(text.split())
    jsonschema.validate(report, json.loads(SCHEMA.read_text()))


@pytest.fixture(scope="module")
def slow_step(tmp_path_factory):
    """4 ranks, 6 steps; rank 2's host sleeps 8 ms before backward in step index 3 only."""
    folder = tmp_path_factory.mktemp("slow_step")
    truth = pixels.write_slow_step_job(folder)
    return diagnose(load([folder], cache=False)), truth


def test_an_injected_slow_step_is_the_outlier_with_its_cause(slow_step):
    d, truth = slow_step
    report = d.to_dict()
    s = report["step_summary"]
    # The writer's ProfilerStep windows per rank (its truth), medians as above.
    want = np.array(
        [np.median([r["step_ns"] for r in st["per_rank"].values()]) for st in truth["steps"]]
    )
    got = np.array([st["step_time_ns"] for st in report["steps"]])
    assert got == pytest.approx(want, rel=0.01)
    assert s["n"] == 6 and s["typical_ns"] == pytest.approx(np.median(want), rel=0.01)
    assert s["outliers"] == [3]
    step = report["steps"][3]
    assert truth["steps"][3]["name"] == f"ProfilerStep#{step['number']}" == "ProfilerStep#13"
    assert step["step_time_ns"] - s["typical_ns"] == pytest.approx(8_000_000, rel=0.05)
    cause = step["cause"]
    # Rank 2's device waits for its sleeping host; the other ranks' collectives wait for rank
    # 2, which is not the cause (their communication grew, rank 2's did not).
    assert (cause["category"], cause["rank"], cause["source"]) == ("idle", 2, "breakdown")
    assert cause["grew_ns"] == pytest.approx(8_000_000, rel=0.05)
    assert cause["text"].endswith("on rank 2")
    others = [r for r in step["ranks"] if r["rank"] != 2]
    typical = report["steps"][2]
    assert all(
        r["breakdown_ns"]["communication"] > 7_000_000 + t["breakdown_ns"]["communication"]
        for r, t in zip(others, [r for r in typical["ranks"] if r["rank"] != 2], strict=True)
    )
    text = render_text(report)
    assert "Outlier steps:" in text and "step 13:" in text and "on rank 2" in text
    jsonschema.validate(report, json.loads(SCHEMA.read_text()))


def test_a_trace_without_step_numbers_is_one_step_its_window(tmp_path):
    from tests.chrome_helpers import X, write

    gpu = {"pid": 0, "tid": 7}
    events = [
        X("kernel", "k1", 100, 10, **gpu, correlation=1, stream=7, device=0),
        X("kernel", "k2", 130, 20, **gpu, correlation=2, stream=7, device=0),
        X("cuda_runtime", "cudaLaunchKernel", 95, 3, correlation=1),
        X("cuda_runtime", "cudaLaunchKernel", 120, 3, correlation=2),
    ]
    path = write(tmp_path / "t.json", {"traceEvents": events})
    report = diagnose(load([path], cache=False)).to_dict()
    s = report["step_summary"]
    assert (s["n"], s["marked"], s["outliers"]) == (1, False, [])
    assert s["typical_ns"] == report["critical_path"]["length_ns"] == 50_000  # 100 to 150 µs
    (step,) = report["steps"]
    assert step["number"] is None and step["step_time_ns"] == 50_000
    assert step["ranks"][0]["breakdown_ns"] == {
        "compute": 30_000,
        "communication": 0,
        "memory": 0,
        "idle": 20_000,
    }
    assert "\nSteps\n" not in render_text(report)
    assert report_metrics(report)["step-time-ns"] == 50_000
