"""The analysed window of a host-only trace, and the typical step of a trace of several steps.

A trace holds several iterations (``ProfilerStep#N``): its window spans all of them, so the
step time reported per rank is its mean step: the span of its events in numbered steps (the
``ProfilerStep#N`` ranges included: first start to last end, idle waits included) over their number. That is the window's length per step,
the same measure as the critical path's and the what-if savings' (a saving over the window, over
the number of steps, is a saving per step). A trace of one step (or without step numbers)
reports its window.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracediag.graph.dependencies import Graph
from tracediag.model import schema as S


def host_only(trace: S.Trace) -> bool:
    """Every track is a CPU thread (a CPU job, or the host side of an accelerator job)."""
    kinds = trace.tracks[S.TRACK_KIND].astype(str).to_numpy()
    return bool(len(kinds)) and bool((kinds == "cpu_thread").all())


def widen_host_window(trace: S.Trace, graph: Graph) -> None:
    """A host-only trace's window is all of its nodes, in place.

    ``build_graph`` takes the device nodes as the window, counting collective instance nodes
    (no track) as device nodes: in a host-only trace the window would then be the instances
    alone, and the ranks' own work outside it."""
    if host_only(trace):
        graph.window = np.ones(len(graph), dtype=bool)


def typical_steps(
    trace: S.Trace, window_ns: dict[int, int]
) -> tuple[dict[int, int], dict[int, int]]:
    """Per rank: its mean step (the span of its events in numbered steps, the step ranges
    themselves included, over their number; ``window_ns[rank]`` without step numbers), and the
    number of steps (1 without step numbers)."""
    steps = {r: 1 for r in window_ns}
    typical = dict(window_ns)
    ev = trace.events
    if S.STEP not in ev or not len(ev):
        return typical, steps
    step = ev[S.STEP].to_numpy(dtype=np.float64)
    has = np.flatnonzero(np.isfinite(step))
    if not len(has):
        return typical, steps
    # The step ranges (ProfilerStep#N) count: a rank whose step opens idle (a sleep, a data
    # loader wait) has no work there.
    start = ev[S.TS].to_numpy()[has]
    frame = pd.DataFrame(
        {
            "rank": ev[S.RANK].to_numpy()[has],
            "step": step[has],
            "start": start,
            "end": start + ev[S.DUR].to_numpy()[has],
        }
    )
    per_rank = frame.groupby("rank").agg(
        n=("step", "nunique"), first=("start", "min"), last=("end", "max")
    )
    for rank, n, first, last in per_rank.itertuples():  # one row per rank
        if int(rank) in typical:
            steps[int(rank)] = int(n)
            typical[int(rank)] = int((last - first) // n)
    return typical, steps
