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


def waits_for_last(late: pd.DataFrame, rank: int, min_late_ns: int = 0) -> pd.Series:
    """ns each other participant waits for ``rank`` at the collectives ``rank`` arrives at last
    (and more than ``min_late_ns`` after the others' median), measured on arrivals: at each such
    instance from the participant's own arrival to ``rank``'s (what a job that times its
    collectives calls the wait for the last), merged over the instances per waiting rank, so a
    wait at one collective that lies within the wait at another counts once (DDP launches the
    second bucket's all-reduce while the first still waits for the late rank). Indexed by the
    waiting rank, sorted; ranks that never wait for it are left out.

    ``late`` is :func:`lateness`'s table. Where the critical path runs has no part in it.
    """
    return _merged_length(*_wait_intervals(late, rank, min_late_ns))


def waits_beside_own_work(
    late: pd.DataFrame, rank: int, events: pd.DataFrame, work: np.ndarray, min_late_ns: int = 0
) -> pd.Series:
    """ns of each other participant's wait for ``rank`` (:func:`waits_for_last`, same index)
    during which its own work runs beside it: its events where ``work`` is set, on any of its
    tracks. An asynchronous collective waits while its rank computes on, so the step loses
    only the rest of the wait."""
    group, start, end = _wait_intervals(late, rank, min_late_ns)
    waiting = np.unique(group)
    ev_rank = events[S.RANK].to_numpy()
    mine = work & np.isin(ev_rank, waiting)
    ts = events[S.TS].to_numpy(dtype=np.int64)[mine]
    te = ts + events[S.DUR].to_numpy(dtype=np.int64)[mine]
    work_g = ev_rank[mine]
    # Work that meets none of its rank's waits adds as much to |work| as to |waits ∪ work|: left
    # out, the difference below stays the same, and the unions sort far fewer intervals.
    meets = _meets_waits(group, start, end, work_g, ts, te)
    work_g, ts, te = work_g[meets], ts[meets], te[meets]
    both_g = np.concatenate([group, work_g])
    both = _merged_length(both_g, np.concatenate([start, ts]), np.concatenate([end, te]))
    own = _merged_length(work_g, ts, te).reindex(waiting, fill_value=0)
    # |waits ∩ work| = |waits| + |work| - |waits ∪ work|
    return (_merged_length(group, start, end) + own - both.reindex(waiting)).astype(np.int64)


def _meets_waits(group, start, end, work_g, ts, te) -> np.ndarray:
    """Per work interval [ts, te): whether it overlaps a wait [start, end) of its own group
    (all True where the groups and times do not fit one int64 key)."""
    keep = np.ones(len(ts), dtype=bool)
    if (
        not len(ts)
        or not len(group)
        or group.dtype.kind not in "iu"
        or work_g.dtype.kind not in "iu"
    ):
        return keep
    lo = min(int(start.min()), int(ts.min()))
    span = max(int(end.max()), int(te.max())) - lo + 1
    g_lo = min(int(group.min()), int(work_g.min()))
    g_n = max(int(group.max()), int(work_g.max())) - g_lo + 1
    if g_n * span >= 1 << 62:
        return keep
    # The waits of each group merged into disjoint intervals, sorted by (group, start).
    order = np.lexsort((start, group))
    g, s, e = group[order].astype(np.int64) - g_lo, start[order], end[order]
    reach = pd.Series(e).groupby(g).cummax().to_numpy()
    new = np.ones(len(g), dtype=bool)
    new[1:] = (g[1:] != g[:-1]) | (s[1:] > reach[:-1])
    heads = np.flatnonzero(new)
    wg, ws = g[heads], s[heads]
    we = np.maximum.reduceat(reach, heads)
    # The first merged wait of the interval's group ending after ts is the only one that can
    # overlap it (the later ones start after that one ends).
    wk = wg * span + (we - lo)
    wg_of = work_g.astype(np.int64) - g_lo
    i = np.searchsorted(wk, wg_of * span + (ts - lo), side="right")
    j = np.minimum(i, len(wk) - 1)
    return (i < len(wk)) & (wg[j] == wg_of) & (ws[j] < te) & (te > ts)


def _wait_intervals(late: pd.DataFrame, rank: int, min_late_ns: int):
    """(waiting rank, start, end) of each other participant's wait for ``rank``: from its own
    arrival to ``rank``'s, at the instances ``rank`` arrives last and late."""
    mine = late[(late[S.RANK] == rank) & late["last"] & (late["late_ns"] > min_late_ns)]
    # A damaged trace can list a rank twice at one instance: its latest arrival is the one waited for.
    until = mine.groupby(S.COLL_KEY)[S.ARRIVAL].max()
    others = late[late[S.COLL_KEY].isin(until.index) & (late[S.RANK] != rank)]
    start = others[S.ARRIVAL].to_numpy(dtype=np.int64)
    end = until.reindex(others[S.COLL_KEY]).to_numpy(dtype=np.int64)
    return others[S.RANK].to_numpy(), start, end


def _merged_length(group: np.ndarray, start: np.ndarray, end: np.ndarray) -> pd.Series:
    """Per group: the length of the union of its intervals [start, end)."""
    order = np.lexsort((start, group))
    g, s, e = group[order], start[order], end[order]
    # Sorted by start, each interval adds what it reaches beyond every earlier one of its group.
    reach = pd.Series(e).groupby(g).cummax().to_numpy()
    before = np.empty_like(reach)
    before[1:] = reach[:-1]
    first = np.ones(len(g), dtype=bool)
    first[1:] = g[1:] != g[:-1]
    before[first] = np.iinfo(np.int64).min
    added = np.clip(e - np.maximum(s, before), 0, None)
    return pd.Series(added).groupby(g).sum().astype(np.int64)


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
