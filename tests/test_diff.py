"""``tracediag diff``: two runs side by side with significance; measured against predicted; and
the statistics behind them (reference values from SciPy 1.17)."""

from __future__ import annotations

import re

import numpy as np
import orjson
import pytest

from tests import gate_runs
from tracediag.ci.diff import correlate, diff_reports
from tracediag.ci.statistics import betainc, bh_qvalues, pearson, t_two_sided_p, welch
from tracediag.model.units import fmt_ns
from tracediag.report.diff_render import render_diff_markdown, render_diff_text

# the shared fixtures (see tests/gate_runs.py)
cli = gate_runs.cli
probes = gate_runs.probes
reports = gate_runs.reports
truths = gate_runs.truths
run_dirs = gate_runs.run_dirs

# ---- statistics -------------------------------------------------------------------------------


def test_statistics_match_scipy():
    assert betainc(2, 0.5, 0.3) == pytest.approx(0.03784096948581308, rel=1e-12)
    assert betainc(50, 0.5, 0.99) == pytest.approx(0.3173043978741973, rel=1e-10)
    assert t_two_sided_p(2.5, 7) == pytest.approx(0.04099221858575289, rel=1e-10)  # 2*t.sf
    # scipy.stats.ttest_ind_from_stats(10, 2, 5, 13, 3, 8, equal_var=False).pvalue
    assert welch(10, 2, 5, 13, 3, 8) == pytest.approx(0.05377376252279121, rel=1e-10)
    q = bh_qvalues(np.array([0.01, 0.04, 0.03, np.nan, 0.5]))  # false_discovery_control
    assert q[[0, 1, 2, 4]] == pytest.approx([0.04, 0.0533333333, 0.0533333333, 0.5])
    assert np.isnan(q[3])


def test_statistics_edge_cases():
    assert welch(1, 0, 1, 2, 0, 5) is None  # one sample: no test
    assert welch(5, 0, 3, 5, 0, 3) == 1.0
    assert welch(5, 0, 3, 6, 0, 3) == 0.0
    assert pearson([1, 2], [2, 4]) is None
    assert pearson([1, 2, 3], [2, 4, 6.5]) == pytest.approx(0.99795, abs=1e-5)


# ---- diff -------------------------------------------------------------------------------------


def test_diff_finds_the_slow_dma(reports, truths):
    a, b = reports("clean0"), reports("slow_dma")
    result = diff_reports(a, b, top=5)
    # The step times are the generator's (each diagnosis finds its run's simulated step).
    step_a, step_b = truths("clean0")["step_time_ns"], truths("slow_dma")["step_time_ns"]
    assert result["step"]["change_ns"] == step_b - step_a
    assert result["step"]["change_pct"] == round(100 * (step_b - step_a) / step_a, 2)
    cats = {c["category"]: c for c in result["categories"]}
    dma_a, dma_b = (r["critical_path"]["by_category_ns"]["dma_transfer"] for r in (a, b))
    assert dma_b > 4 * dma_a  # layer_1's weights at a quarter of the bandwidth
    assert cats["dma_transfer"]["change_ns"] == dma_b - dma_a
    assert (cats["dma_transfer"]["a_pct"], cats["dma_transfer"]["b_pct"]) == (
        round(100 * dma_a / step_a, 2),
        round(100 * dma_b / step_b, 2),
    )
    top = result["ops"][0]
    assert top["op"] == "layer_1.weight"  # the DMA of layer_1's weights, 1152 transfers per run
    assert (top["a_count"], top["b_count"]) == (1152, 1152)
    assert top["change_pct"] == pytest.approx(147.5, abs=0.1)
    assert top["significant"] and top["q_value"] < 1e-4
    assert not any(r["significant"] for r in result["ops"][1:])
    assert len(result["ops"]) == 5


def test_diff_of_reruns_finds_nothing_significant(reports):
    result = diff_reports(reports("clean0"), reports("clean1"), top=None)
    assert len(result["ops"]) == len(reports("clean0")["durations"]["by_op"])
    assert not any(r["significant"] for r in result["ops"] + result["layers"])
    assert abs(result["step"]["change_pct"]) < 0.1


def test_diff_of_a_straggler_flags_its_layers(reports):
    result = diff_reports(reports("clean0"), reports("straggler"), top=None)
    cats = {c["category"]: c for c in result["categories"]}
    assert cats["collective_skew"]["change_ns"] == 1425756 - 10524
    # rank 1's tensor and vector work on layer_1 and layer_2 is 1.5x slower: the per-rank means
    # of those layers grow; two ranks are too few samples for significance, and it says so
    layers = {r["layer"]: r for r in result["layers"]}
    assert layers["layer_1"]["change_pct"] > 10 and layers["layer_2"]["change_pct"] > 10
    assert abs(layers["layer_0"]["change_pct"]) < 1


def test_operators_on_one_side_only():
    def rep(ops):
        return {
            "inputs": [], "ranks": [{"step_time_ns": 10}],
            "critical_path": {"length_ns": 10, "by_category_ns": {}},
            "durations": {"by_layer": [], "by_op": ops},
        }  # fmt: skip

    op = {"op": "x", "kind": "compute", "count": 4, "total_ns": 40, "mean_ns": 10.0, "std_ns": 1.0}
    result = diff_reports(rep([op]), rep([{**op, "op": "y"}]))
    rows = {r["op"]: r for r in result["ops"]}
    assert rows["x"]["b_mean_ns"] is None and rows["x"]["change_total_ns"] == -40
    assert rows["y"]["a_count"] == 0 and rows["y"]["p_value"] is None
    assert result["step"]["p_value"] is None  # one rank: no test
    assert "-" in render_diff_text(result)


def test_correlate_a_prediction(reports, truths):
    measured, predicted = reports("clean0"), reports("straggler")
    result = correlate(measured, predicted, top=3)
    assert result["ops_matched"] == len(measured["durations"]["by_op"])
    step_m, step_p = truths("clean0")["step_time_ns"], truths("straggler")["step_time_ns"]
    assert result["step"]["error_pct"] == pytest.approx(100 * (step_p - step_m) / step_m, abs=0.01)
    assert 0.98 < result["pearson_r"] < 0.99
    assert result["pearson_r_log"] > result["pearson_r"]
    worst = result["worst"][0]
    assert worst["op"] == "dot.73" and worst["error_pct"] == pytest.approx(25.3, abs=0.1)
    assert worst["total_error_ns"] == pytest.approx(
        2 * (worst["predicted_mean_ns"] - worst["measured_mean_ns"])
    )
    assert len(result["worst"]) == 3
    assert correlate(measured, measured)["weighted_mape_pct"] == 0.0


def test_renderers(reports, truths):
    result = diff_reports(reports("clean0"), reports("slow_dma"), top=3)
    text = render_diff_text(result)
    step_a, step_b = truths("clean0")["step_time_ns"], truths("slow_dma")["step_time_ns"]
    change = f"+{fmt_ns(step_b - step_a)}  +{100 * (step_b - step_a) / step_a:.1f}%"
    # the label column is as wide as the slower-rank row below it
    a_b = f"{re.escape(fmt_ns(step_a))} +{re.escape(fmt_ns(step_b))}"
    assert re.search(rf"\n  step time +{a_b}  {re.escape(change)}", text)
    assert "layer_1.weight  1.333 µs  3.299 µs  +147.5%     +2.265 ms  <1e-4          yes" in text
    md = render_diff_markdown(result)
    assert md.startswith("## tracediag diff\n")
    assert "| dma_transfer | 383.8 µs (5.7%) | 1.9 ms (24.6%) | +1.516 ms |" in md


# ---- the command line -------------------------------------------------------------------------


def test_diff_command_on_traces_and_saved_reports(cli, run_dirs, tmp_path):
    code, _, _ = cli("report", run_dirs["clean0"], "--format", "json", "-o", "a.json", "-q")
    assert code == 0
    code, out, err = cli("diff", "a.json", run_dirs["slow_dma"], "--format", "json", "--top", "2")
    assert code == 0
    assert "reading the saved report a.json" in err
    data = orjson.loads(out)
    assert data["a"] == [str(run_dirs["clean0"])] and data["b"] == [str(run_dirs["slow_dma"])]
    assert data["ops"][0]["op"] == "layer_1.weight" and len(data["ops"]) == 2
    code, out, _ = cli("diff", "a.json", "a.json", "--predicted", "-q")
    assert code == 0 and "correlation of mean durations (r)" in out


def test_diff_command_names_the_straggler_and_the_changed_findings(cli, run_dirs, reports, truths):
    code, out, _ = cli("diff", run_dirs["clean0"], run_dirs["straggler"], "--format", "json", "-q")
    assert code == 0
    data = orjson.loads(out)
    # every rank's step grows alike (rank 0 waits for rank 1); the straggler is the one whose
    # own work (compute and memory) grew, here by the generator's injected saving
    [fault] = truths("straggler")["faults"]
    slower = data["slower_rank"]
    assert [slower["rank"]] == fault["ranks"] == [1]
    assert slower["work_change_ns"] == pytest.approx(fault["saving_ns"], rel=0.01)
    assert slower["b_ns"] - slower["a_ns"] == data["step"]["change_ns"]
    # findings matched by fingerprint: the straggler's COL201 on rank 1 is new in B
    found = data["findings"]
    assert [(f["code"], f["ranks"]) for f in found["added"]][0] == ("COL201", [1])
    assert found["added"][0]["saving_ns"] == pytest.approx(fault["saving_ns"], rel=0.01)
    codes_a = [f["code"] for f in reports("clean0")["findings"]]
    codes_b = [f["code"] for f in reports("straggler")["findings"]]
    assert len(codes_b) - len(found["added"]) == len(codes_a) - len(found["removed"])
    assert found["unchanged"] == len(codes_b) - len(found["added"])
    assert "COL201" not in [f["code"] for f in found["removed"]]
    # the layers grow >10% yet q = 1: two ranks are two samples a side, and a note says so
    layers = {r["layer"]: r for r in data["layers"]}
    assert layers["layer_1"]["change_pct"] > 10 and layers["layer_1"]["q_value"] > 0.05
    n_layers = len(data["layers"])
    assert data["notes"][0].startswith(
        f"layers (one sample per rank): {n_layers} of {n_layers} rows have under 5 samples a "
        "side (as few as 2), too few for Welch's test to give q < 0.05"
    )
    text = cli("diff", run_dirs["clean0"], run_dirs["straggler"], "-q", "--top", "3")[1]
    assert re.search(
        r"\n  rank 1 own work \(grew most\) +6.47\d ms +7.9\d\d ms +\+1.4\d\d ms", text
    )
    assert re.search(r"\n  added +COL201 +error +1 ", text)
    added, removed, both = len(found["added"]), len(found["removed"]), found["unchanged"]
    assert (
        f"findings (by fingerprint): {added} added in B, {removed} removed from A, {both} in both"
        in text
    )
    assert "\nnote: layers (one sample per rank): " in text
    # a rerun: no rank's work grew beyond noise, and no straggler finding appears
    rerun = diff_reports(reports("clean0"), reports("clean1"))
    assert rerun["slower_rank"] is None
    assert "COL201" not in [f["code"] for f in rerun["findings"]["added"]]


def test_diff_usage_errors(cli, probes):
    required = (
        "tracediag: error: the following arguments are required: B (see 'tracediag diff --help')\n"
    )
    assert cli("diff", "a")[2] == required
    assert cli("diff", "a", "b", "c")[2].startswith("tracediag: error: unrecognized arguments: c")
    code, out, _ = cli("diff", "--help")
    assert code == 0 and "\n                      A B\n" in out and "PATH" not in out
    assert cli("diff", "a", "b", "--top", "-1")[2] == "tracediag: error: --top must be 0 or more\n"


def test_saved_report_errors(cli, tmp_path):
    (tmp_path / "r.json").write_text('{"schema": "tracediag.report/1", "findings": []}')
    code, _, err = cli("diff", "r.json", "r.json", "-q")
    assert code == 2
    assert err == "tracediag: error: r.json: tracediag report lacks its 'critical_path' section\n"
