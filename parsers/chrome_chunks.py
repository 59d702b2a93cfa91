"""Split a Chrome trace document into its metadata and byte ranges of whole events.

Decoding a 1M-event trace in one ``orjson.loads`` builds a dict per event: about nine times the
JSON text in memory. Decoding it a few megabytes at a time keeps that to one piece's worth. The
split needs no JSON scanner: a cut is put after ``},`` where the next ``{`` follows, and a cut in
the wrong place (inside a string, or inside a nested array of objects) leaves the piece before it
with an open string or bracket, which the decoder refuses; the caller then moves that cut on to
the next candidate (:meth:`Split.merge_with_next`). Anything this module cannot place (no
top-level ``traceEvents`` array, a damaged tail) returns None, and the caller decodes the whole
document instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import orjson

# The array of events of a {"traceEvents": [...]} document (the key checked to be top level).
_TRACE_EVENTS = re.compile(rb'"traceEvents"\s*:\s*\[')
# A boundary between two event objects of the array: the cut lies after the comma.
_BETWEEN_EVENTS = re.compile(rb"\}\s*,\s*(?=\{)")
_LEADING_SPACE = re.compile(rb"[\xef\xbb\xbf \t\r\n]*")
_EMPTY_OBJECT_AT_END = re.compile(rb"\{\s*\}\s*\Z")
# How many ']' from the end are tried as the end of the event array before giving up.
_MAX_END_CANDIDATES = 8


@dataclass
class Split:
    """Where the events of a document lie: ``pieces`` are ``(start, end)`` byte ranges, each a
    comma-separated run of whole events (decode ``b"[" + data[start:end] + b"]"``)."""

    metadata: dict
    pieces: list[tuple[int, int]]
    ends_with_empty_object: bool  # trace-viewer JSON ends its events with a '{}' terminator

    def merge_with_next(self, i: int) -> bool:
        """Join piece ``i`` with the one after it (its cut was misplaced); False if it is last."""
        if i + 1 >= len(self.pieces):
            return False
        self.pieces[i : i + 2] = [(self.pieces[i][0], self.pieces[i + 1][1])]
        return True


def split(data: bytes, piece_bytes: int) -> Split | None:
    """The metadata and event pieces of ``data``, or None where the layout is not the plain one.

    The event array ends at the last ``]`` after which the document's remaining keys and closing
    brace make valid JSON with the prefix (a key's value after the array may hold ``]`` too; a
    wrong choice leaves the last piece undecodable and the caller decodes the whole document).
    """
    start = _LEADING_SPACE.match(data).end()
    bare_list = data[start : start + 1] == b"["
    if bare_list:
        prefix_end, events_start = start, start + 1
    else:
        found = _TRACE_EVENTS.search(data)
        if found is None or not _is_top_level_key(data[: found.end() - 1]):
            return None
        prefix_end, events_start = found.end() - 1, found.end()
    pieces, tail_start = _cut(data, events_start, piece_bytes)
    ends = _events_end(data, tail_start, data[:prefix_end], bare_list)
    if ends is None:
        return None
    events_end, metadata = ends
    if data[tail_start:events_end].strip():
        pieces.append((tail_start, events_end))
    elif pieces:  # the array ends in ',' + spaces: not JSON, left to the whole-document decoder
        return None
    return Split(metadata, pieces, bool(pieces) and _ends_with_empty_object(data, *pieces[-1]))


def _is_top_level_key(prefix: bytes) -> bool:
    """Whether the ``"traceEvents":`` ending ``prefix`` is a key of the top-level object."""
    try:
        return isinstance(orjson.loads(prefix + b"[]}"), dict)
    except orjson.JSONDecodeError:
        return False


def _ends_with_empty_object(data: bytes, start: int, end: int) -> bool:
    """Whether the run of events ``data[start:end]`` ends with the event ``{}``."""
    window = max(start, end - 256)
    found = _EMPTY_OBJECT_AT_END.search(data[window:end])
    if found is None:
        return False
    before = window + found.start()
    while before > start and data[before - 1] in b" \t\r\n":
        before -= 1
    return before == start or data[before - 1] == ord(",")


def _cut(data: bytes, start: int, piece_bytes: int) -> tuple[list[tuple[int, int]], int]:
    """Pieces of about ``piece_bytes`` from ``start``, each ending with an event's ``}``, and
    where the rest of the array (the array's end with it) starts."""
    pieces = []
    pos = start
    while len(data) - pos > 2 * piece_bytes:
        found = _BETWEEN_EVENTS.search(data, pos + piece_bytes)
        if found is None:
            break
        pieces.append((pos, found.start() + 1))
        pos = found.end()
    return pieces, pos


def _events_end(
    data: bytes, tail_start: int, prefix: bytes, bare_list: bool
) -> tuple[int, dict] | None:
    """Position of the ``]`` closing the event array, and the document's other keys."""
    end = len(data)
    for _ in range(_MAX_END_CANDIDATES):
        close = data.rfind(b"]", tail_start, end)
        if close < 0:
            return None
        rest = data[close + 1 :]
        if bare_list:
            return (close, {}) if not rest.strip() else None
        try:
            metadata = orjson.loads(prefix + b"[]" + rest)
        except orjson.JSONDecodeError:
            end = close
            continue
        if not isinstance(metadata, dict):
            return None
        metadata.pop("traceEvents", None)
        return close, metadata
    return None
