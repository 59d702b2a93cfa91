"""What an Explorer DMA table says before it becomes events: duplicates, counted bytes, transfers.

- Duplicate packets are a known profiler defect (troubleshooting guide): a row identical to an
  earlier one in id, times, ring and bytes is removed and counted.
- Bytes as AWS's own analysis counts them: packets of the ``instruction`` queue type (the
  engines' instruction fetch) and packets of at most 4 bytes (semaphore writes) move no tensor
  data; they keep their time on the ring but carry no bytes, so byte totals and the small-transfer
  rule leave them out.
- Efficiency per transfer: a transfer (``packet_aggregation_id``, a ``DmaPacketAggregated``
  row) is many packets, and the 32 KiB target of the glossary is per transfer, not per packet.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracediag.model import schema as S
from tracediag.parsers.neuron_common import column, floats, ints, labels

#: A transfer of at least this size reaches the DMA engines' efficient regime (glossary).
EFFICIENT_TRANSFER_BYTES = 32 * 1024
#: Packets of at most this size are semaphore or descriptor writes, not data (AWS's filter).
TINY_PACKET_BYTES = 4
#: The columns whose equality makes two packet rows one packet written twice.
_IDENTITY = ("id", "start_ts", "end_ts", "duration_ns", "engine_idx", "pcore_idx", "transfer_bytes")


def drop_duplicate_packets(dma: pd.DataFrame, table: str, meta: S.RankMeta) -> pd.DataFrame:
    """``dma`` without rows repeating an earlier row's identity columns; counted in ``meta``."""
    keys = [c for c in _IDENTITY if c in dma.columns]
    if "id" not in keys or not len(dma):
        return dma
    # A row repeats an earlier one only where its id does: the identity columns are compared
    # on those rows alone (in table order, so "earlier" stays the same), not on every packet.
    dup = np.zeros(len(dma), dtype=bool)
    maybe = dma["id"].duplicated(keep=False).to_numpy()
    if maybe.any():
        dup[maybe] = dma.loc[maybe, keys].duplicated(keep="first").to_numpy()
    n = int(dup.sum())
    meta.info["dma_duplicate_packets"] = n
    if not n:
        return dma
    meta.count(f"{table}: duplicate packet removed (a known profiler defect)", n)
    return dma.loc[~dup].reset_index(drop=True)


def data_bytes(dma: pd.DataFrame) -> np.ndarray:
    """Per row: its ``transfer_bytes``, NaN for instruction-queue and tiny packets."""
    n = len(dma)
    nbytes = floats(column(dma, "transfer_bytes"), n)
    qtype = labels(column(dma, "queue_type"), n)
    cats = np.asarray(qtype.categories, dtype=object)
    instruction = np.isin(
        qtype.codes, np.flatnonzero(np.char.lower(cats.astype(str)) == "instruction")
    )
    return np.where(instruction | (nbytes <= TINY_PACKET_BYTES), np.nan, nbytes)


def transfer_stats(dma: pd.DataFrame, nbytes: np.ndarray) -> dict[str, dict]:
    """Per queue: transfers, packets, data bytes, mean transfer size and the share of transfers
    at the 32 KiB target (transfers of data packets only, grouped by ``packet_aggregation_id``)."""
    n = len(dma)
    agg, valid = ints(column(dma, "packet_aggregation_id"), n)
    if not valid.any():
        agg, valid = ints(column(dma, "id"), n)
    queue = labels(column(dma, "queue_name"), n)
    ok = valid & np.isfinite(nbytes) & (queue.codes >= 0)
    if not ok.any():
        return {}
    frame = pd.DataFrame({"q": queue.codes[ok], "t": agg[ok], "b": nbytes[ok]})
    per = frame.groupby(["q", "t"], sort=False)["b"].agg(["sum", "size"]).reset_index()
    per["efficient"] = per["sum"] >= EFFICIENT_TRANSFER_BYTES
    out = per.groupby("q").agg(
        transfers=("t", "size"), packets=("size", "sum"), bytes=("sum", "sum"),
        efficient=("efficient", "sum"),
    )  # fmt: skip
    return {
        str(queue.categories[q]): {
            "transfers": int(r.transfers),
            "packets": int(r.packets),
            "bytes": int(r.bytes),
            "mean_transfer_bytes": float(r.bytes / r.transfers),
            "transfers_at_32KiB_pct": round(100.0 * r.efficient / r.transfers, 2),
        }
        for q, r in out.iterrows()  # one row per queue
    }


def block_semaphores(packets: pd.DataFrame, blocks: pd.DataFrame | None) -> pd.DataFrame:
    """``packets`` (``DmaPacket`` rows) with the ``semaphore_id`` of their transfer: the
    ``DmaPacketAggregated`` row whose ``id`` is the packet's ``packet_aggregation_id`` (the
    packet table has no semaphore column). Unchanged when either side lacks its key."""
    sid = column(blocks, "semaphore_id")
    if sid is None or "id" not in blocks or "semaphore_id" in packets:
        return packets
    agg, valid = ints(column(packets, "packet_aggregation_id"), len(packets))
    ids, known = ints(blocks["id"], len(blocks))
    if not valid.any() or not known.any():
        return packets
    cat = labels(sid, len(sid))
    by_id = pd.Series(np.asarray(cat.codes)[known], index=ids[known])
    by_id = by_id[~by_id.index.duplicated(keep="first")]
    codes = by_id.reindex(agg).fillna(-1).to_numpy(dtype=np.int64)
    codes[~valid] = -1
    return packets.assign(semaphore_id=pd.Categorical.from_codes(codes, cat.categories))
