"""The dependency graph of a job: nodes, edges (CSR), binding predecessors, topological order.

Nodes are events (markers excluded) plus a few zero-duration helper nodes that make the
semantics of ARCHITECTURE.md explicit:

- a collective event becomes an *arrival* node (when this rank reached the collective: its
  local predecessors point here) and a *body* node (the transfer, from when the last
  participant arrived to the end); every arrival of an instance points to one *instance* node
  (at the last arrival) that points to every participant's body (2k edges, not k^2);
- a ``sync`` event (stream/device synchronize) with ``sync`` edges becomes its begin node and a
  *completion* node that the awaited GPU work points to: the call returns when that work ends.

Every node's start is bound by its latest-finishing predecessor (its binding edge); the rest of
the start is the node's ``gap``, latency the trace shows but does not explain. Everything is numpy
arrays; no Python object per node.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from tracediag.graph.sort_orders import binding_order, break_ties, stable_order_by
from tracediag.model import schema as S
from tracediag.model.collective_ops import one_sided_sources

# Node roles
BODY, ARRIVAL, INSTANCE, COMPLETION = 0, 1, 2, 3

# Edge codes (why a predecessor constrains a node)
PROGRAM_ORDER, DEPENDENCY, DMA_TRIGGER, LAUNCH, FLOW, SYNC = 0, 1, 2, 3, 4, 5
COLL_ARRIVAL, COLL_START, SYNC_DONE = 6, 7, 8
STREAM_WAIT, THREAD_HANDOFF, DEVICE_WAIT, DISPATCH_WAIT = 9, 10, 11, 12  # inferred (idle_waits)
RECEIVE_USE, QUEUE_WAIT, WEIGHT_READ = 13, 14, 15  # inferred (receive_uses, dma_queue_waits,
# weight_reads)
EDGE_CODE_NAMES = (
    "program_order",
    "dependency",
    "dma_trigger",
    "launch",
    "flow",
    "sync",
    "collective_arrival",
    "collective_start",
    "sync_completion",
    "stream_wait",
    "thread_handoff",
    "device_wait",
    "dispatch_wait",
    "receive_use",
    "queue_wait",
    "weight_read",
)
_FORMAT_EDGE_CODES = {
    "dependency": DEPENDENCY,
    "dma_trigger": DMA_TRIGGER,
    "launch": LAUNCH,
    "flow": FLOW,
    "sync": SYNC,
    "stream_wait": STREAM_WAIT,
    "thread_handoff": THREAD_HANDOFF,
    "device_wait": DEVICE_WAIT,
    "dispatch_wait": DISPATCH_WAIT,
    "receive_use": RECEIVE_USE,
    "queue_wait": QUEUE_WAIT,
    "weight_read": WEIGHT_READ,
}


@dataclass
class Graph:
    """Node arrays, predecessor CSR and the binding predecessor of every node."""

    start: np.ndarray  # int64 ns
    dur: np.ndarray  # int64 ns
    rank: np.ndarray  # int32 (-1 for instance nodes)
    track: np.ndarray  # int32 (-1 for instance nodes)
    # Node, event and edge numbers (event, coll_key, pred_ptr, pred_src, bind, order,
    # event_node, event_in_node) are int32 where they fit (:func:`index_type`), else int64.
    event: np.ndarray  # event id (-1 for instance nodes)
    role: np.ndarray  # int8: BODY, ARRIVAL, INSTANCE, COMPLETION
    coll_key: np.ndarray  # collective instance (-1 elsewhere)
    pred_ptr: (
        np.ndarray
    )  # CSR over destinations: preds of v are pred_src[pred_ptr[v]:pred_ptr[v+1]]
    pred_src: np.ndarray
    pred_code: np.ndarray  # int8 edge code of each predecessor edge
    bind: np.ndarray  # binding predecessor (-1 for roots)
    bind_code: np.ndarray  # edge code of the binding edge (-1 for roots)
    gap: np.ndarray  # start - end[bind] (0 for roots)
    order: np.ndarray  # a topological order of the nodes
    event_node: np.ndarray  # per event: the node where its successors attach (-1 for markers)
    event_in_node: np.ndarray  # per event: the node its predecessors point to
    window: np.ndarray  # nodes that define the analysed window (device work; all if none)
    dropped_edges: dict[str, int] = field(default_factory=dict)
    replay_plan: object | None = field(default=None, repr=False)  # cached by replay.py
    # Graphs with some completions released from the device work they wait for, by the
    # released nodes (changes.released_graph).
    released: dict = field(default_factory=dict, repr=False)

    @property
    def end(self) -> np.ndarray:
        """Node end times (ns)."""
        return self.start + self.dur

    def __len__(self) -> int:
        return len(self.start)


def _program_order_pairs(ev_rank_track: np.ndarray, ts: np.ndarray, ids: np.ndarray):
    # Sorted by (rank and track, ts, id); ``ids`` ascend, so a stable sort keeps their order on
    # ties, and both keys fit one int64 unless the span is extreme (one pass instead of three).
    order = stable_order_by(ev_rank_track, ts)
    sorted_rt, sorted_ids = ev_rank_track[order], ids[order]
    same = sorted_rt[1:] == sorted_rt[:-1]
    return sorted_ids[:-1][same], sorted_ids[1:][same]


def build_graph(trace: S.Trace, extra_edges: pd.DataFrame | None = None) -> Graph:
    """Build the dependency graph of an (aligned) trace.

    ``extra_edges`` (same columns as ``trace.edges``) are dependencies inferred by analysis,
    used like the recorded ones.
    """
    ev = trace.events
    n_ev = len(ev)
    in_graph = (ev[S.KIND] != "marker").to_numpy(dtype=bool)
    is_sync = (ev[S.KIND] == "sync").to_numpy(dtype=bool)
    ids = np.flatnonzero(in_graph)
    ts = ev[S.TS].to_numpy()
    dur = ev[S.DUR].to_numpy()
    rank = ev[S.RANK].to_numpy()
    track = ev[S.TRACK].to_numpy()

    # --- body nodes: one per graph event ------------------------------------------------
    n_body = len(ids)
    body_of = np.full(n_ev, -1, dtype=np.int64)
    body_of[ids] = np.arange(n_body)
    starts = [ts[ids]]
    durs = [dur[ids]]
    ranks = [rank[ids]]
    tracks = [track[ids]]
    events = [ids.astype(np.int64, copy=False)]
    roles = [np.full(n_body, BODY, dtype=np.int8)]
    ckeys = [np.full(n_body, -1, dtype=np.int64)]
    in_node = body_of.copy()
    out_node = body_of.copy()
    src_list: list[np.ndarray] = []
    dst_list: list[np.ndarray] = []
    code_list: list[np.ndarray] = []
    next_id = n_body

    # --- collectives: arrival + instance + body ------------------------------------------
    coll = trace.collectives
    coll = coll.loc[in_graph[coll[S.EVENT].to_numpy()]] if len(coll) else coll
    if len(coll):
        c_ev = coll[S.EVENT].to_numpy()
        c_key = coll[S.COLL_KEY].to_numpy()
        arrival = coll[S.ARRIVAL].to_numpy()
        # A one-sided transfer's target waits for its source; the source waits for nobody, and
        # the target's arrival (no trigger: its transfer's start) holds nothing up.
        waited = _waited_arrivals(coll)
        last_arrival = _instance_arrivals(c_key, arrival, waited)
        c_end = coll[S.END].to_numpy()
        eff_start = np.minimum(np.maximum(coll[S.START].to_numpy(), last_arrival), c_end)
        b = body_of[c_ev]
        starts[0][b] = eff_start
        durs[0][b] = c_end - eff_start
        ckeys[0][b] = c_key
        n_c = len(coll)
        arr_nodes = next_id + np.arange(n_c)
        next_id += n_c
        starts.append(arrival)
        durs.append(np.zeros(n_c, dtype=np.int64))
        ranks.append(rank[c_ev])
        tracks.append(track[c_ev])
        events.append(c_ev.astype(np.int64, copy=False))
        roles.append(np.full(n_c, ARRIVAL, dtype=np.int8))
        ckeys.append(c_key)
        in_node[c_ev] = arr_nodes
        uniq_keys, inv = np.unique(c_key, return_inverse=True)
        inst_nodes = next_id + np.arange(len(uniq_keys))
        next_id += len(uniq_keys)
        inst_start = pd.Series(last_arrival).groupby(inv).max().to_numpy()
        starts.append(inst_start)
        durs.append(np.zeros(len(uniq_keys), dtype=np.int64))
        ranks.append(np.full(len(uniq_keys), -1, dtype=rank.dtype))
        tracks.append(np.full(len(uniq_keys), -1, dtype=track.dtype))
        events.append(np.full(len(uniq_keys), -1, dtype=np.int64))
        roles.append(np.full(len(uniq_keys), INSTANCE, dtype=np.int8))
        ckeys.append(uniq_keys.astype(np.int64, copy=False))
        src_list += [arr_nodes[waited], inst_nodes[inv]]
        dst_list += [inst_nodes[inv][waited], b]
        code_list += [
            np.full(int(waited.sum()), COLL_ARRIVAL, np.int8),
            np.full(n_c, COLL_START, np.int8),
        ]

    # --- sync calls that wait for device work: begin (body, zero length) + completion -------
    # Recorded and inferred edges as arrays (no frame concatenated: their kinds' categories
    # differ, which would turn the kind column into a string per edge).
    frames = [trace.edges]
    if extra_edges is not None and len(extra_edges):
        frames.append(extra_edges)
    e_src = np.concatenate([f[S.SRC].to_numpy() for f in frames]).astype(np.int64, copy=False)
    e_dst = np.concatenate([f[S.DST].to_numpy() for f in frames]).astype(np.int64, copy=False)
    e_code = np.concatenate([_edge_codes(f[S.EDGE_KIND]) for f in frames])
    # A device wait whose source ends after its host call starts blocked inside that call
    # (graph.device_waits.blocking_calls): a completion, as a recorded synchronize's.
    completion = (
        ((e_code == SYNC) & is_sync[e_dst])
        | ((e_code == DEVICE_WAIT) & (ts[e_src] + dur[e_src] > ts[e_dst]))
        if len(e_src)
        else np.zeros(0, bool)
    )
    sync_ev = np.unique(e_dst[completion])
    sync_ev = sync_ev[in_graph[sync_ev]]
    if len(sync_ev):
        n_s = len(sync_ev)
        comp_nodes = next_id + np.arange(n_s)
        next_id += n_s
        durs[0][body_of[sync_ev]] = 0
        starts.append(ts[sync_ev] + dur[sync_ev])
        durs.append(np.zeros(n_s, dtype=np.int64))
        ranks.append(rank[sync_ev])
        tracks.append(track[sync_ev])
        events.append(sync_ev.astype(np.int64, copy=False))
        roles.append(np.full(n_s, COMPLETION, dtype=np.int8))
        ckeys.append(np.full(n_s, -1, dtype=np.int64))
        out_node[sync_ev] = comp_nodes
        src_list.append(body_of[sync_ev])
        dst_list.append(comp_nodes)
        code_list.append(np.full(n_s, SYNC_DONE, np.int8))

    start = np.concatenate(starts).astype(np.int64, copy=False)
    node_dur = np.concatenate(durs).astype(np.int64, copy=False)
    dropped: dict[str, int] = {}

    # --- program order per track ------------------------------------------------------------
    rt = np.multiply(rank[ids], int(track.max(initial=0)) + 1, dtype=np.int64) + track[ids]
    a, b2 = _program_order_pairs(rt, ts[ids], ids)
    # A collective may be triggered while the previous one on its stream still runs (Neuron
    # queues triggers): then program order binds its transfer, not its arrival.
    prev_end = start[out_node[a]] + node_dur[out_node[a]]
    po_dst = np.where(start[in_node[b2]] >= prev_end, in_node[b2], body_of[b2])
    src_list.append(out_node[a])
    dst_list.append(po_dst)
    code_list.append(np.full(len(a), PROGRAM_ORDER, np.int8))

    # --- explicit edges from the format ----------------------------------------------------
    if len(e_src):
        keep = in_graph[e_src] & in_graph[e_dst]
        dropped_marker = int((~keep).sum())
        if dropped_marker:
            dropped["edges touching annotation-only events (not graph nodes)"] = dropped_marker
        dst_nodes = np.where(completion, out_node[e_dst], in_node[e_dst])
        # A call that launches device work and then blocks until it ends (a blocking copy)
        # launches from its begin: its completion comes after what it launched starts.
        src_ev, dst_nodes = e_src[keep], dst_nodes[keep]
        src_nodes = out_node[src_ev]
        early = (src_nodes != body_of[src_ev]) & (start[dst_nodes] < start[src_nodes])
        src_list.append(np.where(early, body_of[src_ev], src_nodes))
        dst_list.append(dst_nodes)
        code_list.append(e_code[keep])

    src = np.concatenate(src_list).astype(np.int64, copy=False)
    dst = np.concatenate(dst_list).astype(np.int64, copy=False)
    code = np.concatenate(code_list).astype(np.int8, copy=False)
    start_src, start_dst = start[src], start[dst]  # gathered once: the filter and the ties
    bad = (src == dst) | (start_src > start_dst)
    if bad.any():
        dropped["edges against time (successor starts before its predecessor)"] = int(bad.sum())
        keep = ~bad
        src, dst, code = src[keep], dst[keep], code[keep]
        start_src, start_dst = start_src[keep], start_dst[keep]
    tie = start_src == start_dst
    same_start = src[tie], dst[tie]
    del start_src, start_dst, tie, bad
    n = len(start)
    end = start + node_dur
    # Binding predecessor: latest end; on ties prefer an explicit edge over program order,
    # then the lowest node id, so the choice is deterministic.
    explicit_first = (code == PROGRAM_ORDER).astype(np.int8)
    o = binding_order(src, dst, -end[src], explicit_first, n)
    src, dst, code = src[o], dst[o], code[o]
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(dst, minlength=n), out=ptr[1:])  # edges per destination, summed
    has = ptr[1:] > ptr[:-1]
    head = np.minimum(ptr[:-1], max(len(src) - 1, 0))  # each node's first edge (roots: masked)
    bind = np.where(has, src[head], -1) if len(src) else np.full(n, -1, dtype=np.int64)
    bind_code = np.where(has, code[head], -1) if len(src) else np.full(n, -1, dtype=np.int8)
    gap = np.where(has, start - end[bind], 0)
    role = np.concatenate(roles)
    node_track = np.concatenate(tracks).astype(np.int32, copy=False)
    order, cut = _topological_order(start, end, role, src, dst, ptr, same_start)
    if cut:
        dropped["edges in cycles"] = cut
    ckey = np.concatenate(ckeys)
    ix = index_type(max(n, len(out_node), len(src), int(ckey.max(initial=0))))
    return Graph(
        start=start,
        dur=node_dur,
        rank=np.concatenate(ranks).astype(np.int32, copy=False),
        track=node_track,
        event=np.concatenate(events).astype(ix, copy=False),
        role=role,
        coll_key=ckey.astype(ix, copy=False),
        pred_ptr=ptr.astype(ix, copy=False),
        pred_src=src.astype(ix, copy=False),
        pred_code=code,
        bind=bind.astype(ix, copy=False),
        bind_code=bind_code,
        gap=gap,
        order=order.astype(ix, copy=False),
        event_node=out_node.astype(ix, copy=False),
        event_in_node=in_node.astype(ix, copy=False),
        window=_device_nodes(trace, node_track),
        dropped_edges=dropped,
    )


def index_type(largest: int) -> type:
    """int32 for node, event and edge numbers up to ``largest`` where they fit, else int64: half
    the memory of the graph's index arrays and of every gather through them (the clean-room
    writer's 4 ranks x 1M instructions: 5.6M nodes, 10.5M edges)."""
    return np.int32 if largest < 2**31 - 1 else np.int64


def _waited_arrivals(coll: pd.DataFrame) -> np.ndarray:
    """Per collective row: its arrival holds its instance up. Not so for the target of a
    one-sided transfer whose instance has a source (``collective_ops.ONE_SIDED_OPS``)."""
    side = one_sided_sources(
        coll[S.COLL_OP].to_numpy(), coll[S.GROUP].to_numpy(), coll[S.RANK].to_numpy()
    )
    target = side == 0
    if not target.any():
        return np.ones(len(coll), dtype=bool)
    has_source = pd.Series(side == 1).groupby(coll[S.COLL_KEY].to_numpy()).transform("any")
    return ~(target & has_source.to_numpy())


def _instance_arrivals(key: np.ndarray, arrival: np.ndarray, waited: np.ndarray) -> np.ndarray:
    """Per collective row: the last arrival its instance waits for (see _waited_arrivals)."""
    held = np.where(waited, arrival, np.iinfo(np.int64).min)
    return pd.Series(held).groupby(key).transform("max").to_numpy()


def _edge_codes(kind: pd.Series) -> np.ndarray:
    """The edge code of each edge kind (FLOW for an unknown or missing one), per distinct kind
    (the trailing entry: a missing kind), not a string test per edge."""
    kind_idx, kinds = pd.factorize(kind)
    codes = np.array([_FORMAT_EDGE_CODES.get(str(k), FLOW) for k in kinds] + [FLOW], np.int8)
    return codes[kind_idx]


def _device_nodes(trace: S.Trace, node_track: np.ndarray) -> np.ndarray:
    """The nodes of device work (all but CPU threads; collective instances included).

    The window analysed is the devices' busy span, as HTA's: host work before the first kernel
    (framework start-up, CUDA initialisation) or after the last (teardown) is outside the step.
    """
    kinds = trace.tracks[S.TRACK_KIND].astype(str).to_numpy()
    host_track = np.append(kinds == "cpu_thread", False)  # track -1 (instances): the last False
    device = ~host_track[node_track]
    return device if device.any() else np.ones(len(node_track), dtype=bool)


_ROLE_PRIORITY = np.array([2, 0, 1, 3], dtype=np.int8)  # body, arrival, instance, completion


def _same_start_levels(n: int, s: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Per node: the longest chain of the edges ``s`` -> ``d`` (those between nodes of one start
    time) that reaches it."""
    level = np.zeros(n, dtype=np.int64)
    # Same-instant chains are short; past 64 rounds (or in a cycle) Kahn's algorithm takes over.
    for _ in range(min(len(s) + 1, 64)):
        want = level[s] + 1
        grow = want > level[d]
        if not grow.any():
            break
        np.maximum.at(level, d[grow], want[grow])
    return level


def _time_order(start, level, priority, end) -> np.ndarray:
    """``np.lexsort((end, priority, level, start))`` with the first three keys fused into one
    int64 when their ranges fit (two sort passes instead of four)."""
    if len(start) < 2:
        return np.lexsort((end, priority, level, start))
    s0 = int(start.min())
    s_span, l_span = int(start.max()) - s0 + 1, int(level.max()) + 1
    if s_span * l_span * 4 >= 2**62:
        return np.lexsort((end, priority, level, start))
    key = np.subtract(start, s0, dtype=np.int64) * (l_span * 4)  # in place from here
    key += level * 4
    key += priority
    return break_ties(key, end)


def _topological_order(start, end, role, src, dst, ptr, same_start) -> tuple[np.ndarray, int]:
    """Nodes in an order where every edge goes forward.

    Edges never go back in time (those were dropped), so start order is one, except among nodes
    that start at the same instant (a collective's arrival at its trigger instruction's start):
    those are layered by their longest chain of same-instant edges first (``same_start``: those
    edges' sources and destinations, in any order). Kahn's algorithm is the fallback for cycles;
    edges left in a cycle are ignored for ordering and counted.
    """
    n = len(start)
    s_tie, d_tie = same_start
    level = _same_start_levels(n, s_tie, d_tie)
    # By start, level, role priority, end; lexsort is stable: ties keep node id order.
    order = _time_order(start, level, _ROLE_PRIORITY[role], end)
    pos = np.empty(n, dtype=np.int64)
    pos[order] = np.arange(n)
    # The order is by start first, so only an edge within one start time can go back.
    if not len(src) or (pos[s_tie] < pos[d_tie]).all():
        return order, 0
    indeg = np.diff(ptr).copy()
    succ_order = np.argsort(src, kind="stable")
    succ_ptr = np.searchsorted(src[succ_order], np.arange(n + 1))
    succ = dst[succ_order].tolist()
    succ_ptr_l = succ_ptr.tolist()
    indeg_l = indeg.tolist()
    # Seed in time order so the result stays close to it.
    ready = deque(int(v) for v in order if indeg_l[v] == 0)
    out: list[int] = []
    placed = np.zeros(n, dtype=bool)
    cut = 0
    while len(out) < n:
        while ready:
            v = ready.popleft()
            out.append(v)
            placed[v] = True
            for i in range(succ_ptr_l[v], succ_ptr_l[v + 1]):
                w = succ[i]
                indeg_l[w] -= 1
                if indeg_l[w] == 0:
                    ready.append(w)
        if len(out) < n:  # a cycle: release the earliest unplaced node
            rest = order[~placed[order]]
            v = int(rest[0])
            cut += indeg_l[v]
            indeg_l[v] = 0
            ready.append(v)
    return np.asarray(out, dtype=np.int64), cut
