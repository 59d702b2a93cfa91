"""Outlier steps and what made them slow (the rule in :mod:`tracediag.analysis.steps`).

A step is an outlier when it is slower than the median step by more than
:data:`OUTLIER_SIGMAS` robust standard deviations and by more than :data:`OUTLIER_MIN_PCT` of the
median; its cause is the category that grew most against the typical step, per rank, from the
device breakdown where the ranks have device work, else from the critical path.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracediag.model.path_categories import CATEGORIES as PATH_CATEGORIES
from tracediag.model.units import fmt_ns

#: An outlier is slower than the median by more than this many robust standard deviations...
OUTLIER_SIGMAS = 3.0
#: ... and by more than this percentage of the median.
OUTLIER_MIN_PCT = 20.0
OUTLIER_RULE = (
    f"slower than the median step by more than {OUTLIER_SIGMAS:g} robust standard deviations"
    f" (1.4826 x the median absolute deviation) and by more than {OUTLIER_MIN_PCT:g}% of the"
    " median; none with fewer than 3 steps"
)
#: What a cause may name, from the breakdown: the column and the words for it.
_CAUSE_LABEL = {
    "compute": "compute",
    "communication": "communication on every rank",
    "memory": "memory copies",
    "idle": "device idle between its work",
    "host_gap": "host gap (device idle before its first or after its last work in the step)",
}


def outlier_threshold(t: np.ndarray) -> float | None:
    """The step time above which a step is an outlier (the module docstring's rule); None
    with fewer than 3 steps."""
    if len(t) < 3:
        return None
    median = float(np.median(t))
    sigma = 1.4826 * float(np.median(np.abs(t - median)))
    return median + max(OUTLIER_SIGMAS * sigma, OUTLIER_MIN_PCT / 100.0 * median)


def outliers(t: np.ndarray) -> np.ndarray:
    """Per step: slower than the outlier threshold."""
    above = outlier_threshold(t)
    return t > above if above is not None else np.zeros(len(t), dtype=bool)


def outlier_causes(table: pd.DataFrame, br: pd.DataFrame, path: pd.DataFrame) -> dict[int, dict]:
    """Per outlier step (index): what grew most against the typical step (module docstring)."""
    outliers = np.flatnonzero(table["outlier"].to_numpy())
    if not len(outliers):
        return {}
    typical = float(np.median(table["step_ns"]))
    if br["device"].any():
        growth = _breakdown_growth(br[br["device"]])
        source = "breakdown"
    else:
        growth = _path_growth(path)
        source = "critical_path"
    out = {}
    for i in outliers.tolist():  # a few outlier steps
        excess = int(table["step_ns"].iat[i] - typical)
        mine = growth[growth["step"] == i]
        best = mine.loc[mine["grew_ns"].idxmax()] if len(mine) else None
        if best is None or best["grew_ns"] <= 0:
            out[i] = {
                "category": "skew",
                "rank": None,
                "grew_ns": 0,
                "excess_ns": excess,
                "source": source,
                "text": "no rank's own step grew: the ranks' steps are offset from each other",
            }
            continue
        rank = None if best["rank"] < 0 else int(best["rank"])
        category = str(best["category"])
        label = _CAUSE_LABEL.get(category, f"critical path {category.replace('_', ' ')}")
        where = f" on rank {rank}" if rank is not None else ""
        out[i] = {
            "category": category,
            "rank": rank,
            "grew_ns": int(best["grew_ns"]),
            "excess_ns": excess,
            "source": source,
            "text": f"{label} +{fmt_ns(best['grew_ns'])}{where}",
        }
    return out


def _breakdown_growth(br: pd.DataFrame) -> pd.DataFrame:
    """Per (step, rank or -1, category): ns above the rank's median step in that category;
    communication once per step, its least growth over the step's ranks."""
    value = pd.DataFrame(
        {
            "step": br["step"].to_numpy(),
            "rank": br["rank"].to_numpy(),
            "compute": br["compute_ns"].to_numpy(),
            "communication": br["communication_ns"].to_numpy(),
            "memory": br["memory_ns"].to_numpy(),
            "idle": (br["idle_ns"] - br["host_gap_ns"]).to_numpy(),
            "host_gap": br["host_gap_ns"].to_numpy(),
        }
    )
    cats = ["compute", "communication", "memory", "idle", "host_gap"]
    typical = value.groupby("rank")[cats].transform("median")
    grew = value[cats] - typical
    grew[["step", "rank"]] = value[["step", "rank"]]
    comm = grew.groupby("step")["communication"].min()
    own = grew.drop(columns="communication").melt(
        id_vars=["step", "rank"], var_name="category", value_name="grew_ns"
    )
    every = pd.DataFrame(
        {"step": comm.index, "rank": -1, "category": "communication", "grew_ns": comm.to_numpy()}
    )
    return pd.concat([own, every], ignore_index=True)


def _path_growth(path: pd.DataFrame) -> pd.DataFrame:
    """Per (step, rank, path category): ns above that rank's and category's median step."""
    if not len(path):
        return pd.DataFrame(columns=["step", "rank", "category", "grew_ns"])
    n_steps = int(path["step"].max()) + 1
    long = path.melt(id_vars=["step", "rank"], var_name="category", value_name="ns")
    # Every (step, rank, category), zeros included, so a median counts steps without it.
    full = pd.MultiIndex.from_product(
        [range(n_steps), np.unique(long["rank"]), list(PATH_CATEGORIES)],
        names=["step", "rank", "category"],
    )
    ns = long.groupby(["step", "rank", "category"])["ns"].sum().reindex(full, fill_value=0)
    typical = ns.groupby(level=["rank", "category"]).transform("median")
    return (ns - typical).rename("grew_ns").reset_index()
