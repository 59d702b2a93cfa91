"""Read a Chrome trace document as its metadata and runs of whole events, a piece at a time.

Decoding a 1M-event trace in one ``orjson.loads`` builds a dict per event: about nine times the
JSON text in memory, on top of the text itself. :class:`Pieces` reads the document from a
stream and hands out runs of whole events of about ``piece_bytes`` each, so that neither the
text nor its decoded objects are ever held whole. The cuts need no JSON scanner: one is put
after ``},`` where the next ``{`` follows, and a cut in the wrong place (inside a string, or
inside a nested array of objects) leaves the piece before it with an open string or bracket,
which the decoder refuses; the caller then joins that piece, the separator handed out with it
and the next piece, and decodes again. The end of the array is found from the document's tail
(Kineto writes kilobytes of other keys after it, whose values hold ``]`` in strings and arrays
of objects: see :func:`_events_end`). A document this module cannot place (no top-level
``traceEvents`` array, a damaged tail) raises :class:`NotPlain`, and the caller decodes the
whole document instead.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import orjson

from tracediag.parsers.chrome_decode import count_huge_ints

# The array of events of a {"traceEvents": [...]} document (the key checked to be top level).
_TRACE_EVENTS = re.compile(rb'"traceEvents"\s*:\s*\[')
# A boundary between two event objects of the array: the cut lies after the comma.
_BETWEEN_EVENTS = re.compile(rb"\}\s*,\s*(?=\{)")
_LEADING_SPACE = re.compile(rb"[\xef\xbb\xbf \t\r\n]*")
_EMPTY_OBJECT_AT_END = re.compile(rb"\{\s*\}\s*\Z")
# A ']' that closes an array whose last entry is an object: where an event array can end.
_CLOSE_AFTER_OBJECT = re.compile(rb"\}\s*\]")
# How many such closes from the end are tried as the end of the event array (the keys after
# it, e.g. Kineto's deviceProperties, hold a few arrays of objects: more means NotPlain).
_MAX_END_CANDIDATES = 64
# How much is read at a time when looking for a cut in a file (most events are far smaller).
_WINDOW_BYTES = 64 << 10
# How far into the document "traceEvents" is looked for (Kineto puts kilobytes before it).
_MAX_PREFIX_BYTES = 64 << 20


class NotPlain(Exception):
    """The document is not in the layout :class:`Pieces` reads (decode it whole)."""


class Pieces:
    """The runs of whole events of the document in ``stream`` (see the module docstring).

    Iterate for ``(run, separator)`` pairs: ``run`` is ``b"[{...}, {...}]"``, a JSON array of
    whole events, and ``separator`` the bytes between its last event and the next run's first
    (``b""`` after the last run; see :func:`join_runs`). Afterwards ``metadata`` holds the
    document's other keys, ``huge_ints`` the integers beyond 64 bits among them (as
    :func:`count_huge_ints` counts) and ``ends_with_empty_object`` whether the last event is
    the ``{}`` trace-viewer JSON ends with. Raises :class:`NotPlain` while iterating.
    """

    def __init__(self, stream: BinaryIO, piece_bytes: int) -> None:
        self.stream = stream
        self.piece_bytes = piece_bytes
        self.metadata: dict = {}
        self.huge_ints = 0
        self.ends_with_empty_object = False

    def __iter__(self) -> Iterator[tuple[bytes, bytes]]:
        start, prefix, bare_list = _events_start(self.stream, self.piece_bytes)
        buf = bytearray(start)  # grows at the end, consumed at the front: no copy of the rest
        eof = cut = False
        while not eof:
            block = self.stream.read(self.piece_bytes)
            eof = not block
            buf += block
            pos = 0
            while len(buf) - pos > 2 * self.piece_bytes:
                found = _BETWEEN_EVENTS.search(buf, pos + self.piece_bytes)
                if found is None:
                    break
                yield (
                    _bracketed(buf, pos, found.start() + 1),
                    bytes(buf[found.start() + 1 : found.end()]),
                )
                pos, cut = found.end(), True
            del buf[:pos]
        ends = _events_end(bytes(buf), prefix, bare_list, at_array_start=not cut)
        if ends is None:
            raise NotPlain
        close, self.metadata = ends
        self.huge_ints = count_huge_ints(prefix + b"[]" + bytes(buf[close + 1 :]))
        if buf[:close].strip():
            last = _bracketed(buf, 0, close)
            self.ends_with_empty_object = _ends_with_empty_object(last)
            yield last, b""
        elif cut:  # the array ends in ', ]': not JSON
            raise NotPlain


class Spans:
    """The runs of whole events of an uncompressed file, as ``(start, end)`` byte offsets of
    the events between the brackets (read them with :func:`read_span`), cut as :class:`Pieces`
    cuts: only the head, a window at each cut and the tail are read here, so that whoever
    decodes a run reads its bytes itself (a helper process reads them from the file instead of
    being sent them). The last run is handed out as bytes (``b"[...]"``): the tail was read to
    find the array's end. Same attributes and errors as :class:`Pieces`.
    """

    def __init__(self, path: Path, piece_bytes: int) -> None:
        self.path = path
        self.piece_bytes = piece_bytes
        self.metadata: dict = {}
        self.huge_ints = 0
        self.ends_with_empty_object = False

    def __iter__(self) -> Iterator[tuple[tuple[int, int] | bytes, bytes]]:
        with open(self.path, "rb") as stream:
            size = os.fstat(stream.fileno()).st_size
            rest, prefix, bare_list = _events_start(stream, self.piece_bytes)
            start = stream.tell() - len(rest)
            cut = False
            while start + 2 * self.piece_bytes < size:
                found = _boundary_after(stream, start + self.piece_bytes)
                if found is None:
                    break
                end, next_start, separator = found
                yield (start, end), separator
                start, cut = next_start, True
            stream.seek(start)
            tail = stream.read()
        ends = _events_end(tail, prefix, bare_list, at_array_start=not cut)
        if ends is None:
            raise NotPlain
        close, self.metadata = ends
        self.huge_ints = count_huge_ints(prefix + b"[]" + tail[close + 1 :])
        if tail[:close].strip():
            last = b"".join((b"[", tail[:close], b"]"))
            self.ends_with_empty_object = _ends_with_empty_object(last)
            yield last, b""
        elif cut:  # the array ends in ', ]': not JSON
            raise NotPlain


def read_span(path: Path, span: tuple[int, int]) -> bytes:
    """The run of events at ``span`` (see :class:`Spans`) of the file, as ``b"[...]"``."""
    start, end = span
    with open(path, "rb") as f:
        f.seek(start)
        body = f.read(end - start)
    if len(body) != end - start:
        raise EOFError(f"{path}: shorter than when it was cut")
    return b"".join((b"[", body, b"]"))


def _boundary_after(stream: BinaryIO, offset: int) -> tuple[int, int, bytes] | None:
    """The first boundary between events found from ``offset``: where the run before it ends
    (after the '}'), where the next starts (the '{') and the separator between; None at the end
    of the file. Windows are read until one holds a boundary (one that straddles two windows
    may be passed over for a later one: any boundary will do)."""
    stream.seek(offset)
    window = bytearray()  # appended in place: an event of many windows is not copied over
    searched = 0
    while block := stream.read(_WINDOW_BYTES):
        window += block
        found = _BETWEEN_EVENTS.search(window, searched)
        if found is not None:
            end, next_start = offset + found.start() + 1, offset + found.end()
            return end, next_start, bytes(window[found.start() + 1 : found.end()])
        searched = max(0, len(window) - 1)  # only the new bytes are searched again
    return None


def _events_start(stream: BinaryIO, piece_bytes: int) -> tuple[bytes, bytes, bool]:
    """Read up to the event array: the bytes after its '[', what came before, bare list?"""
    buf = b""
    while True:
        block = stream.read(piece_bytes)
        buf += block
        start = _LEADING_SPACE.match(buf).end()
        if start < len(buf) and buf[start : start + 1] == b"[":
            return buf[start + 1 :], b"", True
        found = _TRACE_EVENTS.search(buf)
        if found is not None:
            prefix = buf[: found.end() - 1]
            if not _is_top_level_key(prefix):
                raise NotPlain
            return buf[found.end() :], prefix, False
        if not block or len(buf) > _MAX_PREFIX_BYTES:
            raise NotPlain


def join_runs(first: bytes, separator: bytes, second: bytes) -> bytes:
    """One run of the events of two consecutive runs (``separator``: what came between)."""
    return b"".join((first[:-1], separator, second[1:]))


def _bracketed(buf: bytearray, start: int, end: int) -> bytes:
    """``buf[start:end]`` between '[' and ']', copied once."""
    with memoryview(buf) as view:
        return b"".join((b"[", view[start:end], b"]"))


def _is_top_level_key(prefix: bytes) -> bool:
    """Whether the ``"traceEvents":`` ending ``prefix`` is a key of the top-level object."""
    try:
        return isinstance(orjson.loads(prefix + b"[]}"), dict)
    except orjson.JSONDecodeError:
        return False


def _ends_with_empty_object(run: bytes) -> bool:
    """Whether the run of events ``run`` (``[...]``) ends with the event ``{}``."""
    text = run[1:-1]
    window = max(0, len(text) - 256)
    found = _EMPTY_OBJECT_AT_END.search(text, window)
    if found is None:
        return False
    before = len(text[: found.start()].rstrip())
    return before == 0 or text[before - 1] == ord(",")


def _events_end(
    tail: bytes, prefix: bytes, bare_list: bool, at_array_start: bool
) -> tuple[int, dict] | None:
    """Position in ``tail`` of the ``]`` closing the event array, and the document's other keys.

    The array ends with an event object, so its ``]`` follows a ``}`` (or, when the tail starts
    right after the ``[`` (``at_array_start``), it may be empty). Of the last such closes, the
    leftmost after which the rest makes valid JSON with the prefix is the one: a close inside
    an event leaves the rest closing the event and the array too (invalid), while a close
    further right, inside a later key's value (``"deviceProperties": [{...}]``), may leave
    valid JSON but cannot be the leftmost. None when no close fits.
    """
    candidates = [m.end() - 1 for m in _CLOSE_AFTER_OBJECT.finditer(tail)]
    if at_array_start:
        start = _LEADING_SPACE.match(tail).end()  # (also skips a BOM: not JSON either way)
        if tail[start : start + 1] == b"]":
            candidates.insert(0, start)
    found = None
    for close in reversed(candidates[-_MAX_END_CANDIDATES:]):
        rest = tail[close + 1 :]
        if bare_list:
            if rest.strip():
                return found
            found = (close, {})
            continue
        try:
            metadata = orjson.loads(prefix + b"[]" + rest)
        except orjson.JSONDecodeError:
            continue
        if isinstance(metadata, dict):
            metadata.pop("traceEvents", None)
            found = (close, metadata)
    return found
