"""Saved JSON reports (``report --format json -o FILE``) as inputs of ``baseline`` and ``diff``."""

from __future__ import annotations

from pathlib import Path

import orjson

from tracediag.io.files import head, read_bytes
from tracediag.model.errors import TraceInputError

#: The schema id the engine writes first in every JSON report, and a saved report must carry.
REPORT_SCHEMA = "tracediag.report/1"


def is_saved_report(path: Path) -> bool:
    """True for a file whose JSON starts like a tracediag report (its schema key comes first)."""
    if not Path(path).is_file():
        return False
    start = head(Path(path), 256).lstrip()
    return start.startswith(b"{") and REPORT_SCHEMA.encode() in start


def load_report(path: Path) -> dict:
    """The report dictionary; a TraceInputError when it is not a ``tracediag.report/1`` JSON."""
    try:
        data = orjson.loads(read_bytes(Path(path)))
    except orjson.JSONDecodeError as exc:
        raise TraceInputError(path, f"not valid JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("schema") != REPORT_SCHEMA:
        raise TraceInputError(path, f"not a tracediag report (schema {REPORT_SCHEMA} expected)")
    for key in ("critical_path", "findings", "summary", "ranks"):
        if key not in data:
            raise TraceInputError(path, f"tracediag report lacks its {key!r} section")
    return data
