"""Two runs side by side (``tracediag diff``), and a measured run against a predicted one.

Both read JSON reports only (fresh or saved): step time, critical-path categories and the
per-layer and per-operator duration tables of ``report["durations"]``. Changes of layers and
operators come with Welch's t-test from their summary statistics and Benjamini-Hochberg
q-values over each table (many operators are compared at once); step time is tested over
the ranks' step times.
"""

from __future__ import annotations

import numpy as np

from tracediag.ci.statistics import bh_qvalues, pearson, welch
from tracediag.graph.critical_path import CATEGORIES

#: A change is significant when its q-value (false discovery rate) is below this.
ALPHA = 0.05


def _rel(a: float, b: float) -> float | None:
    return round(float(100.0 * (b - a) / a), 2) if a else None


def _step_row(a: dict, b: dict) -> dict:
    steps_a = np.array([r["step_time_ns"] for r in a["ranks"]], dtype=np.float64)
    steps_b = np.array([r["step_time_ns"] for r in b["ranks"]], dtype=np.float64)
    la, lb = a["critical_path"]["length_ns"], b["critical_path"]["length_ns"]
    p = (
        welch(
            steps_a.mean(),
            steps_a.std(ddof=1),
            len(steps_a),
            steps_b.mean(),
            steps_b.std(ddof=1),
            len(steps_b),
        )  # fmt: skip
        if min(len(steps_a), len(steps_b)) >= 2
        else None
    )
    return {"a_ns": la, "b_ns": lb, "change_ns": lb - la, "change_pct": _rel(la, lb), "p_value": p}


def _categories(a: dict, b: dict) -> list[dict]:
    ca, cb = a["critical_path"]["by_category_ns"], b["critical_path"]["by_category_ns"]
    la, lb = a["critical_path"]["length_ns"], b["critical_path"]["length_ns"]
    return [
        {
            "category": c,
            "a_ns": ca.get(c, 0),
            "b_ns": cb.get(c, 0),
            "change_ns": cb.get(c, 0) - ca.get(c, 0),
            "a_pct": round(100.0 * ca.get(c, 0) / la, 2) if la else 0.0,
            "b_pct": round(100.0 * cb.get(c, 0) / lb, 2) if lb else 0.0,
        }
        for c in CATEGORIES
    ]


def _table(rows_a: list[dict], rows_b: list[dict], key: str, top: int | None) -> list[dict]:
    """Rows of both tables matched on ``key``, with the change of the mean and its test."""
    by_a, by_b = {r[key]: r for r in rows_a}, {r[key]: r for r in rows_b}
    names = list(by_a) + [k for k in by_b if k not in by_a]
    out = []
    for name in names:  # one row per layer or operator, not per event
        ra, rb = by_a.get(name), by_b.get(name)
        row = {
            key: name,
            "a_mean_ns": ra["mean_ns"] if ra else None,
            "b_mean_ns": rb["mean_ns"] if rb else None,
            "a_total_ns": ra["total_ns"] if ra else 0,
            "b_total_ns": rb["total_ns"] if rb else 0,
            "a_count": ra["count"] if ra else 0,
            "b_count": rb["count"] if rb else 0,
        }
        row["change_total_ns"] = row["b_total_ns"] - row["a_total_ns"]
        row["change_pct"] = _rel(ra["mean_ns"], rb["mean_ns"]) if ra and rb else None
        row["p_value"] = (
            welch(
                ra["mean_ns"], ra["std_ns"], ra["count"], rb["mean_ns"], rb["std_ns"], rb["count"]
            )
            if ra and rb
            else None
        )
        out.append(row)
    q = bh_qvalues(np.array([np.nan if r["p_value"] is None else r["p_value"] for r in out]))
    for row, qv in zip(out, q, strict=True):
        row["q_value"] = None if np.isnan(qv) else float(qv)
        row["significant"] = row["q_value"] is not None and row["q_value"] < ALPHA
    out.sort(key=lambda r: -abs(r["change_total_ns"]))
    return out[:top] if top else out


def diff_reports(a: dict, b: dict, *, top: int | None = 20) -> dict:
    """B against A: ``step``, ``categories``, ``layers`` and ``ops`` (largest total change
    first, ``top`` rows each), every row with A, B, the change and its significance."""
    da, db = a.get("durations", {}), b.get("durations", {})
    return {
        "kind": "diff",
        "a": [i["path"] for i in a.get("inputs", [])],
        "b": [i["path"] for i in b.get("inputs", [])],
        "alpha": ALPHA,
        "step": _step_row(a, b),
        "categories": _categories(a, b),
        "layers": _table(da.get("by_layer", []), db.get("by_layer", []), "layer", top),
        "ops": _table(da.get("by_op", []), db.get("by_op", []), "op", top),
    }


def correlate(measured: dict, predicted: dict, *, top: int | None = 10) -> dict:
    """A predicted run (a simulator's or emulator's trace of the same program) against the
    measured one: per-operator error of the mean duration, the correlation over operators
    (linear and of the logarithms), the time-weighted mean absolute error, the step-time error,
    and the ``top`` operators furthest off (by total ns)."""
    meas = {r["op"]: r for r in measured.get("durations", {}).get("by_op", [])}
    pred = {r["op"]: r for r in predicted.get("durations", {}).get("by_op", [])}
    common = [op for op in meas if op in pred]
    m = np.array([meas[op]["mean_ns"] for op in common], dtype=np.float64)
    p = np.array([pred[op]["mean_ns"] for op in common], dtype=np.float64)
    count = np.array([meas[op]["count"] for op in common], dtype=np.float64)
    rows = [
        {
            "op": op,
            "kind": meas[op].get("kind", ""),
            "measured_mean_ns": float(m[i]),
            "predicted_mean_ns": float(p[i]),
            "error_ns": float(p[i] - m[i]),
            "error_pct": _rel(float(m[i]), float(p[i])),
            "total_error_ns": float((p[i] - m[i]) * count[i]),
        }
        for i, op in enumerate(common)
    ]
    rows.sort(key=lambda r: -abs(r["total_error_ns"]))
    positive = (m > 0) & (p > 0)
    weight = m * count
    ls, lp = measured["critical_path"]["length_ns"], predicted["critical_path"]["length_ns"]
    return {
        "kind": "correlation",
        "measured": [i["path"] for i in measured.get("inputs", [])],
        "predicted": [i["path"] for i in predicted.get("inputs", [])],
        "ops_matched": len(common),
        "ops_only_measured": len(meas) - len(common),
        "ops_only_predicted": len(pred) - len(common),
        "pearson_r": pearson(m, p),
        "pearson_r_log": pearson(np.log(m[positive]), np.log(p[positive])),
        "weighted_mape_pct": (
            float(100.0 * np.sum(np.abs(p - m) * count) / weight.sum()) if weight.sum() else None
        ),
        "step": {"measured_ns": ls, "predicted_ns": lp, "error_pct": _rel(ls, lp)},
        "worst": rows[:top] if top else rows,
    }
