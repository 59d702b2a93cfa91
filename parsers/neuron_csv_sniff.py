"""The declaration of :mod:`tracediag.parsers.neuron_csv`: its ``FORMAT``, attributes and ``sniff``,
importable without its parse path (the registry sniffs with this module; the reader module is
imported on the first read).
"""

from __future__ import annotations

from pathlib import Path

from tracediag.parsers.neuron_common import natural_key

FORMAT = "neuron-csv"
NEURON_DEVICE_PROFILE = True
DEFAULT_HARDWARE = "trn1"
TABLES = ("Instruction", "DmaPacketAggregated", "DmaPacket", "CcInstruction", "SemaphoreUpdate")
TRACK_COLUMN = "timeline_track"


def _is_export(path: Path) -> bool:
    """A directory holding an exported table whose header starts with ``timeline_track``."""
    for table in TABLES:
        f = path / f"{table}.csv"
        if f.is_file():
            try:
                with open(f, "rb") as fh:
                    first = fh.read(len(TRACK_COLUMN) + 6)
                # A byte-order mark (spreadsheet-style CSV writers put one first) is not a name.
                first = first.removeprefix(b"\xef\xbb\xbf").replace(b'"', b"")
                return first.startswith(f"{TRACK_COLUMN},".encode())
            except OSError:
                return False
    return False


def _children(path: Path) -> list[Path]:
    if not path.is_dir():
        return []
    kids = sorted((c for c in path.iterdir() if c.is_dir()), key=lambda c: natural_key(c.name))
    return [c for c in kids if _is_export(c)]


def sniff(path: Path) -> bool:
    """An export directory, or a directory of export directories."""
    path = Path(path)
    return path.is_dir() and (_is_export(path) or bool(_children(path)))
