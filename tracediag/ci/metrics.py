"""Scalar metrics of a JSON report: what budgets bound, baselines compare and history records.

Every metric is read from the report dictionary (``Diagnosis.to_dict()`` or a saved JSON
report), never from the trace, so a saved report gives the same numbers as a fresh diagnosis.
Times are of the typical step: on a trace of two or more steps, ``step-time-ns`` is the median
step (``step_summary.typical_ns``) and each ``CATEGORY-ns`` the median over the steps of the
critical path's time in that category (``step_summary.critical_path_ns``), so a profile of 5
steps compares with one of 6, and one slow step does not move them; a trace of one step (or a
report saved before steps existed) gives its critical path. ``CATEGORY-pct`` are shares of the
whole critical path.
Names are kebab-case; ``*-ns`` metrics may be bounded in ``us``, ``ms`` or ``s`` as well.
"""

from __future__ import annotations

from dataclasses import dataclass

from tracediag.model.path_categories import CATEGORIES


@dataclass(frozen=True)
class Metric:
    """A metric's meaning, unit (``ns``, ``pct`` or ``count``) and which way is better."""

    name: str
    description: str
    unit: str
    lower_is_better: bool = True
    gated: bool = False  # compared with a baseline by ``check --baseline``


def _category_metrics() -> list[Metric]:
    out = []
    for cat in CATEGORIES:
        label = cat.replace("_", " ")
        key = cat.replace("_", "-")
        out.append(
            Metric(f"{key}-ns", f"critical-path time in {label} (typical step)", "ns", gated=True)
        )
        out.append(Metric(f"{key}-pct", f"share of the critical path in {label}", "pct"))
    return out


CATALOG: dict[str, Metric] = {
    m.name: m
    for m in [
        Metric(
            "step-time-ns",
            "typical step time (the median step; the critical path for one step)",
            "ns",
            gated=True,
        ),
        *_category_metrics(),
        Metric(
            "mfu-pct",
            "model FLOPs utilisation of the least utilised rank",
            "pct",
            lower_is_better=False,
            gated=True,
        ),
        Metric(
            "rank-imbalance-pct", "slowest rank's step time over the fastest's, minus 100%", "pct"
        ),
        Metric("findings-error", "findings of severity error", "count"),
        Metric("findings-warning", "findings of severity warning", "count"),
        Metric("findings-info", "findings of severity info", "count"),
        Metric(
            "saving-upper-bound-ns",
            "what-if saving of the findings at warning or above, fixed together (one replay)",
            "ns",
        ),
    ]
}

#: Time units a ``*-ns`` metric may be written in (budgets, trend display).
TIME_UNITS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}


def typical_step(report: dict) -> tuple[float, dict[str, float]]:
    """The report's typical step (ns) and the critical path's ns per category in it: the
    median step and the categories' medians over the steps for two or more steps, else (one
    step, or a report saved before steps existed) the critical path's length and categories."""
    cp = report["critical_path"]
    steps = report.get("step_summary") or {}
    if steps.get("n", 0) >= 2:
        path = steps["critical_path_ns"]
        return float(steps["typical_ns"]), {c: float(path.get(c, 0)) for c in CATEGORIES}
    by_cat = cp["by_category_ns"]
    return float(cp["length_ns"]), {c: float(by_cat.get(c, 0)) for c in CATEGORIES}


def report_metrics(report: dict) -> dict[str, float]:
    """The metrics of ``report``; a metric the report cannot give (no FLOPs: no MFU) is absent."""
    cp = report["critical_path"]
    length = float(cp["length_ns"])
    step, in_step = typical_step(report)
    out: dict[str, float] = {"step-time-ns": step}
    for cat in CATEGORIES:
        ns = float(cp["by_category_ns"].get(cat, 0))
        key = cat.replace("_", "-")
        out[f"{key}-ns"] = in_step[cat]
        out[f"{key}-pct"] = round(100.0 * ns / length, 4) if length else 0.0
    ranks = report.get("ranks", [])
    mfu = [r["mfu_pct"] for r in ranks if r.get("mfu_pct") is not None]
    if mfu:
        out["mfu-pct"] = float(min(mfu))
    steps = [r["step_time_ns"] for r in ranks if r.get("step_time_ns")]
    if steps:
        out["rank-imbalance-pct"] = round(100.0 * (max(steps) / min(steps) - 1.0), 4)
    summary = report["summary"]
    for sev in ("error", "warning", "info"):
        out[f"findings-{sev}"] = float(summary.get(sev, 0))
    out["saving-upper-bound-ns"] = float(_joint_saving_ns(summary))
    return out


def _joint_saving_ns(summary: dict) -> int:
    """The report's total saving as the report states it: one replay of the changes of every
    finding at warning or above (``total_saving_ns_joint``; 0 when there is none). Adding the
    findings' savings would count a stall two rules name twice. A report saved before the
    joint replay existed gives its sum of savings, the only total it has."""
    if "joint_findings" not in summary:
        return summary.get("total_saving_ns_upper_bound", 0)
    return summary.get("total_saving_ns_joint") or 0


def resolve_metric(name: str) -> tuple[Metric, float]:
    """``"step-time-ms"`` -> (the ``step-time-ns`` metric, 1e6): the metric and the factor from
    the written unit to the metric's. Raises KeyError for an unknown name."""
    if name in CATALOG:
        return CATALOG[name], 1.0
    stem, _, unit = name.rpartition("-")
    if unit in TIME_UNITS and f"{stem}-ns" in CATALOG:
        return CATALOG[f"{stem}-ns"], TIME_UNITS[unit]
    raise KeyError(name)


def format_value(metric: Metric, value: float) -> str:
    """A metric value for people: ``6.682 ms``, ``73.1%``, ``3``."""
    from tracediag.model.units import fmt_ns

    if metric.unit == "ns":
        return fmt_ns(value)
    if metric.unit == "pct":
        return f"{value:.2f}%"
    return f"{value:g}"
