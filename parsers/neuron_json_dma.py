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
trigger (``PSEUDO_DMA_TRIGGER``, a ``WRITE`` at run time) ends before the transfer's first packet:
each transfer gets a ``dma_trigger`` edge from the last trigger instruction of that engine (any
of its instructions where it ran none) ending by its first packet's start, to every packet of
the transfer. How many were inferred, and how many transfers found none, go to ``meta.info``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracediag.model import schema as S
from tracediag.parsers.neuron_common import column, ints, normalise_engines
from tracediag.parsers.neuron_events import times

#: The engine a queue's name starts with (``qSync...``, ``qScalar...``; ``qAct`` = Scalar).
_QUEUE_ENGINE = r"^q(Sync|Scalar|Act|Vector|GpSimd|Pool|Tensor|PE)"
#: Opcodes of DMA trigger instructions (compile time and run time).
_TRIGGER_OPCODE = r"DMA_TRIGGER|^WRITE$"


def add_transfers(dma: pd.DataFrame, meta: S.RankMeta) -> pd.DataFrame:
    """``dma`` with ``packet_aggregation_id``: one id per transfer (see the module)."""
    blocks, valid = ints(column(dma, "block_id"), len(dma))
    if "packet_aggregation_id" in dma or not valid.any():
        return dma
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
    engine = dma["queue_name"].astype("string").str.extract(_QUEUE_ENGINE, expand=False)
    engine = np.asarray(normalise_engines(engine), dtype=object)
    pcore, _ = ints(column(dma, "pcore_idx"), len(dma))
    start, _ = times(dma)
    packets = pd.DataFrame(
        {
            "row": np.arange(len(dma)),
            "t": agg,
            "e": engine,
            "p": pcore,
            "s": start.to_numpy(dtype=np.float64, na_value=np.nan),
        }
    )[valid & (engine != "unknown")]
    first = packets.groupby("t").agg(e=("e", "first"), p=("p", "first"), s=("s", "min"))
    first = first.dropna(subset=["s"]).reset_index().sort_values("s", kind="stable")
    cand = _trigger_candidates(instr)
    if not len(first) or not len(cand):
        return empty
    hit = pd.merge_asof(
        first, cand.sort_values("end"), left_on="s", right_on="end", by=["e", "p"],
        direction="backward",
    )  # fmt: skip
    hit = hit.dropna(subset=["src"])
    meta.info["dma_triggers_inferred"] = len(hit)
    meta.info["dma_transfers_without_trigger"] = len(first) - len(hit)
    edges = packets.merge(hit[["t", "src"]], on="t")
    return pd.DataFrame(
        {
            S.SRC: instr_first + edges["src"].to_numpy(dtype=np.int64),
            S.DST: dma_first + edges["row"].to_numpy(dtype=np.int64),
            S.EDGE_KIND: "dma_trigger",
        }
    )


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
