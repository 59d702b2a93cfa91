"""Baselines: an injected regression between generated runs fails the gate, a rerun passes."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from tests import gate_runs
from tracediag.ci.baseline import compare, make_baseline, metric_threshold
from tracediag.ci.baseline_settings import BaselineSettings
from tracediag.ci.gate import evaluate_gate
from tracediag.engine.config import from_mapping
from tracediag.model.errors import UsageError
from tracediag.model.findings import Severity
from tracediag.model.units import fmt_ns

# the shared fixtures (see tests/gate_runs.py)
cli = gate_runs.cli
probes = gate_runs.probes
reports = gate_runs.reports
truths = gate_runs.truths
run_dirs = gate_runs.run_dirs


@pytest.fixture
def clean_baseline(reports) -> dict:
    return make_baseline([(n, reports(n)) for n in ("clean0", "clean1", "clean2")])


def test_threshold_is_the_larger_of_noise_and_floor():
    values = np.array([100.0, 102.0, 98.0, 100.0, 130.0])
    median, spread, allowed = metric_threshold(values, "ns", 1000.0, BaselineSettings())
    assert median == 100.0
    assert spread == pytest.approx(1.4826 * 2.0)  # MAD of |0, 2, 2, 0, 30| is 2
    assert allowed == pytest.approx(4 * 1.4826 * 2.0)
    # one run: no spread; the floor is 1% of the median step time (ns) or 1 point (pct)
    assert metric_threshold(np.array([50.0]), "ns", 1000.0, BaselineSettings()) == (50.0, 0.0, 10.0)
    assert metric_threshold(np.array([50.0]), "pct", 1000.0, BaselineSettings(2.0)) == (
        50.0,
        0.0,
        2.0,
    )


def test_an_unchanged_rerun_passes(reports, clean_baseline):
    report = reports("clean3")  # a fourth seed: noise the baseline has not seen
    comparison = compare(report, clean_baseline)
    assert comparison["runs"] == 3
    assert {row["status"] for row in comparison["metrics"]} == {"unchanged"}
    step = next(r for r in comparison["metrics"] if r["metric"] == "step-time-ns")
    # Three seeds of one build vary less than the floor: the allowance is the floor, a share of
    # the baseline's median step.
    floor = BaselineSettings().min_change_pct / 100 * step["median"]
    assert abs(step["change"]) < 10_000 < step["allowed"] == pytest.approx(floor)
    gate = evaluate_gate(report, Severity.ERROR, comparison=comparison)
    assert gate["passed"], gate["failures"]


def test_an_injected_slow_dma_fails(reports, truths, clean_baseline):
    report = reports("slow_dma")
    comparison = compare(report, clean_baseline)
    status = {row["metric"]: row["status"] for row in comparison["metrics"]}
    assert status["step-time-ns"] == "regression"
    assert status["dma-transfer-ns"] == "regression"
    assert status["mfu-pct"] == "regression"  # lower is worse for MFU
    assert status["collective-skew-ns"] == "unchanged"
    step = next(r for r in comparison["metrics"] if r["metric"] == "step-time-ns")
    assert step["value"] == truths("slow_dma")["step_time_ns"]
    clean = [truths(n)["step_time_ns"] for n in ("clean0", "clean1", "clean2")]
    assert step["median"] == float(np.median(clean))
    new = [(f["code"], f["severity"]) for f in comparison["new_findings"]]
    assert ("DMA101", "error") in new
    gate = evaluate_gate(report, Severity.ERROR, comparison=comparison)
    assert not gate["passed"]
    assert [(f["kind"], f["id"]) for f in gate["failures"]] == [
        ("new-finding", "DMA101"),
        ("regression", "step-time-ns"),
        ("regression", "dma-transfer-ns"),
        ("regression", "mfu-pct"),
    ]
    rise = 100 * (step["value"] - step["median"]) / step["median"]
    assert gate["failures"][1]["message"].startswith(
        f"typical step time (the median step; the critical path for one step) regressed: "
        f"{fmt_ns(step['value'])} vs baseline "
        f"median {fmt_ns(step['median'])} (+{rise:.1f}%); noise allows {fmt_ns(step['allowed'])}"
    )


def test_a_straggler_fails_on_collective_skew(reports, clean_baseline):
    comparison = compare(reports("straggler"), clean_baseline)
    regressed = [r["metric"] for r in comparison["metrics"] if r["status"] == "regression"]
    assert regressed == ["step-time-ns", "collective-skew-ns", "mfu-pct"]


def test_known_findings_do_not_fail_and_fixed_ones_are_listed(reports):
    base = make_baseline([("slow", reports("slow_dma"))])
    same = compare(reports("slow_dma"), base)
    assert (same["new_findings"], same["fixed_findings"]) == ([], [])
    assert evaluate_gate(reports("slow_dma"), Severity.ERROR, comparison=same)["passed"]
    fixed = compare(reports("clean0"), base)
    assert [f["code"] for f in fixed["fixed_findings"] if f["code"] == "DMA101"] == ["DMA101"]
    assert {r["metric"]: r["status"] for r in fixed["metrics"]}["step-time-ns"] == "improvement"


def test_a_flaky_finding_is_not_fixed(reports):
    """DMA101 (info) sits on rank 0 in clean0 and on rank 1 in clean1: seen in half the runs,
    its absence is noise, not a fix."""
    base = make_baseline([(n, reports(n)) for n in ("clean0", "clean1")])
    comparison = compare(reports("clean1"), base)
    assert comparison["fixed_findings"] == []
    assert comparison["known_findings"] == len(reports("clean1")["findings"])


def test_append_and_keep(reports):
    one = make_baseline([("a", reports("clean0"))])
    two = make_baseline([("b", reports("clean1"))], previous=one)
    assert [r["label"] for r in two["runs"]] == ["a", "b"]
    kept = make_baseline([("c", reports("clean2"))], previous=two, keep=2)
    assert [r["label"] for r in kept["runs"]] == ["b", "c"]
    live = {fp for run in kept["runs"] for fp in run["findings"]}
    assert set(kept["findings"]) == live


def test_baseline_settings_from_config():
    cfg = from_mapping({"baseline": {"min-change-pct": 2.5, "noise-sigmas": 3}})
    assert cfg.baseline == BaselineSettings(2.5, 3.0)
    with pytest.raises(UsageError, match="unknown baseline keys"):
        from_mapping({"baseline": {"sigmas": 3}})
    with pytest.raises(UsageError, match="must be a number >= 0"):
        from_mapping({"baseline": {"noise-sigmas": -1}})


# ---- the command line ---------------------------------------------------------------------------


def test_baseline_then_check_on_generated_runs(cli, run_dirs, tmp_path):
    base = tmp_path / "base.json"
    code, out, err = cli("baseline", run_dirs["clean0"], run_dirs["clean1"], "-o", base)
    assert (code, out) == (0, "")
    assert err.splitlines()[-1] == "tracediag: baseline of 2 runs"
    data = orjson.loads(base.read_text())
    assert data["schema"] == "tracediag.baseline/1"
    assert [r["label"] for r in data["runs"]] == [str(run_dirs["clean0"]), str(run_dirs["clean1"])]
    assert cli("check", run_dirs["clean2"], "--baseline", base, "-q")[0] == 0
    code, out, err = cli("check", run_dirs["slow_dma"], "--baseline", base, "--format", "json")
    assert code == 1
    assert orjson.loads(out)["gate"]["baseline"]["runs"] == 2
    assert err.splitlines()[-1] == (
        "tracediag: check failed: 1 new finding at or above error, 3 metric regressions"
    )
    assert cli("check", run_dirs["slow_dma"], "--baseline", base, "-q", "--exit-zero")[0] == 0


def test_baseline_from_a_saved_report_and_append(cli, probes, tmp_path):
    assert cli("report", "a", "--format", "json", "-o", "r.json", "-q")[0] == 0
    assert cli("baseline", "r.json", "-o", "base.json", "-q")[0] == 0
    assert (
        cli("baseline", "a", "--append", "base.json", "--keep", "5", "-o", "base.json", "-q")[0]
        == 0
    )
    data = orjson.loads((tmp_path / "base.json").read_text())
    assert [r["label"] for r in data["runs"]] == ["r.json", "a"]
    assert data["runs"][0]["metrics"] == data["runs"][1]["metrics"]
    code, out, _ = cli("check", "a", "--baseline", "base.json", "--fail-on", "info")
    assert code == 0  # COL990 and DMA990 are known
    assert (
        "Against a baseline of 2 runs: 0 new, 0 fixed, 2 known findings; 0 metric regressions."
        in out
    )


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("{not json", "not valid JSON"),
        ('{"schema": "tracediag.report/1"}', "not a tracediag baseline"),
        ('{"schema": "tracediag.baseline/1", "runs": []}', "baseline holds no run"),
    ],
)
def test_bad_baseline_files_are_one_line_errors(cli, probes, tmp_path, content, problem):
    (tmp_path / "base.json").write_text(content)
    code, _, err = cli("check", "a", "--baseline", "base.json")
    assert code == 2
    assert err.startswith("tracediag: error: base.json: ") and problem in err
    assert err.count("\n") == 1


def test_missing_baseline_and_bad_keep(cli, probes):
    assert (
        cli("check", "a", "--baseline", "none.json")[2]
        == "tracediag: error: none.json: no such file\n"
    )
    assert cli("baseline", "a", "--keep", "0")[2] == "tracediag: error: --keep must be at least 1\n"
