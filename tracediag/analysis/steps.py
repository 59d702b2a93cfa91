"""The steps of a job: where each iteration is, and per step its time, breakdown and path.

**Where the steps are.** A step is one iteration as the trace numbers it (the events' ``step``
column): a ``ProfilerStep#N`` range and the GPU work it launches (Kineto), one model execution
(Neuron ``ExecutionInfo`` / ``nc_exec_running``; barrier executions are no step), an XPlane
step number. On a rank, step N starts at the first start of its events (the ProfilerStep
range opens it) and runs to the start of the next step when that one is numbered N+1: the
steps of a run tile its time, so the period between step starts (what throughput sees) is the
step time, and GPU work that spills past the next step's start counts in that next step. A
step whose successor is not in the trace (the last one, or a hole in the numbering) ends at
the end of its host work (the range that opens it, its ProfilerStep, and its host events other
than annotations: a Python frame such as the profiler's own last ``step()`` call runs on 38 ms
after the step on ``kineto_mi300_resnet_act_checkpoint``). That is the host's clock, as the
tiling's: its device work ends later by the queue the host ran ahead with (158 ms on
``kineto_negative_queue_rank0``), which each earlier step passed on to the next. Where it has
no host events (a Neuron execution) it ends at the last end of its own events.

**On a device-bound rank** the host's clock understates the step: the host queues each step
faster than the device runs it, so the device falls further behind every step and the host
ends by waiting for it (``kineto_mi300_resnet_act_checkpoint``: ProfilerSteps of 15.97 ms,
while the GPU work each one launches spans 18.98, 18.98 and 18.55 ms and the host then waits
37.85 ms in ``hipDeviceSynchronize``). A rank is device-bound when the lag of its steps'
device work behind their host end grows from its first step to its last by more than
:data:`DEVICE_BEHIND_SHARE` of its host step per step (steady queueing, a constant lag, is not:
the host still sets the period, as on ``kineto_resnet50_train_worker0`` and
``kineto_negative_queue_rank0``). Its steps are then on the device's clock: step N runs from
the end of step N-1's device work (the first step: from the start of its own) to the end of
the device work step N launched, a running maximum so they tile without overlap. That is the
step PyTorch's TensorBoard profiler plugin uses (a step ends at the later of its ProfilerStep's
end and the end of the device work it launched, and starts no earlier than the previous step's
end; ``tb_plugin/torch_tb_profiler/profiler/event_parser.py``), less what the plugin leaves in
the first step: the device work the host had queued before the trace began (30 ms of the
previous step's on mi300), which is no part of this step's. Applied to every rank, the
plugin's rule would move host-bound steps by the jitter of their last kernel's end (resnet50:
a median of 158.8 ms against 155.05 ms of ProfilerStep ranges), hence the device-bound test.
A step that holds nothing
but its marker (the ``ProfilerStep#N`` that ``prof.stop()`` closes at once, 49 µs on
``kineto_amd_mi250_minitoy``) is no step; the reports say how many they leave out. A trace without step numbers is one step: each rank's window
(the dependency graph's window: its device work; every node of a host-only trace). When some
ranks number their steps and others do not, the job's steps are the numbered ones.

**Job-wide**, step N spans from its first start on any rank to its last end on any rank (the
interval the critical path is clipped to and findings are counted in), and its step time is
the median of the ranks' own step N times. Not the span, nor the slowest rank's: each rank's
step boundaries are set by its own host (a ProfilerStep ends at that process's
``prof.step()``), so they are offset from rank to rank and jitter from step to step while the
ranks, coupled by their collectives, run at one period. On the real 4-rank gloo traces of
``tests/data/real_gloo/straggler_sleep`` (every rank's mean step 105.9 ms by the script's own
clock) the median of the spans is 117.0 ms and of the slowest rank's steps 115.0 ms; the
median over ranks gives 105.5 ms. A trace without step numbers is one step, its window: its
time is the span, the critical path's length.

**Per step and rank**, the temporal breakdown of :mod:`~tracediag.analysis.temporal_breakdown`
(the same activity and the same unions) of the device activity inside the rank's step, with
the step as the window: ``idle`` is the step's time with no device activity, of which
``host_gap`` is the part before its first and after its last activity (the device waiting for
the host to start it, or done early). **Per step**, the critical path's time in each category
inside the job-wide step: the path's segments clipped to it.

**Typical step and spread**: the median of the job-wide step times, their 90th percentile
(linear interpolation) and maximum. A step is an **outlier** when it is slower than the median
by more than :data:`~tracediag.analysis.step_outliers.OUTLIER_SIGMAS` robust standard deviations (1.4826 x the median absolute
deviation of the step times) and by more than :data:`~tracediag.analysis.step_outliers.OUTLIER_MIN_PCT` percent of the median:
the robust rule follows the job's own noise, the floor keeps a very regular job's small
wobbles out. Fewer than 3 steps have no outliers. Its **cause** is what grew most against the
typical step of the same rank (the median of that rank's steps, category by category):
compute, memory, device idle or host gap on one rank, or communication on every rank of the
step (a rank whose collectives wait for a late peer grows in communication too: that is the
late rank's doing, so communication names a cause only when it grew everywhere). A trace
without device activity (host-only) has no breakdown: its cause is the critical-path category
and rank that grew most.

**A finding is in a step** when the step's span shares at least :data:`SEEN_MIN_SHARE` of the
shorter of the two with the finding's window (:meth:`JobSteps.seen`), so a stall that starts
just before a step boundary is in one step, not two.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracediag.analysis.group_codes import group_codes
from tracediag.analysis.intervals import overlap_pairs
from tracediag.analysis.step_outliers import (
    OUTLIER_RULE,
    outlier_causes,
    outlier_threshold,
    outliers,
)
from tracediag.analysis.temporal_breakdown import breakdown_of_codes, device_activity
from tracediag.graph.dependencies import Graph
from tracediag.model import schema as S
from tracediag.model.path_categories import CATEGORIES as PATH_CATEGORIES

#: A rank is device-bound when its device work falls behind its host by more than this share
#: of its host step per step (the lag at its last step over the lag at its first).
DEVICE_BEHIND_SHARE = 0.05
#: A finding is in a step when they share this much of the shorter of the two (steps.seen).
SEEN_MIN_SHARE = 0.05
#: ``rank_steps``' ``attrs`` key: the step numbers left out as marker only on every rank.
EMPTY_STEPS = "empty_steps"
#: Breakdown columns of a rank's step (ns), as the report names them.
BREAKDOWN = ("compute", "communication", "memory", "idle")


def rank_steps(trace: S.Trace, graph: Graph) -> pd.DataFrame:
    """One row per (rank, step), in rank then time order: ``rank``, ``number`` (the trace's step
    number; NaN for a rank without numbered steps, whose one step is its window), ``start_ns``,
    ``end_ns`` and ``step_ns`` (see the module docstring). ``attrs["empty_steps"]``: the
    numbers of the steps left out because they hold nothing but their marker on every rank."""
    ev = trace.events
    step = ev[S.STEP].to_numpy(dtype=np.float64) if S.STEP in ev and len(ev) else np.empty(0)
    has = np.flatnonzero(np.isfinite(step))
    parts = []
    numbered: set[int] = set()
    empty: list[float] = []
    if len(has):
        start = ev[S.TS].to_numpy()[has]
        end = start + ev[S.DUR].to_numpy()[has]
        host_track = trace.tracks[S.TRACK_KIND].astype(str).to_numpy() == "cpu_thread"
        on_host = host_track[ev[S.TRACK].to_numpy()[has]]
        kinds, kind_code = S.text_codes(ev[S.KIND])
        marker = np.append(np.asarray(kinds, dtype=object) == "marker", True)[kind_code[has]]
        lowest, highest = np.iinfo(np.int64).min, np.iinfo(np.int64).max
        rank = ev[S.RANK].to_numpy()[has].astype(np.int64)
        # Host work: not its annotations (a Python frame such as the profiler's own last
        # step() call may run on long after the step).
        host_last = np.where(on_host & ~marker, end, lowest)
        host_start = np.where(on_host, start, highest)
        device_work = ~on_host & ~marker
        g = _per_step(
            rank, step[has], start, end, host_last, host_start, ~marker,
            device_first=np.where(device_work, start, highest),
            device_last=np.where(device_work, end, lowest),
        )  # fmt: skip
        # The range that opens the step on the host (its ProfilerStep#N) ends it too.
        first = g.pop("host_first").to_numpy()
        opening = end[first]
        opens_on_host = host_start[first] < highest
        g["host_last_ns"] = np.maximum(g["host_last_ns"], np.where(opens_on_host, opening, lowest))
        # A step of nothing but its marker (the ProfilerStep that prof.stop() closes at once)
        # is no step, unless the rank has no other.
        busy = g.groupby("rank")["work"].transform("max") > 0
        kept = (g["work"] > 0) | ~busy
        # The numbers left out on every rank, so the reports can say so.
        empty = sorted(set(g.loc[~kept, "number"]) - set(g.loc[kept, "number"]))
        g = g[kept]
        g = g.sort_values(["rank", "start_ns"], kind="stable", ignore_index=True)
        rank = g["rank"].to_numpy()
        number = g["number"].to_numpy()
        nxt_same = np.r_[rank[1:] == rank[:-1], False]
        nxt_number = np.r_[number[1:], np.nan]
        nxt_start = np.r_[g["start_ns"].to_numpy()[1:], 0]
        # Tile the run: up to the next step's start when it is the next number. Without one,
        # to the end of its host work where it has any: the host's clock, as the tiling's
        # (its device work ends later by the queue the host ran ahead with, which each earlier
        # step passed on to the next), else to the end of its own events.
        host_last = g["host_last_ns"].to_numpy()
        own_end = np.where(host_last > lowest, host_last, g["last_ns"].to_numpy())
        follows = nxt_same & (nxt_number == number + 1)
        g["end_ns"] = np.where(follows, nxt_start, own_end)
        g = _on_device_clock(g, lowest)
        parts.append(g[["rank", "number", "start_ns", "end_ns"]])
        numbered = set(np.unique(rank).tolist())
    window = _window_rows(graph)
    window = window[~window["rank"].isin(numbered)]
    if len(window):
        parts.append(window)
    if not parts:
        return pd.DataFrame(
            {
                "rank": pd.Series(dtype="int64"),
                "number": pd.Series(dtype="float64"),
                "start_ns": pd.Series(dtype="int64"),
                "end_ns": pd.Series(dtype="int64"),
                "step_ns": pd.Series(dtype="int64"),
            }
        )
    out = pd.concat(parts, ignore_index=True)
    out = out.sort_values(["rank", "start_ns"], kind="stable", ignore_index=True)
    out = out.astype({"rank": "int64", "start_ns": "int64", "end_ns": "int64"})
    out["step_ns"] = out["end_ns"] - out["start_ns"]
    out.attrs[EMPTY_STEPS] = [int(n) for n in empty]
    return out


def _per_step(
    rank, number, start, end, host_last, host_start, work, device_first, device_last
) -> pd.DataFrame:
    """Per (rank, step number), in order of first appearance: its first start, last end and
    last host end, its first host event's row (the earliest host start, the first such row
    on a tie), its work events, and the first start and last end of its device work. By group
    codes and one sort of the rows by them (no frame of every event grouped)."""
    code, first = group_codes(rank, number)
    # Stable: a group's rows stay in row order (its first earliest host start comes first).
    o = np.argsort(code, kind="stable")
    bounds = np.flatnonzero(np.r_[True, code[o][1:] != code[o][:-1]])  # code k starts here

    def reduce(ufunc, values):
        return ufunc.reduceat(values[o], bounds) if len(o) else values[:0]

    host_min = reduce(np.minimum, host_start)
    at_min = host_start[o] == np.repeat(host_min, np.diff(np.r_[bounds, len(o)]))
    host_first = np.minimum.reduceat(np.where(at_min, o, len(o)), bounds) if len(o) else o[:0]
    return pd.DataFrame(
        {
            "rank": rank[first],
            "number": number[first],
            "start_ns": reduce(np.minimum, start),
            "last_ns": reduce(np.maximum, end),
            "host_last_ns": reduce(np.maximum, host_last),
            "host_first": host_first.astype(np.int64),
            "work": np.bincount(code[work], minlength=len(first)).astype(np.int64),
            "device_first_ns": reduce(np.minimum, device_first),
            "device_last_ns": reduce(np.maximum, device_last),
        }
    )


def _on_device_clock(g: pd.DataFrame, lowest: int) -> pd.DataFrame:
    """``g`` (a rank's steps on the host's clock, in rank then start order) with the steps of
    each device-bound rank moved to the device's clock (module docstring): step N from the
    end of step N-1's device work (the first step: from the start of its own) to the end of
    its own device work, a running maximum so the steps still tile without overlap."""
    has = (g["device_last_ns"] > lowest).to_numpy()
    lag = pd.Series(np.where(has, g["device_last_ns"] - g["end_ns"], np.nan), index=g.index)
    by = lag.groupby(g["rank"].to_numpy())
    first, last, n = by.transform("first"), by.transform("last"), by.transform("count")
    host_step = (g["end_ns"] - g["start_ns"]).groupby(g["rank"].to_numpy()).transform("median")
    # The device falls further behind the host each step: the host's steps are shorter than
    # the device's, and the device, not the host, sets the period.
    grows = (last - first) > DEVICE_BEHIND_SHARE * (n - 1) * host_step
    bound = ((n >= 2) & (last > 0) & grows).to_numpy()
    if not bound.any():
        return g
    rows = np.flatnonzero(bound)
    sub = g.iloc[rows]
    r = sub["rank"].to_numpy()
    # A step without device work on such a rank ends where its host work does.
    raw_end = np.where(has[rows], sub["device_last_ns"], sub["end_ns"]).astype(np.int64)
    end = pd.Series(raw_end).groupby(r).cummax().to_numpy()
    prev = np.r_[np.int64(lowest), end[:-1]]
    first_row = np.r_[True, r[1:] != r[:-1]]
    own_start = np.where(has[rows], sub["device_first_ns"], sub["start_ns"]).astype(np.int64)
    start = np.where(first_row, own_start, prev)
    g = g.copy()
    g.loc[g.index[rows], "start_ns"] = np.minimum(start, end)
    g.loc[g.index[rows], "end_ns"] = end
    return g


def _window_rows(graph: Graph) -> pd.DataFrame:
    """Per rank with nodes in the graph's window: one unnumbered step, first start to last end."""
    ok = (graph.rank >= 0) & graph.window
    frame = pd.DataFrame(
        {"rank": graph.rank[ok], "start_ns": graph.start[ok], "end_ns": graph.end[ok]}
    )
    g = frame.groupby("rank").agg(start_ns=("start_ns", "min"), end_ns=("end_ns", "max"))
    g = g.reset_index()
    g.insert(1, "number", np.nan)
    return g


def per_rank_typical(by_rank: pd.DataFrame) -> tuple[dict[int, int], dict[int, int]]:
    """Per rank: its typical step (the median of its step times) and its number of steps."""
    if not len(by_rank):
        return {}, {}
    g = by_rank.groupby("rank")["step_ns"]
    median, count = g.median(), g.size()
    return (
        {int(r): int(round(v)) for r, v in median.items()},
        {int(r): int(n) for r, n in count.items()},
    )


@dataclass
class JobSteps:
    """The job's steps (see the module docstring). Times are aligned ns.

    ``table``: one row per job step in time order (its ``index`` 0..n-1): ``number`` (NaN
    without step numbers), ``start_ns``, ``end_ns``, ``span_ns``, ``step_ns`` (the median of
    the ranks' own step times; the span without step numbers), the critical path's ns per
    category inside the step (``path_<category>_ns``), ``outlier`` and ``cause`` (a dict, or
    None). ``by_rank``: one row per (step, rank): ``step`` (the job step's index), ``rank``,
    ``start_ns``, ``end_ns``, ``step_ns`` and the breakdown ``compute_ns``,
    ``communication_ns``, ``memory_ns``, ``idle_ns`` (summing to ``step_ns``), ``host_gap_ns``
    and ``device`` (whether the rank has device activity at all; else no breakdown).
    """

    table: pd.DataFrame
    by_rank: pd.DataFrame
    marked: bool  # the trace numbers its steps (else one step: the window)
    empty: tuple[int, ...] = ()  # numbers of the marker-only steps left out (rank_steps)

    @property
    def n(self) -> int:
        return len(self.table)

    @property
    def times(self) -> np.ndarray:
        return self.table["step_ns"].to_numpy(dtype=np.int64)

    @property
    def typical_ns(self) -> int:
        """The median step time (0 without steps)."""
        return int(round(float(np.median(self.times)))) if self.n else 0

    def summary(self) -> dict:
        """The report's ``step_summary``."""
        t = self.times
        above = outlier_threshold(t.astype(np.float64))
        path = {
            c: int(round(float(np.median(self.table[f"path_{c}_ns"])))) if self.n else 0
            for c in PATH_CATEGORIES
        }
        return {
            "n": self.n,
            "marked": self.marked,
            "typical_ns": self.typical_ns,
            "p90_ns": int(round(float(np.percentile(t, 90)))) if self.n else 0,
            "max_ns": int(t.max()) if self.n else 0,
            "min_ns": int(t.min()) if self.n else 0,
            "mean_ns": int(round(float(t.mean()))) if self.n else 0,
            "critical_path_ns": path,
            "outliers": self.table.index[self.table["outlier"]].tolist(),
            "outlier_above_ns": None if above is None else int(round(above)),
            "outlier_rule": OUTLIER_RULE,
            "empty_steps": list(self.empty),
        }

    def to_dicts(self) -> list[dict]:
        """The report's ``steps`` array, one object per step (a handful of ranks each)."""
        ranks: dict[int, list[dict]] = {}
        br = self.by_rank
        cols = [br[c].to_numpy() for c in ("step", "rank", "start_ns", "end_ns", "step_ns")]
        parts = np.stack([br[f"{c}_ns"].to_numpy() for c in BREAKDOWN], axis=1)
        gap = br["host_gap_ns"].to_numpy()
        device = br["device"].to_numpy()
        for i, (s, r, a, b, d) in enumerate(zip(*cols, strict=True)):  # one per (step, rank)
            ranks.setdefault(int(s), []).append(
                {
                    "rank": int(r),
                    "start_ns": int(a),
                    "end_ns": int(b),
                    "step_time_ns": int(d),
                    "breakdown_ns": (
                        dict(zip(BREAKDOWN, map(int, parts[i]), strict=True)) if device[i] else {}
                    ),
                    "host_gap_ns": int(gap[i]) if device[i] else None,
                }
            )
        out = []
        t = self.table
        for i, row in enumerate(t.itertuples(index=False)):  # one per step
            number = row.number
            out.append(
                {
                    "index": i,
                    "number": None if number != number else int(number),
                    "start_ns": int(row.start_ns),
                    "end_ns": int(row.end_ns),
                    "span_ns": int(row.span_ns),
                    "step_time_ns": int(row.step_ns),
                    "ranks": ranks.get(i, []),
                    "critical_path_ns": {
                        c: int(getattr(row, f"path_{c}_ns")) for c in PATH_CATEGORIES
                    },
                    "outlier": bool(row.outlier),
                    "cause": row.cause,
                }
            )
        return out

    def seen(self, start_ns, end_ns) -> np.ndarray:
        """Per window ``[start_ns[i], end_ns[i])`` (a finding's): in how many steps it occurs,
        counting a step whose span shares at least :data:`SEEN_MIN_SHARE` of the shorter of the
        two with it, so a window that ends just past a step boundary is not in the next step.
        A zero-length window at t is in the steps holding t."""
        s = np.asarray(start_ns, dtype=np.int64)
        e = np.maximum(np.asarray(end_ns, dtype=np.int64), s + 1)
        t = self.table  # in start order
        item, win, a, b = overlap_pairs(s, e, t["start_ns"].to_numpy(), t["end_ns"].to_numpy())
        shorter = np.minimum(e[item] - s[item], t["span_ns"].to_numpy()[win])
        counts = (b - a) >= SEEN_MIN_SHARE * shorter
        return np.bincount(item[counts], minlength=len(s))


def job_steps(trace: S.Trace, by_rank: pd.DataFrame, path_segments: pd.DataFrame) -> JobSteps:
    """The job's steps from :func:`rank_steps`' rows and the critical path's segments."""
    marked = bool(by_rank["number"].notna().any()) if len(by_rank) else False
    empty = tuple(by_rank.attrs.get(EMPTY_STEPS, ()))
    br = by_rank[by_rank["number"].notna()] if marked else by_rank
    key = br["number"].fillna(-1.0)
    g = br.groupby(key.to_numpy(), sort=False).agg(
        start_ns=("start_ns", "min"), end_ns=("end_ns", "max")
    )
    g = g.rename_axis("number").reset_index().sort_values("start_ns", kind="stable")
    table = g.reset_index(drop=True)
    if not marked:
        table["number"] = np.nan
    table["span_ns"] = table["end_ns"] - table["start_ns"]
    # Each rank's row names its job step (matched by number; the one step without numbers).
    index_of = pd.Series(np.arange(len(table)), index=g["number"].to_numpy())
    br = br.assign(step=index_of.loc[key.to_numpy()].to_numpy()).reset_index(drop=True)
    if marked:
        median = br.groupby("step")["step_ns"].median().reindex(table.index)
        table["step_ns"] = np.round(median.to_numpy()).astype(np.int64)
    else:
        table["step_ns"] = table["span_ns"]
    br = _with_breakdown(trace, br)
    br = br.sort_values(["step", "rank"], kind="stable", ignore_index=True)
    path = _path_in_steps(path_segments, table)
    for c in PATH_CATEGORIES:
        table[f"path_{c}_ns"] = path.groupby("step")[c].sum().reindex(table.index, fill_value=0)
    table["outlier"] = outliers(table["step_ns"].to_numpy(dtype=np.float64))
    table["cause"] = None
    causes = outlier_causes(table, br, path)
    table["cause"] = [causes.get(i) for i in range(len(table))]
    return JobSteps(table=table, by_rank=br, marked=marked, empty=empty)


def _with_breakdown(trace: S.Trace, br: pd.DataFrame) -> pd.DataFrame:
    """``br`` with each rank's step's breakdown: the device activity clipped to the step, by
    temporal_breakdown's own unions, with the step as the window."""
    rank, start, end, code = device_activity(trace)
    parts = []
    b_rank = br["rank"].to_numpy()
    for r in np.unique(rank).tolist():  # a loop over ranks, not events
        rows = np.flatnonzero(b_rank == r)
        if not len(rows):
            continue
        order = rows[np.argsort(br["start_ns"].to_numpy()[rows], kind="stable")]
        mine = np.flatnonzero(rank == r)
        item, win, s, e = overlap_pairs(
            start[mine], end[mine], br["start_ns"].to_numpy()[order], br["end_ns"].to_numpy()[order]
        )
        # A rank's rows are its own groups: one rank's clipped activity at a time, not all
        # ranks' at once (the report's peak memory).
        parts.append(breakdown_of_codes(order[win], s, e, code[mine][item]))
    out = br.copy()
    step = out["step_ns"].to_numpy()
    if parts:
        bd = pd.concat(parts).reindex(np.arange(len(out)), fill_value=0)
    else:
        bd = pd.DataFrame(0, index=np.arange(len(out)), columns=["total_ns"])
    for c in ("compute", "communication", "memory"):
        out[f"{c}_ns"] = bd[f"{c}_ns"].to_numpy() if f"{c}_ns" in bd else 0
    busy = out["compute_ns"] + out["communication_ns"] + out["memory_ns"]
    out["idle_ns"] = step - busy.to_numpy()
    out["host_gap_ns"] = step - bd["total_ns"].to_numpy()  # outside first..last activity
    out["device"] = out["rank"].isin(np.unique(rank)).to_numpy()
    return out


def _path_in_steps(seg: pd.DataFrame, table: pd.DataFrame) -> pd.DataFrame:
    """ns of the critical path per (step, rank of the segment; -1: none) and category."""
    cols = ["step", "rank", *PATH_CATEGORIES]
    if not len(seg) or not len(table):
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in cols})
    order = np.argsort(seg["start_ns"].to_numpy(), kind="stable")
    s0 = seg["start_ns"].to_numpy()[order]
    e0 = seg["end_ns"].to_numpy()[order]
    step, win, s, e = overlap_pairs(
        table["start_ns"].to_numpy(), table["end_ns"].to_numpy(), s0, e0
    )
    # Each segment's index in PATH_CATEGORIES (-1: none), from its column's few distinct values.
    texts, codes = S.text_codes(seg["category"])
    known = {c: i for i, c in enumerate(PATH_CATEGORIES)}
    category = np.array([known.get(t, -1) for t in texts] + [-1], dtype=np.int8)[codes]
    frame = pd.DataFrame(
        {
            "step": step,
            "rank": seg["rank"].to_numpy()[order][win],
            "category": category[order][win],
            "ns": e - s,
        }
    )
    wide = frame.pivot_table(
        index=["step", "rank"], columns="category", values="ns", aggfunc="sum", fill_value=0
    )
    wide = wide.reindex(columns=range(len(PATH_CATEGORIES)), fill_value=0)
    wide.columns = list(PATH_CATEGORIES)
    return wide.reset_index()
