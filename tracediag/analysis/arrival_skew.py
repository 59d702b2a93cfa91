"""Arrival skew at collectives: who arrives late, by how much, against the others' median."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracediag.analysis.peers import median_of_others
from tracediag.model import schema as S
from tracediag.model.collective_ops import POINT_TO_POINT_OPS


def lateness(coll: pd.DataFrame) -> pd.DataFrame:
    """Per (instance, rank): ``late_ns`` = arrival minus the median arrival of the *other*
    participants (positive = later than them), ``last`` = this rank arrived last.

    Instances with a single participant are left out; point-to-point operations are kept
    (a late sender stalls its receiver just the same).
    """
    cols = [S.COLL_KEY, S.RANK, S.EVENT, S.COLL_OP, S.ARRIVAL, S.START, S.END, S.BYTES]
    c = coll[cols].copy()
    n = c.groupby(S.COLL_KEY)[S.RANK].transform("size")
    c = c.loc[n >= 2].copy()
    if not len(c):
        return c.assign(
            late_ns=pd.Series(dtype="int64"),
            last=pd.Series(dtype=bool),
            synchronous=pd.Series(dtype=bool),
        )
    med_other = median_of_others(c[S.COLL_KEY].to_numpy(), c[S.ARRIVAL].to_numpy())
    c["late_ns"] = (c[S.ARRIVAL].to_numpy() - med_other).round().astype(np.int64)
    last_arrival = c.groupby(S.COLL_KEY)[S.ARRIVAL].transform("max").to_numpy()
    c["last"] = c[S.ARRIVAL].to_numpy() == last_arrival
    c["synchronous"] = ~c[S.COLL_OP].astype(str).str.lower().isin(POINT_TO_POINT_OPS)
    return c


#: Fractions of the colour scale where the colour steps up (levels 1 to 4).
LEVELS = (0.02, 0.25, 0.5, 0.75)
#: The colour scale is at least this share of the critical path: lateness far below it is noise
#: the path does not wait on, and stays pale instead of taking the worst colour.
SCALE_FLOOR_SHARE = 0.005


def colour_scale_ns(late: pd.DataFrame, path_ns: float) -> float:
    """The lateness (ns) the darkest colour stands for: the largest, but at least
    ``SCALE_FLOOR_SHARE`` of the critical path, so every view shades the same ranks."""
    worst = float(late["late_ns"].max()) if len(late) else 0.0
    return max(worst, SCALE_FLOOR_SHARE * float(path_ns), 0.0)


@dataclass
class LatenessGrid:
    """Rows are collective instances in time order, columns ranks."""

    keys: np.ndarray  # coll_key per row
    ops: np.ndarray  # operation per row
    nbytes: np.ndarray  # bytes per row (NaN unknown)
    ranks: np.ndarray  # rank per column
    late: np.ndarray  # float ns [row, col]; NaN where the rank is not a participant
    last: np.ndarray  # bool [row, col]: arrived last
    level: np.ndarray  # int8 [row, col]: -1 absent, 0 on time ... 4 the latest


def lateness_grid(late: pd.DataFrame, scale_ns: float = 0.0) -> LatenessGrid:
    """Pivot ``skew.lateness`` output into a grid with colour levels, fractions of the larger
    of the worst lateness and ``scale_ns`` (see :func:`colour_scale_ns`)."""
    order = late.groupby(S.COLL_KEY)[S.ARRIVAL].min().sort_values(kind="stable")
    keys = order.index.to_numpy()
    ranks = np.sort(late[S.RANK].unique())
    row = pd.Index(keys).get_indexer(late[S.COLL_KEY])
    col = pd.Index(ranks).get_indexer(late[S.RANK])
    grid = np.full((len(keys), len(ranks)), np.nan)
    grid[row, col] = late["late_ns"].to_numpy()
    last = np.zeros(grid.shape, dtype=bool)
    last[row, col] = late["last"].to_numpy()
    first = late.drop_duplicates(S.COLL_KEY).set_index(S.COLL_KEY).reindex(keys)
    worst = max(np.nanmax(grid) if np.isfinite(grid).any() else 0.0, scale_ns)
    level = np.full(grid.shape, -1, dtype=np.int8)
    present = ~np.isnan(grid)
    frac = np.where(present, grid, 0.0) / worst if worst > 0 else np.zeros(grid.shape)
    level[present] = np.digitize(frac[present], LEVELS).astype(np.int8)
    return LatenessGrid(
        keys,
        first[S.COLL_OP].astype(str).to_numpy(),
        first[S.BYTES].to_numpy(dtype=float),
        ranks,
        grid,
        last,
        level,
    )
