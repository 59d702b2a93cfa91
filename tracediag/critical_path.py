"""The critical path: walk back from the last end along binding edges, attributing every ns.

Categories (they sum to the path length, first start of the job to its last end):

- ``compute``: an event of kind compute runs (with the engine or stream it runs on);
- ``dma_transfer``: a DMA moves data (and the overhead between packets of one queue);
- ``dma_wait``: a DMA queued after the instruction that triggered it;
- ``collective_transfer``: a collective moves data once every participant has arrived;
- ``collective_skew``: the collective waits for a late rank, from the median arrival of the
  *other* participants to the last arrival;
- ``host``: host-side work: runtime calls, launch latency, CPU time between launches, syncs;
- ``gap``: latency nothing in the trace explains.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracediag import graph as G
from tracediag import schema as S

CATEGORIES = (
    "compute",
    "dma_transfer",
    "dma_wait",
    "collective_transfer",
    "collective_skew",
    "host",
    "gap",
)
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

    def compute_by_engine(self) -> dict[str, int]:
        """ns of ``compute`` per engine or stream."""
        seg = self.segments[self.segments["category"] == "compute"]
        return {str(k): int(v) for k, v in seg.groupby("engine")["dur_ns"].sum().items()}


def node_categories(graph: G.Graph, trace: S.Trace) -> tuple[np.ndarray, np.ndarray]:
    """Per node: the category of its own duration and of its gap (indices into CATEGORIES)."""
    kind = S.strings(trace.events[S.KIND])
    n = len(graph)
    ev = graph.event
    own = np.full(n, _CAT["gap"], dtype=np.int8)
    has_ev = ev >= 0
    for k, cat in _OWN_CATEGORY.items():
        own[has_ev & (kind[np.maximum(ev, 0)] == k)] = _CAT[cat]
    track_kind = trace.tracks[S.TRACK_KIND].astype(str).to_numpy()
    tk = np.where(graph.track >= 0, track_kind[np.maximum(graph.track, 0)], "")
    gapc = np.full(n, _CAT["gap"], dtype=np.int8)
    code = graph.bind_code
    gapc[code == G.DMA_TRIGGER] = _CAT["dma_wait"]
    gapc[(code == G.LAUNCH) | (code == G.SYNC_DONE)] = _CAT["host"]
    gapc[code == G.COLL_START] = _CAT["collective_transfer"]
    po = code == G.PROGRAM_ORDER
    gapc[po & (tk == "cpu_thread")] = _CAT["host"]
    gapc[po & (tk == "dma_queue")] = _CAT["dma_transfer"]
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
    arrivals = _arrivals_by_instance(graph)
    seg_node, seg_cat, seg_a, seg_b = [], [], [], []

    def add(v: int, cat: int, a: int, b: int) -> None:
        if b > a:
            seg_node.append(v)
            seg_cat.append(cat)
            seg_a.append(a)
            seg_b.append(b)

    cursor = t_end
    while node >= 0 and cursor > t0:
        s = max(int(start[node]), t0)
        add(node, int(own[node]), min(s, cursor), cursor)
        cursor = min(cursor, s)
        p = int(graph.bind[node])
        if p < 0:
            break
        pe = int(end[p])
        if graph.role[node] == G.INSTANCE:
            # The instance waited for its last arrival p: the skew is from the median arrival
            # of the other participants to that last arrival.
            others = arrivals[int(graph.coll_key[node])]
            others = others[others != p]
            if len(others):
                med = int(np.median(start[others]))
                if med < pe:
                    lo = max(med, t0)
                    add(p, _CAT["collective_skew"], min(lo, cursor), cursor)  # the late rank
                    cursor = min(cursor, lo)
        else:
            pe = max(pe, t0)
            add(node, int(gapc[node]), min(pe, cursor), cursor)
            cursor = min(cursor, pe)
        node = p
    add(-1, _CAT["gap"], t0, cursor)
    return CriticalPath(_segments_frame(graph, trace, seg_node, seg_cat, seg_a, seg_b), t0, t_end)


def window_of(graph: G.Graph) -> tuple[int, int]:
    """First start and last end of the window's nodes (see ``Graph.window``)."""
    w = graph.window
    return int(graph.start[w].min()), int(graph.end[w].max())


def _arrivals_by_instance(graph: G.Graph) -> dict[int, np.ndarray]:
    arr = np.flatnonzero(graph.role == G.ARRIVAL)
    if not len(arr):
        return {}
    keys = graph.coll_key[arr]
    o = np.argsort(keys, kind="stable")
    uniq, first = np.unique(keys[o], return_index=True)
    return dict(zip(uniq.tolist(), np.split(arr[o], first[1:]), strict=True))


def _segments_frame(graph, trace, nodes, cats, a, b) -> pd.DataFrame:
    nodes = np.asarray(nodes, dtype=np.int64)
    valid = nodes >= 0
    safe = np.maximum(nodes, 0)
    event = np.where(valid, graph.event[safe], -1)
    rank = np.where(valid, graph.rank[safe], -1)
    track = np.where(valid, graph.track[safe], -1)
    engines = trace.tracks[S.ENGINE].astype(str).to_numpy()
    engine = np.where(track >= 0, engines[np.maximum(track, 0)] if len(engines) else "", "")
    start = np.asarray(a, dtype=np.int64)
    stop = np.asarray(b, dtype=np.int64)
    df = pd.DataFrame(
        {
            "node": nodes,
            "event": event,
            "rank": rank,
            "track": track,
            "category": pd.Categorical(
                np.asarray(CATEGORIES)[np.asarray(cats, dtype=np.int64)], categories=CATEGORIES
            ),
            "engine": engine,
            "start_ns": start,
            "end_ns": stop,
            "dur_ns": stop - start,
        }
    )
    return df
