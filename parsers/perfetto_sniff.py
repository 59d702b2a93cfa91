"""Content sniffing of protobuf trace files (Perfetto and XPlane), from the head of the file only.

It is also the Perfetto reader's declaration (``FORMAT``, ``sniff``): the reader registry sniffs
with it, without importing the Perfetto parse path.

Both formats start with a length-delimited field-1 record (a packet; a plane), so the decision
rests on the fields inside the first record: Perfetto packets carry packet-level fields (sequence
id, timestamp, track event, descriptor, interned data, ...), whose numbers XPlane's first fields
(1-6) never use.
"""

from __future__ import annotations

from pathlib import Path

from tracediag.io import files as fileio
from tracediag.parsers.perfetto_stream import MAX_RECORD_BYTES, FramingError, varint

#: The Perfetto reader's declaration (:mod:`tracediag.parsers.perfetto` re-exports it).
FORMAT = "perfetto"
SNIFF_BYTES = 1 << 16
#: TracePacket fields that mark a Perfetto packet (sequence id, timestamp, clock id, track event,
#: interned data, flags, defaults, descriptor, compressed bundle, first-packet flag, ...).
PERFETTO_PACKET_FIELDS = frozenset({8, 10, 11, 12, 13, 36, 41, 42, 50, 58, 59, 60, 87, 89})


def head(path: Path) -> bytes:
    """The first bytes of the content; a damaged gzip gives what decompresses."""
    return fileio.sniff_head(path, SNIFF_BYTES)


def first_record_fields(data: bytes) -> list[tuple[int, int, bytes]] | None:
    """Fields ``(number, wire type, bytes value or b"")`` of the first field-1 record, as far as
    the head holds them; None when ``data`` does not start with a plausible field-1 record."""
    if not data or data[0] != 0x0A:
        return None
    try:
        size = varint(data, 1, len(data))
    except FramingError:
        return None
    if size is None or size[0] == 0 or size[0] > MAX_RECORD_BYTES:
        return None
    body, end = size[1], min(len(data), size[1] + size[0])
    fields, pos = [], body
    while pos < end:
        try:
            tag = varint(data, pos, end)
            if tag is None:
                break
            number, wire = tag[0] >> 3, tag[0] & 7
            pos = tag[1]
            if number == 0 or wire not in (0, 1, 2, 5):
                return None
            if wire == 0:
                value = varint(data, pos, end)
                if value is None:
                    break
                fields.append((number, wire, b""))
                pos = value[1]
            elif wire == 2:
                length = varint(data, pos, end)
                if length is None:
                    break
                fields.append((number, wire, data[length[1] : length[1] + length[0]]))
                pos = length[1] + length[0]
            else:
                fields.append((number, wire, b""))
                pos += 8 if wire == 1 else 4
        except FramingError:
            return None
    return fields


def looks_like_perfetto(path: Path) -> bool:
    """The file starts with a TracePacket record holding a packet-level field."""
    if not path.is_file():
        return False
    fields = first_record_fields(head(path))
    return bool(fields) and any(number in PERFETTO_PACKET_FIELDS for number, _, _ in fields)


def sniff(path: Path) -> bool:
    """A file whose first records are Perfetto trace packets (the Perfetto reader's sniff)."""
    return looks_like_perfetto(Path(path))
