"""Dependencies the format does not record but the trace implies, each with its evidence.

:func:`infer_edges` gathers every inference, one edge kind each (``EDGE_KIND``):

- ``dependency`` (:func:`wait_edges`): a Neuron instruction's ``evt_wait_time`` is how long it
  stalled on a semaphore after it was ready to issue. When no recorded edge explains that stall,
  the event it waited for is the one on another track of the same rank (another engine, a DMA
  queue, a collective) that finished last inside the stall window [start - wait, start]: the
  semaphore is released by the last producer it counts, and the waiter issues right after.
  Legacy JSON profiles (no edges into collectives) and Parquet profiles without a Flow table need
  this for the critical path to cross engines.
- ``stream_wait``, ``thread_handoff``, ``device_wait`` and ``dispatch_wait``
  (:mod:`tracediag.graph.idle_waits`): GPU streams that idle until another stream's work ends,
  host threads that resume when another thread's work ends, host threads that resume when the
  device work they waited for ends, devices without launch records that start when their host
  has dispatched the work.
- ``queue_wait`` (:mod:`tracediag.graph.dma_queue_waits`): a DMA transfer that started when the
  previous transfer of its queue ended on another ring, later than its trigger and its ring
  explain.
- ``receive_use`` (:mod:`tracediag.graph.receive_uses`): a point-to-point receive that arrived
  before its reader was ready, bound to the reader the link's other receives show (the same
  code consumes every buffer a link delivers).
- ``weight_read`` (:mod:`tracediag.graph.weight_reads`): a layer's weight transfer bound to the
  Tensor-engine instruction at its share of the layer's weights, where the rank records no
  transfer's reader (legacy JSON, the CSV export).

A stall is explained only by a recorded predecessor that ends within the tolerance of the
waiter's start, not by one that ends anywhere inside the stall.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracediag.graph.dma_queue_waits import QUEUE_WAIT, queue_wait_edges
from tracediag.graph.idle_waits import idle_wait_edges, recorded_predecessors
from tracediag.graph.receive_uses import RECEIVE_USE, receive_use_edges
from tracediag.graph.sort_orders import stable_order_by
from tracediag.graph.wait_evidence import (
    DEVICE_WAIT,
    DISPATCH_WAIT,
    EVIDENCE_COLUMNS,
    STREAM_WAIT,
    THREAD_HANDOFF,
    empty_evidence_frame,
)
from tracediag.graph.weight_reads import WEIGHT_READ, weight_read_edges
from tracediag.model import schema as S

#: Slack for the last ns of a semaphore signal (the wait ends just after the producer ends).
TOLERANCE_NS = 100

#: The kinds of inferred edges, in the order of their categorical codes.
INFERRED_EDGE_KINDS = (
    "dependency",
    STREAM_WAIT,
    THREAD_HANDOFF,
    DEVICE_WAIT,
    DISPATCH_WAIT,
    RECEIVE_USE,
    QUEUE_WAIT,
    WEIGHT_READ,
)
#: Each kind's inference, as the evidence names it.
INFERENCE_OF_KIND = {
    "dependency": "semaphore_wait",
    STREAM_WAIT: "cross_stream_wait",
    THREAD_HANDOFF: "cross_thread_handoff",
    DEVICE_WAIT: "device_to_host_wait",
    DISPATCH_WAIT: "host_to_device_dispatch",
    RECEIVE_USE: "repeated_receive_consumer",
    QUEUE_WAIT: "dma_queue_order",
    WEIGHT_READ: "layer_weight_order",
}


def infer_edges(trace: S.Trace) -> pd.DataFrame:
    """Every inferred edge: SRC, DST, EDGE_KIND (one of :data:`INFERRED_EDGE_KINDS`) and the
    evidence columns of :data:`tracediag.graph.wait_evidence.EVIDENCE_COLUMNS`."""
    recorded = recorded_predecessors(trace) if len(trace.events) else None
    waits = wait_edges(trace, recorded)
    parts = [f for f in (waits, idle_wait_edges(trace, recorded)) if len(f)]
    if recorded is not None:
        known = pd.concat([trace.edges[[S.SRC, S.DST]], waits[[S.SRC, S.DST]]], ignore_index=True)
        more = (
            queue_wait_edges(trace, recorded[0], recorded[1]),
            receive_use_edges(trace, known, recorded[0], recorded[1]),
            weight_read_edges(trace),
        )
        parts += [f for f in more if len(f)]
    out = pd.concat(parts, ignore_index=True) if parts else empty_evidence_frame()
    out[S.EDGE_KIND] = pd.Categorical(out[S.EDGE_KIND].astype(str), categories=INFERRED_EDGE_KINDS)
    return out


def counts_by_rank(inferred: pd.DataFrame | None) -> dict[int, dict[str, int]]:
    """Per rank: the number of inferred edges of each inference (zeros included)."""
    if inferred is None or not len(inferred):
        return {}
    counts = inferred.groupby(["rank", S.EDGE_KIND], observed=False).size()
    out: dict[int, dict[str, int]] = {}
    for (rank, kind), n in counts.items():
        out.setdefault(int(rank), {})[INFERENCE_OF_KIND[str(kind)]] = int(n)
    return out


def wait_edges(trace: S.Trace, recorded: tuple | None = None) -> pd.DataFrame:
    """Edges ``producer -> waiter`` (kind ``dependency``) for unexplained semaphore stalls, with
    their evidence (see :func:`infer_edges`); ``recorded``: ``recorded_predecessors(trace)``
    when the caller has it."""
    ev = trace.events
    empty = empty_evidence_frame()
    if not len(ev):
        return empty
    ts = ev[S.TS].to_numpy()
    end = ts + ev[S.DUR].to_numpy()
    # Kind tests on the categorical column (per category, not a string compare per event).
    is_compute = (ev[S.KIND] == "compute").to_numpy(dtype=bool)
    rank = ev[S.RANK].to_numpy()
    wait = _waits(trace, ts, end, is_compute)
    waiter = np.flatnonzero(is_compute & np.isfinite(wait) & (wait > 0))
    if not len(waiter):
        return empty
    ready = ts[waiter] - wait[waiter].astype(np.int64)
    pred = _latest_edge_source_end(trace, waiter, end)
    explained = pred >= ts[waiter] - TOLERANCE_NS
    waiter, ready, pred = waiter[~explained], ready[~explained], pred[~explained]
    producer = np.flatnonzero(ev[S.KIND].isin(("compute", "dma", "collective")).to_numpy())
    if not len(waiter) or not len(producer):
        return empty
    # Latest producer end <= waiter start, per rank: search in (rank, end) order.
    span = int(end.max() - min(ts.min(), ready.min())) + 1
    base = int(min(ts.min(), ready.min()))
    key_p = rank[producer].astype(np.int64) * span + (end[producer] - base)
    o = np.argsort(key_p, kind="stable")
    key_p, producer = key_p[o], producer[o]
    # A producer ends no later than its waiter starts (the waiter itself is never a candidate).
    key_w = rank[waiter].astype(np.int64) * span + (ts[waiter] - base)
    i = np.searchsorted(key_p, key_w, side="right") - 1
    ok = i >= 0
    cand = producer[np.maximum(i, 0)]
    ok &= rank[cand] == rank[waiter]
    ok &= ev[S.TRACK].to_numpy()[cand] != ev[S.TRACK].to_numpy()[waiter]  # program order has it
    ok &= end[cand] >= ready - TOLERANCE_NS
    ok &= end[cand] > pred  # else the recorded predecessor binds: nothing to add
    runner = producer[np.maximum(i - 1, 0)]
    has_ru = (i >= 1) & (rank[runner] == rank[waiter])
    w, c = waiter[ok], cand[ok]
    beaten = (recorded or recorded_predecessors(trace))[1][w]
    runner, has_ru = runner[ok], has_ru[ok]
    return pd.DataFrame(
        {
            S.SRC: c.astype(np.int64),
            S.DST: w.astype(np.int64),
            S.EDGE_KIND: np.full(len(w), "dependency", dtype=object),
            "rank": rank[w].astype(np.int64),
            "gap_ns": (ts[w] - end[c]).astype(np.int64),
            "idle_ns": (ts[w] - ready[ok]).astype(np.int64),
            "beaten": beaten.astype(np.int64),
            "runner_up": np.where(has_ru, runner, -1).astype(np.int64),
            "runner_up_end_ns": np.where(has_ru, end[runner], -1).astype(np.int64),
        },
        columns=[S.SRC, S.DST, S.EDGE_KIND, *EVIDENCE_COLUMNS],
    )


def _waits(trace: S.Trace, ts: np.ndarray, end: np.ndarray, is_compute: np.ndarray) -> np.ndarray:
    """The profiler's stall time per event; on NeuronCore engines without one, the idle time
    since the previous instruction on the engine (an engine idles only when its next
    instruction waits), and for the engine's first instruction since the rank's first event
    (the engine had nothing to run until then: nothing records what its first instruction
    waited for, a collective trigger's wait on the last activation of a step among them)."""
    ev = trace.events
    wait = (
        ev[S.WAIT].to_numpy(dtype=np.float64, copy=True)
        if S.WAIT in ev
        else np.full(len(ev), np.nan)
    )
    track = ev[S.TRACK].to_numpy()
    engine_track = (S.strings(trace.tracks[S.TRACK_KIND]) == "compute_engine")[track]
    missing = ~np.isfinite(wait) & engine_track & is_compute
    if missing.any():
        o = stable_order_by(track, ts)
        same = np.r_[False, track[o][1:] == track[o][:-1]]
        idle = np.full(len(ev), np.nan)
        prev_end = np.r_[0, end[o][:-1]]
        idle[o[same]] = ts[o][same] - prev_end[same]
        rank = ev[S.RANK].to_numpy()
        first_of_rank = pd.Series(ts).groupby(rank).transform("min").to_numpy()
        idle[o[~same]] = ts[o][~same] - first_of_rank[o][~same]
        wait[missing] = idle[missing]
    return wait


def _latest_edge_source_end(trace: S.Trace, waiter: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per waiter: the latest end of a recorded edge's source into it (-inf without one)."""
    ed = trace.edges
    if not len(ed):
        return np.full(len(waiter), -np.inf)
    src, dst = ed[S.SRC].to_numpy(), ed[S.DST].to_numpy()
    if end.dtype.kind in "iu" and dst.dtype.kind in "iu":
        # One slot per event (edges reach events only): ufunc.at instead of a groupby's hashing.
        latest = np.full(len(end), np.iinfo(end.dtype).min, dtype=end.dtype)
        np.maximum.at(latest, dst, end[src])
        has = np.zeros(len(end), dtype=bool)
        has[dst] = True
        return np.where(has[waiter], latest[waiter].astype(np.float64), -np.inf)
    latest = pd.Series(end[src]).groupby(dst).max()
    return np.nan_to_num(latest.reindex(waiter).to_numpy(dtype=np.float64), nan=-np.inf)
