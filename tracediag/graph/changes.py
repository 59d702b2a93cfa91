"""What-if changes: new durations and gaps for some graph nodes, and completions released from
the device work they wait for (:func:`released_graph`); :mod:`tracediag.graph.replay` replays
them. Kept apart from the replay's machinery, which only reads them."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from tracediag.graph.dependencies import COMPLETION, DEVICE_WAIT, SYNC, Graph


@dataclass
class WhatIf:
    """A change to replay: new durations and gaps for some nodes (node id arrays), and
    completion nodes *released* from the device work they wait for (:func:`released_graph`):
    a host call that would no longer block. A released node's gaps are those of the released
    graph (the call's blocked time), so a change sets them as the call's new blocking time."""

    dur_nodes: np.ndarray | None = None
    dur_values: np.ndarray | None = None
    gap_nodes: np.ndarray | None = None
    gap_values: np.ndarray | None = None
    release_nodes: np.ndarray | None = None

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

    @staticmethod
    def released(nodes, blocked_ns) -> WhatIf:
        """Completion ``nodes`` no longer wait for the device work that binds them: each call
        returns ``blocked_ns`` after it began (its gap in the released graph)."""
        nodes = np.asarray(nodes, np.int64)
        return WhatIf(
            gap_nodes=nodes, gap_values=np.asarray(blocked_ns, np.int64), release_nodes=nodes
        )

    def __add__(self, other: WhatIf) -> WhatIf:
        return WhatIf(
            _cat(self.dur_nodes, other.dur_nodes),
            _cat(self.dur_values, other.dur_values),
            _cat(self.gap_nodes, other.gap_nodes),
            _cat(self.gap_values, other.gap_values),
            _cat(self.release_nodes, other.release_nodes),
        )


def _cat(a, b):
    if a is None:
        return b
    return a if b is None else np.concatenate([a, b])


def joint(changes) -> WhatIf:
    """One change doing all of ``changes`` at once. A node that several set keeps the smallest
    value (the most any of them restores it), so the joint replay bounds fixing them all."""
    total = WhatIf()
    for c in changes:
        total = total + c
    return WhatIf(
        *_smallest(total.dur_nodes, total.dur_values),
        *_smallest(total.gap_nodes, total.gap_values),
        release_nodes=total.release_nodes,
    )


def graph_of(graph: Graph, change: WhatIf | None) -> Graph:
    """The graph ``change`` is replayed on: ``graph``, or the one with its completions
    released (:func:`released_graph`). The nodes are the same; durations and gaps of nodes
    not released too."""
    if change is None or change.release_nodes is None or not len(change.release_nodes):
        return graph
    return released_graph(graph, change.release_nodes)


def released_graph(graph: Graph, nodes) -> Graph:
    """``graph`` without the ``sync`` and ``device_wait`` edges into the completion ``nodes``
    (what a host call that blocked until device work ended waited for): each keeps its call's
    begin as binding predecessor, and the blocked time as its gap, so the unchanged replay
    still gives every observed time. Made once per set of nodes and kept on ``graph``."""
    nodes = np.unique(np.asarray(nodes, np.int64))
    nodes = nodes[graph.role[nodes] == COMPLETION]
    key = nodes.tobytes()
    if key in graph.released:
        return graph.released[key]
    dst = np.repeat(np.arange(len(graph)), np.diff(graph.pred_ptr))
    freed = np.zeros(len(graph), dtype=bool)
    freed[nodes] = True
    keep = ~(freed[dst] & np.isin(graph.pred_code, (SYNC, DEVICE_WAIT)))
    ptr = np.zeros(len(graph) + 1, dtype=np.int64)
    np.cumsum(np.bincount(dst[keep], minlength=len(graph)), out=ptr[1:])
    src, code = graph.pred_src[keep], graph.pred_code[keep]
    # Edges stay sorted by latest end first: each released node's first edge left binds it.
    bind, bind_code, gap = graph.bind.copy(), graph.bind_code.copy(), graph.gap.copy()
    has = ptr[nodes + 1] > ptr[nodes]
    head = ptr[nodes][has]
    bind[nodes[has]], bind_code[nodes[has]] = src[head], code[head]
    gap[nodes[has]] = graph.start[nodes[has]] - graph.end[src[head]]
    edges = {"pred_ptr": ptr, "pred_src": src, "pred_code": code}
    binding = {"bind": bind, "bind_code": bind_code, "gap": gap}
    out = replace(graph, **edges, **binding, replay_plan=None, released={})
    graph.released[key] = out
    return out


def _smallest(nodes, values):
    if nodes is None or not len(nodes):
        return nodes, values
    # Sorted by node, then value: the first row of each node holds its smallest value.
    order = np.lexsort((values, nodes))
    nodes, values = nodes[order], values[order]
    first = np.r_[True, nodes[1:] != nodes[:-1]]
    return nodes[first], values[first]
