"""Two runs side by side (``tracediag diff``), and a measured run against a predicted one.

Both read JSON reports only (fresh or saved): step time, critical-path categories and the
per-layer and per-operator duration tables of ``report["durations"]``. Changes of layers and
operators come with Welch's t-test from their summary statistics and Benjamini-Hochberg
q-values over each table (many operators are compared at once); step time (the typical step,
as ``ci.metrics`` reads it: the median step of a trace of several) is tested over the ranks'
step times. Findings are matched by fingerprint (added in B, gone from A), and the
rank whose own work (compute and memory) grew most is named; without a per-rank breakdown
none is, and a note says why.
"""

from __future__ import annotations

import numpy as np

from tracediag.ci.metrics import typical_step
from tracediag.ci.statistics import bh_qvalues, pearson, welch
from tracediag.graph.critical_path import CATEGORIES
from tracediag.model.fingerprints import fingerprints

#: A change is significant when its q-value (false discovery rate) is below this.
ALPHA = 0.05

#: Below this many samples a side, Welch's test has too little power for a small q-value
#: (with 2 a side, one to two degrees of freedom, |t| must pass 4.3 to 12.7 for p < 0.05).
FEW_SAMPLES = 5


def _rel(a: float, b: float) -> float | None:
    return round(float(100.0 * (b - a) / a), 2) if a else None


def _step_row(a: dict, b: dict) -> dict:
    steps_a = np.array([r["step_time_ns"] for r in a["ranks"]], dtype=np.float64)
    steps_b = np.array([r["step_time_ns"] for r in b["ranks"]], dtype=np.float64)
    la, lb = _typical_step(a), _typical_step(b)
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


#: The shares of a rank's step that are its own work; communication and idle time also grow
#: on a rank that waits for a slower one, so they would not tell the two apart.
WORK_SHARES = ("compute", "memory")

#: A rank is named slower only when its own work grew by more than this (reruns differ by
#: well under it).
RANK_GROWTH_PCT = 1.0


def _work_ns(rank: dict) -> float | None:
    """A rank's own work in its step (ns): its compute and memory shares; None when the report
    has no breakdown (host-only traces), since its step time alone cannot tell a straggler
    from the ranks that wait for it."""
    pct = rank.get("breakdown_pct") or {}
    if not pct:
        return None
    return rank["step_time_ns"] * sum(pct.get(k, 0.0) for k in WORK_SHARES) / 100.0


#: Said when neither run gives a rank's own work, so no rank can be named slower.
NO_BREAKDOWN_NOTE = (
    "no rank is named slower: the ranks have no compute/memory breakdown (no device events), "
    "and every rank's step time grows alike when one straggles; B's COL201 findings name "
    "the rank the others wait for"
)


def _slower_rank(a: dict, b: dict) -> dict | None:
    """The rank (present in both runs) whose own work grew most, with its step and work time
    in A and B; None when no rank is in both or none grew by over ``RANK_GROWTH_PCT``. Every rank's step time
    grows alike when one straggles (the others wait for it), so step time cannot name it."""
    in_a = {r["rank"]: r for r in a["ranks"] if "rank" in r}
    pairs = [(in_a[r["rank"]], r) for r in b["ranks"] if r.get("rank") in in_a]
    pairs = [(ra, rb) for ra, rb in pairs if _work_ns(ra) is not None and _work_ns(rb) is not None]
    if not pairs:
        return None
    growth = [_work_ns(rb) - _work_ns(ra) for ra, rb in pairs]
    best = int(np.argmax(growth))
    ra, rb = pairs[best]
    wa, wb = _work_ns(ra), _work_ns(rb)
    if wb - wa <= wa * RANK_GROWTH_PCT / 100.0:
        return None
    return {
        "rank": rb["rank"],
        "a_ns": ra["step_time_ns"],
        "b_ns": rb["step_time_ns"],
        "work_a_ns": round(wa),
        "work_b_ns": round(wb),
        "work_change_ns": round(wb - wa),
        "work_change_pct": _rel(wa, wb),
    }


def _findings(a: dict, b: dict) -> dict:
    """Findings of B not in A (``added``), of A not in B (``removed``), by fingerprint; of the
    ``unchanged`` ones in both, those whose severity differs are ``changed`` (B's figures, with
    A's severity and saving as ``a_severity`` and ``a_saving_ns``): a straggler that grows from
    info to error keeps its fingerprint, and must not vanish from the diff."""

    def keyed(report):
        found = report.get("findings", [])
        return dict(zip(fingerprints(found), found, strict=True))

    fa, fb = keyed(a), keyed(b)

    def row(fp, f):
        keep = ("code", "severity", "title", "ranks", "layer", "op", "saving_ns")
        return {"fingerprint": fp, **{k: f.get(k) for k in keep}}

    return {
        "added": [row(fp, f) for fp, f in fb.items() if fp not in fa],
        "removed": [row(fp, f) for fp, f in fa.items() if fp not in fb],
        "changed": [
            {
                **row(fp, f),
                "a_severity": fa[fp].get("severity"),
                "a_saving_ns": fa[fp].get("saving_ns"),
            }
            for fp, f in fb.items()
            if fp in fa and fa[fp].get("severity") != f.get("severity")
        ],
        "unchanged": sum(fp in fa for fp in fb),
    }


def _power_note(rows: list[dict], what: str) -> str | None:
    """A note when rows of a table have too few samples a side for a small q-value."""
    tested = [min(r["a_count"], r["b_count"]) for r in rows if r["p_value"] is not None]
    few = [n for n in tested if n < FEW_SAMPLES]
    if not few:
        return None
    return (
        f"{what}: {len(few)} of {len(tested)} rows have under {FEW_SAMPLES} samples a side "
        f"(as few as {min(few)}), too few for Welch's test to give q < {ALPHA} unless the "
        "change is many times the spread; a large q there is no evidence of no change"
    )


def _typical_step(report: dict) -> int:
    """The report's typical step (ns): its median step, or its critical path for one step."""
    return int(typical_step(report)[0])


def _categories(a: dict, b: dict) -> list[dict]:
    """Per critical-path category: its ns in the typical step of A and B (see ci.metrics)
    and its share of each whole path."""
    (_, ma), (_, mb) = typical_step(a), typical_step(b)
    ca, cb = a["critical_path"]["by_category_ns"], b["critical_path"]["by_category_ns"]
    la, lb = a["critical_path"]["length_ns"], b["critical_path"]["length_ns"]
    rows = []
    for c in CATEGORIES:
        na, nb = int(ma[c]), int(mb[c])
        rows.append(
            {
                "category": c,
                "a_ns": na,
                "b_ns": nb,
                "change_ns": nb - na,
                "a_pct": round(100.0 * ca.get(c, 0) / la, 2) if la else 0.0,
                "b_pct": round(100.0 * cb.get(c, 0) / lb, 2) if lb else 0.0,
            }
        )
    return rows


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
    """B against A: ``step``, ``slower_rank``, ``categories``, ``findings`` (added, removed,
    changed),
    ``layers`` and ``ops`` (largest total change first, ``top`` rows each, every row with A, B,
    the change and its significance) and ``notes`` (tables with too few samples for a small q;
    layers have one sample per rank)."""
    da, db = a.get("durations", {}), b.get("durations", {})
    layers = _table(da.get("by_layer", []), db.get("by_layer", []), "layer", None)
    ops = _table(da.get("by_op", []), db.get("by_op", []), "op", None)
    notes = [_power_note(layers, "layers (one sample per rank)"), _power_note(ops, "operators")]
    slower = _slower_rank(a, b)
    if slower is None and not any(r.get("breakdown_pct") for r in [*a["ranks"], *b["ranks"]]):
        notes.insert(0, NO_BREAKDOWN_NOTE)
    return {
        "kind": "diff",
        "a": [i["path"] for i in a.get("inputs", [])],
        "b": [i["path"] for i in b.get("inputs", [])],
        "alpha": ALPHA,
        "step": _step_row(a, b),
        "slower_rank": slower,
        "categories": _categories(a, b),
        "findings": _findings(a, b),
        "layers": layers[:top] if top else layers,
        "ops": ops[:top] if top else ops,
        "notes": [n for n in notes if n],
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
    ls, lp = _typical_step(measured), _typical_step(predicted)
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
