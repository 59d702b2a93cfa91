"""Instruction ``dma_trigger_start_ts``/``dma_trigger_end_ts``/``dma_wait_time_ns`` -> DMA edges.

The reference describes the two timestamps as "the DMA it triggered" and ``dma_wait_time_ns`` as
the "delay from this trigger instruction's end to the triggered DMA's start", but leaves open
which rows carry them, so both readings are accepted, row by row:

- *trigger* reading: a row that starts before ``dma_trigger_start_ts`` triggered the DMA
  transfers (blocks) that lie inside [``dma_trigger_start_ts``, ``dma_trigger_end_ts``] and start
  after it ends. Each such block that no Flow edge reaches gets a ``dma_trigger`` edge from it to
  every packet of the block (as a Flow ``DGE_TRIGGER`` edge does).
- *consumer* reading: a row that starts at or after ``dma_trigger_start_ts`` (an LDWEIGHTS or
  MATMUL) waited for the DMA that ends last inside the window; its ``dma_wait_time_ns`` is that
  stall. When no recorded edge leaves a DMA, it gets a ``dependency`` edge from the block's last
  packet, and the stall is part of its ``wait_ns`` (:func:`consumer_waits`).

Trigger windows of consecutive triggers overlap (a slow transfer keeps one open while the next
is issued), so a block inside several windows goes to the trigger whose window starts or ends
exactly at the block; else to the trigger of the previous block on its queue (a queue serves
its descriptors in order) when that window contains it; else to the oldest trigger whose window
contains it. A queue named after an engine (``qSync...``, ``qScalar...``) is triggered from that
engine's instructions only. Counts go to ``meta.info["dma_trigger_fields"]``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracediag.model import schema as S
from tracediag.parsers.neuron_common import column, floats, ints, normalise_engines
from tracediag.parsers.neuron_events import times

#: The engine a queue's name starts with (``qSync...``, ``qScalar...``; ``qAct`` = Scalar).
_QUEUE_ENGINE = r"^q(Sync|Scalar|Act|Vector|GpSimd|Pool|Tensor|PE)"
#: How many overlapping trigger windows a block is checked against (the most recent ones that
#: start no later than the block): windows nest a few deep, never hundreds.
WINDOW_DEPTH = 8


def _roles(instr: pd.DataFrame) -> tuple[np.ndarray, ...]:
    """Per instruction: window start, window end, own start, own end, is trigger, is consumer."""
    n = len(instr)
    lo, lo_ok = ints(column(instr, "dma_trigger_start_ts"), n)
    hi, hi_ok = ints(column(instr, "dma_trigger_end_ts"), n)
    start, dur = times(instr)
    s, s_ok = ints(start, n)
    d, d_ok = ints(dur, n)
    has = lo_ok & hi_ok & s_ok & d_ok & (hi >= lo)
    return lo, hi, s, s + d, has & (s < lo), has & (s >= lo)


def consumer_waits(instr: pd.DataFrame, wait: np.ndarray) -> np.ndarray:
    """``wait`` (the instructions' ``wait_ns``) raised to ``dma_wait_time_ns`` on the rows of the
    consumer reading: the stall on the DMA is part of the stall before the instruction started
    (``evt_wait_time_ns`` counts every semaphore, so it is the larger when both are given)."""
    if column(instr, "dma_wait_time_ns") is None:
        return wait
    consumer = _roles(instr)[5]
    dma_wait = floats(column(instr, "dma_wait_time_ns"), len(instr))
    out = np.asarray(wait, dtype=np.float64).copy()
    out[consumer] = np.fmax(out[consumer], dma_wait[consumer])
    return out


def _blocks(dma: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    """Per DMA block (``packet_aggregation_id``): start, end, first-start and last-end packet
    rows, queue code, queue engine and pcore; and each packet's block index (-1: none)."""
    n = len(dma)
    agg, valid = ints(column(dma, "packet_aggregation_id"), n)
    start, dur = times(dma)
    s, s_ok = ints(start, n)
    d, d_ok = ints(dur, n)
    valid = valid & s_ok & d_ok
    block_of = np.full(n, -1, dtype=np.int64)
    block_of[valid] = pd.factorize(agg[valid], sort=True)[0]  # np.unique's inverse, by hash
    queue_code, engine = _queue_engines(column(dma, "queue_name"), n)
    pcore, _ = ints(column(dma, "pcore_idx"), n)
    p = pd.DataFrame(
        {"b": block_of, "s": s, "e": s + d, "row": np.arange(n), "q": queue_code,
         "eng": engine, "pcore": pcore}
    )[valid]  # fmt: skip
    first = p.sort_values(["b", "s", "row"]).drop_duplicates("b", keep="first").set_index("b")
    last = p.sort_values(["b", "e", "row"]).drop_duplicates("b", keep="last").set_index("b")
    blocks = first[["s", "q", "eng", "pcore"]].assign(
        e=last["e"], first_row=first["row"], last_row=last["row"]
    )
    return blocks.sort_index(), block_of


def _queue_engines(names: pd.Series | None, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Per packet: its queue's code (order of first appearance, -1: none) and the engine the
    queue's name starts with ("unknown": none). A Categorical column (how the tables are read)
    is matched once per distinct name, not once per packet."""
    if names is None:
        names = pd.Series(pd.NA, index=pd.RangeIndex(n), dtype="string")
    cat = names.array if isinstance(names.dtype, pd.CategoricalDtype) else None
    if cat is None or cat.categories.dtype != "str":
        queue = names.astype("string")
        engine = normalise_engines(queue.str.extract(_QUEUE_ENGINE, expand=False))
        return pd.factorize(queue)[0], np.asarray(engine, dtype=object)
    per_name = normalise_engines(pd.Series(cat.categories).str.extract(_QUEUE_ENGINE, expand=False))
    lookup = np.asarray([*np.asarray(per_name, dtype=object), "unknown"], dtype=object)
    return pd.factorize(names)[0], lookup[np.asarray(cat.codes)]


def _candidates(bkey, bs, be, tkey, tlo, thi, tend) -> pd.DataFrame:
    """Pairs (block, trigger) where the trigger's window (same key) contains the block and the
    trigger ended by the block's start; the :data:`WINDOW_DEPTH` latest windows per block."""
    base = int(min(bs.min(), tlo.min()))
    span = int(max(bs.max(), tlo.max()) - base) + 1
    tk = tkey * span + (tlo - base)
    order = np.argsort(tk, kind="stable")
    pos = np.searchsorted(tk[order], bkey * span + (bs - base), side="right") - 1
    pairs = []
    for k in range(WINDOW_DEPTH):
        i = pos - k
        ok = i >= 0
        t = order[np.maximum(i, 0)]
        ok &= (tkey[t] == bkey) & (thi[t] >= be) & (tend[t] <= bs)
        pairs.append(pd.DataFrame({"b": np.flatnonzero(ok), "t": t[ok]}))
    return pd.concat(pairs, ignore_index=True)


def _assign(blocks: pd.DataFrame, trig: pd.DataFrame) -> pd.Series:
    """Block index -> trigger index (see the module for the order of preference)."""
    bs, be = blocks["s"].to_numpy(), blocks["e"].to_numpy()
    pcore_b, pcore_t = blocks["pcore"].to_numpy(), trig["pcore"].to_numpy()
    engines, codes = np.unique(
        np.r_[blocks["eng"].to_numpy(), trig["eng"].to_numpy()], return_inverse=True
    )
    eng_b, eng_t = codes[: len(blocks)], codes[len(blocks) :]
    tlo, thi, tend = trig["lo"].to_numpy(), trig["hi"].to_numpy(), trig["end"].to_numpy()
    named = engines[eng_b] != "unknown"
    width = len(engines) + 1
    found = []
    # A queue named after an engine: that engine's triggers; any other queue: every trigger.
    for sel, bkey, tkey in (
        (named, pcore_b * width + eng_b, pcore_t * width + eng_t),
        (~named, pcore_b, pcore_t),
    ):
        idx = np.flatnonzero(sel)
        if len(idx):
            c = _candidates(bkey[idx], bs[idx], be[idx], tkey, tlo, thi, tend)
            found.append(c.assign(b=idx[c["b"].to_numpy()]))
    pairs = pd.concat(found, ignore_index=True)
    if not len(pairs):
        return pd.Series(dtype=np.int64)
    b, t = pairs["b"].to_numpy(), pairs["t"].to_numpy()
    pairs["lo"] = tlo[t]
    # Ending at the window's end is the stronger match: starts coincide whenever the queue
    # was idle (two triggers issued together), ends rarely do.
    pairs["exact"] = 2 * (thi[t] == be[b]) + (tlo[t] == bs[b])
    by_exact = pairs.sort_values(["b", "exact", "lo", "t"], ascending=[1, 0, 1, 1], kind="stable")
    exact = by_exact[by_exact["exact"] > 0].drop_duplicates("b").set_index("b")["t"]
    pairs = pairs.sort_values(["b", "lo", "t"], kind="stable")
    # The trigger of the last exactly matched block before it on its queue (queues are FIFO).
    order = blocks.assign(x=exact.reindex(np.arange(len(blocks))).to_numpy()).sort_values(
        ["q", "s"]
    )
    run = order.groupby("q")["x"].ffill().reindex(np.arange(len(blocks))).to_numpy()
    in_run = pairs["t"].to_numpy() == run[pairs["b"].to_numpy()]
    by_run = pairs[in_run].drop_duplicates("b").set_index("b")["t"]
    oldest = pairs.drop_duplicates("b").set_index("b")["t"]
    return exact.combine_first(by_run).combine_first(oldest).astype(np.int64)


def field_edges(
    instr: pd.DataFrame,
    instr_first: int,
    dma: pd.DataFrame,
    dma_first: int,
    recorded: list[pd.DataFrame],
    meta: S.RankMeta,
) -> list[pd.DataFrame]:
    """The edges the trigger fields imply (see the module) where ``recorded`` (the format's
    edges, event rows) has none: trigger -> block packets, and DMA -> consumer."""
    if column(instr, "dma_trigger_start_ts") is None or column(instr, "dma_trigger_end_ts") is None:
        return []
    lo, hi, start, end, trigger, consumer = _roles(instr)
    if not (trigger.any() or consumer.any()):
        return []
    blocks, block_of = _blocks(dma)
    if not len(blocks):
        return []
    src = np.concatenate(
        [e[S.SRC].to_numpy(dtype=np.int64) for e in recorded] + [np.zeros(0, np.int64)]
    )
    dst = np.concatenate(
        [e[S.DST].to_numpy(dtype=np.int64) for e in recorded] + [np.zeros(0, np.int64)]
    )
    in_dma = lambda rows: (rows >= dma_first) & (rows < dma_first + len(dma))  # noqa: E731
    reached = np.zeros(len(blocks), dtype=bool)
    into = block_of[dst[in_dma(dst)] - dma_first]
    reached[into[into >= 0]] = True
    info = {"triggers": int(trigger.sum()), "consumers": int(consumer.sum())}
    out = []
    rows = np.flatnonzero(trigger)
    open_blocks = np.flatnonzero(~reached)
    if len(rows) and len(open_blocks):
        pcore, _ = ints(column(instr, "pcore_idx"), len(instr))
        engine = normalise_engines(instr["engine"])  # names for the trigger rows only
        trig = pd.DataFrame(
            {"row": rows, "lo": lo[rows], "hi": hi[rows], "end": end[rows], "pcore": pcore[rows],
             "eng": np.asarray(engine.categories, dtype=object)[engine.codes[rows]]}
        )  # fmt: skip
        chosen = _assign(blocks.iloc[open_blocks].reset_index(drop=True), trig)
        block = open_blocks[chosen.index.to_numpy(dtype=np.int64)]
        owner = pd.Series(trig["row"].to_numpy()[chosen.to_numpy()], index=block)
        packets = np.flatnonzero(np.isin(block_of, block))
        out.append(
            _frame(
                instr_first + owner.reindex(block_of[packets]).to_numpy(),
                dma_first + packets,
                "dma_trigger",
            )
        )
        info["trigger_edges"] = len(packets)
        info["blocks_without_trigger"] = int(len(open_blocks) - len(block))
    leaves_dma = in_dma(src) & ~in_dma(dst)
    rows = np.flatnonzero(consumer)
    if len(rows) and not leaves_dma.any():
        hit = _consumed(blocks, rows, lo, hi, start, instr)
        out.append(
            _frame(
                dma_first + hit["last_row"].to_numpy(),
                instr_first + hit["row"].to_numpy(),
                "dependency",
            )
        )
        info["consumer_edges"] = len(hit)
    meta.info["dma_trigger_fields"] = info
    return out


def _consumed(blocks, rows, lo, hi, start, instr) -> pd.DataFrame:
    """Per consumer row: the block that ends last inside its window, by the consumer's start."""
    pcore, _ = ints(column(instr, "pcore_idx"), len(instr))
    want = pd.DataFrame(
        {"row": rows, "lo": lo[rows], "e": np.minimum(hi[rows], start[rows]), "pcore": pcore[rows]}
    ).sort_values("e", kind="stable")
    have = blocks[["s", "e", "pcore", "last_row"]].sort_values(["e", "s"], kind="stable")
    hit = pd.merge_asof(want, have, on="e", by="pcore", direction="backward")
    return hit[hit["s"].notna() & (hit["s"] >= hit["lo"])].astype({"last_row": np.int64})


def _frame(src: np.ndarray, dst: np.ndarray, kind: str) -> pd.DataFrame:
    return pd.DataFrame(
        {S.SRC: src.astype(np.int64), S.DST: dst.astype(np.int64), S.EDGE_KIND: kind}
    )
