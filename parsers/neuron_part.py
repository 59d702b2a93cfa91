"""Putting one rank's Neuron events together: row layout, id lookup, sanitizing, renumbering.

Each table's events form a :class:`Piece`; pieces are laid out one after another (edges and
collective rows refer to those rows), then :func:`finish_part` drops rows without a usable time
and renumbers every reference, counting what it drops.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals

from tracediag.model import schema as S
from tracediag.model.assembly import (
    TRACK_DEVICE,
    TRACK_ENGINE,
    TRACK_KIND_COL,
    TRACK_LABEL,
    RankPart,
    sanitize_events,
)
from tracediag.parsers.neuron_common import ints, labels
from tracediag.parsers.neuron_dma import dma_events, engine_order_edges
from tracediag.parsers.neuron_dma_layers import layers_from_tensors
from tracediag.parsers.neuron_dma_triggers import consumer_waits, field_edges
from tracediag.parsers.neuron_events import (
    TRIGGER_TS,
    cc_collectives,
    cc_events,
    instruction_events,
    trigger_edges,
)
from tracediag.parsers.neuron_flow import EventIds
from tracediag.parsers.neuron_semaphores import semaphore_edges


@dataclass
class Piece:
    """One table's events and the row its first event takes in the rank's event frame."""

    what: str
    events: pd.DataFrame
    first_row: int = 0


def layout(pieces: list[Piece]) -> list[Piece]:
    """Give each piece its first row (pieces are laid out one after another)."""
    row = 0
    for piece in pieces:
        piece.first_row = row
        row += len(piece.events)
    return pieces


#: Format-specific edges of a rank, from its id indexes and its tables' first event rows.
ExplicitEdges = Callable[[EventIds, dict[str, int]], list[pd.DataFrame]]


def build_part(
    meta: S.RankMeta,
    device: str,
    tables: dict[str, pd.DataFrame | None],
    names: dict[str, str],
    explicit_edges: ExplicitEdges,
    semaphores: pd.DataFrame | None = None,
    semaphore_texts: pd.DataFrame | None = None,
) -> RankPart:
    """One rank's part from its ``instruction``, ``dma`` and ``cc`` tables (Parquet field
    names; None when absent). ``names`` says what each table is called in the source, for the
    counts of dropped rows. A CcOp that no explicit edge reaches gets its trigger edge; a DMA
    transfer takes the layer its tensor's name states (:mod:`neuron_dma_layers`); the
    Instruction ``dma_trigger_*`` fields give the DMA edges no explicit edge records
    (:mod:`neuron_dma_triggers`); consecutive
    packets of two queues on one DMA engine are ordered (:func:`neuron_dma.engine_order_edges`);
    instructions' semaphore waits depend on the event that satisfied them, from ``semaphores``
    (the ``SemaphoreUpdate`` table; None when absent) and the instructions' operand texts
    (``semaphore_texts``, row for row; None: the instruction table's) (:mod:`neuron_semaphores`)."""
    mappers = {"instruction": instruction_events, "dma": dma_events, "cc": cc_events}
    present = {k: t for k, t in tables.items() if t is not None}
    pieces = layout([Piece(names[k], mappers[k](t, device)) for k, t in present.items()])
    by_table = dict(zip(present, pieces, strict=True))
    if "dma" in by_table and "instruction" in by_table:
        dma_ev = by_table["dma"].events
        dma_ev[S.LAYER] = layers_from_tensors(
            dma_ev[S.NAME].array, by_table["instruction"].events[S.LAYER].array
        )
    first = {k: p.first_row for k, p in zip(present, pieces, strict=True)}
    located = {k: (t, first[k]) for k, t in present.items()}
    ids = EventIds.build(meta, located.get("instruction"), located.get("dma"), located.get("cc"))
    edges = explicit_edges(ids, first)
    edges.append(semaphore_edges(present, first, semaphores, meta, semaphore_texts))
    if "dma" in present and "instruction" in present:
        instr_ev = by_table["instruction"].events
        instr_ev[S.WAIT] = consumer_waits(present["instruction"], instr_ev[S.WAIT].to_numpy())
        edges += field_edges(
            present["instruction"], first["instruction"], present["dma"], first["dma"], edges, meta
        )
    if "dma" in present:
        edges.append(engine_order_edges(present["dma"], by_table["dma"].events, first["dma"]))
    collectives = None
    cc = present.get("cc")
    if cc is not None:
        rows = first["cc"] + np.arange(len(cc))
        reached = np.concatenate([e[S.DST].to_numpy(dtype=np.int64) for e in edges] + [rows[:0]])
        instr, instr_first = located.get("instruction", (None, 0))
        edges.append(
            trigger_edges(instr, instr_first, cc, first["cc"], np.isin(rows, reached), meta)
        )
        collectives = cc_collectives(cc, first["cc"], meta.rank, meta)
    return finish_part(meta, pieces, edges, collectives)


def finish_part(
    meta: S.RankMeta,
    pieces: list[Piece],
    edges: list[pd.DataFrame],
    collectives: pd.DataFrame | None,
) -> RankPart:
    """Sanitize each piece's times, renumber edge and collective references, build the part."""
    total = sum(len(p.events) for p in pieces)
    new_row = np.full(total, -1, dtype=np.int64)
    frames, base = [], 0
    for piece in pieces:
        clean = sanitize_events(piece.events, meta, piece.what)
        new_row[piece.first_row + clean["orig_row"].to_numpy()] = base + np.arange(len(clean))
        frames.append(clean.drop(columns="orig_row"))
        base += len(clean)
    events = _concat(frames) if frames else _empty_events()
    part = RankPart(meta=meta, events=events, edges=_remap_edges(edges, new_row, meta))
    if collectives is not None and len(collectives):
        part.collectives = _remap_collectives(collectives, new_row, events, meta)
    return part


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Concatenate event frames keeping text columns Categorical (pandas would fall back to one
    Python string per row when categories differ); a column a frame lacks is missing there."""
    columns = list(dict.fromkeys(c for f in frames for c in f.columns))
    out = {}
    for col in columns:
        pieces = [f.get(col) for f in frames]
        if any(p is not None and isinstance(p.dtype, pd.CategoricalDtype) for p in pieces):
            cats = [labels(p, len(f)) for p, f in zip(pieces, frames, strict=True)]
            out[col] = union_categoricals(cats)
        else:
            # An integer id column is -1 where a frame lacks it (NaN would make it float).
            fill = -1 if S.EVENT_OPTIONAL.get(col) == "int64" else np.nan
            filled = [
                p if p is not None else pd.Series(fill, index=f.index)
                for p, f in zip(pieces, frames, strict=True)
            ]
            out[col] = pd.concat(filled, ignore_index=True)
    # Not consolidated into blocks: that would copy every column a second time.
    return pd.DataFrame(out, copy=False)


def _remap_edges(edges: list[pd.DataFrame], new_row: np.ndarray, meta: S.RankMeta) -> pd.DataFrame:
    edges = [e for e in edges if len(e)]
    if not edges:
        return S.empty_frame(S.EDGE_COLUMNS)
    ed = _concat(edges)
    src = new_row[ed[S.SRC].to_numpy(dtype=np.int64)]
    dst = new_row[ed[S.DST].to_numpy(dtype=np.int64)]
    kept = (src >= 0) & (dst >= 0)
    meta.count("edges: dropped, an end event had no valid time", int((~kept).sum()))
    loop = kept & (src == dst)
    meta.count("edges: dropped, event depends on itself", int(loop.sum()))
    kept &= ~loop
    return pd.DataFrame(
        {S.SRC: src[kept], S.DST: dst[kept], S.EDGE_KIND: labels(ed[S.EDGE_KIND], len(ed))[kept]}
    )


def _remap_collectives(
    co: pd.DataFrame, new_row: np.ndarray, events: pd.DataFrame, meta: S.RankMeta
) -> pd.DataFrame:
    event = new_row[co[S.EVENT].to_numpy(dtype=np.int64)]
    kept = event >= 0
    meta.count("collectives: dropped, event had no valid time", int((~kept).sum()))
    co = co.loc[kept].reset_index(drop=True)
    event = event[kept]
    start = events[S.TS].to_numpy(dtype=np.int64)[event]
    trigger, tvalid = ints(co[TRIGGER_TS], len(co))
    co[S.EVENT] = event
    co[S.START] = start
    co[S.END] = start + events[S.DUR].to_numpy(dtype=np.int64)[event]
    co[S.ARRIVAL] = np.where(tvalid, trigger, start)
    return co.drop(columns=TRIGGER_TS)


def _empty_events() -> pd.DataFrame:
    return pd.DataFrame(
        {
            **{
                c: pd.Series(dtype=t)
                for c, t in S.EVENT_REQUIRED.items()
                if c not in (S.RANK, S.TRACK)
            },
            **{
                c: pd.Series(dtype=object)
                for c in (TRACK_LABEL, TRACK_KIND_COL, TRACK_ENGINE, TRACK_DEVICE)
            },
        }
    )


def empty_part(meta: S.RankMeta) -> RankPart:
    """A part with no events (summary-only inputs)."""
    return RankPart(meta=meta, events=_empty_events())
