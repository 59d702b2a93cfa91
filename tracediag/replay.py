"""Replay: recompute start and end times in topological order; what-if savings.

``start[v] = max(end[p] for p in preds(v)) + gap[v]`` (roots keep their observed start), with the
graph's node-level gaps. Replaying the unchanged graph gives back every observed time exactly,
which is what makes the what-ifs trustworthy. A what-if changes node durations and gaps and
replays; its saving is the difference in the window's length.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tracediag.graph import Graph


@dataclass
class WhatIf:
    """A change to replay: new durations and gaps for some nodes (node id arrays)."""

    dur_nodes: np.ndarray | None = None
    dur_values: np.ndarray | None = None
    gap_nodes: np.ndarray | None = None
    gap_values: np.ndarray | None = None

    @staticmethod
    def durations(nodes, values) -> WhatIf:
        """Set the durations of ``nodes`` to ``values`` (ns)."""
        return WhatIf(
            dur_nodes=np.asarray(nodes, np.int64), dur_values=np.asarray(values, np.int64)
        )

    @staticmethod
    def gaps(nodes, values) -> WhatIf:
        """Set the gaps (unexplained latency before the start) of ``nodes`` to ``values`` (ns)."""
        return WhatIf(
            gap_nodes=np.asarray(nodes, np.int64), gap_values=np.asarray(values, np.int64)
        )

    def __add__(self, other: WhatIf) -> WhatIf:
        def cat(a, b):
            if a is None:
                return b
            return a if b is None else np.concatenate([a, b])

        return WhatIf(
            cat(self.dur_nodes, other.dur_nodes),
            cat(self.dur_values, other.dur_values),
            cat(self.gap_nodes, other.gap_nodes),
            cat(self.gap_values, other.gap_values),
        )


@dataclass
class ReplayResult:
    start: np.ndarray
    end: np.ndarray
    window: np.ndarray  # the nodes that define the window (Graph.window)

    @property
    def length_ns(self) -> int:
        """First start to last end of the replayed window."""
        if not len(self.start):
            return 0
        return int(self.end[self.window].max() - self.start[self.window].min())


def replay(graph: Graph, change: WhatIf | None = None) -> ReplayResult:
    """Replay the graph, optionally with a change, and return the new node times."""
    dur = graph.dur.copy()
    gap = graph.gap.copy()
    if change is not None:
        if change.dur_nodes is not None and len(change.dur_nodes):
            dur[change.dur_nodes] = np.maximum(change.dur_values, 0)
        if change.gap_nodes is not None and len(change.gap_nodes):
            gap[change.gap_nodes] = change.gap_values
    start = graph.start.copy()
    end = start + dur
    # One tight loop over plain lists: a node's start needs its predecessors' new ends, which
    # no vectorised pass over a million-node DAG gives without levelising it first.
    ptr = graph.pred_ptr.tolist()
    preds = graph.pred_src.tolist()
    start_l = start.tolist()
    end_l = end.tolist()
    dur_l = dur.tolist()
    gap_l = gap.tolist()
    for v in graph.order.tolist():
        lo, hi = ptr[v], ptr[v + 1]
        if lo != hi:
            m = end_l[preds[lo]]
            for i in range(lo + 1, hi):
                e = end_l[preds[i]]
                if e > m:
                    m = e
            s = m + gap_l[v]
            start_l[v] = s
            end_l[v] = s + dur_l[v]
    return ReplayResult(np.asarray(start_l, np.int64), np.asarray(end_l, np.int64), graph.window)
