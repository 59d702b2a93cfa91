"""The most a finding's change can save: what it takes out of the critical path.

A what-if (:class:`~tracediag.graph.changes.WhatIf`) sets durations and gaps of graph nodes and
replays ``start[v] = max(end[p] for p in preds(v)) + gap[v]`` (roots keep their start). Let P be
the *binding chain*: the node that ends the window, its binding predecessor (``Graph.bind``,
the predecessor that ends last, so ``start = end[bind] + gap`` exactly), that one's, and so on
back to a root. The window's old length is P's root start plus P's durations and gaps, less the
window's first start. After the change:

- the window's last end is at least P's root start plus P's *new* durations and gaps (the
  longest path into a node is at least any one path), so it moves up by at most the time the
  change takes off P's nodes;
- the window's first start moves later by at most the time the change adds anywhere (a start
  is a sum of durations and gaps along some path), and not at all when it adds nothing.

So a replayed saving never exceeds ``removed_on_path_ns + added_ns``
(:attr:`ChangeEffect.bound_ns`): a finding cannot save more than its own change removes from
the path, whatever its impact (and so never more than its impact plus that). A root's gap
counts for nothing (the replay keeps a root's start). ``tests/report_invariants.py`` asserts
the bound on every diagnosis the test suite makes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tracediag.analysis.context import Analysis, change_key
from tracediag.graph.changes import WhatIf, graph_of
from tracediag.graph.critical_path import chain_from
from tracediag.graph.dependencies import Graph
from tracediag.model.findings import Finding


@dataclass(frozen=True)
class ChangeEffect:
    """What a change does to the graph's durations and gaps, in ns."""

    removed_on_path_ns: int  # taken off the durations and gaps of the binding chain
    removed_ns: int  # taken off durations and gaps anywhere
    added_ns: int  # added to durations and gaps anywhere (a node made longer, a gap wider)
    # Gaps set below both 0 and what was observed: the node would start before the
    # predecessor that binds it ends, earlier than any recorded dependency allows.
    early_ns: int

    @property
    def bound_ns(self) -> int:
        """The most the replayed window can shorten with this change (module docstring)."""
        return self.removed_on_path_ns + self.added_ns


def binding_chain(graph: Graph) -> np.ndarray:
    """Per node: whether it is on the binding chain from the window's last end back to a root
    (the critical path's nodes, continued past the window's start to the root they wait for)."""
    on = np.zeros(len(graph), dtype=bool)
    if not len(graph) or not graph.window.any():
        return on
    end = graph.end
    t_end = end[graph.window].max()
    # The walk's node: ties on the last end go to the lowest node id (critical_path.walk).
    node = int(np.flatnonzero((end == t_end) & graph.window)[0])
    on[chain_from(graph.bind, node)] = True
    return on


def binding_chain_of(analysis: Analysis, graph: Graph | None = None) -> np.ndarray:
    """:func:`binding_chain` of ``graph`` (default: the analysis's), made once per graph and
    kept on ``analysis`` for all its findings."""
    graph = analysis.graph if graph is None else graph
    chains = analysis.__dict__.setdefault("_binding_chains", {})
    if id(graph) not in chains:  # graphs replayed live as long as the analysis's graph
        chains[id(graph)] = binding_chain(graph)
    return chains[id(graph)]


def change_effect(analysis: Analysis, change: WhatIf) -> ChangeEffect:
    """The :class:`ChangeEffect` of ``change`` on ``analysis``'s graph, with its values as the
    replay applies them (durations floored at 0; a node set twice keeps the last value)."""
    g = graph_of(analysis.graph, change)
    chain = binding_chain_of(analysis, g)
    root = g.pred_ptr[1:] == g.pred_ptr[:-1]
    removed = on_path = added = early = 0
    for nodes, values, base, is_gap in (
        (change.dur_nodes, change.dur_values, g.dur, False),
        (change.gap_nodes, change.gap_values, g.gap, True),
    ):
        if nodes is None or not len(nodes):
            continue
        nodes, values = _last_values(np.asarray(nodes, np.int64), np.asarray(values, np.int64))
        if is_gap:  # the replay keeps a root's start: its gap counts for nothing
            keep = ~root[nodes]
            nodes, values = nodes[keep], values[keep]
            old = base[nodes]
            early += int(np.maximum(np.minimum(old, 0) - values, 0).sum())
        else:
            values = np.maximum(values, 0)
            old = base[nodes]
        cut = np.maximum(old - values, 0)
        removed += int(cut.sum())
        on_path += int(cut[chain[nodes]].sum())
        added += int(np.maximum(values - old, 0).sum())
    return ChangeEffect(on_path, removed, added, early)


def finding_effect(analysis: Analysis, finding: Finding) -> ChangeEffect | None:
    """The effect of the change ``finding``'s saving was replayed with; None when its rule
    recorded none (``Analysis.finding(change=)``)."""
    change = analysis.changes.get(change_key(finding))
    return None if change is None else change_effect(analysis, change)


def _last_values(nodes: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each node once with the value it is set to last (numpy's assignment keeps the last)."""
    rev = nodes[::-1]
    _, first_in_rev = np.unique(rev, return_index=True)
    return rev[first_in_rev], values[::-1][first_in_rev]


def impact_covering_saving(
    analysis: Analysis, change: WhatIf, impact_ns: int, saving_ns: int
) -> int:
    """A finding's impact, made to cover its saving: ``impact_ns`` when the saving is within it,
    else the larger of it and what ``change`` takes off the path's binding chain (its cause's
    time on the path as the change defines the cause, which bounds the saving whenever the
    change adds nothing). A rule whose own measure of its cause on the path (exposed transfer,
    a stage's compute) misses part of what its change shortens there uses this."""
    if saving_ns <= impact_ns:
        return impact_ns
    return max(impact_ns, change_effect(analysis, change).removed_on_path_ns)
