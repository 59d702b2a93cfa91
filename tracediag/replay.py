"""Replay: recompute start and end times in dependency order; what-if savings.

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


@dataclass
class _Plan:
    """What replays of one graph share: its single-predecessor chains and their anchors.

    Most nodes have exactly one predecessor (program order on a track), so their end is their
    predecessor's end plus their own gap and duration: along such chains ends are sums, which
    pointer jumping computes for all nodes at once. Only *anchors* (roots and nodes with several
    predecessors, a few percent of a real graph) need a max over predecessors, in a Python loop.
    """

    single: np.ndarray  # bool: exactly one predecessor
    parent: np.ndarray  # that predecessor (self for anchors)
    anchor: np.ndarray  # the anchor each chain hangs from (self for anchors)
    rounds: int  # pointer-jumping rounds that reach every anchor
    loop: list[int]  # anchors with predecessors, in topological order
    edge_ptr: list[int]  # their predecessor edges, compacted: loop[k]'s are edge_ptr[k]:[k+1]
    edge_src: np.ndarray  # predecessor of each compacted edge
    edge_anchor: list[int]  # anchor of that predecessor


def _plan(graph: Graph) -> _Plan:
    if graph.replay_plan is not None:
        return graph.replay_plan
    n = len(graph)
    ptr = graph.pred_ptr
    npred = np.diff(ptr)
    single = npred == 1
    own = np.arange(n)
    # No edge at all (every event alone on its track): every node is an anchor.
    first = graph.pred_src[np.minimum(ptr[:-1], len(graph.pred_src) - 1)] if ptr[-1] else own
    parent = np.where(single, first, own)
    anchor, rounds = parent, 0
    while True:  # each round doubles the distance jumped: log2(longest chain) rounds
        nxt = anchor[anchor]
        if np.array_equal(nxt, anchor):
            break
        anchor, rounds = nxt, rounds + 1
    loop = graph.order[(npred >= 2)[graph.order]]
    lo, hi = ptr[loop], ptr[loop + 1]
    edge_ptr = np.r_[0, np.cumsum(hi - lo)]
    idx = np.repeat(lo - edge_ptr[:-1], hi - lo) + np.arange(int(edge_ptr[-1]))
    edge_src = graph.pred_src[idx]
    plan = _Plan(
        single,
        parent,
        anchor,
        rounds + 1,
        loop.tolist(),
        edge_ptr.tolist(),
        edge_src,
        anchor[edge_src].tolist(),
    )
    graph.replay_plan = plan  # a graph is never changed once built
    return plan


def _chain_offsets(plan: _Plan, w: np.ndarray) -> np.ndarray:
    """Per node: the sum of ``w`` from it up its chain to (not including) its anchor."""
    acc = np.where(plan.single, w, 0)
    jump = plan.parent
    # An anchor adds 0 and jumps to itself, so no mask is needed once a chain reaches it.
    for _ in range(plan.rounds):
        acc = acc + acc[jump]
        jump = jump[jump]
    return acc


def replay(graph: Graph, change: WhatIf | None = None) -> ReplayResult:
    """Replay the graph, optionally with a change, and return the new node times."""
    dur = graph.dur.copy()
    gap = graph.gap.copy()
    if change is not None:
        if change.dur_nodes is not None and len(change.dur_nodes):
            dur[change.dur_nodes] = np.maximum(change.dur_values, 0)
        if change.gap_nodes is not None and len(change.gap_nodes):
            gap[change.gap_nodes] = change.gap_values
    plan = _plan(graph)
    w = gap + dur
    offset = _chain_offsets(plan, w)
    # Anchors in topological order: a root keeps its start; another anchor starts after its
    # latest predecessor, whose end is its own anchor's end plus its chain offset.
    end_l = (graph.start + dur).tolist()
    src_offset = offset[plan.edge_src].tolist()
    w_l = w.tolist()
    ea, ep = plan.edge_anchor, plan.edge_ptr
    for k, a in enumerate(plan.loop):
        lo, hi = ep[k], ep[k + 1]
        m = end_l[ea[lo]] + src_offset[lo]
        for i in range(lo + 1, hi):
            e = end_l[ea[i]] + src_offset[i]
            if e > m:
                m = e
        end_l[a] = m + w_l[a]
    end = np.asarray(end_l, np.int64)
    end = np.where(plan.single, end[plan.anchor] + offset, end)
    return ReplayResult(end - dur, end, graph.window)
