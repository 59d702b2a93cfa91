"""Baselines: what earlier runs looked like, so ``check --baseline`` fails only on what changed.

A baseline (schema ``tracediag.baseline/1``) keeps, for each of its runs, the metrics of
:mod:`tracediag.ci.metrics` and the fingerprints of the findings, plus one description per
fingerprint. Several runs make it noise-aware: a metric regresses when it is worse than the
runs' median by more than their spread allows (see :mod:`tracediag.ci.baseline_settings`), and a
finding is new only when no run had it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import orjson

from tracediag import __version__
from tracediag.ci.baseline_settings import BaselineSettings
from tracediag.ci.metrics import CATALOG, report_metrics
from tracediag.model.errors import TraceInputError
from tracediag.model.fingerprints import fingerprints

BASELINE_SCHEMA = "tracediag.baseline/1"
#: The finding fields a baseline keeps to describe a fixed finding.
_DESCRIBE = ("code", "severity", "title", "ranks", "track", "layer", "op")
#: 1.4826 x MAD estimates the standard deviation of normal noise robustly.
MAD_TO_SIGMA = 1.4826


def run_record(report: dict, label: str = "") -> dict:
    """One run of a baseline: its inputs, metrics and finding fingerprints."""
    return {
        "label": label,
        "inputs": [i["path"] for i in report.get("inputs", [])],
        "metrics": report_metrics(report),
        "findings": fingerprints(report["findings"]),
    }


def make_baseline(
    reports: list[tuple[str, dict]], previous: dict | None = None, keep: int | None = None
) -> dict:
    """A baseline of ``reports`` (label, report) appended to ``previous``'s runs; only the last
    ``keep`` runs remain when given."""
    runs = list(previous["runs"]) if previous else []
    described = dict(previous["findings"]) if previous else {}
    for label, report in reports:
        run = run_record(report, label)
        runs.append(run)
        for fp, f in zip(run["findings"], report["findings"], strict=True):
            described[fp] = {k: f[k] for k in _DESCRIBE}
    if keep is not None:
        runs = runs[-keep:]
    live = {fp for run in runs for fp in run["findings"]}
    return {
        "schema": BASELINE_SCHEMA,
        "tool": {"name": "tracediag", "version": __version__},
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "runs": runs,
        "findings": {fp: d for fp, d in sorted(described.items()) if fp in live},
    }


def load_baseline(path: Path) -> dict:
    """A baseline file; a TraceInputError when it is not one."""
    try:
        data = orjson.loads(Path(path).read_bytes())
    except FileNotFoundError:
        raise TraceInputError(path, "no such file") from None
    except orjson.JSONDecodeError as exc:
        raise TraceInputError(path, f"not valid JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("schema") != BASELINE_SCHEMA:
        raise TraceInputError(
            path,
            f"not a tracediag baseline (schema {BASELINE_SCHEMA} expected; "
            "write one with 'tracediag baseline PATH -o FILE')",
        )
    if not data.get("runs"):
        raise TraceInputError(path, "baseline holds no run")
    return data


def metric_threshold(
    values: np.ndarray, unit: str, step_median: float, settings: BaselineSettings
) -> tuple[float, float, float]:
    """(median, robust spread, allowed change) of a metric's baseline values."""
    median = float(np.median(values))
    spread = MAD_TO_SIGMA * float(np.median(np.abs(values - median)))
    floor = settings.min_change_pct * (step_median / 100.0 if unit == "ns" else 1.0)
    return median, spread, max(settings.noise_sigmas * spread, floor)


def compare_metrics(report: dict, baseline: dict, settings: BaselineSettings) -> list[dict]:
    """Each gated metric against the baseline: ``status`` regression, improvement or unchanged."""
    now = report_metrics(report)
    runs = baseline["runs"]
    step_median = float(np.median([r["metrics"]["step-time-ns"] for r in runs]))
    out = []
    for name, metric in CATALOG.items():
        past = [r["metrics"][name] for r in runs if name in r["metrics"]]
        if not metric.gated or name not in now or not past:
            continue
        median, spread, allowed = metric_threshold(
            np.asarray(past, dtype=np.float64), metric.unit, step_median, settings
        )
        change = now[name] - median
        worse = change if metric.lower_is_better else -change
        status = (
            "regression" if worse > allowed else "improvement" if -worse > allowed else "unchanged"
        )
        out.append(
            {
                "metric": name,
                "value": now[name],
                "median": median,
                "spread": spread,
                "allowed": allowed,
                "change": change,
                "runs": len(past),
                "status": status,
            }
        )
    return out


def compare(report: dict, baseline: dict, settings: BaselineSettings | None = None) -> dict:
    """``report`` against ``baseline``: new findings (fingerprint in no run), fixed findings (in
    most runs, not now), findings known from the baseline, and the gated metrics."""
    settings = settings or BaselineSettings()
    runs = baseline["runs"]
    seen: dict[str, int] = {}
    for run in runs:
        for fp in set(run["findings"]):
            seen[fp] = seen.get(fp, 0) + 1
    current = fingerprints(report["findings"])
    new = [
        {**f, "fingerprint": fp}
        for fp, f in zip(current, report["findings"], strict=True)
        if fp not in seen
    ]
    fixed = [
        {**baseline["findings"].get(fp, {}), "fingerprint": fp, "runs_seen": n}
        for fp, n in sorted(seen.items())
        if fp not in set(current) and 2 * n > len(runs)  # a flaky finding is not "fixed"
    ]
    return {
        "runs": len(runs),
        "new_findings": new,
        "fixed_findings": fixed,
        "known_findings": sum(1 for fp in current if fp in seen),
        "metrics": compare_metrics(report, baseline, settings),
        "settings": {
            "min_change_pct": settings.min_change_pct,
            "noise_sigmas": settings.noise_sigmas,
        },
    }
