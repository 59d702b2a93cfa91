"""Why a what-if saves much less than the time its finding holds the path: the replay tells.

A change that removes 200 ms of a host stall may shorten the step by 3 ms: once the stalled
work starts earlier, later work on the path waits for something the change does not move (the
device still copying on another stream, another thread's launch, a root that starts when it was
recorded). Replaying the change shows where: along the observed path, the first node after the
change whose replayed end moved little more than the saving is where the gain is absorbed, and
its latest predecessor in the replay is what it now waits for.
"""

from __future__ import annotations

import re

import numpy as np

from tracediag.graph.changes import WhatIf, graph_of
from tracediag.graph.replay import replay
from tracediag.model import schema as S
from tracediag.model.units import fmt_ns

#: A saving below this share of the finding's impact is "much smaller": the message says why.
MUCH_SMALLER = 0.5


def limit_clause(ctx, change: WhatIf | None, saving_ns: int, impact_ns: int) -> str:
    """A short clause saying what holds the path once ``change`` is replayed, when its saving
    is much smaller than ``impact_ns`` although the change itself removes much more than that
    (a change that removes little explains itself: the rule says so); "" otherwise.

    ``"; no more, as the replayed path then waits for Memcpy DtoH on stream 27 (rank 0), which
    this change moves only 2.8 ms earlier"``; ``"; no more, as the work after it waits for X
    anyway"`` when the changed work itself does not start earlier; ``"; no more, as the
    replayed step then ends with X instead"`` when the window ends on other work.
    """
    if change is None or impact_ns <= 0 or saving_ns >= MUCH_SMALLER * impact_ns:
        return ""
    g = graph_of(ctx.graph, change)  # a released call's gap: its time blocked
    removed, changed = _removed(g, change)
    if removed < 2 * max(saving_ns, 1) or not len(changed):
        return ""
    new = replay(g, change)
    moved = g.end - new.end
    lo = int(g.start[changed].min())
    seg = ctx.path.segments
    path = np.unique(seg["node"].to_numpy()[seg["node"].to_numpy() >= 0])
    path = path[np.argsort(g.start[path], kind="stable")]
    path = path[g.start[path] >= lo]
    if not len(path):
        return ""
    shift = moved[path]
    peak = int(np.argmax(shift))
    margin = saving_ns + 0.1 * max(int(shift[peak]) - saving_ns, 0)
    if moved[changed].max() <= saving_ns + 0.1 * (removed - saving_ns):
        # The changed work itself barely starts earlier: something else holds it.
        worst = changed[np.argmax(_removed_per_node(g, change, changed))]
        holder = _latest_predecessor(g, new, int(worst))
        if holder < 0:
            return ""
        return f"; no more, as the work after it waits for {_describe(ctx, holder)} anyway"
    after = np.flatnonzero(shift[peak:] <= margin)
    if not len(after):
        # The observed path keeps more of the gain than the window: the replayed window ends
        # on other work, which the change moves less (the path moves elsewhere).
        window = np.flatnonzero(g.window)
        last = int(window[np.argmax(new.end[window])])
        return f"; no more, as the replayed step then ends with {_describe(ctx, last)} instead"
    node = int(path[peak + after[0]])
    holder = _latest_predecessor(g, new, node)
    if holder < 0:
        return (
            f"; no more, as {_describe(ctx, node)} starts when it was recorded to (nothing in "
            "the trace lets it start earlier)"
        )
    gain = int(moved[holder])
    return (
        f"; no more, as the replayed path then waits for {_describe(ctx, holder)}, which this "
        + (f"change moves only {fmt_ns(gain)} earlier" if gain > 0 else "change does not move")
    )


def most_saved_ns(graph, change: WhatIf) -> int | None:
    """The most any replay of ``change`` can save: the ns it takes off its nodes (a node's start
    moves earlier by no more than the durations and gaps cut on its way), so a rule whose
    threshold even this misses need not replay it. None for a change that releases completions
    (it changes the graph, not only times)."""
    if change.release_nodes is not None and len(change.release_nodes):
        return None
    return _removed(graph, change)[0]


def _removed(g, change: WhatIf) -> tuple[int, np.ndarray]:
    """ns the change takes off its nodes (durations and gaps cut, never added), and the nodes."""
    nodes = []
    total = 0
    for which, values, base in (
        (change.dur_nodes, change.dur_values, g.dur),
        (change.gap_nodes, change.gap_values, g.gap),
    ):
        if which is not None and len(which):
            total += int(np.maximum(base[which] - values, 0).sum())
            nodes.append(which)
    return total, (np.unique(np.concatenate(nodes)) if nodes else np.zeros(0, np.int64))


def _removed_per_node(g, change: WhatIf, nodes: np.ndarray) -> np.ndarray:
    """Per node of ``nodes`` (ascending): the ns the change takes off it."""
    out = np.zeros(len(nodes), dtype=np.int64)
    for which, values, base in (
        (change.dur_nodes, change.dur_values, g.dur),
        (change.gap_nodes, change.gap_values, g.gap),
    ):
        if which is not None and len(which):
            np.add.at(out, np.searchsorted(nodes, which), np.maximum(base[which] - values, 0))
    return out


def _latest_predecessor(g, new, node: int) -> int:
    """The predecessor of ``node`` that ends last in the replay (what it waits for), -1."""
    preds = g.pred_src[g.pred_ptr[node] : g.pred_ptr[node + 1]]
    return int(preds[np.argmax(new.end[preds])]) if len(preds) else -1


def _describe(ctx, node: int) -> str:
    """``"Memcpy DtoH (Device -> Pageable) on gpu0/stream 27 (rank 0)"``; a collective's
    instance (no event of its own) is the collective joining its ranks."""
    g = ctx.graph
    event = int(g.event[node])
    if event < 0:
        return "a collective joining its ranks"
    name = _short(str(ctx.trace.events[S.NAME].iat[event]))
    track = ctx.track_name(int(g.track[node]))
    return f"{name}{f' on {track}' if track else ''} (rank {int(g.rank[node])})"


def _short(name: str, width: int = 60) -> str:
    """A kernel's name without its return type, template and argument lists when long."""
    if len(name) <= width:
        return name
    name = re.sub(r"^void\s+", "", name)
    cut = min((i for i in (name.find("("), name.find("<")) if i > 0), default=len(name))
    name = name[:cut]
    return name if len(name) <= width else name[: width - 1] + "…"
