"""The declaration of :mod:`tracediag.parsers.neuron_system_parquet`: its ``FORMAT``, attributes and ``sniff``,
importable without its parse path (the registry sniffs with this module; the reader module is
imported on the first read).
"""

from __future__ import annotations

from pathlib import Path

from tracediag.parsers.neuron_parquet_files import is_profile_dir, table_files

FORMAT = "neuron-system-parquet"
#: The hardware a profile that names none ran on (the documented default target).
DEFAULT_HARDWARE = "trn1"
TABLE = "SystemProfileEvents"
#: Device tables: a directory holding one is a device profile (the Parquet reader's).
_DEVICE_TABLES = ("Instruction", "DmaPacket", "DmaPacketAggregated", "CcOp")


def sniff(path: Path) -> bool:
    """A directory with ``SystemProfileEvents`` part files and no device table."""
    path = Path(path)
    if not is_profile_dir(path):  # table files with the Parquet magic
        return False
    try:
        files = table_files(path)
    except OSError:
        return False
    return TABLE in files and not any(t in files for t in _DEVICE_TABLES)
