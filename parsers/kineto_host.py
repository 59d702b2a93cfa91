"""Host-only Kineto traces (CPU training, the host side of a Trainium job): work and collectives.

A trace without GPU events has nothing but CPU slices, so its work is on CPU threads:

- The *outermost* ``cpu_op`` slices of each thread that enclose no ``c10d::*`` launch are its
  work, kind ``compute`` (``host`` for the ``c10d::*`` launches themselves): they never overlap,
  so a thread stays a serial track, and an op's time is counted once, its own time between its
  children included (``aten::mm`` computes between its tiny ``aten::resolve_conj`` children: as
  leaves, the multiply itself would be gaps). An op enclosing a launch (the autograd node whose
  hook starts a DDP bucket's all-reduce) gives way to its children, so the launch is a node of its
  own. The ops they enclose stay markers, and so do the ops inside a collective's range on its
  thread (gloo's copies into an all_gather's outputs).
- Collectives. torch's gloo backend writes each call twice (see tests/real_traces/reading.md):
  the ``c10d::X`` launch on the calling thread, and a ``gloo:Y`` range on a ``pt_gloo_runloop``
  thread from the start of the gloo work to its completion (its length includes the wait for late
  peers). The gloo range is the collective (arrival = its start, end = its end); the k-th launch of
  an operation pairs with the next gloo range of that operation starting after it. A launch that
  pairs no gloo range is the collective itself. Gloo ranges starting before the rank's first
  recorded launch belong to a step before the window and stay markers (their number in
  ``meta.info["gloo_ranges_before_window"]``).
- Instances match across ranks by their order within the process group and operation
  (``"{group}|{op}|{ordinal}"``): gloo ranges carry no sequence number. The group is the default
  process group of ``distributedInfo.pg_config`` (gloo ranges do not say which group they serve),
  else the world.
- Send/Recv are point-to-point: their group is the pair (rank, peer) and a Send matches its
  peer's Recv by their order on the link (``"{src}>{dst}|P2P|{k}"``), the peer read from the
  launch's scalar inputs (``record_shapes`` only). Without them nothing in a rank's trace says
  who a transfer talks to (no group, no sequence number, and a middle stage sends both ways), so
  such a Send/Recv is matched with nobody: an instance of its own rank (``"{rank}?|{op}|{k}"``,
  no group), counted in ``meta.repairs`` (TRC501), rather than the k-th Sends of every rank
  read as one collective.
  Their ``gloo:send``/``gloo:recv`` range runs on the calling thread around the wait, after the
  launch posted the transfer: the collective arrives at the launch, which is part of it.
- Edges (kind ``launch``): the calling thread's last work ending at or before the gloo range's
  start -> the range (the gloo work may start before the launch returns, so the launch itself is
  not always its predecessor). Edges (kind ``sync``): the range -> the calling thread's first op
  after its end, when that thread sat idle at the end and resumed within half of its idle time
  (it was waiting for the collective: DDP's bucket wait, a synchronous call's return).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracediag.model import schema as S
from tracediag.parsers.chrome_nesting import SliceNesting
from tracediag.parsers.kineto import KIND, Rows
from tracediag.parsers.kineto_collectives import OP_NAMES, link_keys, op_from_text

GLOO_RANGE = re.compile(r"^gloo:")
C10D_OP = re.compile(r"^c10d::")
#: The waiting thread resumed within this share of its idle time after the collective ended.
RESUME_SHARE = 0.5
#: The repair counted for a Send/Recv whose peer the trace does not give (TRC501 reads it).
UNKNOWN_PEER = (
    "collectives: Send/Recv with no peer rank (recorded without record_shapes): peer unknown, "
    "not matched across ranks"
)


def is_host_only(rows: Rows) -> bool:
    """No GPU slice at all (kernels, copies, GPU-side records or annotations)."""
    return not bool(rows.on_gpu.any())


def host_kinds(rows: Rows) -> np.ndarray:
    """Kinds of a host-only trace's slices (int8 codes into ``S.KINDS``), collectives excepted
    (:func:`host_collectives` sets those): the outermost ``cpu_op`` slices enclosing no
    ``c10d::`` launch are compute, the launches host; everything else a marker."""
    kind = np.full(len(rows.family), KIND["marker"], dtype=np.int8)
    ops = rows.where("cpu_op", gpu=False)
    is_launch = rows.matches(C10D_OP, ops)
    free = ops[~_encloses(rows, ops, ops[is_launch])]
    work = free[_outermost(rows, free)]
    kind[work] = np.where(rows.matches(C10D_OP, work), KIND["host"], KIND["compute"])
    return kind


def _thread_keys(rows: Rows, at: np.ndarray, t: np.ndarray) -> np.ndarray:
    """One int64 key per (thread, time), thread-major: sorted keys are sorted by thread, then
    time."""
    span = int(max(rows.end.max(initial=0) - rows.ts.min(initial=0), 1)) + 1
    return rows.thread[at].astype(np.int64) * span + (t - int(rows.ts.min(initial=0)))


def _encloses(rows: Rows, ops: np.ndarray, inner: np.ndarray) -> np.ndarray:
    """Per op, whether another of the ``inner`` slices of its thread starts inside it (slices
    nest, so it then ends inside it too)."""
    if not len(inner):
        return np.zeros(len(ops), dtype=bool)
    key = np.sort(_thread_keys(rows, inner, rows.ts[inner]))
    lo = np.searchsorted(key, _thread_keys(rows, ops, rows.ts[ops]), side="left")
    hi = np.searchsorted(key, _thread_keys(rows, ops, rows.end[ops]), side="left")
    itself = np.isin(ops, inner)  # an inner slice starts at its own start: not inside itself
    return (hi - lo - itself) > 0


def _outermost(rows: Rows, ops: np.ndarray) -> np.ndarray:
    """Per op, whether no other of ``ops`` on its thread encloses it. Sorted by (thread, start,
    longer first), an op is enclosed when an earlier one of its thread is still open at its
    start (slices nest)."""
    if not len(ops):
        return np.zeros(0, dtype=bool)
    order = np.lexsort((rows.ts[ops] - rows.end[ops], rows.ts[ops], rows.thread[ops]))
    o = ops[order]
    # Thread-major keys: a running maximum never carries one thread's end into the next.
    open_until = np.maximum.accumulate(_thread_keys(rows, o, rows.end[o]))
    starts = _thread_keys(rows, o, rows.ts[o])
    top = np.r_[True, starts[1:] >= open_until[:-1]]
    out = np.empty(len(ops), dtype=bool)
    out[order] = top
    return out


def host_collectives(
    rows: Rows, kind: np.ndarray, info: dict, meta: S.RankMeta
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The collectives table (canonical columns less ``coll_key`` and ``rank``) and the launch
    and wait edges of a host-only trace; sets the collectives' ``kind`` in place."""
    cpu = np.flatnonzero(~rows.on_gpu)
    gloo = cpu[rows.matches(GLOO_RANGE, cpu)]
    gloo = gloo[np.argsort(rows.ts[gloo], kind="stable")]
    ops = rows.where("cpu_op", gpu=False)
    launches = ops[rows.matches(C10D_OP, ops)]  # leaves or not (allgather_ encloses its ops)
    launch_op = _ops(rows, launches)
    launches, launch_op = launches[launch_op != ""], launch_op[launch_op != ""]
    launches_sorted = np.argsort(rows.ts[launches], kind="stable")
    launches, launch_op = launches[launches_sorted], launch_op[launches_sorted]
    gloo_op = _ops(rows, gloo)
    if len(launches):  # a range from before the first recorded launch: a step before the window
        early = rows.ts[gloo] < rows.ts[launches[0]]
        if early.any():  # a profiling window's normal edge, not a repair: noted, not counted
            meta.info["gloo_ranges_before_window"] = int(early.sum())
        gloo, gloo_op = gloo[~early], gloo_op[~early]
    pair = _pair(rows, launches, launch_op, gloo, gloo_op)  # per launch: its gloo range, -1
    unpaired = launches[pair < 0]
    coll = np.concatenate([gloo, unpaired])
    op = np.concatenate([gloo_op, launch_op[pair < 0]])
    o = np.argsort(rows.ts[coll], kind="stable")
    coll, op = coll[o], op[o]
    kind[coll] = KIND["collective"]
    _fold_into_collectives(rows, kind, coll)
    default = _default_group(info)
    ordinal = _ordinal_per_op(op)
    key = np.char.add(
        np.char.add(f"{default}|", op.astype(str)), np.char.add("|", ordinal.astype(str))
    ).astype(object)
    n = len(coll)
    group = np.full(n, default, dtype=object)
    launch_of = np.full(len(gloo), -1, dtype=np.int64)
    launch_of[pair[pair >= 0]] = launches[pair >= 0]
    launch_of = np.concatenate([launch_of, unpaired])[o]
    _point_to_point(rows, op, launch_of, meta, key, group)
    arrival = _posted_at(rows, kind, coll, op, launch_of)
    table = pd.DataFrame(
        {
            S.EVENT: coll.astype(np.int64),
            S.MATCH_KEY: key,
            S.COLL_OP: op.astype(object),
            S.GROUP: group,
            S.SEQ: np.full(n, -1, dtype=np.int64),
            S.BYTES: np.full(n, np.nan),
            S.ARRIVAL: arrival,
            S.START: arrival,
            S.END: rows.end[coll],
            S.ALGORITHM: np.full(n, "", dtype=object),
            S.ALGBW: np.full(n, np.nan),
            S.BUSBW: np.full(n, np.nan),
            S.DTYPE: np.full(n, "", dtype=object),
        }
    )
    paired = pair >= 0
    edges = _edges(rows, kind, launches[paired], gloo[pair[paired]])
    return table, edges


def _point_to_point(rows: Rows, op, launch_of, meta: S.RankMeta, key, group) -> None:
    """Send/Recv rows whose launch names its peer get the pair as their group and a key that
    matches a Send with its Recv, in place: ``"{src}>{dst}|P2P|{k}"`` for the k-th transfer from
    src to dst on this rank (the sender's k-th Send to dst is dst's k-th Recv from src).

    The peer is the third scalar input of ``c10d::send``/``c10d::recv_`` (``dstRank``/
    ``srcRank``), which the profiler writes with ``record_shapes`` only (``Concrete Inputs``).
    Without it (or without a launch) the pair cannot be told: the row gets a key of its own rank
    and no group, counted in ``meta``."""
    rank = meta.rank
    p2p = np.flatnonzero(np.isin(op, ("Send", "Recv")))
    if not len(p2p) or rank < 0:
        return
    peer = np.full(len(p2p), np.nan)
    launched = launch_of[p2p] >= 0
    if launched.any():
        inputs = pd.Series(
            rows.args.value("Concrete Inputs", launch_of[p2p[launched]]), dtype=object
        )
        peer[launched] = pd.to_numeric(inputs.str[2], errors="coerce").to_numpy(dtype=np.float64)
    known = np.isfinite(peer) & (peer >= 0) & (peer != rank)
    unknown = p2p[~known]
    if len(unknown):  # matched with nobody rather than with the k-th transfer of every rank
        mine = np.char.add(f"{rank}?|", op[unknown].astype(str))
        ordinal = _ordinal_per_op(mine)
        key[unknown] = np.char.add(np.char.add(mine, "|"), ordinal.astype(str))
        group[unknown] = ""
        meta.count(UNKNOWN_PEER, len(unknown))
    p2p, peer = p2p[known], peer[known].astype(np.int64)
    if not len(p2p):
        return
    sends = op[p2p] == "Send"
    src, dst = np.where(sends, rank, peer), np.where(sends, peer, rank)
    key[p2p], group[p2p] = link_keys(src, dst)


def _posted_at(rows: Rows, kind: np.ndarray, coll, op, launch_of) -> np.ndarray:
    """Per collective, when its rank reached it: the start of its range, or for a Send/Recv
    whose ``gloo:`` range runs on the launching thread, the launch's start. gloo posts the
    transfer in ``c10d::send``/``recv_`` (which blocks while the socket is full) and records
    ``gloo:send``/``recv`` around the wait that follows, so the transfer spans both: the
    launch becomes part of the collective (a marker, in place), not host work before it."""
    arrival = rows.ts[coll].copy()
    posted = np.isin(op, ("Send", "Recv")) & (launch_of >= 0)
    posted[posted] = rows.thread[launch_of[posted]] == rows.thread[coll[posted]]
    arrival[posted] = np.minimum(arrival[posted], rows.ts[launch_of[posted]])
    kind[launch_of[posted]] = KIND["marker"]
    return arrival


def _fold_into_collectives(rows: Rows, kind: np.ndarray, coll: np.ndarray) -> None:
    """Ops inside a collective's range on its thread (gloo's copies into the outputs of an
    all_gather) are part of it: markers, in place, so that the thread stays serial."""
    work = np.flatnonzero((kind == KIND["compute"]) | (kind == KIND["host"]))
    if not len(work) or not len(coll):
        return
    nesting = SliceNesting(rows.thread[coll], rows.ts[coll], rows.end[coll])
    inside = nesting.innermost(rows.thread[work], rows.ts[work]) >= 0
    kind[work[inside]] = KIND["marker"]


def _ops(rows: Rows, at: np.ndarray) -> np.ndarray:
    """The normalised collective operation of each row's name ("" where it names none)."""
    names = rows.name_of(at).astype(str)
    uniq, inv = np.unique(names, return_inverse=True)
    known = set(OP_NAMES)
    per = np.array(
        [(lambda op: op if op in known else "")(op_from_text(u.split(":")[-1])) for u in uniq]
        or [""],
        dtype=object,
    )
    return per[inv] if len(at) else np.zeros(0, dtype=object)


def _pair(rows: Rows, launches, launch_op, gloo, gloo_op) -> np.ndarray:
    """Per launch, the index into ``gloo`` of its range: per operation, the k-th launch takes the
    first range starting at or after it that no earlier launch took (-1: none left)."""
    pair = np.full(len(launches), -1, dtype=np.int64)
    for op in np.unique(launch_op):  # a loop over the few operations, not events
        mine = np.flatnonzero(launch_op == op)
        theirs = np.flatnonzero(gloo_op == op)
        if not len(theirs):
            continue
        first = np.searchsorted(rows.ts[gloo[theirs]], rows.ts[launches[mine]], side="left")
        k = np.arange(len(mine))
        j = np.maximum.accumulate(first - k) + k  # strictly increasing: each range taken once
        ok = j < len(theirs)
        pair[mine[ok]] = theirs[j[ok]]
    return pair


def _default_group(info: dict) -> str:
    """The default process group's ranks ("0,1,2,3"), else the world's, else ""."""
    groups = info.get("pg_config") if isinstance(info.get("pg_config"), list) else []
    groups = [g for g in groups if isinstance(g, dict) and isinstance(g.get("ranks"), list)]
    default = [
        g for g in groups if g.get("pg_desc") == "default_pg" or str(g.get("pg_name")) == "0"
    ]
    chosen = default or sorted(groups, key=lambda g: -len(g["ranks"]))
    if chosen:
        try:
            return ",".join(str(r) for r in sorted(int(r) for r in chosen[0]["ranks"]))
        except (TypeError, ValueError):
            pass
    world = info.get("world_size")
    if isinstance(world, int) and not isinstance(world, bool) and world > 0:
        return ",".join(str(r) for r in range(world))
    return ""


def _ordinal_per_op(op: np.ndarray) -> np.ndarray:
    """Per row (in time order), the number of earlier rows of its operation."""
    codes = pd.factorize(op)[0]
    return pd.Series(codes).groupby(codes).cumcount().to_numpy()


def _edges(rows: Rows, kind: np.ndarray, launch: np.ndarray, coll: np.ndarray) -> pd.DataFrame:
    """Launch edges (calling thread's last work before the range) and wait edges (the range ->
    the calling thread's op that resumed after it); see the module docstring."""
    work = np.flatnonzero((kind == KIND["compute"]) | (kind == KIND["host"]))
    work = work[np.lexsort((rows.ts[work], rows.thread[work]))]
    w_thread, w_ts, w_end = rows.thread[work], rows.ts[work], rows.end[work]
    thread = rows.thread[launch]
    # Searches in (thread, time) order: one sorted key per work row and per query.
    span = int(max(rows.end.max(initial=0), 1)) + 1
    base = int(rows.ts.min(initial=0))
    key_ts = w_thread * span + (w_ts - base)
    # Thread-major keys: a running maximum never carries one thread's end into the next.
    key_end = np.maximum.accumulate(w_thread * span + (w_end - base)) if len(work) else key_ts
    # Launch: the last work ending at or before the range's start (leaves end in start order).
    q = thread * span + (rows.ts[coll] - base)
    i = np.searchsorted(key_end, q, side="right") - 1
    ok_l = (i >= 0) & (w_thread[np.maximum(i, 0)] == thread)
    # Wait: the first work starting at or after the range's end, if the thread was idle then.
    q_end = thread * span + (rows.end[coll] - base)
    nxt = np.searchsorted(key_ts, q_end, side="left")
    prev = nxt - 1
    has_next = (nxt < len(work)) & (w_thread[np.minimum(nxt, len(work) - 1)] == thread)
    has_prev = (prev >= 0) & (w_thread[np.maximum(prev, 0)] == thread)
    nxt_c, prev_c = np.minimum(nxt, len(work) - 1), np.maximum(prev, 0)
    idle_since = np.where(has_prev, w_end[prev_c], rows.ts[launch])
    resume = w_ts[nxt_c] - rows.end[coll]
    idle = w_ts[nxt_c] - idle_since
    ok_w = has_next & (idle_since <= rows.end[coll]) & (resume <= RESUME_SHARE * idle)
    src = np.concatenate([work[i[ok_l]], coll[ok_w]])
    dst = np.concatenate([coll[ok_l], work[nxt_c[ok_w]]])
    kinds = np.r_[
        np.full(int(ok_l.sum()), S.EDGE_KINDS.index("launch")),
        np.full(int(ok_w.sum()), S.EDGE_KINDS.index("sync")),
    ]
    return pd.DataFrame(
        {
            S.SRC: src.astype(np.int64),
            S.DST: dst.astype(np.int64),
            S.EDGE_KIND: pd.Categorical.from_codes(kinds.astype(np.int64), categories=S.EDGE_KINDS),
        }
    )
