"""Budgets on report metrics, the MFU and duration tables they read, and per-trace ignores."""

from __future__ import annotations

import orjson
import pytest

from tests import gate_runs
from tracediag.ci.budgets import check_budgets, parse_budgets
from tracediag.ci.metrics import report_metrics
from tracediag.engine.config import from_mapping
from tracediag.engine.trace_ignores import apply_per_trace_ignores, covered_ranks
from tracediag.model.errors import UsageError
from tracediag.model.units import fmt_ns

# the shared fixtures (see tests/gate_runs.py)
cli = gate_runs.cli
diagnosed = gate_runs.diagnosed
probes = gate_runs.probes
reports = gate_runs.reports
truths = gate_runs.truths
run_dirs = gate_runs.run_dirs

# ---- metrics ----------------------------------------------------------------------------------


def test_metrics_of_a_generated_run(reports, truths):
    report = reports("slow_dma")
    m = report_metrics(report)
    cp = report["critical_path"]
    step = truths("slow_dma")["step_time_ns"]  # the generator's simulated step
    assert m["step-time-ns"] == cp["length_ns"] == step
    dma = cp["by_category_ns"]["dma_transfer"]
    assert m["dma-transfer-ns"] == dma and dma > 0.2 * step  # the slowed weight DMA bounds it
    assert m["dma-transfer-pct"] == pytest.approx(100 * dma / step, abs=1e-4)
    assert sum(m[f"{c}-pct"] for c in ("compute", "dma-transfer", "dma-wait", "collective-transfer",
                                       "collective-skew", "host", "gap")) == pytest.approx(100, abs=1e-3)  # fmt: skip
    assert m["mfu-pct"] == min(r["mfu_pct"] for r in report["ranks"])
    assert m["findings-error"] == 1


def test_report_mfu_matches_cmp301(reports):
    """The report's per-rank MFU is the figure rule CMP301 quotes for the same rank."""
    report = reports("slow_dma")
    for f in (f for f in report["findings"] if f["code"] == "CMP301"):
        rank = f["ranks"][0]
        mfu = next(r["mfu_pct"] for r in report["ranks"] if r["rank"] == rank)
        assert mfu == pytest.approx(f["evidence"]["mfu_pct"], abs=0.01)
    assert [r["mfu_pct"] for r in reports("clean0")["ranks"]] == [75.46, 75.43]


def test_report_durations_by_op_and_layer(reports, diagnosed):
    report = reports("clean0")
    ev = diagnosed("clean0").trace.events
    ops = {o["op"]: o for o in report["durations"]["by_op"]}
    dot = ev[ev["op"].astype(str) == "dot.3"]["dur_ns"]
    assert ops["dot.3"]["count"] == len(dot) == 2
    assert ops["dot.3"]["total_ns"] == int(dot.sum())
    assert ops["dot.3"]["mean_ns"] == pytest.approx(dot.mean(), abs=0.05)
    assert ops["dot.3"]["std_ns"] == pytest.approx(dot.std(), abs=0.05)
    totals = [o["total_ns"] for o in report["durations"]["by_op"]]
    assert totals == sorted(totals, reverse=True)
    layers = {x["layer"]: x for x in report["durations"]["by_layer"]}
    assert set(layers) == {"layer_0", "layer_1", "layer_2", "layer_3", "loss", "optimizer"}
    assert layers["layer_0"]["count"] == 2  # one sample per rank
    device = ev["kind"].astype(str).isin(["compute", "dma", "collective"])
    l0 = ev[device & (ev["layer"].astype(str) == "layer_0")]
    assert layers["layer_0"]["total_ns"] == int(l0["dur_ns"].sum())


# ---- budgets ----------------------------------------------------------------------------------


def test_budgets_parse_units_and_directions():
    b = {
        x.key: x
        for x in parse_budgets({"max-step-time-ms": 7.5, "min-mfu-pct": 40, "max-gap-us": 3})
    }
    assert (b["max-step-time-ms"].metric.name, b["max-step-time-ms"].limit) == (
        "step-time-ns",
        7.5e6,
    )
    assert (b["max-gap-us"].metric.name, b["max-gap-us"].limit) == ("gap-ns", 3000.0)
    assert (b["min-mfu-pct"].bound, b["min-mfu-pct"].limit) == ("min", 40.0)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"step-time-ms": 1}, "must start with max- or min-"),
        ({"max-step-tme-ms": 1}, "no metric 'step-tme-ms' (did you mean max-step-time-ns?)"),
        ({"max-dma-wait-pct": "5%"}, "must be a number"),
        ({"max-dma-wait-pct": True}, "must be a number"),
    ],
)
def test_bad_budgets_are_usage_errors(table, message):
    with pytest.raises(
        UsageError, match=message.replace("(", r"\(").replace(")", r"\)").replace("?", r"\?")
    ):
        from_mapping({"budgets": table}, "t.toml")


def test_budget_results_with_real_numbers(reports, truths):
    report = reports("slow_dma")
    metrics = report_metrics(report)
    step = truths("slow_dma")["step_time_ns"]
    results = check_budgets(
        metrics,
        parse_budgets(
            {
                "max-step-time-ms": 7.0,
                "max-dma-wait-pct": 5,
                "min-mfu-pct": 70,
                "max-collective-skew-pct": 2,
            }
        ),
    )
    by = {r["budget"]: r for r in results}
    assert [r["passed"] for r in results] == [False, True, False, True]
    assert by["max-step-time-ms"]["message"] == (
        f"typical step time (the median step; the critical path for one step) is "
        f"{fmt_ns(step)}: exceeds budget "
        "max-step-time-ms = 7 (max 7 ms)"
    )
    least = min(r["mfu_pct"] for r in report["ranks"])
    assert by["min-mfu-pct"]["message"].startswith(
        f"model FLOPs utilisation of the least utilised rank is {least:.1f}"
    )
    assert "is below budget min-mfu-pct = 70 (min 70.00%)" in by["min-mfu-pct"]["message"]
    dma_wait = report["critical_path"]["by_category_ns"]["dma_wait"]
    assert by["max-dma-wait-pct"]["value"] == pytest.approx(100 * dma_wait / step, abs=1e-4)


def test_a_budget_that_cannot_be_checked_fails(cli, probes, tmp_path):
    """The worked example records no FLOPs: an MFU floor cannot be checked, and says so."""
    (tmp_path / "tracediag.toml").write_text(
        "[budgets]\nmin-mfu-pct = 30\nmax-step-time-ns = 1000\n"
    )
    code, out, err = cli("check", "a", "--format", "json")
    assert code == 1
    gate = orjson.loads(out)["gate"]
    assert [(b["budget"], b["passed"]) for b in gate["budgets"]] == [
        ("min-mfu-pct", False),
        ("max-step-time-ns", True),
    ]
    assert gate["budgets"][0]["message"] == (
        "budget min-mfu-pct = 30 cannot be checked: the report has no model FLOPs utilisation "
        "of the least utilised rank"
    )
    assert err.splitlines()[-1] == "tracediag: check failed: 1 budget exceeded"


def test_budgets_fail_the_gate_from_pyproject(cli, probes, tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        "[tool.tracediag.budgets]\nmax-step-time-ns = 700\nmax-collective-skew-pct = 10\n"
    )
    code, out, err = cli("check", "a")
    assert code == 1
    assert (
        "x typical step time (the median step; the critical path for one step) is 780 ns:"
        " exceeds budget max-step-time-ns = 700" in out
    )
    assert "share of the critical path in collective skew is 19.23%: exceeds budget" in out
    assert err.splitlines()[-1] == "tracediag: check failed: 2 budgets exceeded"
    assert cli("check", "a", "--exit-zero", "-q")[0] == 0


# ---- per-trace ignores ------------------------------------------------------------------------


def test_covered_ranks_by_path_glob_and_rank_glob():
    inputs = [("runs/warmup/rank_0.json", [0]), ("runs/main/rank_1.json", [1]), ("all", [2, 3])]
    ranks = [0, 1, 2, 3, 12]
    assert covered_ranks("runs/warmup/*", inputs, ranks) == {0}
    assert covered_ranks("rank_1.json", inputs, ranks) == {1}  # no "/": the last component
    assert covered_ranks("*/rank_1.json", inputs, ranks) == {1}
    assert covered_ranks("all", inputs, ranks) == {2, 3}
    assert covered_ranks("rank:1*", inputs, ranks) == {1, 12}
    assert covered_ranks("rank:[0-2]", inputs, ranks) == {0, 1, 2}


def test_per_trace_ignores_drop_only_fully_covered_findings(diagnosed, run_dirs):
    d = diagnosed("slow_dma")  # DMA101 on ranks 0-1, CMP301 on rank 0 and on rank 1
    kept = apply_per_trace_ignores(d, {"rank:1": ["DMA", "CMP301"]})
    assert kept.ignored_findings == 1
    assert [(f.code, f.ranks) for f in kept.findings] == [
        (f.code, f.ranks) for f in d.findings if (f.code, f.ranks) != ("CMP301", (1,))
    ]
    both = apply_per_trace_ignores(d, {"rank:1": ["DMA"], "rank:0": ["DMA101"]})
    assert both.ignored_findings == 1 and "DMA101" not in [f.code for f in both.findings]
    by_path = apply_per_trace_ignores(d, {f"*{run_dirs['slow_dma'].parent.name}*": ["ALL"]})
    assert (by_path.ignored_findings, by_path.findings) == (len(d.findings), [])
    assert by_path.to_dict()["summary"]["findings"] == 0
    assert apply_per_trace_ignores(d, {"elsewhere/*": ["ALL"]}).ignored_findings == 0


def test_per_trace_ignores_in_check(cli, probes, tmp_path):
    (tmp_path / "tracediag.toml").write_text('[per-trace-ignores]\n"b" = ["COL990"]\n')
    code, _, err = cli("check", "a", "--fail-on", "warning")
    assert code == 0
    assert "tracediag: 1 finding ignored by per-trace-ignores" in err
    (tmp_path / "tracediag.toml").write_text('[per-trace-ignores]\n"a" = ["COL990"]\n')
    assert cli("check", "a", "--fail-on", "warning", "-q")[0] == 1  # COL990 is rank 1's (b)


def test_per_trace_ignores_in_report(cli, probes, tmp_path):
    (tmp_path / "tracediag.toml").write_text('[per-trace-ignores]\n"rank:1" = ["DMA990"]\n')
    code, out, err = cli("report", "a", "--format", "json")
    assert code == 0
    assert [f["code"] for f in orjson.loads(out)["findings"]] == ["COL990"]
    assert "tracediag: 1 finding ignored by per-trace-ignores" in err
