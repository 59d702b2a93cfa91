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

from dataclasses import dataclass

import numpy as np

_HIGH = np.uint64(0x8080808080808080)
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
    lowest = stop & (~stop + _U(1))  # the first byte without a continuation bit
    nbytes = np.where(stop == 0, 9, (np.log2(np.maximum(lowest, 1).astype(np.float64)) + 1) / 8)
    nbytes = nbytes.astype(np.int64)
    keep = np.where(nbytes >= 8, ~_U(0), (_U(1) << (nbytes.astype(np.uint64) * _U(8))) - _U(1))
    value = _compact(w & keep)
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
    by (message, row) puts it in message order, then wire order (:meth:`in_order`)."""

    msg: np.ndarray
    field: np.ndarray
    wire: np.ndarray
    value: np.ndarray
    data: np.ndarray
    bad: np.ndarray  # per message: its fields do not parse

    def of(self, field: int, wire: int) -> np.ndarray:
        """Rows of field ``field`` with wire type ``wire``."""
        return np.flatnonzero((self.field == field) & (self.wire == wire))

    def in_order(self, rows: np.ndarray) -> np.ndarray:
        """``rows`` in message order, then wire order."""
        return rows[np.argsort(self.msg[rows], kind="stable")]


_MASKS = np.array([(1 << (8 * k)) - 1 for k in range(8)] + [(1 << 64) - 1], dtype=np.uint64)
_bitcount = getattr(np, "bitwise_count", None)  # numpy >= 2


def _end_byte(lowest: np.ndarray) -> np.ndarray:
    """For the lowest stop bit of a word (bit 8k+7), k + 1; 0 where there is none."""
    if _bitcount is not None:
        n = (_bitcount(lowest - _U(1)).astype(np.int64) + 1) >> 3
    else:
        n = (np.log2(np.maximum(lowest, 1).astype(np.float64)).astype(np.int64) + 1) >> 3
    return np.where(lowest == 0, 0, n)


def _step(buf: Buffer, pos: np.ndarray):
    """One field at each of ``pos``: number, wire, value, payload start, next position, ok."""
    w = buf.words[pos]
    stop = ~w & _HIGH
    low1 = stop & (~stop + _U(1))
    rest = stop ^ low1
    k1 = _end_byte(low1)  # the tag's bytes (0: longer than 8, never a valid tag)
    k2 = _end_byte(rest & (~rest + _U(1)))  # where the next varint ends, if in this word
    tag = _compact(w & _MASKS[k1])
    wire = (tag & _U(7)).astype(np.int64)
    number = (tag >> _U(3)).astype(np.int64)
    shift = (np.minimum(k1, 7) * 8).astype(np.uint64)
    value = _compact((w >> shift) & _MASKS[np.maximum(k2 - k1, 0)])
    after = pos + k2
    ok = k1 > 0
    far = np.flatnonzero(ok & (k2 == 0) & ((wire == WIRE_VARINT) | (wire == WIRE_LEN)))
    if len(far):  # the value's varint runs past the word: read it on its own
        v, at, fine = varints(buf, pos[far] + k1[far])
        value[far], after[far] = v, at
        ok[far] &= fine
    fixed = np.flatnonzero((wire == WIRE_FIXED64) | (wire == WIRE_FIXED32))
    if len(fixed):
        at = pos[fixed] + k1[fixed]
        f = buf.words[at]
        eight = wire[fixed] == WIRE_FIXED64
        value[fixed] = np.where(eight, f, f & _U(0xFFFFFFFF))
        after[fixed] = at
    is_len = wire == WIRE_LEN
    length = np.where(is_len & (value < _MAX_LENGTH), value, 0).astype(np.int64)
    nxt = after + length
    nxt[fixed] = after[fixed] + np.where(wire[fixed] == WIRE_FIXED64, 8, 4)
    ok &= (number > 0) & ((wire <= WIRE_LEN) | (wire == WIRE_FIXED32))
    ok &= ~is_len | (value < _MAX_LENGTH)
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


def last_per(msg: np.ndarray, rows: np.ndarray, values: np.ndarray, n: int, fill) -> np.ndarray:
    """Per message the value of its last row among ``rows`` (protobuf: the last one wins)."""
    out = np.full(n, fill, dtype=values.dtype)
    out[msg[rows]] = values[rows]
    return out
