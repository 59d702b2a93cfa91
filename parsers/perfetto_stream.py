"""A Perfetto trace file as a stream of ``TracePacket`` messages, never one whole ``Trace``.

The file is a ``Trace`` message: a run of length-delimited field-1 records, one per packet (gzip
or not). :func:`packets` reads it in chunks, finds the record boundaries, decodes each chunk's
complete records in one protobuf call and yields the packets with their byte offsets, so memory
stays bounded by the chunk size whatever the file size. ``compressed_packets`` bundles (zlib
deflate of more records) are expanded in place. Framing or decoding problems raise
:class:`~tracediag.model.errors.TraceInputError` naming the file, the byte offset and the problem.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from google.protobuf.message import DecodeError

from tracediag.io.files import GZIP_MAGIC
from tracediag.model.errors import TraceInputError
from tracediag.parsers.protos.perfetto_trace_pb2 import Trace, TracePacket

#: 2 MiB: the numpy walk gathers from a chunk that stays in cache (8 MiB read ~40% slower).
CHUNK_BYTES = 1 << 21
#: Larger declared records are corrupt framing, not data (real packets are kilobytes).
MAX_RECORD_BYTES = 1 << 28
_PACKET_TAG = 0x0A  # field 1, wire type 2 (length-delimited)
_FIXED_SIZE = {1: 8, 5: 4}
_COMPRESSED_TAG = bytes(
    [(50 << 3 | 2) & 0x7F | 0x80, (50 << 3 | 2) >> 7]
)  # compressed_packets = 50


class FramingError(Exception):
    """A record boundary problem at ``offset`` (relative to the buffer scanned)."""

    def __init__(self, offset: int, problem: str):
        super().__init__(problem)
        self.offset = offset
        self.problem = problem


def varint(buf: bytes, pos: int, end: int) -> tuple[int, int] | None:
    """(value, next position), or None when the buffer ends inside the varint."""
    value = shift = 0
    start = pos
    while pos < end:
        byte = buf[pos]
        value |= (byte & 0x7F) << shift
        pos += 1
        if byte < 0x80:
            return value, pos
        shift += 7
        if pos - start >= 10:
            raise FramingError(start, "malformed varint (more than 10 bytes)")
    return None


def scan_records(buf: bytes, counts: dict[str, int]) -> tuple[list[tuple[int, int, int]], int]:
    """Complete packet records in ``buf``: ``[(record offset, payload start, payload end)]`` and
    the offset where the first incomplete record starts (``len(buf)`` when none is cut).

    Top-level fields other than packets are skipped and counted; an impossible tag raises
    :class:`FramingError`. A loop per record, but only over its two header varints.
    """
    records, pos, end = [], 0, len(buf)
    while pos < end:
        # Fast path: a packet tag and a length of one or two bytes (nearly every record).
        if buf[pos] == _PACKET_TAG and pos + 3 <= end:
            b1 = buf[pos + 1]
            if b1 < 0x80:
                length, start = b1, pos + 2
            elif buf[pos + 2] < 0x80:
                length, start = (b1 & 0x7F) | buf[pos + 2] << 7, pos + 3
            else:
                length = -1
            if length >= 0:
                if start + length > end:
                    return records, pos
                records.append((pos, start, start + length))
                pos = start + length
                continue
        head = varint(buf, pos, end)
        if head is None:
            return records, pos
        tag, body = head
        field, wire = tag >> 3, tag & 7
        if field == 0 or wire not in (0, 1, 2, 5):
            raise FramingError(pos, f"not a packet record (field {field}, wire type {wire})")
        if wire == 2:
            size = varint(buf, body, end)
            if size is None:
                return records, pos
            length, start = size
            if length > MAX_RECORD_BYTES:
                raise FramingError(pos, f"record declares {length} bytes (corrupt length)")
            if start + length > end:
                return records, pos
            if tag == _PACKET_TAG:
                records.append((pos, start, start + length))
            else:
                _count_unknown(counts, field)
            pos = start + length
        elif wire == 0:
            value = varint(buf, body, end)
            if value is None:
                return records, pos
            _count_unknown(counts, field)
            pos = value[1]
        else:
            if body + _FIXED_SIZE[wire] > end:
                return records, pos
            _count_unknown(counts, field)
            pos = body + _FIXED_SIZE[wire]
    return records, pos


def _count_unknown(counts: dict[str, int], field: int) -> None:
    key = f"top-level records of unknown field {field}: skipped"
    counts[key] = counts.get(key, 0) + 1


def _open(path: Path) -> BinaryIO:
    with open(path, "rb") as f:
        gz = f.read(2) == GZIP_MAGIC
    return gzip.open(path, "rb") if gz else open(path, "rb")


def _read(f: BinaryIO, n: int, path: Path, offset: int) -> bytes:
    try:
        return f.read(n)
    except EOFError:
        raise TraceInputError(
            path, f"truncated gzip stream (ends near decompressed byte offset {offset})"
        ) from None
    except (OSError, zlib.error) as exc:
        raise TraceInputError(
            path, f"corrupt gzip data near decompressed byte offset {offset}: {exc}"
        ) from None


def frames(
    path: Path, counts: dict[str, int], scan=scan_records
) -> Iterator[tuple[bytes, list, int]]:
    """The file chunk by chunk: ``(buffer, its complete records, the buffer's offset in the
    decompressed content)``; each record is ``(record offset, payload start, payload end)`` in
    the buffer (``scan``: :func:`scan_records` or one giving the same records as an ``(n, 3)``
    array). Framing problems raise :class:`TraceInputError` with the byte offset."""
    path = Path(path)
    with _open(path) as f:
        buf, base, eof = b"", 0, False
        while not eof:
            more = _read(f, CHUNK_BYTES, path, base + len(buf))
            eof = not more
            buf += more
            try:
                records, used = scan(buf, counts)
            except FramingError as exc:
                raise TraceInputError(
                    path, f"byte offset {base + exc.offset}: {exc.problem}"
                ) from None
            if len(records):
                yield buf, records, base
            buf, base = buf[used:], base + used
        if buf:
            raise TraceInputError(path, _truncation(buf, base))


def packets(path: Path, counts: dict[str, int]) -> Iterator[tuple[int, TracePacket]]:
    """Every packet of the file in order, with the byte offset of its record (in the
    decompressed content; offsets inside a compressed bundle give the bundle's offset)."""
    for buf, records, base in frames(path, counts):
        for _, offset, packet in decoded(path, buf, records, base, counts):
            yield offset, packet


def _truncation(rest: bytes, base: int) -> str:
    """What is cut at the end of the file: a header or a record's payload."""
    end = base + len(rest)
    head = varint(rest, 0, len(rest))
    size = varint(rest, head[1], len(rest)) if head else None
    if size is None:
        return f"truncated at byte offset {end}: the file ends inside a record header"
    return (
        f"truncated at byte offset {end}: the record at byte offset {base} declares "
        f"{size[0]} bytes, only {len(rest) - size[1]} remain"
    )


def decoded(
    path: Path, buf: bytes, records: list[tuple[int, int, int]], base: int, counts: dict[str, int]
) -> Iterator[tuple[int, int, TracePacket]]:
    """The packets of ``records`` (in order; they need not be adjacent) as ``(index in
    records, byte offset, packet)``; a compressed bundle gives its packets under its index."""
    if not records:
        return
    if records[-1][2] - records[0][0] == sum(end - offset for offset, _, end in records):
        chunk = buf[records[0][0] : records[-1][2]]  # adjacent records: one slice
    else:
        chunk = b"".join([buf[offset:end] for offset, _, end in records])
    try:
        batch = Trace.FromString(chunk).packet  # one C-level parse for all of them
    except DecodeError:
        batch = [_one(path, buf, rec, base) for rec in records]  # find the bad record
    if _COMPRESSED_TAG not in chunk:  # then no packet of the chunk is a compressed bundle
        for i, ((offset, _, _), packet) in enumerate(zip(records, batch, strict=True)):
            yield i, base + offset, packet
        return
    for i, ((offset, _, _), packet) in enumerate(zip(records, batch, strict=True)):
        if packet.WhichOneof("data") == "compressed_packets":
            for at, inner in _bundle(path, packet.compressed_packets, base + offset, counts):
                yield i, at, inner
        else:
            yield i, base + offset, packet


def _one(path: Path, buf: bytes, record: tuple[int, int, int], base: int) -> TracePacket:
    offset, start, end = record
    try:
        return TracePacket.FromString(buf[start:end])
    except DecodeError as exc:
        raise TraceInputError(
            path, f"byte offset {base + offset}: packet does not decode as a TracePacket ({exc})"
        ) from None


def _bundle(
    path: Path, data: bytes, offset: int, counts: dict[str, int]
) -> Iterator[tuple[int, TracePacket]]:
    """The packets of a ``compressed_packets`` bundle (zlib; raw deflate also accepted)."""
    try:
        inner = zlib.decompress(data)
    except zlib.error:
        try:
            inner = zlib.decompress(data, wbits=-15)
        except zlib.error as exc:
            raise TraceInputError(
                path, f"byte offset {offset}: compressed packets do not inflate ({exc})"
            ) from None
    try:
        records, used = scan_records(inner, counts)
    except FramingError as exc:
        raise TraceInputError(
            path,
            f"byte offset {offset}: compressed packets, inner offset {exc.offset}: {exc.problem}",
        ) from None
    if used != len(inner):
        raise TraceInputError(
            path,
            f"byte offset {offset}: compressed packets end inside a record (inner offset {used})",
        )
    for _, _, packet in decoded(path, inner, records, 0, counts):
        yield offset, packet
