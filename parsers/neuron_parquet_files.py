"""Which files of a directory are the tables of a Neuron Explorer Parquet profile, by their names
and magic: what sniffing needs, without pyarrow's Parquet module (which the Chrome and other
readers' commands need not import) or pandas.
"""

from __future__ import annotations

import re
from pathlib import Path

from tracediag.io.files import PARQUET_MAGIC

#: Tables of the Explorer profile schema (reference version 7.4.0); other Parquet files in a
#: directory do not make it a Neuron profile.
KNOWN_TABLES = frozenset(
    [
        "ActiveTime",
        "AssemblyInstruction",
        "BirInstruction",
        "CcInstruction",
        "CcOp",
        "CcStream",
        "CoreBarriers",
        "CpuUsage",
        "DeviceProfileList",
        "DmaPacket",
        "DmaPacketAggregated",
        "DmaQueuesInfo",
        "DmaUsage",
        "DmaUsageSummary",
        "Error",
        "ExecutionInfo",
        "Flow",
        "FrameworkInstruction",
        "FrameworkNode",
        "HbmUsage",
        "HbmUsageSummaryByType",
        "HloInstruction",
        "HostMemUsage",
        "Instruction",
        "KernelInstructions",
        "KernelIterationVariables",
        "KernelStackFrames",
        "Metadata",
        "NeffHeader",
        "OpcodeSummary",
        "SbufUsage",
        "SchemaFields",
        "SemaphoreUpdate",
        "StackFrame",
        "StackFrameFileLocation",
        "StackFrameFileName",
        "StackFrameFunctionName",
        "Summary",
        "SystemProfileEvents",
        "SystemProfileHbmUsage",
        "SystemProfileMetadata",
        "TensorInfo",
        "Throttle",
        "ThrottleSummary",
        "Warning",
    ]
)

_TABLE_FILE = re.compile(r"^(?P<table>[A-Za-z_]+?)(?:_(?P<part>\d+))?\.parquet$")
#: Table names as files may spell them: ``DmaPacketAggregated`` or ``dma_packet_aggregated``.
_TABLE_SPELLINGS = {t: t for t in KNOWN_TABLES} | {
    re.sub(r"(?<!^)(?=[A-Z])", "_", t).lower(): t for t in KNOWN_TABLES
}


def _table_of(name: str) -> tuple[str, int] | None:
    match = _TABLE_FILE.match(name)
    table = _TABLE_SPELLINGS.get(match.group("table")) if match else None
    if table is None:
        return None
    part = match.group("part")
    return table, -1 if part is None else int(part)


def _has_parquet_magic(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == PARQUET_MAGIC
    except OSError:
        return False


def is_profile_dir(path: Path) -> bool:
    """True when ``path`` is a directory holding a known table file with the Parquet magic."""
    if not path.is_dir():
        return False
    try:
        entries = list(path.iterdir())
    except OSError:
        return False
    return any(_table_of(e.name) and e.is_file() and _has_parquet_magic(e) for e in entries)


def table_files(path: Path) -> dict[str, list[Path]]:
    """The profile's table files by table name, each list in part order."""
    found: dict[str, list[tuple[int, Path]]] = {}
    for entry in path.iterdir():
        table = _table_of(entry.name)
        if table and entry.is_file():
            found.setdefault(table[0], []).append((table[1], entry))
    return {name: [p for _, p in sorted(parts)] for name, parts in found.items()}
