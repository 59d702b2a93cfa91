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

from tracediag import schema as S

DEVICE_TRACK_KINDS = ("gpu_stream", "compute_engine", "dma_queue", "cc_core")
#: Event kind -> breakdown category.
CATEGORY_OF_KIND = {"compute": "compute", "collective": "communication", "dma": "memory"}
CATEGORIES = ("compute", "communication", "memory", "idle")
COLUMNS = [f"{c}_ns" for c in CATEGORIES] + ["total_ns"] + [f"{c}_pct" for c in CATEGORIES]


def temporal_breakdown(trace: S.Trace) -> pd.DataFrame:
    """Per rank (index ``rank``): ``compute_ns``, ``communication_ns``, ``memory_ns``, ``idle_ns``,
    ``total_ns`` and the four ``*_pct`` (see the module docstring)."""
    ev = trace.events
    track_kind = trace.tracks[S.TRACK_KIND].astype(str).to_numpy()
    on_device = (
        np.isin(track_kind[ev[S.TRACK].to_numpy()], DEVICE_TRACK_KINDS)
        if len(ev)
        else np.zeros(0, bool)
    )
    kind = S.strings(ev[S.KIND])
    active = on_device & np.isin(kind, list(CATEGORY_OF_KIND))
    start = ev[S.TS].to_numpy()[active]
    return breakdown_of_intervals(
        ev[S.RANK].to_numpy()[active],
        start,
        start + ev[S.DUR].to_numpy()[active],
        pd.Series(kind[active]).map(CATEGORY_OF_KIND).to_numpy(dtype=object),
    )


def breakdown_of_intervals(
    rank: np.ndarray, start: np.ndarray, end: np.ndarray, category: np.ndarray
) -> pd.DataFrame:
    """The breakdown of activity intervals, each ``compute``, ``communication`` or ``memory``."""
    rank = np.asarray(rank, dtype=np.int64)
    start = np.asarray(start, dtype=np.int64)
    end = np.asarray(end, dtype=np.int64)
    category = np.asarray(category, dtype=object)
    ranks, code = np.unique(rank, return_inverse=True)
    if not len(ranks):
        return pd.DataFrame(
            {c: pd.Series(dtype="int64" if c.endswith("_ns") else "float64") for c in COLUMNS}
        ).rename_axis("rank")
    n = len(ranks)
    window = (
        pd.DataFrame({"r": code, "s": start, "e": end})
        .groupby("r")
        .agg(s=("s", "min"), e=("e", "max"))
    )
    total = (window["e"] - window["s"]).to_numpy(dtype=np.int64)
    is_compute = category == "compute"
    compute = union_lengths(code[is_compute], start[is_compute], end[is_compute], n)
    busy_cc = is_compute | (category == "communication")
    compute_or_comm = union_lengths(code[busy_cc], start[busy_cc], end[busy_cc], n)
    busy = union_lengths(code, start, end, n)
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


def union_lengths(
    group: np.ndarray, start: np.ndarray, end: np.ndarray, n_groups: int
) -> np.ndarray:
    """Per group code ``0..n_groups-1``, the length of the union of its intervals (int64 ns).

    Sorted by start within each group, an interval adds only what extends past the latest end
    before it (a cumulative maximum), so overlaps count once.
    """
    out = np.zeros(n_groups, dtype=np.int64)
    if not len(group):
        return out
    order = np.lexsort((start, group))
    g, s, e = group[order], start[order], end[order]
    reach = pd.Series(e).groupby(g).cummax().to_numpy()
    first = np.r_[True, g[1:] != g[:-1]]
    before = np.where(first, s, np.r_[s[:1], reach[:-1]])
    covered = np.maximum(e - np.maximum(s, before), 0)
    np.add.at(out, g, covered)
    return out
