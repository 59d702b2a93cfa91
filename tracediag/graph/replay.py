"""Replay: recompute start and end times in dependency order; what-if savings.

``start[v] = max(end[p] for p in preds(v)) + gap[v]`` (roots keep their observed start), with the
graph's node-level gaps. Replaying the unchanged graph gives back every observed time exactly,
which is what makes the what-ifs trustworthy. A what-if changes node durations and gaps and
replays; its saving is the difference in the window's length.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from tracediag.graph.dependencies import Graph


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


def joint(changes) -> WhatIf:
    """One change doing all of ``changes`` at once. A node that several set keeps the smallest
    value (the most any of them restores it), so the joint replay bounds fixing them all."""
    total = WhatIf()
    for c in changes:
        total = total + c
    return WhatIf(
        *_smallest(total.dur_nodes, total.dur_values), *_smallest(total.gap_nodes, total.gap_values)
    )


def _smallest(nodes, values):
    if nodes is None or not len(nodes):
        return nodes, values
    # Sorted by node, then value: the first row of each node holds its smallest value.
    order = np.lexsort((values, nodes))
    nodes, values = nodes[order], values[order]
    first = np.r_[True, nodes[1:] != nodes[:-1]]
    return nodes[first], values[first]


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
    predecessors, a few percent of a real graph) need a max over predecessors, in a compiled
    loop over the anchors' ends alone (numbered by *slot*), not an array of every node's.
    """

    single: np.ndarray  # bool: exactly one predecessor
    parent: np.ndarray  # that predecessor (self for anchors)
    anchor_slot: np.ndarray  # per node: the slot of the anchor its chain hangs from
    rounds: int  # pointer-jumping rounds that reach every anchor
    anchors: np.ndarray  # the anchor of each slot (node ids, ascending)
    loop: np.ndarray  # anchors with predecessors, in topological order (node ids)
    loop_slot: np.ndarray  # their slots
    edge_ptr: np.ndarray  # their predecessor edges, compacted: loop[k]'s are edge_ptr[k]:[k+1]
    edge_src: np.ndarray  # predecessor of each compacted edge
    edge_anchor: np.ndarray  # slot of that predecessor's anchor

    @functools.cached_property
    def loop_lists(self) -> tuple[list[int], list[int], list[int]]:
        """``loop_slot``, ``edge_ptr``, ``edge_anchor`` as lists, for the interpreted loop."""
        return self.loop_slot.tolist(), self.edge_ptr.tolist(), self.edge_anchor.tolist()


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
    # Anchors: every chain's top (a single-predecessor cycle among same-instant nodes may
    # settle on one of its own nodes) and every node that is no chain's member.
    is_anchor = ~single
    is_anchor[anchor] = True
    anchors = np.flatnonzero(is_anchor)
    slot = np.full(n, -1, dtype=np.int64)
    slot[anchors] = np.arange(len(anchors))
    loop = graph.order[(npred >= 2)[graph.order]]
    lo, hi = ptr[loop], ptr[loop + 1]
    edge_ptr = np.r_[0, np.cumsum(hi - lo)]
    idx = np.repeat(lo - edge_ptr[:-1], hi - lo) + np.arange(int(edge_ptr[-1]))
    edge_src = graph.pred_src[idx]
    plan = _Plan(
        single,
        parent,
        slot[anchor],
        rounds + 1,
        anchors,
        loop,
        slot[loop],
        edge_ptr,
        edge_src,
        slot[anchor[edge_src]],
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


def _anchor_ends(end_a, loop_slot, edge_ptr, edge_anchor, edge_src, offset, w_loop):
    """In place: each loop anchor's end, in topological order, from its predecessors' ends."""
    for k in range(len(loop_slot)):
        lo, hi = edge_ptr[k], edge_ptr[k + 1]
        m = end_a[edge_anchor[lo]] + offset[edge_src[lo]]
        for i in range(lo + 1, hi):
            e = end_a[edge_anchor[i]] + offset[edge_src[i]]
            if e > m:
                m = e
        end_a[loop_slot[k]] = m + w_loop[k]


# Above this many predecessor edges into anchors the loop runs compiled: interpreted it costs
# ~0.3 us an edge (0.06 s a replay at 200k, ~3 s at 10M), while numba's first call in a
# process costs 0.5-1 s (its import, then loading its registries even from the disk cache),
# which a diagnosis's 10-20 replays of a small graph would never win back.
_COMPILE_ABOVE_EDGES = 200_000


@functools.cache
def _anchor_kernel():
    # Compiled on first use, not at import, so commands that never replay a big graph do not
    # import numba; cache=True keeps the machine code on disk: only the first run ever compiles.
    import numba

    return numba.njit(cache=True, nogil=True)(_anchor_ends)


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
    end_a = graph.start[plan.anchors] + dur[plan.anchors]
    if plan.edge_ptr[-1] > _COMPILE_ABOVE_EDGES:
        _anchor_kernel()(
            end_a,
            plan.loop_slot,
            plan.edge_ptr,
            plan.edge_anchor,
            plan.edge_src,
            offset,
            w[plan.loop],
        )
    else:  # the same function interpreted, on lists (Python indexes them faster than arrays);
        # the offsets come gathered per edge, so the edge's source is its own index: a range
        ends, src_offset = end_a.tolist(), offset[plan.edge_src].tolist()
        slots, ptr, anchor = plan.loop_lists
        edges = range(len(src_offset))
        _anchor_ends(ends, slots, ptr, anchor, edges, src_offset, w[plan.loop].tolist())
        end_a = np.asarray(ends, np.int64)
    # An anchor's own offset is 0: one expression for chain nodes and anchors alike.
    end = end_a[plan.anchor_slot] + offset
    return ReplayResult(end - dur, end, graph.window)
