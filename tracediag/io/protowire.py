"""Protobuf wire encoding of many rows at once, with numpy: varints, fixed64 and length-delimited
fields built column by column, so that writing a million trace events needs no Python loop over
them (the protobuf package would build one message object per event).

A *column* is ``(flat bytes, length per row)``: row i's bytes are ``flat[start_i:start_i + len_i]``
with rows laid out one after another. :func:`join` concatenates columns row by row.
"""

from __future__ import annotations

import numpy as np

Column = tuple[np.ndarray, np.ndarray]  # (uint8 bytes of all rows, int64 length per row)

_GROUPS = np.arange(10, dtype=np.uint64)


def varints(values: np.ndarray) -> Column:
    """The varint encodings of ``values`` (taken as uint64: a negative int64 wraps)."""
    v = np.asarray(values).astype(np.int64).view(np.uint64)
    groups = ((v[:, None] >> (_GROUPS * np.uint64(7))) & np.uint64(0x7F)).astype(np.uint8)
    nonzero = groups != 0
    length = np.where(nonzero.any(axis=1), 10 - np.argmax(nonzero[:, ::-1], axis=1), 1)
    position = np.arange(10)[None, :]
    groups |= np.where(position < length[:, None] - 1, 0x80, 0).astype(np.uint8)
    return groups[position < length[:, None]], length.astype(np.int64)


def constant(data: bytes, n: int) -> Column:
    """The same bytes on each of ``n`` rows."""
    return np.tile(np.frombuffer(data, dtype=np.uint8), n), np.full(n, len(data), dtype=np.int64)


def fixed64(values: np.ndarray) -> Column:
    """Little-endian 8-byte encodings."""
    raw = np.ascontiguousarray(np.asarray(values).astype("<u8")).view(np.uint8)
    return raw, np.full(len(values), 8, dtype=np.int64)


def tag(field: int, wire: int) -> bytes:
    """A field's key bytes."""
    flat, _ = varints(np.array([field << 3 | wire]))
    return flat.tobytes()


def join(columns: list[Column]) -> Column:
    """Row i of the result is row i of every column, in order."""
    lengths = np.stack([c[1] for c in columns], axis=1)
    total = lengths.sum(axis=1)
    row_start = np.cumsum(total) - total
    col_start = np.cumsum(lengths, axis=1) - lengths
    out = np.empty(int(total.sum()), dtype=np.uint8)
    for j, (flat, length) in enumerate(columns):  # a loop over columns (fields), not rows
        src_start = np.cumsum(length) - length
        out[np.repeat(row_start + col_start[:, j] - src_start, length) + np.arange(len(flat))] = (
            flat
        )
    return out, total


def masked(column: Column, keep: np.ndarray) -> Column:
    """``column`` on the rows where ``keep``, nothing on the others."""
    flat, length = column
    return flat[np.repeat(keep, length)], np.where(keep, length, 0)


def field_varint(field: int, values: np.ndarray) -> Column:
    """A varint field on every row."""
    return join([constant(tag(field, 0), len(values)), varints(values)])


def field_message(field: int, payload: Column) -> Column:
    """A length-delimited field (sub-message or bytes) holding each row's ``payload``."""
    return join([constant(tag(field, 2), len(payload[1])), varints(payload[1]), payload])
