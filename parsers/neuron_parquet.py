"""Reader of Neuron Explorer Parquet device profiles (``neuron-explorer view --output-format parquet``).

A profile is a directory of table files (``Instruction.parquet``, ``DmaPacket_0.parquet``, ...);
a multi-rank capture is a parent directory of such profiles (``rank_0/``, ``profile_rank_1/`` or
any names). Mappings (field names as in schema reference 7.4.0):

- ``Instruction`` -> compute events on one track per engine (plus pcore when there are several);
- ``DmaPacket`` -> DMA events per queue (``DmaPacketAggregated`` blocks when packets are absent);
- ``CcOp`` -> collective events per CC stream and collective rows matched across ranks by
  ``replica_group|stream_id|op_id``;
- ``Flow`` -> edges (see :mod:`neuron_flow`); a CcOp that no Flow edge reaches gets an edge from
  the instruction that triggered it (same engine, start = ``trigger_start_ts``);
- ``Summary`` -> ``meta.summary``; ``Metadata`` -> ``meta.info``; ``ActiveTime`` busy time per
  engine, the ``SemaphoreUpdate`` row count, the ``Error`` rows by kind and the bytes of the
  ``TensorInfo`` IN/OUT tensors (``tensor_io_bytes``) -> ``meta.info``;
- instruction dtypes from ``adjusted_flops`` against ``raw_flops``, else from ``operands``.

An Explorer data path (``<data-path>/profiles/global/<name>@latest/``) is read as the folder of
its profiles; which profiles make the job and their ranks come from the names
(:mod:`neuron_parquet_profiles`: ``rank_3``, ``vnc_3``, pid and ``nc_<k>`` order; other jobs and
other compiled models are skipped with a note), else from Metadata ``worker_gid``, else (inside a
parent) from the directories' natural order, else rank 0 with ``rank_source = "default"`` so that
the loader can renumber it.

What the profile says about itself (the ``Warning`` table, DMA tables absent or empty, an
unknown schema major), duplicate DMA packets, bytes as AWS counts them, transfers against the
32 KiB target and the ``ExecutionInfo`` executions: :mod:`neuron_parquet_notes` and
:mod:`neuron_parquet_dma`. Metadata's hardware constants feed
:func:`tracediag.analysis.hardware.from_metadata`.
"""

from __future__ import annotations

from itertools import count
from pathlib import Path

import numpy as np
import pandas as pd

from tracediag.model import schema as S
from tracediag.model.assembly import RankPart
from tracediag.model.errors import TraceInputError
from tracediag.parsers.neuron_common import (
    device_of,
    normalise_engines,
    numeric_summary,
    rank_from_name,
    schema_known,
    schema_warning,
)
from tracediag.parsers.neuron_errors import ERROR_COLUMNS, record_errors
from tracediag.parsers.neuron_events import times
from tracediag.parsers.neuron_executions import Spans, execution_edges, execution_of, snap_to_idle
from tracediag.parsers.neuron_flow import flow_edges
from tracediag.parsers.neuron_kernel_fields import tensor_sizes
from tracediag.parsers.neuron_parquet_cc import fill_empty_groups, stream_indices
from tracediag.parsers.neuron_parquet_dma import (
    block_semaphores,
    data_bytes,
    drop_duplicate_packets,
    transfer_stats,
)
from tracediag.parsers.neuron_parquet_notes import (
    add_note,
    dma_presence,
    execution_steps,
    profiler_warnings,
    schema_fields_missing,
    steps_of,
)
from tracediag.parsers.neuron_parquet_profiles import select_job
from tracediag.parsers.neuron_parquet_sniff import (  # noqa: F401 (the reader's declaration)
    DEFAULT_HARDWARE,
    FORMAT,
    NEURON_DEVICE_PROFILE,
    POOL_ON_FEW_CORES,
    _profile_children,
    _profiles_root,
    sniff,
)
from tracediag.parsers.neuron_parquet_tables import (
    column_names,
    first_row,
    is_profile_dir,
    read_table,
    row_count,
    table_files,
)
from tracediag.parsers.neuron_part import build_part
from tracediag.parsers.neuron_semaphores import TEXT_COLUMNS as SEMAPHORE_TEXT
from tracediag.parsers.neuron_semaphores import read_updates

INSTRUCTION_COLUMNS = [
    "start_ts", "end_ts", "duration_ns", "engine", "pcore_idx", "opcode", "id", "hlo_name", "layer",
    "nki_source_location", "evt_wait_time_ns", "raw_flops", "hbm_read_bytes", "hbm_write_bytes",
    "adjusted_flops", "flops_transpose", "bir_debug_info_source_location", "dma_trigger_start_ts",
    "dma_trigger_end_ts", "dma_wait_time_ns", "pc",  # pc: where executions start (snap_to_idle)
]  # fmt: skip
#: Read only when ``adjusted_flops`` cannot tell the dtypes (a long text column per instruction).
DTYPE_TEXT_COLUMNS = ["operands", "instruction_chain"]
DMA_COLUMNS = [
    "start_ts", "end_ts", "duration_ns", "id", "packet_aggregation_id", "engine_idx",
    "transfer_bytes", "variable", "queue_name", "queue_type", "pcore_idx",
    "semaphore_id",  # DmaPacketAggregated only (neuron_semaphores: the DMA is a producer)
]  # fmt: skip
CC_COLUMNS = [
    "start_ts", "end_ts", "duration_ns", "operation", "algorithm", "dtype", "op_id", "stream_id",
    "trigger_engine", "trigger_start_ts", "input_size", "output_size", "algorithm_bandwidth",
    "bus_bandwidth", "replica_group", "stream_index",
]  # fmt: skip
FLOW_COLUMNS = ["in_id", "in_table", "out_id", "out_table"]
ACTIVE_COLUMNS = ["engine", "start_ts", "end_ts", "duration_ns"]
CC_STREAM_COLUMNS = ["stream_id", "stream_index"]
EXECUTION_COLUMNS = ["execution_index", "neff_name", "execution_start_ts", "execution_end_ts"]
WARNING_COLUMNS = ["category", "message"]
#: Metadata fields the analysis reads (hardware constants, device indices, the time base).
METADATA_FIELDS = [
    "profile_schema_version", "instance_type", "neuroncore_idx", "neuron_device_idx",
    "first_hw_timestamp", "dma_ddr_bandwidth", "tensor_engine_num_rows", "tensor_engine_num_cols",
    "tensor_engine_clock_freq",
]  # fmt: skip
TENSOR_COLUMNS = ["type", "size", "variable_name"]


def rank_units(path: Path) -> list[Path] | None:
    """The profile directories of a job directory, to read and cache one rank at a time; None
    for a profile itself, or when a profile's name does not state its rank (numbered by
    directory order or Metadata, it needs its siblings, so the parent is read whole)."""
    path = _profiles_root(Path(path))
    if is_profile_dir(path):
        return None
    chosen = select_job(_profile_children(path))
    # Read whole when something is skipped (the note travels with the parts) or a rank is
    # numbered from its siblings.
    if chosen.profiles and not chosen.skipped and all(s == "filename" for _, s in chosen.ranks):
        return chosen.profiles
    return None


def read(path: Path) -> list[RankPart]:
    """One part per profile directory under ``path`` (``path`` itself when it is a profile)."""
    path = _profiles_root(Path(path))
    if is_profile_dir(path):
        rank, source = _stated_rank(path)
        return [_read_profile(path, 0 if rank is None else rank, source or "default")]
    dirs = _profile_children(path)
    if not dirs:
        raise TraceInputError(
            path, "not a Neuron Explorer Parquet profile (no <Table>.parquet files)"
        )
    chosen = select_job(dirs)
    stated = [
        named if named[0] is not None else _metadata_rank(d)
        for d, named in zip(chosen.profiles, chosen.ranks, strict=True)
    ]
    free = (i for i in count() if i not in {r for r, _ in stated})
    parts = []
    for d, (rank, source) in zip(chosen.profiles, stated, strict=True):
        if rank is None:
            rank, source = next(free), "directory order"
        parts.append(_read_profile(d, rank, source))
    for note in chosen.skipped:
        add_note(parts[0].meta, "profiles skipped", "info", note)
    return parts


def _stated_rank(path: Path) -> tuple[int | None, str | None]:
    """The rank the directory name or Metadata ``worker_gid`` states, with where it came from."""
    rank = rank_from_name(path.name)
    if rank is not None:
        return rank, "filename"
    return _metadata_rank(path)


def _metadata_rank(path: Path) -> tuple[int | None, str | None]:
    metadata, _ = first_row(table_files(path).get("Metadata"))
    gid = pd.to_numeric(pd.Series([metadata.get("worker_gid")]), errors="coerce").iloc[0]
    return (int(gid), "metadata") if pd.notna(gid) else (None, None)


def _read_profile(path: Path, rank: int, rank_source: str) -> RankPart:
    files = table_files(path)
    meta = S.RankMeta(rank=rank, sources=[str(path)], format=FORMAT)
    metadata, _ = first_row(files.get("Metadata"))
    meta.info.update(metadata)
    meta.info["rank_source"] = rank_source
    meta.hardware = str(metadata.get("instance_type") or "")
    version = metadata.get("profile_schema_version")
    if "Metadata" in files:
        schema_warning(version, meta)
    summary, summary_rows = first_row(files.get("Summary"))
    meta.summary = numeric_summary(summary)
    meta.count("Summary: rows after the first ignored", max(summary_rows - 1, 0))
    meta.info["semaphore_update_count"] = row_count(files.get("SemaphoreUpdate"))
    record_errors(read_table(files.get("Error"), ERROR_COLUMNS), meta)
    active = read_table(files.get("ActiveTime"), ACTIVE_COLUMNS, ("engine", "start_ts"))
    if active is not None:
        meta.info["active_time_ns"] = active_time_per_engine(active)
    tensors = read_table(files.get("TensorInfo"), TENSOR_COLUMNS)
    if tensors is not None and set(TENSOR_COLUMNS) <= set(tensors.columns):
        meta.info["tensor_io_bytes"] = io_tensor_bytes(tensors)
        meta.info["tensor_sizes"] = tensor_sizes(tensors)
    profiler_warnings(read_table(files.get("Warning"), WARNING_COLUMNS), meta)
    if "Metadata" in files and not schema_known(version):
        # semaphore_id is a DmaPacketAggregated field (the field list gives DmaPacket none)
        packet_columns = [c for c in DMA_COLUMNS if c != "semaphore_id"]
        wanted = {
            "Instruction": INSTRUCTION_COLUMNS, "DmaPacket": packet_columns, "CcOp": CC_COLUMNS,
            "Flow": FLOW_COLUMNS, "ActiveTime": ACTIVE_COLUMNS, "Metadata": METADATA_FIELDS,
        }  # fmt: skip
        present = {t: column_names(files[t]) for t in wanted if t in files}
        schema_fields_missing(version, wanted, present, meta)
    try:
        part, spans = _events_part(files, meta, device_of(metadata), metadata)
    except TraceInputError as exc:
        if "Metadata" not in files or schema_known(version):
            raise
        raise TraceInputError(
            exc.path,
            f"{exc.problem} (profile schema version {version}: a major version this "
            "reader has not seen, which may have renamed it)",
        ) from None
    if spans is not None and len(part.events):
        part.events[S.STEP] = steps_of(part.events[S.TS].to_numpy(dtype=np.int64), spans)
    return part


def _with_texts(files: list[Path], instr: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """The instructions with their text columns, and the semaphore texts, from one read of
    the Instruction table's text columns (each can be large). ``operands`` (the tensor
    engine's tile shapes) is joined always, the dtype text columns only without
    ``adjusted_flops``; the other semaphore columns stay apart, row for row, so the dtype
    reading sees only what it asks for."""
    dtype_text = "adjusted_flops" not in instr or instr["adjusted_flops"].isna().all()
    joined = [c for c in (DTYPE_TEXT_COLUMNS if dtype_text else ["operands"]) if c not in instr]
    apart = [c for c in SEMAPHORE_TEXT if c not in instr and c not in joined]
    texts = read_table(files, joined + apart) if joined or apart else None
    if texts is None:
        return instr, None
    have = [c for c in joined if c in texts]
    instr = instr.join(texts[have]) if have else instr
    return instr, texts[[c for c in apart if c in texts]] if apart else None


def _time_base(frames: list[pd.DataFrame | None], metadata: dict) -> int:
    """The profile start on the events' time base: Metadata ``first_hw_timestamp`` when the
    events are on the device clock (none starts before it), else 0 (profile-relative times)."""
    first = pd.to_numeric(pd.Series([metadata.get("first_hw_timestamp")]), errors="coerce")[0]
    starts = [f["start_ts"].min() for f in frames if f is not None and len(f)]
    starts = [int(x) for x in starts if pd.notna(x)]
    if not starts or pd.isna(first) or first <= 0:
        return 0
    return int(first) if min(starts) >= int(first) else 0


def io_tensor_bytes(tensors: pd.DataFrame) -> int:
    """Bytes of the kernel's input and output tensors (TensorInfo ``type`` IN or OUT, each once):
    the traffic a kernel cannot avoid (the performance bounds' necessary bytes)."""
    io = np.isin(np.asarray(tensors["type"].astype(str)), ("IN", "OUT"))
    size = pd.to_numeric(tensors["size"], errors="coerce").to_numpy(dtype="float64", na_value=0.0)
    return int(np.nansum(size[io]))


def active_time_per_engine(active: pd.DataFrame) -> dict[str, int]:
    """Busy nanoseconds per normalised engine (summed over pcores)."""
    _, dur = times(active)
    engine = normalise_engines(active["engine"])
    # Summed per engine code (no name per row), in name order as a groupby on the names.
    busy = np.bincount(
        engine.codes, dur.to_numpy(dtype="float64", na_value=0.0), len(engine.categories)
    )
    used = np.bincount(engine.codes, minlength=len(engine.categories)) > 0
    return {str(k): int(v) for k, v in zip(engine.categories[used], busy[used], strict=True)}


def _timed_table(
    files: dict, name: str, columns: list[str], required: tuple[str, ...]
) -> pd.DataFrame | None:
    frame = read_table(files.get(name), columns, required)
    if frame is not None and "duration_ns" not in frame and "end_ts" not in frame:
        raise TraceInputError(files[name][0], "table has neither duration_ns nor end_ts")
    return frame


def _located(tables: dict, first: dict[str, int]) -> dict:
    """The present tables with the event row of their first row (as ``execution_edges`` takes)."""
    return {k: (t, first[k]) for k, t in tables.items() if t is not None}


def _events_part(
    files: dict, meta: S.RankMeta, device: str, metadata: dict
) -> tuple[RankPart, Spans | None]:
    """The rank's part and its ``ExecutionInfo`` executions on the events' time base (each
    CcOp row is labelled with its execution: collectives match across ranks by it)."""
    instr = _timed_table(files, "Instruction", INSTRUCTION_COLUMNS, ("start_ts", "engine"))
    instr, semaphore_texts = (
        _with_texts(files["Instruction"], instr) if instr is not None else (None, None)
    )
    dma_table = "DmaPacket" if row_count(files.get("DmaPacket")) else "DmaPacketAggregated"
    has_dma = "DmaPacket" in files or "DmaPacketAggregated" in files
    dma = None
    if dma_presence(row_count(files.get(dma_table)) if has_dma else None, meta) == "present":
        dma = _timed_table(files, dma_table, DMA_COLUMNS, ("start_ts",))
        dma = drop_duplicate_packets(dma, dma_table, meta)
        if dma_table == "DmaPacketAggregated":
            dma["packet_aggregation_id"] = dma.get("id")  # each block is its own transfer
        else:  # packets name no semaphore: their block does
            blocks = read_table(files.get("DmaPacketAggregated"), ["id", "semaphore_id"])
            dma = block_semaphores(dma, blocks)
        nbytes = data_bytes(dma)
        meta.info["dma_transfers"] = transfer_stats(dma, nbytes)
        meta.info["dma_packets_without_data"] = int(np.isnan(nbytes).sum())
        dma["transfer_bytes"] = nbytes  # instruction-queue and tiny packets carry no data bytes
        meta.info["dma_granularity"] = "packet" if dma_table == "DmaPacket" else "block"
    cc = _timed_table(files, "CcOp", CC_COLUMNS, ("start_ts",))
    spans = execution_steps(
        read_table(files.get("ExecutionInfo"), EXECUTION_COLUMNS),
        _time_base([instr, dma, cc], metadata),
        meta,
    )
    spans = snap_to_idle(spans, instr, meta)
    if cc is not None:
        cc = fill_empty_groups(cc, meta)
        cc = stream_indices(cc, read_table(files.get("CcStream"), CC_STREAM_COLUMNS), meta)
        cc["execution_index"] = execution_of(cc, spans)
    flow = read_table(files.get("Flow"), FLOW_COLUMNS, tuple(FLOW_COLUMNS))
    part = build_part(
        meta,
        device,
        {"instruction": instr, "dma": dma, "cc": cc},
        {"instruction": "Instruction", "dma": dma_table, "cc": "CcOp"},
        lambda ids, first: [
            *([flow_edges(flow, ids, meta)] if flow is not None else []),
            execution_edges(spans, _located({"instruction": instr, "dma": dma, "cc": cc}, first)),
        ],
        read_updates(files.get("SemaphoreUpdate")),
        semaphore_texts,
    )
    return part, spans
