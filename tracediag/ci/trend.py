"""Trends over the recorded history: each metric over runs, with its change points.

Change points are found by binary segmentation: the most likely single change of a series
(largest Welch t over every split) is kept when its p-value is below ``alpha``, then each side
is searched again. A statistical test, not a fixed percentage: a shift counts when it stands
out from the series' own run-to-run noise. A series too short to ever reach ``alpha`` is
marked so (``reachable``) rather than shown as flat.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracediag.ci.metrics import CATALOG
from tracediag.ci.statistics import change_point, smallest_p_value

#: Metrics shown when none is asked for: the ones a baseline gates.
DEFAULT_METRICS = [name for name, m in CATALOG.items() if m.gated]

#: Fewest points on either side of a change point.
MIN_SIZE = 3


def runs_needed(alpha: float) -> int | None:
    """The fewest runs whose change point can reach p < ``alpha``; None when no run count can
    (``alpha`` at or below the test's resolution)."""
    n = 2 * MIN_SIZE
    return n if smallest_p_value(n, MIN_SIZE) < alpha else None


def change_points(
    values: np.ndarray, alpha: float, min_size: int = MIN_SIZE, offset: int = 0
) -> list[dict]:
    """Significant change points of ``values`` (binary segmentation), in series order."""
    found = change_point(values, min_size=min_size)
    if found is None or found["p_value"] >= alpha:
        return []
    k = found["index"]
    here = {**found, "index": offset + k}
    return (
        change_points(values[:k], alpha, min_size, offset)
        + [here]
        + change_points(values[k:], alpha, min_size, offset + k)
    )


def trend(runs: pd.DataFrame, table: pd.DataFrame, metrics: list[str], alpha: float = 0.01) -> dict:
    """Per metric: its series over runs, summary numbers, whether ``alpha`` is ``reachable``
    with its number of runs, and change points (``run_id`` and ``label`` of the run where the
    new level starts, ``before_mean``, ``after_mean``, ``change_pct``, ``p_value``, and whether
    it is a ``regression``). ``runs_needed``: the fewest runs that can reach ``alpha``."""
    out = []
    ids = runs["id"].to_numpy()
    labels = runs["label"].fillna("").astype(str).to_numpy()
    for name in metrics:
        if name not in table:
            continue
        series = table[name]
        ok = series.notna().to_numpy()
        values = series.to_numpy(dtype=np.float64)[ok]
        run_ids, run_labels = ids[ok], labels[ok]
        metric = CATALOG[name]
        points = []
        for cp in change_points(values, alpha):
            before, after = cp["before_mean"], cp["after_mean"]
            points.append(
                {
                    "run_id": int(run_ids[cp["index"]]),
                    "label": str(run_labels[cp["index"]]),
                    "before_mean": before,
                    "after_mean": after,
                    "change_pct": round(100.0 * (after - before) / before, 2) if before else None,
                    "p_value": cp["p_value"],
                    "regression": (after > before) == metric.lower_is_better,
                }
            )
        out.append(
            {
                "metric": name,
                "unit": metric.unit,
                "run_ids": [int(i) for i in run_ids],
                "values": [float(v) for v in values],
                "latest": float(values[-1]) if len(values) else None,
                "median": float(np.median(values)) if len(values) else None,
                "reachable": smallest_p_value(len(values), MIN_SIZE) < alpha,
                "change_points": points,
            }
        )
    return {"runs": len(runs), "alpha": alpha, "runs_needed": runs_needed(alpha), "metrics": out}
