"""Replay: recompute start and end times in dependency order; what-if savings.

``start[v] = max(end[p] for p in preds(v)) + gap[v]`` (roots keep their observed start), with the
graph's node-level gaps. Replaying the unchanged graph gives back every observed time exactly,
which is what makes the what-ifs trustworthy. A what-if changes node durations and gaps and
replays; its saving is the difference in the window's length.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from itertools import islice

import numpy as np

from tracediag.graph.changes import WhatIf, graph_of
from tracediag.graph.dependencies import Graph, index_type


class _Patch:
    """A change as the new duration and ``w`` (gap + duration) of each node it sets, ``nodes``
    (each once, ascending): the node-sized arrays with the change made are built only when
    something reads every node (``dur``, ``w``), which most windowed replays never do."""

    def __init__(self, graph: Graph, change: WhatIf | None) -> None:
        self.graph = graph
        empty = np.zeros(0, dtype=np.int64)
        dn = dv = gn = gv = None
        if change is not None:
            if change.dur_nodes is not None and len(change.dur_nodes):
                dn, dv = change.dur_nodes, change.dur_values
            if change.gap_nodes is not None and len(change.gap_nodes):
                gn, gv = change.gap_nodes, change.gap_values
        parts = [x for x in (dn, gn) if x is not None]
        nodes = np.sort(np.concatenate(parts)) if parts else empty  # each once (np.unique
        self.nodes = nodes[np.r_[True, nodes[1:] != nodes[:-1]]] if len(nodes) else nodes  # hashes)
        # Set as on the whole arrays (a node given twice keeps its last value): one index into
        # ``nodes`` per entry of the change.
        self.dur_at = graph.dur[self.nodes]
        if dn is not None:
            self.dur_at[np.searchsorted(self.nodes, dn)] = np.maximum(dv, 0)
        gap_at = graph.gap[self.nodes]
        if gn is not None:
            gap_at[np.searchsorted(self.nodes, gn)] = gv
        self.w_at = gap_at + self.dur_at
        self.dur_changed = bool((self.dur_at != graph.dur[self.nodes]).any())

    @functools.cached_property
    def dur(self) -> np.ndarray:
        """Every node's duration with the change made."""
        if not self.dur_changed:
            return self.graph.dur
        dur = self.graph.dur.copy()
        dur[self.nodes] = self.dur_at
        return dur

    @functools.cached_property
    def w(self) -> np.ndarray:
        """Every node's gap + duration with the change made."""
        w = self.graph.gap + self.graph.dur
        w[self.nodes] = self.w_at
        return w

    def w_of(self, idx: np.ndarray) -> np.ndarray:
        """Gap + duration with the change made at the nodes ``idx``."""
        if "w" in self.__dict__:
            return self.w[idx]
        out = self.graph.gap[idx] + self.graph.dur[idx]
        if len(self.nodes):
            pos = np.minimum(np.searchsorted(self.nodes, idx), len(self.nodes) - 1)
            hit = self.nodes[pos] == idx
            out[hit] = self.w_at[pos[hit]]
        return out


class ReplayResult:
    """A replay's node times: ``start`` and ``end`` (ns, per node), ``window`` the nodes that
    define the window (Graph.window). The per-node arrays are made when first read: most
    what-ifs ask only ``length_ns``, which reads the window's nodes alone."""

    def __init__(self, end_a, anchor_slot, offset, dur, window, patch: _Patch | None = None):
        self._end_a, self._slot, self._offset = end_a, anchor_slot, offset
        self._dur_given, self._patch = dur, patch
        self.window = window

    @property
    def _dur(self) -> np.ndarray:
        return self._dur_given if self._patch is None else self._patch.dur

    @functools.cached_property
    def end(self) -> np.ndarray:
        # An anchor's own offset is 0: one expression for chain nodes and anchors alike.
        return self._end_a[self._slot] + self._offset

    @functools.cached_property
    def start(self) -> np.ndarray:
        return self.end - self._dur

    @property
    def length_ns(self) -> int:
        """First start to last end of the replayed window."""
        if not len(self._slot):
            return 0
        w = self.window
        kernel = _span_kernel() if len(w) > _COMPILE_ABOVE_NODES and w.dtype == bool else None
        if kernel is not None:  # one pass, no window-sized temporaries (each costs page faults)
            span = self._kernel_span(kernel, w)
            if span is not None:
                return span
        end = self._end_a[self._slot[w]] + self._offset[w]  # the same sums as ``end``'s
        return int(end.max() - (end - self._dur[w]).min())

    def _kernel_span(self, kernel, w) -> int | None:
        """The span by the compiled pass. With durations changed and not yet made into a
        node-sized array, the pass reads the unchanged durations of the nodes the change
        leaves alone, and the changed nodes' starts and ends are taken in apart."""
        patch = self._patch
        if patch is None or not patch.dur_changed or "dur" in patch.__dict__:
            found, last_end, first_start = kernel(
                self._end_a, self._slot, self._offset, self._dur, w
            )
            return int(last_end - first_start) if found else None
        mask = w.copy()
        mask[patch.nodes] = False
        found, last_end, first_start = kernel(
            self._end_a, self._slot, self._offset, patch.graph.dur, mask
        )
        mine = w[patch.nodes]
        nodes = patch.nodes[mine]
        if len(nodes):
            end = self._end_a[self._slot[nodes]] + self._offset[nodes]
            start = end - patch.dur_at[mine]
            last_end = max(last_end, end.max()) if found else end.max()
            first_start = min(first_start, start.min()) if found else start.min()
            found = True
        return int(last_end - first_start) if found else None


def _window_span(end_a, slot, offset, dur, w):
    """(any node in the window, last end, first start) of the nodes where the mask ``w`` is
    set, by the sums of ``ReplayResult.end``."""
    found = False
    last = first = end_a[0]
    for n in range(len(w)):
        if not w[n]:
            continue
        e = end_a[slot[n]] + offset[n]
        s = e - dur[n]
        if not found:
            found, last, first = True, e, s
            continue
        if e > last:
            last = e
        if s < first:
            first = s
    return found, last, first


#: Above this many window nodes a replay's length is measured compiled (numba is loaded by
#: then: the anchor loop of a graph this big runs compiled).
_COMPILE_ABOVE_NODES = 1_000_000


@functools.cache
def _span_kernel():
    """The compiled :func:`_window_span`, or None (see :func:`_anchor_kernel`)."""
    from tracediag.io.compiled import compiled

    one, index = np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int32)  # as _plan's
    return compiled(_window_span, one, index, one, one, np.ones(1, dtype=bool))


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
    # For replaying a window of the loop: per slot, the first and last loop anchor reading its
    # chain (none: len(loop) and -1) and its own loop index (-1: a root). ``windowed`` is False when an edge
    # reads an anchor not yet replayed (edges left in a cycle): then every replay is a full one.
    first_read: np.ndarray
    last_read: np.ndarray
    slot_loop: np.ndarray
    windowed: bool
    # The unchanged graph's replay, made on the first replay: anchor ends, chain offsets.
    base_end_a: np.ndarray | None = None
    base_offset: np.ndarray | None = None
    base_w_loop: np.ndarray | None = None  # the loop anchors' unchanged gap + duration
    slot_nodes: np.ndarray | None = None  # nodes by the slot of their chain, made when needed:
    slot_ptr: np.ndarray | None = None  # slot s's are slot_nodes[slot_ptr[s]:slot_ptr[s + 1]]

    @functools.cached_property
    def loop_lists(self) -> tuple[list[int], list[int], list[int], list[bool], list[int]]:
        """``loop_slot``, ``edge_ptr``, ``edge_anchor``, whether each edge is its anchor's
        last, and ``last_read``, as lists, for the interpreted loop."""
        closes = np.zeros(int(self.edge_ptr[-1]), dtype=bool)
        closes[self.edge_ptr[1:] - 1] = True  # (every loop anchor has two edges or more)
        return (
            self.loop_slot.tolist(),
            self.edge_ptr.tolist(),
            self.edge_anchor.tolist(),
            closes.tolist(),
            self.last_read.tolist(),
        )

    @functools.cached_property
    def base_lists(self) -> tuple[list[int], list[int]]:
        """The unchanged replay's anchor ends and per-edge source offsets, as lists."""
        return self.base_end_a.tolist(), self.base_offset[self.edge_src].tolist()


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
    edge_anchor = slot[anchor[edge_src]]
    # Which loop anchor each edge feeds, and which slots each loop anchor reads.
    edge_loop = np.repeat(np.arange(len(loop)), hi - lo)
    first_read = np.full(len(anchors), len(loop), dtype=np.int64)
    np.minimum.at(first_read, edge_anchor, edge_loop)
    last_read = np.full(len(anchors), -1, dtype=np.int64)
    np.maximum.at(last_read, edge_anchor, edge_loop)
    slot_loop = np.full(len(anchors), -1, dtype=np.int64)
    slot_loop[slot[loop]] = np.arange(len(loop))
    # Every edge reads an anchor replayed before it, and no chain closes on itself.
    windowed = bool((slot_loop[edge_anchor] < edge_loop).all() and not single[anchors].any())
    ix = index_type(max(n, len(edge_src)))  # int32 on 4 x 1M: plan 593 -> 367 MiB
    plan = _Plan(
        single,
        parent.astype(ix),
        slot[anchor].astype(ix),
        rounds + 1,
        anchors.astype(ix),
        loop.astype(ix),
        slot[loop].astype(ix),
        edge_ptr.astype(ix),
        edge_src.astype(ix),
        edge_anchor.astype(ix),
        first_read.astype(ix),
        last_read.astype(ix),
        slot_loop.astype(ix),
        windowed,
    )
    graph.replay_plan = plan  # a graph is never changed once built
    return plan


def _chain_offsets(plan: _Plan, w: np.ndarray) -> np.ndarray:
    """Per node: the sum of ``w`` from it up its chain to (not including) its anchor."""
    acc = np.where(plan.single, w, 0)
    # An anchor adds 0 and jumps to itself, so no mask is needed once a chain reaches it.
    # Gathers into buffers made once: a fresh node-sized array a round costs its page faults
    # (~20 rounds, each two arrays, on a graph of millions of nodes).
    gathered = np.empty_like(acc)
    jump, spare = plan.parent, np.empty_like(plan.parent)
    for _ in range(plan.rounds):
        np.take(acc, jump, out=gathered, mode="clip")  # node ids: "clip" never clips
        acc += gathered
        np.take(jump, jump, out=spare, mode="clip")
        # The array just read becomes the next output, unless it is the plan's own.
        jump, spare = spare, (np.empty_like(spare) if jump is plan.parent else jump)
    return acc


def _anchor_ends(
    end_a, loop_slot, edge_ptr, edge_anchor, edge_src, offset, w_loop, last_read, k, horizon
):
    """In place: the loop anchors' ends from loop index ``k`` on, in topological order, from
    their predecessors' ends, while an anchor still to come reads an end that moved (up to
    ``horizon`` at least). Given every anchor's unchanged end, it stops where a change stops
    moving anything; from ``k`` 0 with the last index as ``horizon`` it is the full pass."""
    while k <= horizon:
        lo, hi = edge_ptr[k], edge_ptr[k + 1]
        m = end_a[edge_anchor[lo]] + offset[edge_src[lo]]
        for i in range(lo + 1, hi):
            e = end_a[edge_anchor[i]] + offset[edge_src[i]]
            if e > m:
                m = e
        s = loop_slot[k]
        e = m + w_loop[k]
        if e != end_a[s]:
            end_a[s] = e
            if last_read[s] > horizon:  # a reader later on must see the moved end
                horizon = last_read[s]
        k += 1


# Below every int64 end: the start of each anchor's max over its edges.
_BELOW_ENDS = -(1 << 64)


def _listed_anchor_ends(
    end_a, loop_slot, edge_ptr, edge_anchor, closes, src_offset, w_loop, last_read, k, horizon
):
    """``_anchor_ends`` interpreted, on lists: the same ends, in the same order. The edges are
    walked in one ``zip`` from loop index ``k``'s first (``closes``: the edge is its anchor's
    last) with their sources' offsets given per edge, so that an edge costs one index into
    the ends instead of four indexes and a ``range`` per anchor (~2x faster)."""
    if k > horizon:
        return
    m = _BELOW_ENDS
    edges = zip(edge_anchor, src_offset, closes, strict=True)
    for a, o, close in islice(edges, edge_ptr[k], None):
        e = end_a[a] + o
        if e > m:
            m = e
        if close:
            s = loop_slot[k]
            e = m + w_loop[k]
            if e != end_a[s]:
                end_a[s] = e
                if last_read[s] > horizon:  # a reader later on must see the moved end
                    horizon = last_read[s]
            k += 1
            if k > horizon:
                return
            m = _BELOW_ENDS


# Above this many predecessor edges into anchors the loop runs compiled: interpreted it costs
# ~0.15 us an edge (0.03 s a replay at 200k, ~1.5 s at 10M), while numba's first call in a
# process costs 0.5-1 s (its import, then loading its registries even from the disk cache),
# which a diagnosis's 10-20 replays of a small graph would never win back.
_COMPILE_ABOVE_EDGES = 200_000


@functools.cache
def _anchor_kernel():
    """The compiled loop, or None where numba is missing or cannot compile (the interpreted
    loop gives the same ends). cache=True keeps the machine code on disk, so only the first run
    ever compiles; where no cache directory is writable it compiles in memory each process."""
    # Compiled on first use, not at import, so commands that never replay a big graph do not
    # import numba; compiled now on a one-anchor loop (see tracediag.io.compiled).
    from tracediag.io.compiled import compiled

    one, index = np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int32)  # as _plan's
    return compiled(
        _anchor_ends,
        one.copy(),
        index,
        np.array([0, 1], dtype=np.int32),
        index,
        index,
        one,
        one,
        index - 1,
        0,
        0,
    )


def _loop(plan: _Plan, end_a, offset, w_loop, k, horizon, base_src_offset=None):
    """Run the anchor loop from ``k`` (see ``_anchor_ends``), compiled on a big graph."""
    kernel = _anchor_kernel() if plan.edge_ptr[-1] > _COMPILE_ABOVE_EDGES else None
    if kernel is not None:
        args = (plan.loop_slot, plan.edge_ptr, plan.edge_anchor, plan.edge_src, offset)
        try:
            kernel(end_a, *args, w_loop, plan.last_read, k, horizon)
            return end_a
        except Exception:  # numba failed to compile these types: before the loop, end_a intact
            pass
    # The same loop interpreted, on lists (Python indexes them faster than arrays), with the
    # offsets gathered per edge.
    src_offset = base_src_offset if base_src_offset is not None else offset[plan.edge_src].tolist()
    slots, ptr, anchor, closes, last = plan.loop_lists
    ends = end_a if isinstance(end_a, list) else end_a.tolist()
    _listed_anchor_ends(
        ends, slots, ptr, anchor, closes, src_offset, w_loop.tolist(), last, k, horizon
    )
    return np.asarray(ends, np.int64)


def _full(graph: Graph, plan: _Plan, dur: np.ndarray, w: np.ndarray):
    """Every anchor's end and every node's chain offset, by one pass over the whole loop."""
    offset = _chain_offsets(plan, w)
    # Anchors in topological order: a root keeps its start; another anchor starts after its
    # latest predecessor, whose end is its own anchor's end plus its chain offset.
    end_a = graph.start[plan.anchors] + dur[plan.anchors]
    end_a = _loop(plan, end_a, offset, w[plan.loop], 0, len(plan.loop) - 1)
    return end_a, offset


def replay(graph: Graph, change: WhatIf | None = None) -> ReplayResult:
    """Replay the graph, optionally with a change, and return the new node times.

    A change is replayed over the window of the topological order it can move: the anchor loop
    starts at the first anchor that reads a changed node and stops once no anchor still to
    come reads an end that moved, the other anchors keeping the unchanged replay's ends (made
    once per graph). The times are the full pass's, bit for bit: an anchor none of whose inputs
    moved keeps its end. Chain offsets are recomputed only when a chain member changed.
    """
    graph = graph_of(graph, change)
    patch = _Patch(graph, change)
    plan = _plan(graph)
    if not plan.windowed:
        end_a, offset = _full(graph, plan, patch.dur, patch.w)
        return _result(graph, plan, end_a, offset, patch)
    if plan.base_end_a is None:
        plan.base_end_a, plan.base_offset = _full(graph, plan, graph.dur, graph.gap + graph.dur)
    end_a, offset = _windowed(graph, plan, patch)
    return _result(graph, plan, end_a, offset, patch)


def _loop_w(graph: Graph, plan: _Plan, patch: _Patch) -> np.ndarray:
    """The loop anchors' gap + duration with the change made: the unchanged ones (kept in the
    plan) with the changed anchors' set."""
    if plan.base_w_loop is None:
        plan.base_w_loop = graph.gap[plan.loop] + graph.dur[plan.loop]
    w_loop = plan.base_w_loop.copy()
    nodes = patch.nodes
    at = plan.slot_loop[plan.anchor_slot[nodes]]
    own = (at >= 0) & (plan.anchors[plan.anchor_slot[nodes]] == nodes)
    w_loop[at[own]] = patch.w_at[own]
    return w_loop


def _windowed(graph: Graph, plan: _Plan, patch: _Patch):
    """Anchor ends and chain offsets with the durations and ``w`` of ``patch.nodes`` changed
    at most, from the unchanged replay's."""
    nodes, dur_at = patch.nodes, patch.dur_at
    moved_w = nodes[patch.w_at != graph.gap[nodes] + graph.dur[nodes]]
    slot = plan.anchor_slot
    # A chain member's new w moves the offsets below it on its chain; a root's duration moves
    # its end (its gap counts for nothing); a loop anchor's w moves its own end.
    chain = moved_w[plan.single[moved_w]]
    looped = plan.slot_loop[slot[moved_w]]
    looped = looped[(looped >= 0) & ~plan.single[moved_w]]
    is_root = (dur_at != graph.dur[nodes]) & (plan.anchors[slot[nodes]] == nodes)
    is_root &= plan.slot_loop[slot[nodes]] < 0
    roots, root_end = nodes[is_root], graph.start[nodes[is_root]] + dur_at[is_root]
    if len(chain):
        offset, base_src = _changed_offsets(plan, patch, slot[chain]), None
    else:  # unchanged offsets: the interpreted loop reuses their per-edge list too
        offset = plan.base_offset
        base_src = plan.base_lists[1] if plan.edge_ptr[-1] <= _COMPILE_ABOVE_EDGES else None
    read = slot[np.r_[chain, roots]]
    k = min(
        int(plan.first_read[read].min(initial=len(plan.loop))),
        int(looped.min(initial=len(plan.loop))),
    )
    if k >= len(plan.loop):  # nothing reads what changed
        end_a = plan.base_end_a.copy()
        end_a[slot[roots]] = root_end
        return end_a, offset
    horizon = max(int(plan.last_read[read].max(initial=-1)), int(looped.max(initial=-1)))
    if base_src is not None:  # interpreted: start from the unchanged ends' list
        end_a = list(plan.base_lists[0])
        for s, e in zip(slot[roots].tolist(), root_end.tolist(), strict=True):
            end_a[s] = e
    else:
        end_a = plan.base_end_a.copy()
        end_a[slot[roots]] = root_end
    return _loop(plan, end_a, offset, _loop_w(graph, plan, patch), k, horizon, base_src), offset


def _changed_offsets(plan: _Plan, patch: _Patch, slots: np.ndarray) -> np.ndarray:
    """Chain offsets with ``w`` changed on the chains of ``slots`` only: pointer jumping over
    those chains' nodes (a chain holds its members' parents), the others' offsets unchanged."""
    if plan.slot_ptr is None:  # nodes grouped by the slot of their chain
        ix = plan.anchor_slot.dtype
        plan.slot_nodes = np.argsort(plan.anchor_slot, kind="stable").astype(ix)
        plan.slot_ptr = np.searchsorted(
            plan.anchor_slot[plan.slot_nodes], np.arange(len(plan.anchors) + 1)
        ).astype(ix)
    slots = np.sort(slots)  # each once (np.unique hashes: slower)
    slots = slots[np.r_[True, slots[1:] != slots[:-1]]]
    lo, hi = plan.slot_ptr[slots], plan.slot_ptr[slots + 1]
    size = hi - lo
    if size.sum() * 8 > len(plan.single):  # dense: one pass over every node costs less
        return _chain_offsets(plan, patch.w)
    nodes = np.sort(
        plan.slot_nodes[np.repeat(lo - np.cumsum(size) + size, size) + np.arange(size.sum())]
    )
    acc = np.where(plan.single[nodes], patch.w_of(nodes), 0)
    jump = np.searchsorted(nodes, plan.parent[nodes])
    for _ in range(plan.rounds):  # as _chain_offsets, on these nodes alone
        acc = acc + acc[jump]
        jump = jump[jump]
    offset = plan.base_offset.copy()
    offset[nodes] = acc
    return offset


def _result(graph: Graph, plan: _Plan, end_a: np.ndarray, offset: np.ndarray, patch: _Patch):
    return ReplayResult(end_a, plan.anchor_slot, offset, graph.dur, graph.window, patch)
