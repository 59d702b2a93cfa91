"""Legacy JSON DMA rows -> transfers (``block_id``) and the instructions that trigger them.

A legacy ``dma`` row is one packet: its queue (``dma_queue``/``subgroup``), its ring
(``engine_idx``) and ``block_id``, the compiler's id of the transfer it serves ("a block_id is
used by the compiler to logically identify the transfer of one or more tensors ... fulfilled by
a set of DMA packets"; unique per DMA engine, queue, function and subgraph: schema reference).
The packets of one queue and block (and physical core) that overlap or follow one another without
a gap are one transfer, as ``DmaPacketAggregated`` rows are in Parquet; the same block id seen
again after the transfer ended (the next execution) is a new transfer. Each transfer gets a
``packet_aggregation_id``.

The JSON names no trigger (Parquet's Flow ``DGE_TRIGGER`` edges, our ``trigger_id`` extension).
A queue is named after the engine whose instruction queue triggers it (``qSyncIO0``,
``qScalarSpillReload0-Q1-E64``, ``S[10] (qGpSimdPIO0)``: neuron-real-output.md), and the
trigger (``PSEUDO_DMA_TRIGGER``, a ``WRITE`` at run time) ends before the transfer's first packet.
Each transfer gets a ``dma_trigger`` edge, to every packet of the transfer, from the trigger
whose byte fields its queue's transfers use up in order (:mod:`neuron_json_dma_fifo`,
``info["dma_triggers_by_bytes"]``); on an engine whose triggers state no bytes and feed one
queue, from the trigger of the same rank in issue order when the counts agree
(``info["dma_triggers_by_order"]``); a transfer none fits, from the last trigger instruction of
that engine (any of its instructions where it ran none) ending by its first packet's start
(``info["dma_triggers_inferred"]``; ``dma_transfers_without_trigger``: found none).
Rows without any ``block_id`` (the documented row: queue, ``transfer_size``, ``timestamp``,
``duration``) are one transfer each (``info["dma_transfers_from_rows"]``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracediag.model import schema as S
from tracediag.parsers import neuron_json_dma_fifo as json_fifo
from tracediag.parsers.neuron_common import column, ints, normalise_engines
from tracediag.parsers.neuron_events import times

#: The engine a queue's name starts with (``qSync...``, ``qScalar...``; ``qAct`` = Scalar).
_QUEUE_ENGINE = r"^q(Sync|Scalar|Act|Vector|GpSimd|Pool|Tensor|PE)"
#: Opcodes of DMA trigger instructions (compile time and run time).
_TRIGGER_OPCODE = r"DMA_TRIGGER|^WRITE$"


def add_transfers(dma: pd.DataFrame, meta: S.RankMeta) -> pd.DataFrame:
    """``dma`` with ``packet_aggregation_id``: one id per transfer (see the module)."""
    blocks, valid = ints(column(dma, "block_id"), len(dma))
    if "packet_aggregation_id" in dma:
        return dma
    if not valid.any():
        # The documented row (queue, transfer_size, timestamp, duration) names no block: each
        # row is one transfer of its transfer_size, as Parquet blocks without packets are.
        out = dma.assign(packet_aggregation_id=pd.array(np.arange(len(dma)), dtype="Int64"))
        meta.info["dma_transfers_from_rows"] = len(dma)
        return out
    start, dur = times(dma)
    s = start.to_numpy(dtype=np.float64, na_value=np.nan)
    e = s + dur.to_numpy(dtype=np.float64, na_value=np.nan)
    pcore, _ = ints(column(dma, "pcore_idx"), len(dma))
    queue = pd.factorize(dma["queue_name"].astype("string"))[0] if "queue_name" in dma else 0
    table = pd.DataFrame(
        {"q": queue, "p": pcore, "b": np.where(valid, blocks, -1), "s": s, "e": e}
    ).sort_values(["q", "p", "b", "s"], kind="stable")
    group = table[["q", "p", "b"]].to_numpy()
    same = np.r_[False, (group[1:] == group[:-1]).all(axis=1)]
    reach = table["e"].groupby([table["q"], table["p"], table["b"]]).cummax().shift()
    # A new transfer: a new block, or a packet that starts after the block's packets so far end.
    new = ~same | (table["s"].to_numpy() > reach.to_numpy())
    ids = np.empty(len(table), dtype=np.int64)
    ids[table.index.to_numpy()] = np.cumsum(new) - 1
    out = dma.assign(packet_aggregation_id=np.where(valid, ids, pd.NA))
    out["packet_aggregation_id"] = out["packet_aggregation_id"].astype("Int64")
    meta.info["dma_transfers_from_block_id"] = int(new[table["b"].to_numpy() >= 0].sum())
    return out


def trigger_edges(
    instr: pd.DataFrame | None,
    instr_first: int,
    dma: pd.DataFrame,
    dma_first: int,
    meta: S.RankMeta,
) -> pd.DataFrame:
    """``dma_trigger`` edges instruction -> every packet of each transfer (see the module)."""
    empty = pd.DataFrame(
        {S.SRC: np.zeros(0, np.int64), S.DST: np.zeros(0, np.int64), S.EDGE_KIND: "dma_trigger"}
    )
    agg, valid = ints(column(dma, "packet_aggregation_id"), len(dma))
    if instr is None or "queue_name" not in dma or not valid.any():
        return empty
    queue = dma["queue_name"].astype("string")
    engine = np.asarray(normalise_engines(queue.str.extract(_QUEUE_ENGINE, expand=False)), object)
    pcore, _ = ints(column(dma, "pcore_idx"), len(dma))
    start, dur = times(dma)
    s = start.to_numpy(dtype=np.float64, na_value=np.nan)
    packets = pd.DataFrame(
        {
            "row": np.arange(len(dma)),
            "t": agg,
            "e": engine,
            "p": pcore,
            "s": s,
            "fin": s + dur.to_numpy(dtype=np.float64, na_value=np.nan),
            "q": pd.factorize(queue)[0],
            "block": ints(column(dma, "block_id"), len(dma))[0],
            "n": _counted_bytes(dma),
        }
    )[valid & (engine != "unknown")]
    first = packets.groupby("t").agg(
        e=("e", "first"), p=("p", "first"), s=("s", "min"), fin=("fin", "max"),
        q=("q", "first"), block=("block", "first"), n=("n", "sum"),
    )  # fmt: skip
    first = first.dropna(subset=["s"]).reset_index().sort_values("s", kind="stable")
    cand = _trigger_candidates(instr)
    if not len(first) or not len(cand):
        return empty
    by_bytes = _by_bytes(first, instr, dma)
    rest = first[~first["t"].isin(by_bytes["t"])]
    by_order = _by_order(rest, instr, dma)
    rest = rest[~rest["t"].isin(by_order["t"])]
    hit = pd.merge_asof(
        rest, cand.sort_values("end"), left_on="s", right_on="end", by=["e", "p"],
        direction="backward",
    )  # fmt: skip
    hit = hit.dropna(subset=["src"])
    meta.info["dma_triggers_by_bytes"] = len(by_bytes)
    meta.info["dma_trigger_queue_ambiguous"] = int(by_bytes.attrs.get("ambiguous", 0))
    meta.info["dma_triggers_by_order"] = len(by_order)
    meta.info["dma_triggers_inferred"] = len(hit)
    meta.info["dma_transfers_without_trigger"] = len(rest) - len(hit)
    chosen = pd.concat(
        [by_bytes[["t", "src"]], by_order[["t", "src"]], hit[["t", "src"]]], ignore_index=True
    )
    edges = packets[["row", "t"]].merge(chosen, on="t")
    return pd.DataFrame(
        {
            S.SRC: instr_first + edges["src"].to_numpy(dtype=np.int64),
            S.DST: dma_first + edges["row"].to_numpy(dtype=np.int64),
            S.EDGE_KIND: "dma_trigger",
        }
    )


def _counted_bytes(dma: pd.DataFrame) -> np.ndarray:
    """Per packet the bytes a trigger's byte fields count: none for instruction queues, packets
    of 4 bytes or less (as AWS counts) and repeats of a packet (a known profiler defect)."""
    n, _ = ints(column(dma, "transfer_bytes"), len(dma))
    keep = n > 4
    qtype = column(dma, "queue_type")
    if qtype is not None:
        keep &= (qtype.astype("string").str.lower() != "instruction").fillna(True).to_numpy(bool)
    same = [c for c in ("queue_name", "pcore_idx", "block_id", "engine_idx", "start_ts",
                        "duration_ns", "transfer_bytes") if c in dma]  # fmt: skip
    keep &= ~dma.duplicated(subset=same).to_numpy()
    return np.where(keep, n, 0)


def _by_bytes(first: pd.DataFrame, instr: pd.DataFrame, dma: pd.DataFrame) -> pd.DataFrame:
    """Transfers (``t``) whose trigger (``src``, instruction row) their queue's FIFO use of the
    triggers' byte fields names (:mod:`neuron_json_dma_fifo`); ``attrs["ambiguous"]``: triggers
    that fit two queues equally."""
    none = pd.DataFrame({"t": np.zeros(0, np.int64), "src": np.zeros(0)})
    trig = _triggers(instr)
    trig = trig[trig["bytes"].to_numpy() > 0]
    if "pcore_idx" not in dma:  # DMA rows that name no physical core: any core's triggers
        trig["p"] = 0
    data = first[first["n"] > 0]
    if not len(trig) or not len(data):
        return none
    key = pd.factorize(pd.MultiIndex.from_arrays([data["q"], data["p"]]))[0]
    transfers = pd.DataFrame(
        {"key": key, "s": data["s"].to_numpy(np.int64), "e": data["fin"].to_numpy(np.float64),
         "block": data["block"].to_numpy(), "bytes": data["n"].to_numpy(np.int64),
         "t": data["t"].to_numpy()}
    )  # fmt: skip
    queues = pd.DataFrame({"key": key, "eng": data["e"].to_numpy(), "p": data["p"].to_numpy()})
    queues = queues.drop_duplicates("key")
    fifo = json_fifo.queue_order(transfers)
    trig["key"] = json_fifo.assign_queues(trig, fifo, queues)
    out = json_fifo.match(trig, fifo).dropna(subset=["src"])[["t", "src"]]
    out.attrs["ambiguous"] = int((trig["key"] == -2).sum())
    return out


def _by_order(first: pd.DataFrame, instr: pd.DataFrame, dma: pd.DataFrame) -> pd.DataFrame:
    """Transfers (``t``) paired in order with the triggers (``src``) of an engine whose triggers
    state no bytes and whose transfers all go to one queue: the queue serves its descriptors in
    issue order and a trigger names one block (``PSEUDO_DMA_TRIGGER`` operands
    ``qSyncPIOParam0 block_id=1``: schema reference), so the k-th trigger to end issued the k-th
    transfer to start. Only where the counts agree and every pair is causal; elsewhere time
    alone decides (a trigger issued faster than the queue's issue latency ends before the
    previous trigger's transfer starts, so the last trigger ending by a start is a later one)."""
    none = pd.DataFrame({"t": np.zeros(0, np.int64), "src": np.zeros(0)})
    trig = _triggers(instr)
    if "pcore_idx" not in dma:  # DMA rows that name no physical core: any core's triggers
        trig["p"] = 0
    if not len(trig) or not len(first):
        return none
    trig = trig[trig.groupby(["eng", "p"])["bytes"].transform("max").to_numpy() <= 0]
    trig = trig.sort_values(["end", "src"], kind="stable")
    trig["k"] = trig.groupby(["eng", "p"]).cumcount()
    xfer = first.rename(columns={"e": "eng"}).sort_values(["s", "t"], kind="stable")
    xfer = xfer.assign(k=xfer.groupby(["eng", "p"]).cumcount())
    pairs = xfer.merge(trig[["eng", "p", "k", "end", "src"]], on=["eng", "p", "k"], how="left")
    n_trig = trig.groupby(["eng", "p"]).size().rename("n_trig")
    pairs = pairs.join(n_trig, on=["eng", "p"])
    # The causal column is NaN-free: a transfer past the triggers has no end and fails.
    pairs["causal"] = (pairs["end"] <= pairs["s"]).to_numpy(dtype=bool)
    per_engine = pairs.groupby(["eng", "p"]).agg(
        n=("t", "size"), n_trig=("n_trig", "first"), queues=("q", "nunique"),
        causal=("causal", "all"),
    )  # fmt: skip
    fits = per_engine[
        (per_engine["n"] == per_engine["n_trig"]) & (per_engine["queues"] == 1)
        & per_engine["causal"]
    ]  # fmt: skip
    return pairs.merge(fits[[]], left_on=["eng", "p"], right_index=True)[["t", "src"]]


def _triggers(instr: pd.DataFrame) -> pd.DataFrame:
    """Trigger instructions (DMA_TRIGGER/WRITE opcodes): engine, pcore, end, bytes
    (``hbm_read_bytes`` + ``hbm_write_bytes``, 0 where none) and row."""
    n = len(instr)
    read, _ = ints(column(instr, "hbm_read_bytes"), n)
    write, _ = ints(column(instr, "hbm_write_bytes"), n)
    opcode = column(instr, "opcode")
    if opcode is None:
        return pd.DataFrame(columns=["eng", "p", "end", "bytes", "src"])
    trig = opcode.astype("string").str.contains(_TRIGGER_OPCODE, regex=True).fillna(False)
    start, dur = times(instr)
    end, end_ok = ints(start + dur, n)
    pcore, _ = ints(column(instr, "pcore_idx"), n)
    rows = np.flatnonzero(trig.to_numpy(bool) & end_ok)
    return pd.DataFrame(
        {"eng": np.asarray(normalise_engines(instr["engine"]), dtype=object)[rows],
         "p": pcore[rows], "end": end[rows], "bytes": (read + write)[rows], "src": rows}
    )  # fmt: skip


def _trigger_candidates(instr: pd.DataFrame) -> pd.DataFrame:
    """Per instruction that may trigger a DMA: engine, pcore, end time and its row. An engine
    that ran trigger opcodes offers only those; another offers all its instructions."""
    start, dur = times(instr)
    end = (start + dur).to_numpy(dtype=np.float64, na_value=np.nan)
    pcore, _ = ints(column(instr, "pcore_idx"), len(instr))
    opcode = (
        instr["opcode"].astype("string")
        if "opcode" in instr
        else pd.Series(pd.NA, index=instr.index)
    )
    trig = opcode.str.contains(_TRIGGER_OPCODE, regex=True).fillna(False).to_numpy(dtype=bool)
    cand = pd.DataFrame(
        {
            "e": np.asarray(normalise_engines(instr["engine"]), dtype=object),
            "p": pcore,
            "end": end,
            "src": np.arange(len(instr), dtype=np.float64),
            "trig": trig,
        }
    ).dropna(subset=["end"])
    has_trig = cand.groupby(["e", "p"])["trig"].transform("any").to_numpy(dtype=bool)
    return cand[cand["trig"].to_numpy() | ~has_trig].drop(columns="trig")
