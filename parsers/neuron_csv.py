"""Reader of the Neuron Explorer UI's CSV export of a device profile.

The UI exports ``Instruction.csv``, ``DmaPacketAggregated.csv``, ``DmaPacket.csv``,
``CcInstruction.csv`` and ``SemaphoreUpdate.csv``: each row a leading ``timeline_track`` column
(the UI's row label) then the Parquet table's fields. A profile is a directory of such files; a
job is a directory of profile directories (ranks from their names, as for Parquet). The files
are read column by column with Arrow and mapped exactly as the Parquet tables
(:mod:`neuron_parquet`): instructions, DMA packets (duplicates removed, instruction-queue and
tiny packets without bytes) and semaphore updates; no ``Flow`` edges. The export has no ``CcOp``:
collectives come from their trigger instructions and the CC cores' ``CcInstruction`` rows
(:mod:`neuron_csv_cc`).
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv

from tracediag.model import schema as S
from tracediag.model.assembly import RankPart
from tracediag.model.errors import TraceInputError
from tracediag.parsers.neuron_csv_cc import csv_collectives
from tracediag.parsers.neuron_csv_sniff import (  # noqa: F401 (the reader's declaration)
    DEFAULT_HARDWARE,
    FORMAT,
    NEURON_DEVICE_PROFILE,
    TRACK_COLUMN,
    _children,
    _is_export,
    sniff,
)
from tracediag.parsers.neuron_executions import (
    IDENTITY_KEYS,
    execution_edges,
    pc_executions,
    tiled,
)
from tracediag.parsers.neuron_parquet import DMA_COLUMNS, DTYPE_TEXT_COLUMNS, INSTRUCTION_COLUMNS
from tracediag.parsers.neuron_parquet_dma import data_bytes, drop_duplicate_packets
from tracediag.parsers.neuron_parquet_notes import dma_presence, steps_of
from tracediag.parsers.neuron_parquet_profiles import select_job
from tracediag.parsers.neuron_parquet_tables import _to_frame
from tracediag.parsers.neuron_part import build_part
from tracediag.parsers.neuron_semaphores import TEXT_COLUMNS as SEMAPHORE_TEXT
from tracediag.parsers.neuron_semaphores import UPDATE_COLUMNS

#: The ``CcInstruction`` fields read (neuron-parquet-fields.md).
CC_INSTRUCTION_COLUMNS = (
    "start_ts", "end_ts", "duration_ns", "core_idx", "description", "trigger_engine",
    "trigger_start_ts",
)  # fmt: skip


def read(path: Path) -> list[RankPart]:
    """One part per export directory (``path`` itself when it is one)."""
    path = Path(path)
    if _is_export(path):
        chosen = select_job([path])
        return [_read_export(path, *_rank(chosen.ranks[0], 0))]
    dirs = _children(path)
    if not dirs:
        raise TraceInputError(path, "not a Neuron Explorer CSV export (no <Table>.csv files)")
    chosen = select_job(dirs)
    taken = {r for r, _ in chosen.ranks if r is not None}
    free = iter(i for i in range(len(dirs) + len(taken) + 1) if i not in taken)
    return [
        _read_export(d, *_rank(named, None, free))
        for d, named in zip(chosen.profiles, chosen.ranks, strict=True)
    ]


def _rank(named, default, free=None) -> tuple[int, str]:
    rank, source = named
    if rank is not None:
        return rank, source
    if free is not None:
        return next(free), "directory order"
    return default, "default"


def read_csv_table(path: Path) -> pa.Table:
    """One exported table, its leading ``timeline_track`` column kept as ``timeline_track``
    (the table's own field of that name, when exported too, is dropped)."""
    try:
        with open(path, encoding="utf-8", errors="replace", newline="") as fh:
            header = next(csv.reader([fh.readline()]), [])
        names = [TRACK_COLUMN] + [
            n if n != TRACK_COLUMN else "_own_timeline_track" for n in header[1:]
        ]
        table = pacsv.read_csv(
            path,
            read_options=pacsv.ReadOptions(column_names=names, skip_rows=1),
            convert_options=pacsv.ConvertOptions(strings_can_be_null=True),
        )
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise TraceInputError(
            path, f"unreadable CSV export ({' '.join(str(exc).split())[:200]})"
        ) from None
    return table.drop_columns([c for c in table.column_names if c == "_own_timeline_track"])


def _frame(path: Path, table: str, columns, required: tuple[str, ...]):
    f = path / f"{table}.csv"
    if not f.is_file():
        return None
    t = read_csv_table(f)
    missing = [c for c in required if c not in t.column_names]
    if missing:
        raise TraceInputError(f, f"table lacks required column(s) {', '.join(missing)}")
    return _to_frame(t.select([c for c in columns if c in t.column_names]))


#: Instruction byte counts whose sums stand for the ``Summary`` fields of the same name (the
#: export has no Summary table; the Parquet Summary's are those sums).
SUMMED = ("hbm_read_bytes", "hbm_write_bytes", "spill_reload_bytes", "spill_save_bytes")


def _summary_from(instr: pd.DataFrame) -> dict[str, float]:
    """The Summary byte totals the instructions' own columns give."""
    out = {}
    for c in SUMMED:
        if c in instr:
            values = pd.to_numeric(instr[c], errors="coerce")
            if values.notna().any():
                out[c] = float(values.sum())
    return out


def _instructions(path: Path):
    """The instructions as the Parquet reader has them, their semaphore texts apart (row for
    row), and the whole read (every text column: what the trigger instructions are read from),
    from one read of ``Instruction.csv``: ``operands`` always joined, the dtype text columns only
    without ``adjusted_flops`` (as :func:`neuron_parquet._with_texts`). Nones without the file."""
    texts = [*DTYPE_TEXT_COLUMNS, *SEMAPHORE_TEXT]
    wanted = list(dict.fromkeys([*INSTRUCTION_COLUMNS, *IDENTITY_KEYS, *SUMMED, *texts]))
    frame = _frame(path, "Instruction", wanted, ("start_ts", "engine"))
    if frame is None:
        return None, None, None
    apart = [c for c in SEMAPHORE_TEXT if c in frame]
    base = frame.drop(columns=[c for c in texts if c in frame])
    dtype_text = "adjusted_flops" not in base or base["adjusted_flops"].isna().all()
    joined = [c for c in (DTYPE_TEXT_COLUMNS if dtype_text else ["operands"]) if c in frame]
    return base.join(frame[joined]), frame[apart] if apart else None, frame


def _read_export(path: Path, rank: int, source: str) -> RankPart:
    meta = S.RankMeta(rank=rank, sources=[str(path)], format=FORMAT)
    meta.info["rank_source"] = source
    instr, semaphore_texts, whole = _instructions(path)
    if instr is not None:
        meta.summary = _summary_from(instr)
        instr = instr.drop(
            columns=[c for c in SUMMED if c in instr and c not in INSTRUCTION_COLUMNS]
        )
    table = "DmaPacket" if (path / "DmaPacket.csv").is_file() else "DmaPacketAggregated"
    dma = _frame(path, table, DMA_COLUMNS, ("start_ts",))
    dma = dma if dma is not None and len(dma) else None
    if dma_presence(None if dma is None else len(dma), meta) == "present":
        dma = drop_duplicate_packets(dma, table, meta)
        if table == "DmaPacketAggregated":
            dma["packet_aggregation_id"] = dma.get("id")
        dma["transfer_bytes"] = data_bytes(dma)
    cc_rows = _frame(path, "CcInstruction", CC_INSTRUCTION_COLUMNS, ("start_ts",))
    cc = csv_collectives(cc_rows, whole, meta)
    updates = _frame(path, "SemaphoreUpdate", UPDATE_COLUMNS, ("timestamp", "id"))
    # No ExecutionInfo in the export: executions from the program counters, as for legacy JSON.
    spans = pc_executions(instr, meta)
    tables = {"instruction": instr, "dma": dma, "cc": cc}
    part = build_part(
        meta,
        "",
        tables,
        {"instruction": "Instruction", "dma": table, "cc": "CcInstruction"},
        lambda _ids, first: [
            execution_edges(spans, {k: (t, first[k]) for k, t in tables.items() if t is not None})
        ],
        updates,
        semaphore_texts,
    )
    if spans is not None and len(part.events):
        part.events[S.STEP] = steps_of(part.events[S.TS].to_numpy(dtype=np.int64), tiled(spans))
    return part
