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
  engine, the ``SemaphoreUpdate`` row count and the ``Error`` rows by kind -> ``meta.info``;
- instruction dtypes from ``adjusted_flops`` against ``raw_flops``, else from ``operands``.

Ranks come from the directory name (``rank_3``, ``profile_rank_3``, ``rank3``), else from
Metadata ``worker_gid``, else (inside a parent) from the directories' natural order, else rank 0
with ``rank_source = "default"`` so that the loader can renumber it.
"""

from __future__ import annotations

from itertools import count
from pathlib import Path

import numpy as np
import pandas as pd

from tracediag.io.files import head
from tracediag.model import schema as S
from tracediag.model.assembly import RankPart
from tracediag.model.errors import TraceInputError
from tracediag.parsers.neuron_common import (
    device_of,
    natural_key,
    normalise_engines,
    numeric_summary,
    rank_from_name,
    schema_warning,
)
from tracediag.parsers.neuron_errors import ERROR_COLUMNS, record_errors
from tracediag.parsers.neuron_events import times
from tracediag.parsers.neuron_flow import flow_edges
from tracediag.parsers.neuron_parquet_tables import (
    first_row,
    is_profile_dir,
    read_table,
    row_count,
    table_files,
)
from tracediag.parsers.neuron_part import build_part

FORMAT = "neuron-parquet"

INSTRUCTION_COLUMNS = [
    "start_ts", "end_ts", "duration_ns", "engine", "pcore_idx", "opcode", "id", "hlo_name", "layer",
    "nki_source_location", "evt_wait_time_ns", "raw_flops", "hbm_read_bytes", "hbm_write_bytes",
    "adjusted_flops", "flops_transpose",
]  # fmt: skip
#: Read only when ``adjusted_flops`` cannot tell the dtypes (a long text column per instruction).
DTYPE_TEXT_COLUMNS = ["operands", "instruction_chain"]
DMA_COLUMNS = [
    "start_ts", "end_ts", "duration_ns", "id", "packet_aggregation_id", "engine_idx",
    "transfer_bytes", "variable", "queue_name",
]  # fmt: skip
CC_COLUMNS = [
    "start_ts", "end_ts", "duration_ns", "operation", "algorithm", "dtype", "op_id", "stream_id",
    "trigger_engine", "trigger_start_ts", "input_size", "output_size", "algorithm_bandwidth",
    "bus_bandwidth", "replica_group",
]  # fmt: skip
FLOW_COLUMNS = ["in_id", "in_table", "out_id", "out_table"]
ACTIVE_COLUMNS = ["engine", "start_ts", "end_ts", "duration_ns"]

#: File suffixes of other trace formats: a parent directory holding one beside its profiles is
#: left to the loader's one-level expansion, so that those files are read too.
_OTHER_TRACE_SUFFIXES = (".json", ".json.gz", ".pftrace", ".perfetto-trace", ".pb", ".pb.gz")


def sniff(path: Path) -> bool:
    """A profile directory, or a directory of profile directories and no other trace file."""
    path = Path(path)
    return is_profile_dir(path) or bool(_profile_children(path))


def read(path: Path) -> list[RankPart]:
    """One part per profile directory under ``path`` (``path`` itself when it is a profile)."""
    path = Path(path)
    if is_profile_dir(path):
        rank, source = _stated_rank(path)
        return [_read_profile(path, 0 if rank is None else rank, source or "default")]
    dirs = _profile_children(path)
    if not dirs:
        raise TraceInputError(
            path, "not a Neuron Explorer Parquet profile (no <Table>.parquet files)"
        )
    stated = [_stated_rank(d) for d in dirs]
    free = (i for i in count() if i not in {r for r, _ in stated})
    parts = []
    for d, (rank, source) in zip(dirs, stated, strict=True):
        if rank is None:
            rank, source = next(free), "directory order"
        parts.append(_read_profile(d, rank, source))
    return parts


def _profile_children(path: Path) -> list[Path]:
    if not path.is_dir():
        return []
    children = sorted(
        (c for c in path.iterdir() if not c.name.startswith(".")), key=lambda c: natural_key(c.name)
    )
    profiles = [c for c in children if is_profile_dir(c)]
    if any(c.is_file() and _is_other_trace(c) for c in children):
        return []
    return profiles


def _is_other_trace(path: Path) -> bool:
    if path.name.lower().endswith(_OTHER_TRACE_SUFFIXES):
        return True
    try:
        return head(path, 64).lstrip()[:1] in (b"{", b"[")
    except TraceInputError:
        return False


def _stated_rank(path: Path) -> tuple[int | None, str | None]:
    """The rank the directory name or Metadata ``worker_gid`` states, with where it came from."""
    rank = rank_from_name(path.name)
    if rank is not None:
        return rank, "filename"
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
    if "Metadata" in files:
        schema_warning(metadata.get("profile_schema_version"), meta)
    summary, summary_rows = first_row(files.get("Summary"))
    meta.summary = numeric_summary(summary)
    meta.count("Summary: rows after the first ignored", max(summary_rows - 1, 0))
    meta.info["semaphore_update_count"] = row_count(files.get("SemaphoreUpdate"))
    record_errors(read_table(files.get("Error"), ERROR_COLUMNS), meta)
    active = read_table(files.get("ActiveTime"), ACTIVE_COLUMNS, ("engine", "start_ts"))
    if active is not None:
        meta.info["active_time_ns"] = active_time_per_engine(active)
    return _events_part(files, meta, device_of(metadata))


def active_time_per_engine(active: pd.DataFrame) -> dict[str, int]:
    """Busy nanoseconds per normalised engine (summed over pcores)."""
    _, dur = times(active)
    busy = (
        pd.Series(dur.to_numpy(dtype="float64", na_value=0.0))
        .groupby(np.asarray(normalise_engines(active["engine"]), dtype=object))
        .sum()
    )
    return {str(k): int(v) for k, v in busy.items()}


def _timed_table(
    files: dict, name: str, columns: list[str], required: tuple[str, ...]
) -> pd.DataFrame | None:
    frame = read_table(files.get(name), columns, required)
    if frame is not None and "duration_ns" not in frame and "end_ts" not in frame:
        raise TraceInputError(files[name][0], "table has neither duration_ns nor end_ts")
    return frame


def _events_part(files: dict, meta: S.RankMeta, device: str) -> RankPart:
    instr = _timed_table(files, "Instruction", INSTRUCTION_COLUMNS, ("start_ts", "engine"))
    if instr is not None and (
        "adjusted_flops" not in instr or instr["adjusted_flops"].isna().all()
    ):
        texts = read_table(files["Instruction"], DTYPE_TEXT_COLUMNS)
        instr = instr.join(texts) if texts is not None else instr
    dma_table = "DmaPacket" if "DmaPacket" in files else "DmaPacketAggregated"
    dma = _timed_table(files, dma_table, DMA_COLUMNS, ("start_ts",))
    if dma is not None and dma_table == "DmaPacketAggregated":
        dma["packet_aggregation_id"] = dma.get("id")  # each block is its own first/last packet
    meta.info["dma_granularity"] = "packet" if dma_table == "DmaPacket" else "block"
    cc = _timed_table(files, "CcOp", CC_COLUMNS, ("start_ts",))
    flow = read_table(files.get("Flow"), FLOW_COLUMNS, tuple(FLOW_COLUMNS))
    return build_part(
        meta,
        device,
        {"instruction": instr, "dma": dma, "cc": cc},
        {"instruction": "Instruction", "dma": dma_table, "cc": "CcOp"},
        lambda ids, _first: [flow_edges(flow, ids, meta)] if flow is not None else [],
    )
