"""Resolving the ids Neuron tables use to refer to each other onto a rank's event rows.

``Flow`` edges name their ends by (table, id): ``instruction`` (Instruction.id), ``dma_packet``
(DmaPacket.id), ``dma_block``/``dma_packet_aggregated`` (a DMA block: DmaPacket's
``packet_aggregation_id`` = DmaPacketAggregated.id) and ``cc_op`` (CcOp.op_id). DMA events keep
packet granularity, so a block resolves to its packets: an edge *into* a block, or into one of
its packets, binds every packet of the block (each packet, on whichever ring serves it, cannot
start before the block is triggered), and an edge *out of* a block leaves from its last packet
(the block is done when its last packet is).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracediag.model import schema as S
from tracediag.parsers.neuron_common import IdIndex, column, ints, labels
from tracediag.parsers.neuron_events import times

_INSTRUCTION = "instruction"
_DMA_PACKET = "dmapacket"
_DMA_BLOCK = "dmablock"
_CC_OP = "ccop"
#: Flow table names (lower-cased, underscores removed) -> the kind of event they name.
TABLE_ALIASES = {
    "instruction": _INSTRUCTION,
    "dmapacket": _DMA_PACKET,
    "dmablock": _DMA_BLOCK,
    "dmapacketaggregated": _DMA_BLOCK,
    "ccop": _CC_OP,
}


def id_index(ids: pd.Series | None, first_row: int, n: int, meta: S.RankMeta, what: str) -> IdIndex:
    """Index of a table's id column onto its event rows; repeated ids are counted."""
    values, valid = ints(ids, n)
    index = IdIndex(values, valid, first_row + np.arange(n, dtype=np.int64))
    meta.count(f"{what}: repeated id (edges bind to its first row)", index.duplicates)
    return index


Located = tuple[pd.DataFrame, int]  # a table and the event row of its first row


@dataclass
class EventIds:
    """Source ids -> event rows for every table an edge may name."""

    instruction: IdIndex
    dma_packet: IdIndex
    block_first: IdIndex
    block_last: IdIndex
    cc_op: IdIndex
    blocks: BlockMembers

    @classmethod
    def build(
        cls, meta: S.RankMeta, instr: Located | None, dma: Located | None, cc: Located | None
    ) -> EventIds:
        """Index the tables present (None: the table is absent)."""

        def index(table: Located | None, id_column: str, what: str) -> IdIndex:
            if table is None:
                return IdIndex.empty()
            return id_index(column(table[0], id_column), table[1], len(table[0]), meta, what)

        first, last = _block_ends(*dma) if dma else (IdIndex.empty(), IdIndex.empty())
        return cls(
            instruction=index(instr, "id", "Instruction"),
            dma_packet=index(dma, "id", "DmaPacket"),
            block_first=first,
            block_last=last,
            cc_op=index(cc, "op_id", "CcOp"),
            blocks=BlockMembers.build(*dma) if dma else BlockMembers.empty(),
        )

    def resolve(
        self, kinds: np.ndarray, ids: np.ndarray, valid: np.ndarray, into: bool
    ) -> np.ndarray:
        """Event rows of (canonical table, id) ends (``kinds``: :func:`canonical_tables` codes);
        -1 where nothing matches.

        ``into``: the end is an edge's destination (a DMA block then binds to its first packet).
        """
        rows = np.full(len(ids), -1, dtype=np.int64)
        by_kind = {
            _INSTRUCTION: self.instruction,
            _DMA_PACKET: self.dma_packet,
            _DMA_BLOCK: self.block_first if into else self.block_last,
            _CC_OP: self.cc_op,
        }
        for kind, index in by_kind.items():
            mask = kinds == _KIND_CODE[kind]
            if mask.any():
                rows[mask] = index.lookup(ids[mask], valid[mask])
        return rows


@dataclass
class BlockMembers:
    """The packets of each DMA block (``packet_aggregation_id``), as event rows grouped by block."""

    block_of: np.ndarray  # per event row from ``first_row``: the block's index (-1: none)
    first_row: int
    ptr: np.ndarray  # CSR over blocks: block b's packets are rows[ptr[b]:ptr[b + 1]]
    rows: np.ndarray

    @classmethod
    def build(cls, dma: pd.DataFrame, first_row: int) -> BlockMembers:
        """Group the DMA table's rows (at event rows ``first_row``...) by block."""
        agg, valid = ints(column(dma, "packet_aggregation_id"), len(dma))
        block_of = np.full(len(dma), -1, dtype=np.int64)
        block_of[valid] = pd.factorize(agg[valid], sort=True)[0]  # np.unique's inverse, by hash
        order = np.argsort(block_of, kind="stable")
        order = order[block_of[order] >= 0]
        ptr = np.searchsorted(block_of[order], np.arange(int(block_of.max(initial=-1)) + 2))
        return cls(block_of, first_row, ptr, first_row + order)

    @classmethod
    def empty(cls) -> BlockMembers:
        """No DMA table: no block."""
        none = np.zeros(0, dtype=np.int64)
        return cls(none, 0, np.zeros(1, dtype=np.int64), none)

    def expand(self, rows: np.ndarray, into_dma: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Edge ends ``rows``, those marked ``into_dma`` replaced by every packet of their block:
        (the index of the edge each result row comes from, the result rows)."""
        local = rows - self.first_row
        inside = into_dma & (local >= 0) & (local < len(self.block_of))
        block = np.full(len(rows), -1, dtype=np.int64)
        block[inside] = self.block_of[local[inside]]
        sizes = np.r_[np.diff(self.ptr), 1]  # the trailing 1: an end that is no block's
        size = sizes[np.where(block >= 0, block, len(sizes) - 1)]
        edge = np.repeat(np.arange(len(rows)), size)
        # Position within each edge's block: 0..size-1, from the block's first packet.
        within = np.arange(len(edge)) - np.repeat(np.cumsum(size) - size, size)
        b = block[edge]
        out = rows[edge].copy()
        member = b >= 0
        out[member] = self.rows[self.ptr[b[member]] + within[member]]
        return edge, out


#: The kinds of event a Flow end names, as codes (0: a table no event comes from).
_KINDS = ("", _INSTRUCTION, _DMA_PACKET, _DMA_BLOCK, _CC_OP)
_KIND_CODE = {k: np.int8(i) for i, k in enumerate(_KINDS)}


def canonical_tables(tables: pd.Categorical) -> np.ndarray:
    """Per row: the code in :data:`_KINDS` of the flow table's name in canonical form (0: an
    unknown name), worked out once per distinct name (no string per row)."""
    plain = [str(c).strip().lower().replace("_", "") for c in tables.categories]
    per_name = [_KIND_CODE[TABLE_ALIASES.get(p, "")] for p in plain] + [_KIND_CODE[""]]
    return np.array(per_name, dtype=np.int8)[tables.codes]


def _block_ends(dma: pd.DataFrame, first_row: int) -> tuple[IdIndex, IdIndex]:
    """First packet (earliest start) and last packet (latest end) of each DMA block (ties: the
    first row, the last row)."""
    n = len(dma)
    agg, valid = ints(column(dma, "packet_aggregation_id"), n)
    start, dur = times(dma)
    s = start.to_numpy(dtype=np.float64, na_value=np.nan)
    e = (start + dur).to_numpy(dtype=np.float64, na_value=np.nan)
    ok = valid & np.isfinite(s) & np.isfinite(e)
    agg, rows = agg[ok], first_row + np.flatnonzero(ok).astype(np.int64)

    def index(when: np.ndarray, keep_first: bool) -> IdIndex:
        # By block, then time, then row (lexsort is stable and the rows are in order); each
        # block's first (or last) row in that order.
        o = np.lexsort((when, agg))
        a = agg[o]
        change = a[1:] != a[:-1]
        ends = np.r_[len(a) > 0, change] if keep_first else np.r_[change, len(a) > 0]
        ends = ends[: len(a)]
        return IdIndex(a[ends], np.ones(int(ends.sum()), dtype=bool), rows[o][ends])

    return index(s[ok], True), index(e[ok], False)


def flow_edges(flow: pd.DataFrame, ids: EventIds, meta: S.RankMeta) -> pd.DataFrame:
    """``Flow`` rows -> edges (in -> out); ends that resolve to no event are counted, not kept."""
    n = len(flow)
    in_tables, out_tables = (
        labels(column(flow, "in_table"), n),
        labels(column(flow, "out_table"), n),
    )
    in_kinds, out_kinds = canonical_tables(in_tables), canonical_tables(out_tables)
    in_ids, in_valid = ints(column(flow, "in_id"), n)
    out_ids, out_valid = ints(column(flow, "out_id"), n)
    src = ids.resolve(in_kinds, in_ids, in_valid, into=False)
    dst = ids.resolve(out_kinds, out_ids, out_valid, into=True)
    none = _KIND_CODE[""]
    unknown = (in_kinds == none) | (out_kinds == none)
    if unknown.any():
        names = set(pd.Series(in_tables[in_kinds == none]).dropna()) | set(
            pd.Series(out_tables[out_kinds == none]).dropna()
        )
        meta.info["flow_unknown_tables"] = sorted(str(t) for t in names)
    meta.count("Flow: edges naming a table no event comes from", int(unknown.sum()))
    unresolved = ~unknown & ((src < 0) | (dst < 0))
    meta.count("Flow: edges whose id matches no event", int(unresolved.sum()))
    kept = (src >= 0) & (dst >= 0)
    to_dma = (out_kinds == _KIND_CODE[_DMA_PACKET]) | (out_kinds == _KIND_CODE[_DMA_BLOCK])
    trigger = (in_kinds == _KIND_CODE[_INSTRUCTION]) & to_dma
    edge, dst_rows = ids.blocks.expand(dst[kept], to_dma[kept])
    kind = pd.Categorical.from_codes(
        trigger[kept][edge].astype(np.int8), pd.Index(["dependency", "dma_trigger"], dtype="str")
    )
    return pd.DataFrame({S.SRC: src[kept][edge], S.DST: dst_rows, S.EDGE_KIND: kind})
