"""Links a Neuron Perfetto device trace does not record, inferred as the JSON and Parquet readers
infer them from the same fields.

A device trace's DMA slices carry the legacy JSON ``dma`` row keys (the device screenshot's
Arguments pane: ``subgroup`` = the queue, ``transfer_size``, ``timestamp``, ``duration``;
neuron-formats.md section 2 and 3) and no trigger: without ``--show-perfetto-flows`` nothing
links a transfer to the instruction that issued it, nor a collective to the
``PSEUDO_TRIGGER_COLLECTIVE`` that started it. Per rank, the slices become the tables the other
Neuron readers use (Parquet field names) and:

- DMA transfers that no recorded edge (a flow) reaches from an instruction get the legacy JSON
  reader's ``dma_trigger`` edges (:func:`neuron_json_dma.trigger_edges`: the queue's engine,
  triggers in issue order, else the last trigger ending by the transfer's start); each slice is
  one transfer unless a ``block_id`` annotation groups packets (:func:`neuron_json_dma.add_transfers`);
- collectives that no recorded edge reaches get the trigger edge of the Parquet and JSON readers
  (:func:`neuron_events.trigger_edges`: the instruction on ``trigger_engine`` starting at the
  op's trigger time);
- a trace of several executions of the NEFF (the slices' ``pc`` starts over, or the engines'
  first instructions come round again after an idle core: :func:`neuron_executions.pc_executions`,
  as for legacy JSON) gets the execution edges (the next execution starts after the previous one
  ended: :func:`neuron_executions.execution_edges`) and each slice the step of its execution.
  Each row of an engine or queue is a track of its own (``Tensor Engine - Row 2``), so executions
  are found and tied per row: a row's first slice of an execution would otherwise hang on the
  row's last slice of the previous one. The runtime starts an execution after the previous one
  completed, so a boundary holds only where the whole core idles before it, DMA and collectives
  included (a pipeline's micro-batches wait on a collective with the engines idle, and repeat
  the same instructions: not executions).

DMA packets: each slice is one transfer, unless ``block_id`` annotations group them, or (no
block id) slices of one queue and one tensor (the ``variable`` annotation, else a slice name other
than ``unknown``) that overlap or follow one another without a gap: the packets of one block,
served by several DMA engines at once (neuron-real-output.md, "DMA"), as the legacy JSON reader
groups a block's packets. Each DMA event keeps its transfer (the ``transfer`` column), so that
transfer sizes and efficiency are counted per transfer as from the other Neuron formats.

A DMA slice's queue is its ``subgroup``/``dma_queue``/``queue_name`` annotation, else its
track's queue (``qSyncIO0 - Row 1``). The counts go to each rank's ``meta.info`` as the JSON
reader's do (``dma_triggers_by_order``, ``collective_trigger_unmatched``, ...).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracediag.model import schema as S
from tracediag.model.assembly import TRACK_ENGINE, TRACK_LABEL
from tracediag.parsers import neuron_json_dma as json_dma
from tracediag.parsers.neuron_events import trigger_edges as collective_trigger_edges
from tracediag.parsers.neuron_executions import execution_edges, pc_executions, tiled
from tracediag.parsers.neuron_parquet_notes import steps_of
from tracediag.parsers.perfetto_annotations import last_numbers, last_values
from tracediag.parsers.perfetto_rows import ROW_SUFFIX

#: DMA slice annotations: the queue (legacy ``subgroup``/``dma_queue``, Parquet ``queue_name``)
#: and what groups packets into transfers or names a ring.
QUEUE_FIELDS = ("queue_name", "dma_queue", "subgroup")
DMA_FIELDS = ("block_id", "engine_idx", "queue_type", "pcore_idx", "variable")
#: The annotation names read here (the decoder keeps only wanted names).
WANTED = frozenset(
    {*QUEUE_FIELDS, *DMA_FIELDS, "hbm_read_bytes", "hbm_write_bytes", "pc", "operands"}
)
_EMPTY = pd.DataFrame({S.SRC: np.zeros(0, np.int64), S.DST: np.zeros(0, np.int64)})


def inferred_edges(
    events: pd.DataFrame,
    ann: pd.DataFrame,
    fields: dict,
    rank: np.ndarray,
    collectives: pd.DataFrame,
    recorded: list[pd.DataFrame],
) -> tuple[pd.DataFrame, dict[int, dict]]:
    """Edges between slice rows (all ranks; ``edge_kind`` set) and, per rank, the counts for
    its ``meta.info``. ``recorded``: the edges the trace states (flows, ``inst_dep_ids``,
    semaphore waits); ``collectives``: :func:`perfetto_collectives.collective_table`. Sets
    ``events[S.STEP]`` where executions are found."""
    kind = events[S.KIND].to_numpy(dtype=object)
    src = np.concatenate([e[S.SRC].to_numpy(dtype=np.int64) for e in recorded] + [_EMPTY[S.SRC]])
    dst = np.concatenate([e[S.DST].to_numpy(dtype=np.int64) for e in recorded] + [_EMPTY[S.DST]])
    from_compute = kind[src] == "compute" if len(src) else np.zeros(0, dtype=bool)
    fed = np.zeros(len(events), dtype=bool)
    fed[dst[from_compute]] = True  # slices an instruction already leads to
    text = annotations(ann, (*QUEUE_FIELDS, *DMA_FIELDS, "operands"), len(events))
    numbers = {
        f: last_numbers(ann, f, len(events)) for f in ("hbm_read_bytes", "hbm_write_bytes", "pc")
    }
    step = np.full(len(events), np.nan)
    transfer = np.full(len(events), -1, dtype=np.int64)
    frames, info = [], {}
    for r in np.unique(rank):  # a loop over ranks
        instr = np.flatnonzero((kind == "compute") & (rank == r))
        if not len(instr):
            continue
        meta = S.RankMeta(rank=int(r))
        itable = _instructions(events, fields, numbers, text, instr)
        dma_all = np.flatnonzero((kind == "dma") & (rank == r))
        dtable = _transfers(events, text, dma_all)
        unfed = ~fed[dma_all]
        if len(dma_all):
            # Every packet's transfer, fed or not. With none fed these are also the trigger
            # edges' transfers and their counts this rank's; else those come from the unfed.
            every = json_dma.add_transfers(dtable, meta if unfed.all() else S.RankMeta(rank=int(r)))
            transfer[dma_all] = every["packet_aggregation_id"].fillna(-1).to_numpy(np.int64)
        dma = dma_all[unfed]
        if len(dma):
            table = (
                every
                if unfed.all()
                else json_dma.add_transfers(dtable[unfed].reset_index(drop=True), meta)
            )
            e = json_dma.trigger_edges(itable, 0, table, len(instr), meta)
            frames.append(_global(e, np.concatenate([instr, dma])))
        cc = collectives[rank[collectives["_row"].to_numpy()] == r].reset_index(drop=True)
        if len(cc):
            has_in = fed[cc["_row"].to_numpy()]
            e = collective_trigger_edges(itable, 0, cc, len(instr), has_in, meta)
            frames.append(_global(e, np.concatenate([instr, cc["_row"].to_numpy()])))
        by_row = itable.assign(engine=events[TRACK_LABEL].to_numpy(dtype=object)[instr])
        spans = pc_executions(by_row, meta)
        if spans is not None:
            busy = np.concatenate([instr, dma_all, cc["_row"].to_numpy()])
            spans = _idle_boundaries(spans, events, busy, meta)
        if spans is not None:
            rows = np.concatenate([instr, dma_all, cc["_row"].to_numpy()])
            dma_rows = dtable.assign(queue_name=events[TRACK_LABEL].to_numpy(dtype=object)[dma_all])
            located = {"instruction": (by_row, 0), "dma": (dma_rows, len(instr))}
            located["cc"] = (cc, len(instr) + len(dma_all)) if len(cc) else None
            frames.append(_global(execution_edges(spans, located), rows))
            step[rows] = steps_of(events[S.TS].to_numpy(dtype=np.int64)[rows], tiled(spans))
        info[int(r)] = meta.info
    if np.isfinite(step).any():
        events[S.STEP] = step
    if (transfer >= 0).any():
        events[S.TRANSFER] = transfer
    if not frames:
        return _EMPTY.assign(**{S.EDGE_KIND: "dependency"}), info
    return pd.concat(frames, ignore_index=True), info


def _idle_boundaries(spans, events: pd.DataFrame, busy: np.ndarray, meta: S.RankMeta):
    """``spans`` less the boundaries with no time before them when nothing at all runs (the
    slices ``busy``); None when one execution is left."""
    starts, ends, _ = spans
    s = events[S.TS].to_numpy(dtype=np.int64)[busy]
    e = s + events[S.DUR].to_numpy(dtype=np.int64)[busy]
    order = np.argsort(s, kind="stable")
    s, reach = s[order], np.maximum.accumulate(e[order])
    idle = np.flatnonzero(s[1:] > reach[:-1])  # nothing runs from reach[i] to s[i + 1]
    gap_end = s[1:][idle]
    # A boundary before execution k holds when an idle time ends at its start and began
    # after the previous execution's instructions (the core's last activity before it).
    at = np.searchsorted(gap_end, starts[1:], side="left")
    hit = at < len(gap_end)
    ok = hit & (gap_end[np.minimum(at, len(gap_end) - 1)] == starts[1:])
    ok &= reach[:-1][idle][np.minimum(at, len(gap_end) - 1)] >= ends[:-1]
    keep = np.r_[True, ok]
    dropped = int((~keep).sum())
    if dropped:
        meta.info["execution_boundaries_without_idle_core"] = dropped
    if keep.sum() < 2:
        meta.info.pop("executions", None)
        meta.info.pop("executions_source", None)
        return None
    group = np.cumsum(keep) - 1
    merged_ends = np.full(int(group[-1]) + 1, np.iinfo(np.int64).min)
    np.maximum.at(merged_ends, group, ends)
    meta.info["executions"] = [
        {"index": k, "neff": None, "kind": "model", "start_ns": int(a), "end_ns": int(b)}
        for k, (a, b) in enumerate(zip(starts[keep], merged_ends, strict=True))  # a handful
    ]
    return starts[keep], merged_ends, np.arange(len(merged_ends), dtype=np.float64)


def _global(edges: pd.DataFrame, rows: np.ndarray) -> pd.DataFrame:
    """A rank's local edge rows (into ``rows``) as slice rows."""
    return edges.assign(**{S.SRC: rows[edges[S.SRC]], S.DST: rows[edges[S.DST]]})


def _instructions(events, fields, numbers, text, rows) -> pd.DataFrame:
    """Instruction slices with the Parquet field names the trigger and execution rules read
    (``pc``, ``operands`` and ``hlo_name`` only where the slices carry them)."""
    opcode = pd.Series(fields["opcode"][rows], dtype=object)
    opcode = opcode.fillna(pd.Series(events[S.NAME].to_numpy(dtype=object)[rows], dtype=object))
    out = pd.DataFrame(
        {
            "start_ts": events[S.TS].to_numpy(dtype=np.int64)[rows],
            "duration_ns": events[S.DUR].to_numpy(dtype=np.int64)[rows],
            "engine": events[TRACK_ENGINE].to_numpy(dtype=object)[rows],
            "opcode": opcode.astype(str).to_numpy(dtype=object),
        }
    )
    for f, v in numbers.items():
        if f != "pc" or np.isfinite(v[rows]).any():
            out[f] = pd.array(np.rint(v[rows])).astype("Float64").astype("Int64")
    for f, v in (("operands", text["operands"][rows]), ("hlo_name", fields[S.OP][rows])):
        if pd.notna(v).any():
            out[f] = v
    return out


def queue_names(events: pd.DataFrame, text: dict[str, np.ndarray], rows: np.ndarray) -> pd.Series:
    """The queue of DMA slices ``rows``: the first of the :data:`QUEUE_FIELDS` annotations
    (``text``: per slice, None where absent), else the track's queue (``qSyncIO0/ring1``)."""
    track_queue = pd.Series(events[TRACK_LABEL].to_numpy(dtype=object)[rows], dtype=object)
    queue = track_queue.str.replace(ROW_SUFFIX, "", regex=True)
    return named_queues(text, rows).fillna(queue).astype(str)


def named_queues(text: dict[str, np.ndarray], rows: np.ndarray | slice = slice(None)) -> pd.Series:
    """The queue slices ``rows`` name: the first of their :data:`QUEUE_FIELDS` annotations
    (``text``: per slice, None where absent); None where they name none."""
    named = [pd.Series(text[f][rows], dtype=object) for f in QUEUE_FIELDS]
    return named[0].fillna(named[1]).fillna(named[2])


def annotations(ann: pd.DataFrame, names: tuple[str, ...], n: int) -> dict[str, np.ndarray]:
    """Per name, its last value per slice (None where absent)."""
    return {f: last_values(ann, f, n) for f in names}


def _transfers(events, text, rows) -> pd.DataFrame:
    """DMA slices with the Parquet ``DmaPacket`` field names (queue: annotation, else track)."""
    queue = queue_names(events, text, rows)
    out = pd.DataFrame(
        {
            "start_ts": events[S.TS].to_numpy(dtype=np.int64)[rows],
            "duration_ns": events[S.DUR].to_numpy(dtype=np.int64)[rows],
            "queue_name": queue.astype(str).to_numpy(dtype=object),
            "transfer_bytes": pd.array(events[S.BYTES].to_numpy()[rows]).astype("Float64"),
        }
    )
    for f in DMA_FIELDS:  # only those the slices carry: absent columns mean "not given"
        values = pd.Series(text[f][rows], dtype=object)
        if values.notna().any():
            out[f] = values.to_numpy(dtype=object)
    for f in ("block_id", "engine_idx", "pcore_idx"):
        if f in out:
            out[f] = pd.to_numeric(out[f], errors="coerce").astype("Int64")
    out["transfer_bytes"] = out["transfer_bytes"].round().astype("Int64")
    if "block_id" not in out:
        out = _tensor_blocks(
            out, text["variable"][rows], events[S.NAME].to_numpy(dtype=object)[rows]
        )
    return out


def _tensor_blocks(dma: pd.DataFrame, variable: np.ndarray, name: np.ndarray) -> pd.DataFrame:
    """``block_id`` per tensor of each queue (see the module), where slices name one."""
    tensor = pd.Series(variable, dtype=object)
    tensor = tensor.where(tensor.notna(), pd.Series(name, dtype=object))
    named = tensor.notna() & (tensor.astype(str).str.lower() != "unknown")
    if not named.any():
        return dma
    key = pd.factorize(pd.MultiIndex.from_arrays([dma["queue_name"], tensor.astype(str)]))[0]
    block = pd.array(key, dtype="Int64")
    block[~named.to_numpy()] = pd.NA
    return dma.assign(block_id=block)
