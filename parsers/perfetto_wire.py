"""Protobuf wire decoding of many messages at once, with numpy (the reading side of
:mod:`tracediag.io.protowire`).

:func:`walk` lists the fields of a set of messages held in one buffer: every step reads one field
of every message still open (its tag, then its varint, fixed value or length), so the Python loop
runs over field positions, as many times as the longest message has fields, never over messages.
Varints are read eight bytes at a time from an unaligned 64-bit view of the buffer.

Nothing here raises on damaged data: a message whose fields do not parse is flagged ``bad``, and
the caller hands it to protobuf, which gives the precise error or the exact reading.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

_HIGH = np.uint64(0x8080808080808080)
#: The mask keeping a word's first k bytes, k = 0..8.
BYTE_MASKS = np.array([(1 << (8 * k)) - 1 for k in range(9)], dtype=np.uint64)
_U = np.uint64
#: Largest length we take from a length prefix (longer: the message is flagged bad).
_MAX_LENGTH = 1 << 31
WIRE_VARINT, WIRE_FIXED64, WIRE_LEN, WIRE_FIXED32 = 0, 1, 2, 5


class Buffer:
    """A byte buffer with a 64-bit little-endian word starting at every byte offset."""

    def __init__(self, data: bytes):
        padded = bytes(data) + bytes(24)  # words near the end read zeros, never past the buffer
        self.size = len(data)
        self.bytes = np.frombuffer(padded, dtype=np.uint8)
        self.words = np.ndarray(
            (len(padded) - 7,), dtype="<u8", buffer=padded, offset=0, strides=(1,)
        )


def _compact(w: np.ndarray) -> np.ndarray:
    """The 7-bit groups of eight varint bytes side by side (a parallel bit extract)."""
    w = (w & _U(0x007F007F007F007F)) | ((w & _U(0x7F007F007F007F00)) >> _U(1))
    w = (w & _U(0x00003FFF00003FFF)) | ((w & _U(0x3FFF00003FFF0000)) >> _U(2))
    return (w & _U(0x000000000FFFFFFF)) | ((w & _U(0x0FFFFFFF00000000)) >> _U(4))


def varints(buf: Buffer, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The varints at ``pos``: (uint64 values, positions after them, well-formed)."""
    w = buf.words[pos]
    stop = ~w & _HIGH
    lowest = stop & (~stop + _U(1))  # the first byte without a continuation bit: 0x80 << 8k
    # k + 1 bytes: 2**8k times 0x0102...08 has k + 1 in its top byte (none: nine or more).
    nbytes = (((lowest >> _U(7)) * _U(0x0102030405060708)) >> _U(56)).view(np.int64)
    nbytes[stop == 0] = 9
    value = _compact(w & BYTE_MASKS.take(nbytes, mode="clip"))
    ok = np.ones(len(pos), dtype=bool)
    long = np.flatnonzero(stop == 0)
    if len(long):  # nine or ten bytes: 64-bit ids, negative ints
        b8 = buf.bytes[pos[long] + 8].astype(np.uint64)
        b9 = buf.bytes[pos[long] + 9].astype(np.uint64)
        ten = b8 >= 0x80
        value[long] |= (b8 & _U(0x7F)) << _U(56)
        value[long[ten]] |= b9[ten] << _U(63)
        ok[long[ten & (b9 > 1)]] = False  # beyond 64 bits or longer than ten bytes
        nbytes[long] = np.where(ten, 10, 9)
    return value, pos + nbytes, ok


@dataclass
class Fields:
    """One row per field: the message (index into the spans walked), field number, wire type,
    ``value`` (varint or fixed value; for length-delimited fields the length) and ``data``
    (where a length-delimited payload starts). Rows are in step order (the first field of every
    message, then the second, ...): rows of one message are in wire order, so ordering a subset
    by (message, row) puts it in message order, then wire order (:meth:`ordered`)."""

    msg: np.ndarray
    field: np.ndarray
    wire: np.ndarray
    value: np.ndarray
    data: np.ndarray
    bad: np.ndarray  # per message: its fields do not parse

    def of(self, field: int, wire: int) -> np.ndarray:
        """Rows of field ``field`` with wire type ``wire``."""
        return np.flatnonzero(self.tags == (field << 3 | wire))

    @functools.cached_property
    def tags(self) -> np.ndarray:
        """Per row its tag (field number and wire type), for one comparison per :meth:`of`."""
        return self.field << 3 | self.wire

    def ordered(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``rows`` in message order, then wire order, and their messages."""
        msg = self.msg[rows]
        order = np.argsort(msg, kind="stable")
        return rows[order], msg[order]


def _step(buf: Buffer, pos: np.ndarray):
    """One field at each of ``pos``: number, wire, value, payload start, next position, ok.

    Most tags and most values (small ints, short lengths) are one byte each: both come from one
    gathered word, a few numpy passes; only the rows with a longer tag or value take the
    word-wise varint reader (:func:`varints`)."""
    w = buf.words[pos]  # the tag and the value's first byte, in one gather
    tag = (w & _U(0xFF)).astype(np.int64)
    value = (w >> _U(8)) & _U(0xFF)
    at = pos + 1  # where the value starts
    ok = np.ones(len(pos), dtype=bool)
    long = np.flatnonzero(tag >= 0x80)
    if len(long):  # field numbers of 16 and more
        t, at[long], ok[long] = varints(buf, pos[long])
        tag[long] = t.view(np.int64)
        value[long] = buf.bytes[at[long]]
    wire = tag & 7
    number = tag >> 3
    after = at + 1
    # Wire types 1 and 5 (fixed64, fixed32; 3 is odd too, but never ok): no varint value.
    fixed = np.flatnonzero(tag & 1)
    long = np.flatnonzero(value >= 0x80)
    if len(fixed):
        long = np.setdiff1d(long, fixed, assume_unique=True)
    if len(long):  # varints of two bytes and more (timestamps, ids, lengths of 128 and more)
        value[long], after[long], fine = varints(buf, at[long])
        ok[long] &= fine
    length = value.view(np.int64) * (wire == WIRE_LEN)
    huge = np.flatnonzero((length >= _MAX_LENGTH) | (length < 0))
    if len(huge):  # a length beyond what we take: the message is bad
        length[huge] = 0
        ok[huge] = False
    nxt = after + length
    if len(fixed):
        f = buf.words[at[fixed]]
        eight = wire[fixed] == WIRE_FIXED64
        value[fixed] = np.where(eight, f, f & _U(0xFFFFFFFF))
        after[fixed] = at[fixed]
        nxt[fixed] = at[fixed] + np.where(eight, 8, 4)
    ok &= (number > 0) & ((wire <= WIRE_LEN) | (wire == WIRE_FIXED32))
    return number, wire, value, after, nxt, ok


def walk(buf: Buffer, starts: np.ndarray, ends: np.ndarray) -> Fields:
    """The fields of the messages ``buf[starts[i]:ends[i]]`` (see :class:`Fields`)."""
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    bad = np.zeros(len(starts), dtype=bool)
    msg = np.flatnonzero(starts < ends)
    pos, end = starts[msg], ends[msg]
    out: list[tuple[np.ndarray, ...]] = []
    while len(msg):  # a loop over field positions: each step reads one field of every message
        number, wire, value, after, nxt, ok = _step(buf, pos)
        ok &= nxt <= end
        if not ok.all():
            bad[msg[~ok]] = True
            msg, number, wire, value, after, nxt, end = (
                c[ok] for c in (msg, number, wire, value, after, nxt, end)
            )
        out.append((msg, number, wire, value, after))
        more = nxt < end
        if not more.all():
            msg, nxt, end = msg[more], nxt[more], end[more]
        pos = nxt
    if not out:
        empty = np.zeros(0, dtype=np.int64)
        return Fields(empty, empty, empty, empty.astype(np.uint64), empty, bad)
    msg, number, wire, value, data = (np.concatenate(c) for c in zip(*out, strict=True))
    if bad.any():
        keep = ~bad[msg]  # a message with a bad field is read by protobuf, whole
        msg, number, wire, value, data = (c[keep] for c in (msg, number, wire, value, data))
    return Fields(msg, number, wire, value, data, bad)


def count_per(msg: np.ndarray, rows: np.ndarray, n: int) -> np.ndarray:
    """How many of ``rows`` each of ``n`` messages has."""
    return np.bincount(msg[rows], minlength=n)


def any_per(msg: np.ndarray, rows: np.ndarray, n: int) -> np.ndarray:
    """Per message: whether it has any of ``rows`` (one scatter; ``count_per(...) > 0``)."""
    out = np.zeros(n, dtype=bool)
    out[msg[rows]] = True
    return out


def last_per(msg: np.ndarray, rows: np.ndarray, values: np.ndarray, n: int, fill) -> np.ndarray:
    """Per message the value of its last row among ``rows`` (protobuf: the last one wins)."""
    out = np.full(n, fill, dtype=values.dtype)
    out[msg[rows]] = values[rows]
    return out
