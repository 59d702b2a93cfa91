"""Per-rank temporal breakdown of device time: compute, communication, memory and idle.

Definition (all ranks). The window of a rank runs from the first start to the last end of its
device activity: events of kind ``compute``, ``collective`` or ``dma`` on device tracks
(``gpu_stream``; Neuron ``compute_engine``, ``dma_queue``, ``cc_core``). With ``|U(x)|`` the length
of the union of the intervals of ``x`` (overlap across streams/engines counted once):

- ``compute_ns``       = ``|U(compute)|``
- ``communication_ns`` = ``|U(compute + collective)| - |U(compute)|``: collective time not hidden
  under compute
- ``memory_ns``        = ``|U(all activity)| - |U(compute + collective)|``: copies/DMA hidden under
  neither
- ``idle_ns``          = window - ``|U(all activity)|``

so the four sum to ``total_ns`` (the window) and the percentages to 100. Ranks without device
activity are left out.

How this matches Holistic Trace Analysis (HTA, ``BreakdownAnalysis.get_temporal_breakdown``): HTA's
``kernel_time`` is our window (first GPU activity start to last end, all streams of the rank), its
``idle_time`` is window minus the merged intervals of all GPU activity (our ``idle_ns``), its
``compute_time`` is the merged intervals of computation kernels (our ``compute_ns``) and its
``non_compute_time`` = kernel_time - compute - idle is our ``communication_ns + memory_ns``: we only
split it, communication first. Fed the same intervals, the numbers are equal (the tests check this
against HTA 0.5.0's output on a small trace). Where HTA's event selection differs:

- HTA takes every event whose ``args.stream`` is not -1, which includes CUPTI synchronisation
  records (``cuda_sync``: "Stream Sync", "Stream Wait Event", and "Context Sync" whose stream is
  written as 4294967295) and counts them as computation. They are not GPU work: we leave them out.
  On the AlexNet trace of HTA's own test data this is the whole difference.
- HTA classifies by name: communication = ``^nccl.*Kernel`` (older releases: ``ncclKernel`` in the
  name), memory = ``^Memcpy|^Memset|^dma``, everything else computation. We use the parser's kinds:
  communication = NCCL/RCCL kernels of both naming generations (RCCL and ``ncclDevKernel_*`` count
  as computation in older HTA releases), memory = ``gpu_memcpy``/``gpu_memset`` events.
- With two or more ``ProfilerStep`` annotations, HTA drops GPU work not launched before the last
  step starts; we keep the whole trace.
- HTA rounds float timestamps to whole µs (start up, end down); we keep nanoseconds.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracediag.graph.sort_orders import stable_order_by
from tracediag.model import schema as S

DEVICE_TRACK_KINDS = ("gpu_stream", "compute_engine", "dma_queue", "cc_core")
#: Event kind -> breakdown category.
CATEGORY_OF_KIND = {"compute": "compute", "collective": "communication", "dma": "memory"}
CATEGORIES = ("compute", "communication", "memory", "idle")
COLUMNS = [f"{c}_ns" for c in CATEGORIES] + ["total_ns"] + [f"{c}_pct" for c in CATEGORIES]


def temporal_breakdown(trace: S.Trace) -> pd.DataFrame:
    """Per rank (index ``rank``): ``compute_ns``, ``communication_ns``, ``memory_ns``, ``idle_ns``,
    ``total_ns`` and the four ``*_pct`` (see the module docstring)."""
    return breakdown_of_codes(*device_activity(trace))


def device_activity(trace: S.Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The activity the breakdown covers, one interval per event: (rank, start, end, category
    code: the index into :data:`CATEGORIES`). Per-step breakdowns (steps.py) clip these."""
    ev = trace.events
    track_kind = trace.tracks[S.TRACK_KIND].astype(str).to_numpy()
    device_track = np.isin(track_kind, DEVICE_TRACK_KINDS)
    # Classify the few distinct kinds, then index by event (not a string test per event).
    kinds, kind_code = S.text_codes(ev[S.KIND])
    category_of_kind = np.array(
        [_CODE.get(CATEGORY_OF_KIND.get(k, ""), -1) for k in kinds] + [-1], dtype=np.int8
    )
    category = category_of_kind[kind_code]
    active = device_track[ev[S.TRACK].to_numpy()] & (category >= 0)
    start = ev[S.TS].to_numpy()[active]
    return (
        ev[S.RANK].to_numpy()[active],
        start,
        start + ev[S.DUR].to_numpy()[active],
        category[active],
    )


_CODE = {c: i for i, c in enumerate(CATEGORIES)}


def breakdown_of_intervals(
    rank: np.ndarray, start: np.ndarray, end: np.ndarray, category: np.ndarray
) -> pd.DataFrame:
    """The breakdown of activity intervals, each ``compute``, ``communication`` or ``memory``."""
    category = np.asarray(category, dtype=object)
    code = np.full(len(category), _CODE["memory"], dtype=np.int8)
    code[category == "compute"] = _CODE["compute"]
    code[category == "communication"] = _CODE["communication"]
    return breakdown_of_codes(rank, start, end, code)


def breakdown_of_codes(
    rank: np.ndarray, start: np.ndarray, end: np.ndarray, category: np.ndarray
) -> pd.DataFrame:
    """The breakdown of activity intervals by category code (index into :data:`CATEGORIES`),
    per distinct value of ``rank`` (any integer group: a rank, or a rank's step)."""
    rank = np.asarray(rank, dtype=np.int64)
    start = np.asarray(start, dtype=np.int64)
    end = np.asarray(end, dtype=np.int64)
    ranks, code = _dense_codes(rank)
    if not len(ranks):
        return pd.DataFrame(
            {c: pd.Series(dtype="int64" if c.endswith("_ns") else "float64") for c in COLUMNS}
        ).rename_axis("rank")
    n = len(ranks)
    # One sort for the three unions: a subset of (rank, start)-sorted rows stays sorted.
    order = _group_start_order(code, start)
    code, start, end, category = code[order], start[order], end[order], category[order]
    bounds = np.searchsorted(code, np.arange(n + 1))
    first_start = start[bounds[:-1]]
    last_end = np.maximum.reduceat(end, bounds[:-1])
    total = (last_end - first_start).astype(np.int64)
    is_compute = category == _CODE["compute"]
    compute = _sorted_union_lengths(code[is_compute], start[is_compute], end[is_compute], n)
    busy_cc = is_compute | (category == _CODE["communication"])
    compute_or_comm = _sorted_union_lengths(code[busy_cc], start[busy_cc], end[busy_cc], n)
    busy = _sorted_union_lengths(code, start, end, n)
    out = pd.DataFrame(
        {
            "compute_ns": compute,
            "communication_ns": compute_or_comm - compute,
            "memory_ns": busy - compute_or_comm,
            "idle_ns": total - busy,
            "total_ns": total,
        },
        index=pd.Index(ranks, name="rank"),
    )
    for c in CATEGORIES:
        out[f"{c}_pct"] = 100.0 * out[f"{c}_ns"] / out["total_ns"].where(out["total_ns"] > 0)
    out.loc[out["total_ns"] == 0, [f"{c}_pct" for c in CATEGORIES]] = [0.0, 0.0, 0.0, 100.0]
    return out


def _dense_codes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(values, return_inverse=True)``, by a lookup table for small integers
    (ranks) instead of a sort of every row."""
    if not len(values):
        return values[:0], values[:0]
    lo, hi = int(values.min()), int(values.max())
    if hi - lo > 4 * len(values):
        return np.unique(values, return_inverse=True)
    present = np.bincount(values - lo, minlength=hi - lo + 1) > 0
    lookup = np.cumsum(present) - 1
    return np.flatnonzero(present) + lo, lookup[values - lo]


def union_lengths(
    group: np.ndarray, start: np.ndarray, end: np.ndarray, n_groups: int
) -> np.ndarray:
    """Per group code ``0..n_groups-1``, the length of the union of its intervals (int64 ns).

    Sorted by start within each group, an interval adds only what extends past the latest end
    before it (a cumulative maximum), so overlaps count once.
    """
    group = np.asarray(group, dtype=np.int64)
    start = np.asarray(start, dtype=np.int64)
    end = np.asarray(end, dtype=np.int64)
    order = _group_start_order(group, start)
    return _sorted_union_lengths(group[order], start[order], end[order], n_groups)


def _group_start_order(group: np.ndarray, start: np.ndarray) -> np.ndarray:
    """The order sorting rows by group, then start (none needed when they already are)."""
    if len(group) < 2:
        return np.arange(len(group))
    dg = np.diff(group)
    if (dg >= 0).all() and ((dg > 0) | (np.diff(start) >= 0)).all():
        return np.arange(len(group))
    return stable_order_by(group, start)


def _sorted_union_lengths(
    group: np.ndarray, start: np.ndarray, end: np.ndarray, n_groups: int
) -> np.ndarray:
    """:func:`union_lengths` of rows already sorted by group, then start."""
    out = np.zeros(n_groups, dtype=np.int64)
    bounds = np.searchsorted(group, np.arange(n_groups + 1))
    for g in np.flatnonzero(np.diff(bounds)).tolist():  # a loop over groups (ranks), not rows
        s, e = start[bounds[g] : bounds[g + 1]], end[bounds[g] : bounds[g + 1]]
        reach = np.maximum.accumulate(e)
        before = np.r_[s[:1], reach[:-1]]
        out[g] = np.maximum(e - np.maximum(s, before), 0).sum()
    return out
