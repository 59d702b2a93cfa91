"""The analysed window of a host-only trace.

The window is what the critical path and the what-if savings are measured over: every step of
the trace. Where the steps are, and the typical (median) step, is :mod:`tracediag.analysis.steps`.
"""

from __future__ import annotations

import numpy as np

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
