"""The CI gate: the pass/fail verdict of ``tracediag check`` from severities, budgets, baseline.

The gate fails on
- a finding at or above ``fail_on`` (with a baseline: only a *new* one, absent from every
  baseline run; findings the baseline knows are accepted),
- a budget exceeded, or one that cannot be checked,
- a gated metric worse than the baseline beyond its noise threshold.

:func:`evaluate_gate` returns the ``gate`` section that ``check --format json`` adds to the
report, and that the JUnit, SARIF and GitHub renderers read.
"""

from __future__ import annotations

from tracediag.ci.budgets import Budget, check_budgets
from tracediag.ci.metrics import CATALOG, format_value, report_metrics
from tracediag.model.findings import Severity
from tracediag.model.fingerprints import fingerprints


def regression_message(row: dict) -> str:
    """``"step time (...) regressed: 7.719 ms vs baseline median 6.682 ms (+15.5%) ..."``."""
    metric = CATALOG[row["metric"]]
    rel = f" ({100.0 * row['change'] / row['median']:+.1f}%)" if row["median"] else ""
    word = {"regression": "regressed", "improvement": "improved"}.get(row["status"], "unchanged")
    return (
        f"{metric.description} {word}: {format_value(metric, row['value'])} vs baseline median "
        f"{format_value(metric, row['median'])}{rel}; noise allows "
        f"{format_value(metric, row['allowed'])} (spread {format_value(metric, row['spread'])} "
        f"over {row['runs']} run{'s' if row['runs'] != 1 else ''})"
    )


def evaluate_gate(
    report: dict,
    fail_on: Severity,
    budgets: list[Budget] | None = None,
    comparison: dict | None = None,
) -> dict:
    """The ``gate`` section: ``passed``, ``fail_on``, ``failures`` (each with ``kind``,
    ``title``, ``message``), per-finding ``fingerprints`` and ``failing`` flags, ``budgets``
    results and the ``baseline`` comparison (or None)."""
    findings = report["findings"]
    fps = fingerprints(findings)
    new = {f["fingerprint"] for f in comparison["new_findings"]} if comparison else None
    failing = [
        Severity.parse(f["severity"]) >= fail_on and (new is None or fp in new)
        for fp, f in zip(fps, findings, strict=True)
    ]
    failures = []
    for f, fp, fails in zip(findings, fps, failing, strict=True):
        if fails:
            failures.append(
                {
                    "kind": "finding" if new is None else "new-finding",
                    "id": f["code"],
                    "fingerprint": fp,
                    "ranks": list(f.get("ranks") or []),
                    "title": f"{f['code']} {f['title']}",
                    "message": f["message"],
                }
            )
    budget_results = check_budgets(report_metrics(report), budgets or [])
    failures += [
        {
            "kind": "budget",
            "id": b["budget"],
            "title": f"budget {b['budget']}",
            "message": b["message"],
        }
        for b in budget_results
        if not b["passed"]
    ]
    if comparison:
        failures += [
            {
                "kind": "regression",
                "id": row["metric"],
                "title": f"regression of {row['metric']}",
                "message": regression_message(row),
            }
            for row in comparison["metrics"]
            if row["status"] == "regression"
        ]
    return {
        "passed": not failures,
        "fail_on": str(fail_on),
        "failures": failures,
        "fingerprints": fps,
        "failing": failing,
        "budgets": budget_results,
        "baseline": comparison,
    }


def verdict_line(gate: dict) -> str:
    """One line for stderr: ``check passed: ...`` or ``check failed: ...`` with counts by kind."""
    if gate["passed"]:
        extra = []
        if gate["budgets"]:
            extra.append(f"{len(gate['budgets'])} budgets met")
        if gate["baseline"]:
            extra.append(f"no regression against {gate['baseline']['runs']} baseline runs")
        tail = f" ({'; '.join(extra)})" if extra else ""
        return f"check passed: no finding at or above {gate['fail_on']}{tail}"
    counts: dict[str, int] = {}
    for f in gate["failures"]:
        counts[f["kind"]] = counts.get(f["kind"], 0) + 1
    fail_on = gate["fail_on"]
    labels = {
        "finding": (f"finding at or above {fail_on}", f"findings at or above {fail_on}"),
        "new-finding": (
            f"new finding at or above {fail_on}",
            f"new findings at or above {fail_on}",
        ),
        "budget": ("budget exceeded", "budgets exceeded"),
        "regression": ("metric regression", "metric regressions"),
    }
    parts = [f"{n} {labels[k][0] if n == 1 else labels[k][1]}" for k, n in counts.items()]
    return "check failed: " + ", ".join(parts)
