"""The critical path: walk back from the last end along binding edges, attributing every ns.

Categories (they sum to the path length, first start of the job to its last end):

- ``compute``: an event of kind compute runs (with the engine or stream it runs on);
- ``dma_transfer``: a DMA moves data (and the overhead between the triggered packets of one
  ring; a ring idle before a packet nothing recorded made ready is a ``gap``);
- ``dma_wait``: a DMA queued after the instruction that triggered it;
- ``collective_transfer``: a collective moves data once every participant has arrived;
- ``collective_skew``: the collective waits for a late rank, from the median arrival of the
  *other* participants to the last arrival;
- ``host``: host-side work: runtime calls, launch latency, CPU time between launches, syncs, a
  thread pool's task queued from its enqueue (a recorded flow into a host thread) to its start;
- ``gap``: latency nothing in the trace explains, a host thread's idle stretches included (a
  wait on its previous call of at least ``path_idle.IDLE_THREAD_NS`` with nothing of the
  thread recorded: a ``time.sleep``; see :mod:`tracediag.graph.path_idle`).

The time from the window's start to the walk's earliest cut is the wait of the path's earliest
node, on its rank: ``host`` when a host thread of that rank ran something then (a DataLoader),
else a ``gap`` (see :func:`_leading`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa

from tracediag.graph import dependencies as G
from tracediag.graph.path_idle import split_idle
from tracediag.model import schema as S
from tracediag.model.path_categories import CATEGORIES

_CAT = {c: i for i, c in enumerate(CATEGORIES)}

_OWN_CATEGORY = {
    "compute": "compute",
    "dma": "dma_transfer",
    "collective": "collective_transfer",
    "host": "host",
    "sync": "host",
}


@dataclass
class CriticalPath:
    """The path as a table of segments, latest first, and its totals."""

    segments: pd.DataFrame  # node, event, rank, track, category, engine, start_ns, end_ns, dur_ns
    start_ns: int
    end_ns: int

    @property
    def length_ns(self) -> int:
        """First start to last end of the analysed window."""
        return self.end_ns - self.start_ns

    def by_category(self) -> dict[str, int]:
        """ns per category (all categories present, zeros included)."""
        sums = self.segments.groupby("category", observed=False)["dur_ns"].sum()
        return {c: int(sums.get(c, 0)) for c in CATEGORIES}

    def gap_by_rank(self) -> dict[int, int]:
        """ns of the path that nothing explains (category ``gap``) on each rank's nodes (zeros
        included for every rank on the path), the leading wait of the path's earliest node with
        them; time on no node (a path of no ranked node) is left out."""
        seg = self.segments
        rank = seg["rank"].to_numpy()
        on = rank >= 0
        gap = np.where((seg["category"] == "gap").to_numpy()[on], seg["dur_ns"].to_numpy()[on], 0)
        sums = pd.Series(gap).groupby(rank[on]).sum()
        return {int(r): int(v) for r, v in sums.items()}

    def compute_by_engine(self) -> dict[str, int]:
        """ns of ``compute`` per engine or stream."""
        seg = self.segments
        on = (seg["category"] == "compute").to_numpy()  # two columns sliced, not the frame
        sums = seg["dur_ns"][on].groupby(seg["engine"][on]).sum()
        return {str(k): int(v) for k, v in sums.items()}


def node_categories(graph: G.Graph, trace: S.Trace) -> tuple[np.ndarray, np.ndarray]:
    """Per node: the category of its own duration and of its gap (indices into CATEGORIES)."""
    n = len(graph)
    ev = graph.event
    # Category per distinct kind, then indexed per node (no string test per node).
    # A missing kind's code -1 reads the trailing "gap" appended below.
    kinds, kind_code = S.text_codes(trace.events[S.KIND])
    own_of_kind = np.array(
        [_CAT[_OWN_CATEGORY[k]] if k in _OWN_CATEGORY else _CAT["gap"] for k in kinds]
        + [_CAT["gap"]],
        dtype=np.int8,
    )
    own = np.where(ev >= 0, own_of_kind[kind_code[np.maximum(ev, 0)]], _CAT["gap"]).astype(np.int8)
    track_kind = trace.tracks[S.TRACK_KIND].astype(str).to_numpy()
    on_track = graph.track >= 0
    cpu_track = np.append(track_kind == "cpu_thread", False)
    dma_track = np.append(track_kind == "dma_queue", False)
    tk_index = np.where(on_track, graph.track, len(track_kind))
    gapc = np.full(n, _CAT["gap"], dtype=np.int8)
    code = graph.bind_code
    gapc[code == G.DMA_TRIGGER] = _CAT["dma_wait"]
    # A thread woken by another thread's work or by the device work it waited for: CPU time
    # from that work's end to its next call.
    woken = (code == G.THREAD_HANDOFF) | (code == G.DEVICE_WAIT)
    dispatched = (code == G.LAUNCH) | (code == G.DISPATCH_WAIT)  # launch latency: host's
    gapc[dispatched | (code == G.SYNC_DONE) | woken] = _CAT["host"]
    gapc[code == G.COLL_START] = _CAT["collective_transfer"]
    po = code == G.PROGRAM_ORDER
    gapc[po & cpu_track[tk_index]] = _CAT["host"]
    # A host thread bound by a recorded flow from another thread (a thread pool's worker that
    # idled until the task enqueued for it started: XPlane's producer/consumer contexts) waited
    # in the host's own queue: host time from the hand-off to its start, as for an inferred one.
    gapc[(code == G.FLOW) & cpu_track[tk_index]] = _CAT["host"]
    # A DMA ring's gap after its previous packet is the transfer's per-packet overhead only when
    # the packet was ready (something recorded triggered it, and ended earlier): otherwise the
    # ring idled, which no transfer explains.
    triggered = np.zeros(n, dtype=bool)
    if len(graph.pred_src):
        dst = np.repeat(np.arange(n), np.diff(graph.pred_ptr))
        triggered[dst[graph.pred_code != G.PROGRAM_ORDER]] = True
    gapc[po & dma_track[tk_index] & triggered] = _CAT["dma_transfer"]
    gapc[code == G.QUEUE_WAIT] = _CAT["dma_transfer"]  # its queue's hand-over to the next
    return own, gapc


def walk(
    graph: G.Graph, trace: S.Trace, categories: tuple[np.ndarray, np.ndarray] | None = None
) -> CriticalPath:
    """Walk the critical path of the window and attribute it (see module docstring).

    ``categories`` is :func:`node_categories`'s result when the caller already has it.
    """
    n = len(graph)
    if n == 0:  # e.g. a trace of markers only: an empty path with typed columns
        return CriticalPath(_segments_frame(graph, trace, [], [], [], []), 0, 0)
    end = graph.end
    start = graph.start
    t0, t_end = window_of(graph)
    # Ties on the last end: the lowest node id (events are ordered by rank), so rank 0 wins.
    node = int(np.flatnonzero((end == t_end) & graph.window)[0])
    own, gapc = categories if categories is not None else node_categories(graph, trace)
    path = _bind_chain(graph.bind, start, node, t0)
    parent = graph.bind[path]
    has_parent = parent >= 0
    pe = np.where(has_parent, end[np.maximum(parent, 0)], t_end)
    # Each path node contributes two cuts in turn: its own start, then the end of what it
    # waited for (an instance: the median arrival of the others, when before the last arrival).
    own_cut = np.maximum(start[path], t0)
    gap_cut = np.maximum(pe, t0)
    gap_cat = gapc[path].astype(np.int64)
    gap_node = path.copy()
    instance = np.flatnonzero(has_parent & (graph.role[path] == G.INSTANCE))
    if len(instance):
        gap_cut[instance] = t_end  # no cut unless a skew is found below
        gap_cat[instance] = _CAT["collective_skew"]
        gap_node[instance] = parent[instance]
        arrivals = _Arrivals(graph)
        for i in instance.tolist():
            p = int(parent[i])
            others = arrivals.of(int(graph.coll_key[path[i]]))
            others = others[others != p]
            if len(others):
                med = int(np.median(start[others]))
                if med < int(end[p]):
                    gap_cut[i] = max(med, t0)
    cuts = np.column_stack((own_cut, gap_cut)).ravel()
    cursor = np.minimum.accumulate(np.r_[t_end, cuts])  # the cursor before and after each cut
    seg_node = np.column_stack((path, gap_node)).ravel()
    seg_cat = np.column_stack((own[path].astype(np.int64), gap_cat)).ravel()
    seg_a, seg_b = cursor[1:], cursor[:-1]
    keep = seg_b > seg_a
    seg_node, seg_cat, seg_a, seg_b = seg_node[keep], seg_cat[keep], seg_a[keep], seg_b[keep]
    # A host thread's program-order wait is host time where the thread recorded work, a gap
    # where it recorded nothing (graph.path_idle).
    waits = np.tile(np.array([False, True]), len(path))[keep] & (seg_cat == _CAT["host"])
    waits &= graph.bind_code[seg_node] == G.PROGRAM_ORDER
    waits &= _on_cpu_thread(graph, trace)[seg_node]
    seg_node, seg_cat, seg_a, seg_b = split_idle(
        seg_node, seg_cat, seg_a, seg_b, waits, graph, trace, _CAT["host"], _CAT["gap"]
    )
    # The time before the walk's earliest cut: the work its earliest node's rank did then.
    lead_node, lead_event, lead_cat = _leading(graph, trace, path, t0, int(cursor[-1]))
    n_seg = len(seg_node)
    seg_node = np.r_[seg_node, lead_node]
    seg_cat = np.r_[seg_cat, lead_cat]
    seg_a = np.r_[seg_a, t0]
    seg_b = np.r_[seg_b, cursor[-1]]
    seg_event = np.r_[np.full(n_seg, -2), lead_event]  # -2: the node's own event
    keep = seg_b > seg_a
    return CriticalPath(
        _segments_frame(
            graph, trace, seg_node[keep], seg_cat[keep], seg_a[keep], seg_b[keep], seg_event[keep]
        ),
        t0,
        t_end,
    )


def _on_cpu_thread(graph: G.Graph, trace: S.Trace) -> np.ndarray:
    """Per node: it sits on a host thread's track."""
    kinds = trace.tracks[S.TRACK_KIND].astype(str).to_numpy() == "cpu_thread"
    return np.append(kinds, False)[np.where(graph.track >= 0, graph.track, len(kinds))]


def _leading(graph: G.Graph, trace: S.Trace, path: np.ndarray, t0: int, lead_end: int):
    """(node, event, category) of the path's leading segment ``[t0, lead_end)``: the time
    before the walk's earliest cut, where its earliest node had no binding predecessor inside
    the window (a root, or one that began before it, or the rest hidden by a collective's skew).

    That time belongs to the rank of the path's earliest node: it is the wait of that node (the
    segment's node). When a host thread of that rank ran something then that ended before the
    node began (a DataLoader's ``__next__``, the forward pass before the backward thread's first
    launch), it is ``host`` time of the event overlapping it most; ranges still open when the node
    begins (``ProfilerStep#N``, the whole script) hold it, they do not fill it. Nothing recorded
    (a ``time.sleep``, the rank's profiler not started yet): a ``gap`` of that node.
    """
    ranked = path[graph.rank[path] >= 0]
    if lead_end <= t0 or not len(ranked):
        return -1, -1, _CAT["gap"]
    node = int(ranked[-1])  # an instance has no rank: the latest node of one before it
    ev = trace.events
    ts = ev[S.TS].to_numpy()
    stop = ts + ev[S.DUR].to_numpy()
    track = ev[S.TRACK].to_numpy()
    on_cpu = np.append(trace.tracks[S.TRACK_KIND].astype(str).to_numpy() == "cpu_thread", False)
    overlap = np.minimum(stop, lead_end) - np.maximum(ts, t0)
    filling = (
        (ev[S.RANK].to_numpy() == graph.rank[node])
        & on_cpu[np.where(track >= 0, track, len(on_cpu) - 1)]
        & (stop <= graph.start[node])
        & (overlap > 0)
    )
    if not filling.any():
        return node, -2, _CAT["gap"]
    best = np.flatnonzero(filling)[np.argmax(overlap[filling])]
    return node, int(best), _CAT["host"]


def _bind_chain(bind: np.ndarray, start: np.ndarray, node: int, t0: int) -> np.ndarray:
    """The nodes from ``node`` back along binding edges, to one without a binding edge or
    one starting at or before ``t0`` (past it the path has nothing left to attribute).

    Only the node ids are collected here; the attribution is computed on the whole chain at
    once."""
    # A node at or before t0 ends the chain like a root: its parent reads -1.
    return chain_from(np.where(start <= t0, -1, bind), node)


def chain_from(parent: np.ndarray, node: int) -> np.ndarray:
    """The nodes from ``node`` along ``parent`` up to the first whose parent is negative; at
    most one step per node (the bound stops a malformed cycle, whose nodes then repeat).

    Numpy's per-item access is cheap for a chain much shorter than the graph (a device
    trace's path: a few nodes in a hundred); a long one continues in a compiled loop on a big
    graph, else in a tight loop over a list of every node's parent: the walk starts item by
    item and switches once it is long."""
    chain: list[int] = []
    append = chain.append
    by_item = min(len(parent), len(parent) // 16 + 1)
    item = parent.item
    for _ in range(by_item):
        append(node)
        node = item(node)
        if node < 0:
            return np.asarray(chain, dtype=np.int64)
    head = np.asarray(chain, dtype=np.int64)
    kernel = _chain_kernel() if len(parent) > _COMPILE_ABOVE_NODES else None
    if kernel is not None:
        rest = np.empty(len(parent) - by_item, dtype=np.int64)
        n = kernel(parent.astype(np.int64, copy=False), node, rest)
        return np.concatenate([head, rest[:n]])
    parents = parent.tolist()
    chain = []
    append = chain.append
    for _ in range(len(parents) - by_item):
        append(node)
        node = parents[node]
        if node < 0:
            break
    return np.concatenate([head, np.asarray(chain, dtype=np.int64)])


def _chain_walk(parent, node, out):
    """``out`` filled with the nodes from ``node`` along ``parent`` while the parent is not
    negative (at most ``len(out)``); returns how many."""
    n = 0
    while n < len(out):
        out[n] = node
        n += 1
        node = parent[node]
        if node < 0:
            break
    return n


# Above this many nodes a long chain is walked compiled: listing every node's parent costs
# ~0.06 s a million nodes, the interpreted walk as much again a million steps, while numba
# (already imported by the replay of such a graph) loads the cached loop in well under that.
_COMPILE_ABOVE_NODES = 1_000_000


@functools.cache
def _chain_kernel():
    """The compiled walk, or None where numba is missing or cannot compile it."""
    from tracediag.io.compiled import compiled

    return compiled(_chain_walk, np.array([-1]), 0, np.empty(1, dtype=np.int64))


def window_of(graph: G.Graph) -> tuple[int, int]:
    """First start and last end of the window's nodes (see ``Graph.window``)."""
    w = graph.window
    return int(graph.start[w].min()), int(graph.end[w].max())


class _Arrivals:
    """The arrival nodes of each collective instance: sorted by instance once, each instance's
    found by a search (no array per instance split off for the few the path crosses)."""

    def __init__(self, graph: G.Graph):
        arr = np.flatnonzero(graph.role == G.ARRIVAL)
        keys = graph.coll_key[arr]
        o = np.argsort(keys, kind="stable")
        self.keys, self.nodes = keys[o], arr[o]

    def of(self, key: int) -> np.ndarray:
        lo = np.searchsorted(self.keys, key, side="left")
        hi = np.searchsorted(self.keys, key, side="right")
        return self.nodes[lo:hi]


def _segments_frame(graph, trace, nodes, cats, a, b, events=None) -> pd.DataFrame:
    """The segments table; ``events`` (optional) names a segment's event where it is not its
    node's own (-2: the node's): its track is then the event's."""
    nodes = np.asarray(nodes, dtype=np.int64)
    valid = nodes >= 0
    safe = np.maximum(nodes, 0)
    event = np.where(valid, graph.event[safe], -1)
    rank = np.where(valid, graph.rank[safe], -1)
    track = np.where(valid, graph.track[safe], -1)
    if events is not None:
        other = np.asarray(events, dtype=np.int64) >= 0
        if other.any():
            event = np.where(other, events, event)
            ev_track = trace.events[S.TRACK].to_numpy()
            track = np.where(other, ev_track[np.maximum(events, 0)], track)
    engines = trace.tracks[S.ENGINE].astype(str).to_numpy()
    if len(nodes):  # taken by code through Arrow (see texts_by_code)
        engine = texts_by_code([*engines, ""], np.where(track >= 0, track, len(engines)))
    else:  # typed as an empty frame of object columns always was
        engine = np.where(track >= 0, engines[np.maximum(track, 0)] if len(engines) else "", "")
    start = np.asarray(a, dtype=np.int64)
    stop = np.asarray(b, dtype=np.int64)
    df = pd.DataFrame(
        {
            "node": nodes,
            "event": event,
            "rank": rank,
            "track": track,
            "category": pd.Categorical.from_codes(
                np.asarray(cats, dtype=np.int64), categories=CATEGORIES
            ),
            "engine": engine,
            "start_ns": start,
            "end_ns": stop,
            "dur_ns": stop - start,
        }
    )
    return df


def texts_by_code(texts, codes: np.ndarray) -> pd.api.extensions.ExtensionArray:
    """``texts[codes]`` (missing where a code is -1) as pandas' ``str`` column: what it infers
    from an object array of these strings, built by one Arrow take of the few distinct texts
    instead of a Python string per row converted (the path has a row per segment, 100k+)."""
    taken = pa.array(np.asarray(texts, dtype=object), type=pa.large_string()).take(
        pa.array(codes, mask=codes < 0)
    )
    return pd.arrays.ArrowStringArray(taken, dtype=pd.StringDtype("pyarrow", na_value=np.nan))
