"""Reader of legacy Neuron device JSON (``--output-format json``, ``ntff.json``) and summary-json.

Legacy JSON is one object of tables, each a list of row objects, one file per rank (the name may
carry the rank: ``rank_3.json``, ``profile_rank_3.json``; else its folder's:
``profile_rank_3/ntff.json``):

- ``instruction``: ``timestamp``, ``duration``, ``subgroup`` (the engine; ``label`` when absent),
  ``opcode``, ``hlo_name``, ``id``, ``inst_dep_ids`` (-> ``dependency`` edges), ``layer``,
  ``bir_debug_info_source_location`` (else ``nki_source_location``; lists of strings joined),
  ``evt_wait_time``, ``hbm_read_bytes``, ``hbm_write_bytes``;
- ``dma``: ``subgroup`` (the queue), ``transfer_size``, ``timestamp``, ``duration``, optional
  ``id`` and, when present, ``trigger_id`` / ``inst_dep_ids`` naming the instructions that
  triggered it (-> ``dma_trigger`` edges);
- ``summary`` (one object) -> ``meta.summary``; ``metadata`` -> ``meta.info``; ``error`` (rows
  with the Parquet ``Error`` fields, see :mod:`neuron_errors`) -> ``meta.info["device_errors"]``;
- ``tensor_info`` (any spelling of the Parquet ``TensorInfo``) -> ``meta.info``
  ``tensor_io_bytes`` and ``tensor_sizes``, as the Parquet reader sets them;
- ``cc_op``: **our own extension, not a Neuron table**: rows with the field names of the Explorer
  Parquet ``CcOp`` table, mapped like it; its times are in the file's time unit like the rest;
- ``cc_ops``: neuron-profile's own collectives table; with neither, the collectives the trigger
  instructions name (``ctype=...``; :mod:`neuron_cc_triggers`), their completion inferred.

Times are read in the file's unit, which the documentation says is ns and one note says is ps:
:func:`detect_unit` decides from ``summary.total_time`` and records ``meta.info["timestamp_unit"]``.
Ids are 64-bit; unsigned values wrap to int64. Older files' bare ``NaN`` literals are read as null.

summary-json (``--output-format summary-json``) is an object of flat Summary objects, one per
subgraph or model: it gives a part without events, ``meta.info["summary_only"] = True`` and
``meta.summary = {subgraph: {field: value}}``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from tracediag.model import schema as S
from tracediag.model.assembly import RankPart
from tracediag.model.errors import TraceInputError
from tracediag.parsers import neuron_json_dma as json_dma
from tracediag.parsers.neuron_cc_triggers import trigger_collectives
from tracediag.parsers.neuron_common import column, device_of, ints, numeric_summary, rank_from_name
from tracediag.parsers.neuron_errors import ERROR_COLUMNS, record_errors
from tracediag.parsers.neuron_executions import execution_edges, pc_executions, tiled
from tracediag.parsers.neuron_flow import EventIds
from tracediag.parsers.neuron_json_sniff import (  # noqa: F401 (the reader's declaration)
    DEFAULT_HARDWARE,
    FORMAT,
    NEURON_DEVICE_PROFILE,
    sniff,
)
from tracediag.parsers.neuron_json_tables import (
    detect_unit,
    id_lists,
    load_json,
    metadata_row,
    summary_row,
    table_frame,
    to_ns,
)
from tracediag.parsers.neuron_kernel_fields import tensor_sizes
from tracediag.parsers.neuron_parquet import TENSOR_COLUMNS, io_tensor_bytes
from tracediag.parsers.neuron_parquet_cc import fill_empty_groups
from tracediag.parsers.neuron_parquet_notes import dma_presence, steps_of
from tracediag.parsers.neuron_part import build_part, empty_part

LEGACY_TABLES = ("instruction", "dma", "summary")
#: The Parquet ``TensorInfo`` table as an extra JSON table, under any of its spellings.
TENSOR_TABLES = ("tensor_info", "TensorInfo", "tensorinfo")
_READ_TABLES = (
    "instruction", "dma", "summary", "metadata", "cc_op", "cc_ops", "error", "active_time",
    "layer_summary", "profile_info", *TENSOR_TABLES,
)  # fmt: skip
#: What a file holding only ``profile_info`` means (neuron-real-output.md).
WRONG_NEFF = (
    "holds only 'profile_info': the profile was viewed without its NEFF (or with the wrong one), "
    "so neuron-profile wrote no instructions; view it again with the NEFF the run executed "
    "(`neuron-profile view -n <file.neff> -s <file.ntff> --output-format json`)"
)


def read(path: Path) -> list[RankPart]:
    """The file's one rank (legacy device JSON) or its summaries (summary-json)."""
    path = Path(path)
    meta = S.RankMeta(rank=0, sources=[str(path)], format=FORMAT)
    doc = load_json(path, meta)
    if not isinstance(doc, dict) or "traceEvents" in doc:
        raise TraceInputError(
            path, "not Neuron JSON (expected an object of tables or of summaries)"
        )
    if any(isinstance(doc.get(t), list) for t in LEGACY_TABLES):
        return [_legacy_part(doc, path, meta)]
    if isinstance(doc.get("profile_info"), list):
        raise TraceInputError(path, WRONG_NEFF)
    if doc and all(isinstance(v, dict) for v in doc.values()):
        _set_rank(meta, path, {})
        meta.info["summary_only"] = True
        meta.summary = {str(k): numeric_summary(v) for k, v in doc.items()}
        return [empty_part(meta)]
    raise TraceInputError(
        path, "not Neuron JSON: no instruction/dma/summary table and not summary-json"
    )


def _set_rank(meta: S.RankMeta, path: Path, metadata: dict) -> None:
    """The rank the file name states, else its folder's (``profile_rank_3/ntff.json``: the
    default output name inside a per-rank folder), else Metadata ``worker_gid``, else 0."""
    for name, source in ((path.name, "filename"), (path.parent.name, "folder name")):
        rank = rank_from_name(name)
        if rank is not None:
            meta.rank, meta.info["rank_source"] = rank, source
            return
    gid = pd.to_numeric(
        pd.Series([metadata.get("worker_gid")], dtype=object), errors="coerce"
    ).iloc[0]
    if pd.notna(gid):
        meta.rank, meta.info["rank_source"] = int(gid), "metadata"
    else:
        meta.rank, meta.info["rank_source"] = 0, "default"


def _timed(
    frame: pd.DataFrame | None, table: str, path: Path, required: tuple[str, ...]
) -> pd.DataFrame | None:
    if frame is None:
        return None
    missing = [c for c in required if c not in frame]
    if "duration_ns" not in frame and "end_ts" not in frame:
        missing.append("duration")
    if missing and len(frame):
        raise TraceInputError(path, f"table {table!r} rows lack {', '.join(missing)}")
    return frame if len(frame) else None


def _legacy_part(doc: dict, path: Path, meta: S.RankMeta) -> RankPart:
    metadata = metadata_row(doc)
    meta.info.update(
        {
            str(k): v
            for k, v in metadata.items()
            if v is None or isinstance(v, str | int | float | bool)
        }
    )
    _set_rank(meta, path, metadata)
    meta.hardware = str(metadata.get("instance_type") or "")
    meta.info["extra_tables"] = sorted(
        k for k, v in doc.items() if isinstance(v, list) and k not in _READ_TABLES
    )
    summary, rows = summary_row(doc, path)
    meta.summary = numeric_summary(summary)
    meta.count("summary: rows after the first ignored", max(rows - 1, 0))
    instr = _timed(
        table_frame(doc, "instruction", path), "instruction", path, ("start_ts", "engine")
    )
    dma = _timed(table_frame(doc, "dma", path), "dma", path, ("start_ts",))
    cc = _timed(table_frame(doc, "cc_op", path), "cc_op", path, ("start_ts",))
    if cc is None:  # neuron-profile's own table (``cc_op`` is our extension)
        cc = _timed(table_frame(doc, "cc_ops", path), "cc_ops", path, ("start_ts",))
    divisor = detect_unit(instr, meta.summary.get("total_time"), meta)
    for frame in (instr, dma, cc):
        to_ns(frame, divisor)
    if cc is None:  # no collective table: the collectives the trigger instructions name
        cc = trigger_collectives(instr, _profile_end_ns(metadata, divisor), meta)
    else:
        cc = fill_empty_groups(cc, meta)
    dma_presence(None if dma is None else len(dma), meta, ("dma", "dma"))
    if dma is not None and not len(dma):
        dma = None
    if dma is not None:
        dma = json_dma.add_transfers(dma, meta)
    record_errors(_error_table(doc, path), meta, divisor)
    _side_tables(doc, metadata, meta, divisor)
    spans = pc_executions(instr, meta)
    tables = {"instruction": instr, "dma": dma, "cc": cc}

    def edges(ids: EventIds, first: dict[str, int]) -> list[pd.DataFrame]:
        located = {k: (t, first[k]) for k, t in tables.items() if t is not None}
        return [
            *_explicit_edges(instr, dma, first, ids, path, meta),
            execution_edges(spans, located),
        ]

    part = build_part(
        meta,
        device_of(metadata),
        tables,
        {"instruction": "instruction", "dma": "dma", "cc": "cc_op"},
        edges,
    )
    if spans is not None and len(part.events):
        part.events[S.STEP] = steps_of(part.events[S.TS].to_numpy(dtype=np.int64), tiled(spans))
    return part


def _profile_end_ns(metadata: dict, divisor: int) -> float:
    """The profile's end (``last_hw_timestamp``, on the instructions' time base) in ns; NaN
    when the metadata does not give it."""
    last = pd.to_numeric(pd.Series([metadata.get("last_hw_timestamp")]), errors="coerce")[0]
    return float(last) / divisor if pd.notna(last) else float("nan")


def _side_tables(doc: dict, metadata: dict, meta: S.RankMeta, divisor: int) -> None:
    """What ``metadata``, ``active_time``, ``layer_summary`` and ``profile_info`` say, in
    ``meta.info``: the graph's total (``last_hw_timestamp`` - ``first_hw_timestamp``, else
    ``last_hw_timestamp`` of a zero-based profile), active time per engine (interval sums, the
    engines' own merged rows), per-layer time and the NEFF the profile was viewed with."""
    last = pd.to_numeric(pd.Series([metadata.get("last_hw_timestamp")]), errors="coerce")[0]
    first = pd.to_numeric(pd.Series([metadata.get("first_hw_timestamp")]), errors="coerce")[0]
    if pd.notna(last):
        total = last - (first if pd.notna(first) else 0)
        meta.info["graph_total_ns"] = int(total // divisor)
    active = doc.get("active_time")
    if isinstance(active, list) and active and all(isinstance(r, dict) for r in active):
        at = pd.DataFrame(active, columns=["start_ts", "end_ts", "engine"])
        length = pd.to_numeric(at["end_ts"], errors="coerce") - pd.to_numeric(
            at["start_ts"], errors="coerce"
        )
        per = (length // divisor).groupby(at["engine"].astype(str)).sum()
        meta.info["active_time_ns"] = {k: int(v) for k, v in per.items()}
    layers = doc.get("layer_summary")
    if isinstance(layers, list) and layers and all(isinstance(r, dict) for r in layers):
        ls = pd.DataFrame(layers, columns=["layer", "duration", "instruction_count"])
        dur = pd.to_numeric(ls["duration"], errors="coerce") // divisor
        meta.info["layer_time_ns"] = {
            str(k): int(v) for k, v in zip(ls["layer"], dur.fillna(0), strict=True)
        }
    _tensor_table(doc, meta)
    info = doc.get("profile_info")
    if isinstance(info, list) and info and isinstance(info[0], dict):
        for key in ("neff_path", "ntff_path", "profiler_version", "num_executions"):
            if key in info[0]:
                meta.info[f"profile_{key}"] = info[0][key]


def _tensor_table(doc: dict, meta: S.RankMeta) -> None:
    """A ``tensor_info`` table (the Parquet ``TensorInfo`` fields ``variable_name``, ``type``,
    ``size``) -> ``meta.info`` ``tensor_io_bytes`` and ``tensor_sizes``, as the Parquet reader
    sets them (the performance bounds' necessary bytes, DMA105's tensor sizes)."""
    rows = next((doc[k] for k in TENSOR_TABLES if isinstance(doc.get(k), list)), None)
    if not rows or not all(isinstance(r, dict) for r in rows):
        return
    tensors = pd.DataFrame(rows, columns=TENSOR_COLUMNS)
    if tensors[["type", "size"]].notna().any().all():
        meta.info["tensor_io_bytes"] = io_tensor_bytes(tensors)
        meta.info["tensor_sizes"] = tensor_sizes(tensors)


def _error_table(doc: dict, path: Path) -> pd.DataFrame | None:
    rows = doc.get("error")
    if rows is None:
        return None
    try:
        if not isinstance(rows, list):
            raise TypeError
        frame = pd.DataFrame(rows, columns=ERROR_COLUMNS)
    except (TypeError, ValueError, AttributeError):
        raise TraceInputError(path, "table 'error' is not a list of objects") from None
    return frame.dropna(axis=1, how="all")


def _explicit_edges(
    instr: pd.DataFrame | None,
    dma: pd.DataFrame | None,
    first: dict[str, int],
    ids: EventIds,
    path: Path,
    meta: S.RankMeta,
) -> list[pd.DataFrame]:
    edges = []
    if instr is not None:
        edges.append(_dependency_edges(instr, first["instruction"], ids, path, meta))
    if dma is not None:
        edges.append(_dma_trigger_edges(dma, first["dma"], ids, path, meta))
    if dma is not None and "trigger_id" not in dma and "inst_dep_ids" not in dma:
        # No trigger named: each transfer's from its queue's engine (neuron_json_dma).
        edges.append(
            json_dma.trigger_edges(instr, first.get("instruction", 0), dma, first["dma"], meta)
        )
    return edges


def _edges(
    src: np.ndarray, dst: np.ndarray, kind: str, meta: S.RankMeta, what: str
) -> pd.DataFrame:
    found = src >= 0
    meta.count(f"{what}: id matches no event", int((~found).sum()))
    return pd.DataFrame({S.SRC: src[found], S.DST: dst[found], S.EDGE_KIND: kind})


def _dependency_edges(
    instr: pd.DataFrame, first_row: int, ids: EventIds, path: Path, meta: S.RankMeta
) -> pd.DataFrame:
    """``inst_dep_ids`` -> edges dependency -> instruction (instruction ids first, then DMA ids)."""
    rows, dep_ids = id_lists(column(instr, "inst_dep_ids"), path, "instruction.inst_dep_ids")
    src = ids.instruction.lookup(dep_ids)
    missing = src < 0
    src[missing] = ids.dma_packet.lookup(dep_ids[missing])
    return _edges(src, first_row + rows, "dependency", meta, "instruction.inst_dep_ids")


def _dma_trigger_edges(
    dma: pd.DataFrame, first_row: int, ids: EventIds, path: Path, meta: S.RankMeta
) -> pd.DataFrame:
    """``trigger_id`` / ``inst_dep_ids`` of DMA rows -> edges instruction -> DMA (``dma_trigger``)."""
    trigger, valid = ints(column(dma, "trigger_id"), len(dma))
    rows = np.flatnonzero(valid)
    by_trigger = _edges(
        ids.instruction.lookup(trigger[rows]),
        first_row + rows,
        "dma_trigger",
        meta,
        "dma.trigger_id",
    )
    rows, dep_ids = id_lists(column(dma, "inst_dep_ids"), path, "dma.inst_dep_ids")
    by_deps = _edges(
        ids.instruction.lookup(dep_ids), first_row + rows, "dma_trigger", meta, "dma.inst_dep_ids"
    )
    return pd.concat([by_trigger, by_deps], ignore_index=True)
