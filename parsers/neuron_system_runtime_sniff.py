"""The declaration of :mod:`tracediag.parsers.neuron_system_runtime`: its ``FORMAT``, attributes and ``sniff``,
importable without its parse path (the registry sniffs with this module; the reader module is
imported on the first read).
"""

from __future__ import annotations

import re
from pathlib import Path

from tracediag.io.files import head
from tracediag.model.errors import TraceInputError

FORMAT = "neuron-runtime-json"
#: The hardware a profile that names none ran on (the documented default target).
DEFAULT_HARDWARE = "trn1"
_HEAD = re.compile(rb'^\s*\{\s*"(?:events|data_version)"\s*:')
_EVENT_TYPE = re.compile(rb'"event_type"\s*:')
_MAX_SNIFFED_FILES = 8


def _is_runtime_file(path: Path) -> bool:
    if not path.is_file() or path.suffix.lower() != ".json":
        return False
    try:
        text = head(path, 4096)
    except TraceInputError:
        return False
    text = text.lstrip(b"\xef\xbb\xbf")
    return bool(_HEAD.match(text) and _EVENT_TYPE.search(text))


def _files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    return sorted(p for p in path.iterdir() if _is_runtime_file(p))


def sniff(path: Path) -> bool:
    """A runtime trace file, or a directory whose JSON files are runtime trace files."""
    path = Path(path)
    if path.is_file():
        return _is_runtime_file(path)
    if not path.is_dir():
        return False
    jsons = sorted(p for p in path.iterdir() if p.suffix.lower() == ".json")
    return bool(jsons) and all(_is_runtime_file(p) for p in jsons[:_MAX_SNIFFED_FILES])
