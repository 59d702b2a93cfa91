"""Reader of the Neuron Explorer UI's CSV export of a device profile.

The UI exports ``Instruction.csv``, ``DmaPacketAggregated.csv``, ``DmaPacket.csv``,
``CcInstruction.csv`` and ``SemaphoreUpdate.csv``: each row a leading ``timeline_track`` column
(the UI's row label) then the Parquet table's fields. A profile is a directory of such files; a
job is a directory of profile directories (ranks from their names, as for Parquet). The files
are read column by column with Arrow and mapped exactly as the Parquet tables
(:mod:`neuron_parquet`): instructions, DMA packets (duplicates removed, instruction-queue and
tiny packets without bytes), no collectives (the export has no ``CcOp``) and no ``Flow`` edges.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv

from tracediag.model import schema as S
from tracediag.model.assembly import RankPart
from tracediag.model.errors import TraceInputError
from tracediag.parsers.neuron_csv_sniff import (  # noqa: F401 (the reader's declaration)
    DEFAULT_HARDWARE,
    FORMAT,
    NEURON_DEVICE_PROFILE,
    TRACK_COLUMN,
    _children,
    _is_export,
    sniff,
)
from tracediag.parsers.neuron_parquet import DMA_COLUMNS, INSTRUCTION_COLUMNS
from tracediag.parsers.neuron_parquet_dma import data_bytes, drop_duplicate_packets
from tracediag.parsers.neuron_parquet_notes import dma_presence
from tracediag.parsers.neuron_parquet_profiles import select_job
from tracediag.parsers.neuron_parquet_tables import _to_frame
from tracediag.parsers.neuron_part import build_part


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


def _frame(path: Path, table: str, columns: list[str], required: tuple[str, ...]):
    f = path / f"{table}.csv"
    if not f.is_file():
        return None
    t = read_csv_table(f)
    missing = [c for c in required if c not in t.column_names]
    if missing:
        raise TraceInputError(f, f"table lacks required column(s) {', '.join(missing)}")
    return _to_frame(t.select([c for c in columns if c in t.column_names]))


def _read_export(path: Path, rank: int, source: str) -> RankPart:
    meta = S.RankMeta(rank=rank, sources=[str(path)], format=FORMAT)
    meta.info["rank_source"] = source
    instr = _frame(path, "Instruction", INSTRUCTION_COLUMNS, ("start_ts", "engine"))
    table = "DmaPacket" if (path / "DmaPacket.csv").is_file() else "DmaPacketAggregated"
    dma = _frame(path, table, DMA_COLUMNS, ("start_ts",))
    dma = dma if dma is not None and len(dma) else None
    if dma_presence(None if dma is None else len(dma), meta) == "present":
        dma = drop_duplicate_packets(dma, table, meta)
        if table == "DmaPacketAggregated":
            dma["packet_aggregation_id"] = dma.get("id")
        dma["transfer_bytes"] = data_bytes(dma)
    return build_part(
        meta,
        "",
        {"instruction": instr, "dma": dma, "cc": None},
        {"instruction": "Instruction", "dma": table, "cc": "CcOp"},
        lambda _ids, _first: [],
    )
