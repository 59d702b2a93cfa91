"""Runs of consecutive critical-path segments of some categories, with the work that waited.

The path's segments are ordered latest first, so the segment just before a run (in that order)
is the work that waited for the run: the instruction that a DMA fed, say.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def runs(segments: pd.DataFrame, categories: set[str]) -> pd.DataFrame:
    """One row per maximal run of segments whose category is in ``categories``.

    Columns: ``run``, ``first`` and ``last`` (row positions in ``segments``), ``rank``, ``start_ns``,
    ``end_ns``, ``ns`` (sum of the run's segments), ``waiter`` (row position of the segment the run
    delayed, -1 at the path's end) and ``ns_<category>`` per category.
    """
    seg = segments.reset_index(drop=True)
    # Tested per category, not by a string per segment (the column is categorical).
    inside = seg["category"].isin(categories).to_numpy()
    if not inside.any():
        return pd.DataFrame(
            columns=["run", "first", "last", "rank", "start_ns", "end_ns", "ns", "waiter"]
        )
    boundary = np.r_[True, inside[1:] != inside[:-1]]
    run_id = np.cumsum(boundary)
    rows = seg.loc[inside].assign(run=run_id[inside], pos=np.flatnonzero(inside))
    g = rows.groupby("run", sort=True)
    out = pd.DataFrame(
        {
            "first": g["pos"].min(),
            "last": g["pos"].max(),
            "rank": g["rank"].max(),
            "start_ns": g["start_ns"].min(),
            "end_ns": g["end_ns"].max(),
            "ns": g["dur_ns"].sum(),
        }
    )
    for cat in sorted(categories):
        out[f"ns_{cat}"] = (
            rows[(rows["category"] == cat).to_numpy()]
            .groupby("run")["dur_ns"]
            .sum()
            .reindex(out.index)
            .fillna(0)
            .astype(np.int64)
        )
    out["waiter"] = out["first"] - 1
    return out.reset_index()
