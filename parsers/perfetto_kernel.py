"""The Perfetto wire walk compiled (numba): record framing and the fast packets' fields, written
straight into column arrays, one pass over the bytes.

It reads what :func:`perfetto_fast.shapes` and the wire part of :func:`perfetto_fast.events`
read, with the same rules: a packet is *fast* when every field of it, of its ``TrackEvent``, of
its debug annotations and of their array or dictionary elements is one
:mod:`perfetto_fast` knows, with the schema's wire type, at most once where the schema says
optional, and parses; every other packet is *slow* (left to protobuf, which reads the packets
that change interning state). The numpy walk costs ~40 ns per field per pass over some thirty
passes; here each byte is visited once. Imported only inside :func:`tracediag.io.compiled.compiled`
(this module imports numba), and used on big files only (see ``perfetto_decode``).

Outputs (uint64 matrices, one column per item, in file order; a row per field):

- ``E``, per fast packet with a track event: the rows ``E_*`` below;
- ``A``, per debug annotation of those events (event, then wire order): event row, inline name
  start and length (0: none or empty, then the interned ``iid``), name iid;
- ``V``, per value row: annotation row, field number, value (varint or fixed64; a string's
  length), payload start; an annotation's own value, else its array elements' values, then its
  dictionary entries' (the protobuf reader's order), each in wire order;
- ``F``, per flow point: event row, flow id, terminating, group (flow_ids, terminating_flow_ids,
  flow_ids_old, terminating_flow_ids_old: the rows of an event are in group order, then wire
  order).
"""

from __future__ import annotations

import numpy as np
from numba.extending import register_jitable

_U32 = np.uint64(1 << 32)
_MAX_LENGTH = np.uint64(1 << 31)  # longer length prefixes: the packet is slow (perfetto_wire)
_MAX_RECORD = np.uint64(1 << 28)  # perfetto_stream.MAX_RECORD_BYTES
_ONE, _SEVEN, _X7F = np.uint64(1), np.uint64(7), np.uint64(0x7F)
_PACKET_TAG = 0x0A
# Columns of E.
E_RECORD, E_SEQ, E_FLAGS, E_TS, E_HAS_TS, E_CLOCK, E_KIND, E_UUID, E_HAS_UUID = range(9)
E_NAME_IID, E_NAME_AT, E_NAME_LEN1, E_CAT_AT, E_CAT_LEN1, E_CORR = range(9, 15)  # LEN1: len + 1
E_COLUMNS = 15
_BAD, _CUT = -2, -1  # varint: malformed; the buffer ends inside it


@register_jitable
def _varint(data, pos, end):
    """(value, position after it); the position is _CUT when ``end`` comes first and _BAD past
    ten bytes or beyond 64 bits (the numpy walk's rule: a tenth byte above 1 is bad)."""
    value = np.uint64(0)
    shift = np.uint64(0)
    while pos < end:
        b = np.uint64(data[pos])
        pos += 1
        if shift == np.uint64(63):
            if b > _ONE:
                return value, _BAD
            return value | (b << shift), pos
        value |= (b & _X7F) << shift
        if b < np.uint64(0x80):
            return value, pos
        shift += _SEVEN
    return value, _CUT


@register_jitable
def _is_value(number, wire):
    """A DebugAnnotation value field with its wire type: bool, uint, int, double, string,
    pointer, legacy JSON, interned string."""
    if number == 2 or number == 3 or number == 4 or number == 7 or number == 17:
        return wire == 0
    if number == 5:
        return wire == 1
    if number == 6 or number == 9:
        return wire == 2
    return False


def walk(data, starts, ends):
    """The packets ``data[starts[i]:ends[i]]``: (slow per record, E, A, V, F), see the module.

    One loop over the fields of a packet and of the messages inside it (``depth``: 0 packet,
    1 track event, 2 debug annotation, 3 array element or dictionary entry), each field read by
    the one piece of code below; a message's checks and rows come when it closes. No helper
    taking an array is called per field: numba counts references of array arguments, which costs
    more than reading the field."""
    n = len(starts)
    total = 0
    for i in range(n):
        total += ends[i] - starts[i]
    bound = total // 2 + 1  # every field takes two bytes or more
    u0 = np.uint64(0)
    slow = np.zeros(n, dtype=np.bool_)
    E = np.empty((E_COLUMNS, n), dtype=np.uint64)
    A = np.empty((4, bound), dtype=np.uint64)
    V = np.empty((4, bound), dtype=np.uint64)
    F = np.empty((4, bound), dtype=np.uint64)
    T = np.empty((4, bound), dtype=np.uint64)  # one annotation's element values, meanwhile
    G = np.empty((4, bound), dtype=np.uint64)  # one event's flows, reordered
    stop = np.zeros(4, dtype=np.int64)  # where the open message of each depth ends
    ne, na, nv, nf = 0, 0, 0, 0
    for i in range(n):
        a_n, v_n, f_n = na, nv, nf  # this packet's rows, kept if it is fast
        pos, depth, ok = starts[i], 0, True
        stop[0] = ends[i]
        seen0, ts, has_ts, seq, flags, clock, has_te = 0, u0, 0, u0, u0, u0, False
        seen1, kind, uuid, has_uuid, iid1, corr = 0, u0, u0, 0, u0, u0
        name_at1, name_len1, cat_at, cat_len1, f0 = 0, u0, 0, u0, 0
        seen2, aname_at, aname_len, aiid, has_value, vf, vv, vd, nt, n_el = (
            0,
            0,
            u0,
            u0,
            False,
            0,
            u0,
            0,
            0,
            0,
        )
        seen3, el_field, x_has, xf, xv, xd = 0, 0, False, 0, u0, 0
        while True:
            end = stop[depth]
            if pos >= end:  # the message at ``depth`` is read
                if depth == 3:
                    if x_has:
                        T[0, nt], T[1, nt], T[2, nt], T[3, nt] = xf, xv, xd, el_field == 12
                        nt += 1
                    depth = 2
                    continue
                if depth == 2:
                    if has_value and n_el:
                        ok = False  # a value and elements: protobuf's reading, not ours
                        break
                    A[0, a_n], A[1, a_n], A[2, a_n], A[3, a_n] = ne, aname_at, aname_len, aiid
                    if has_value:
                        V[0, v_n], V[1, v_n], V[2, v_n], V[3, v_n] = a_n, vf, vv, vd
                        v_n += 1
                    for array in (1, 0):  # array values, then dictionary entries
                        for k in range(nt):
                            if T[3, k] == array:
                                V[0, v_n], V[1, v_n] = a_n, T[0, k]
                                V[2, v_n], V[3, v_n] = T[1, k], T[2, k]
                                v_n += 1
                    a_n += 1
                    depth = 1
                    continue
                if depth == 1:
                    if kind < _ONE or kind > np.uint64(4):
                        ok = False
                        break
                    if f_n - f0 > 1:  # flows in group order, then wire order
                        k = 0
                        for group in range(4):
                            for j in range(f0, f_n):
                                if F[3, j] == group:
                                    for c in range(4):
                                        G[c, k] = F[c, j]
                                    k += 1
                        for j in range(k):
                            for c in range(4):
                                F[c, f0 + j] = G[c, j]
                    depth = 0
                    continue
                break  # the packet is read
            # One field: tag, then value (varint, fixed, or length and payload).
            tag, shift, at = u0, u0, -1
            q = pos
            while q < end:
                byte = np.uint64(data[q])
                q += 1
                if shift == np.uint64(63):  # a tenth byte: one more bit, or malformed
                    if byte <= _ONE:
                        tag |= byte << shift
                        at = q
                    break
                tag |= (byte & _X7F) << shift
                if byte < np.uint64(0x80):
                    at = q
                    break
                shift += _SEVEN
            number = np.int64(tag >> np.uint64(3))  # a huge tag wraps to a number none has
            wire = np.int64(tag & _SEVEN)
            if at < 0 or number <= 0:
                ok = False
                break
            value, nxt = u0, -1
            if wire == 0 or wire == 2:
                shift = u0
                q = at
                while q < end:
                    byte = np.uint64(data[q])
                    q += 1
                    if shift == np.uint64(63):
                        if byte <= _ONE:
                            value |= byte << shift
                            nxt = q
                        break
                    value |= (byte & _X7F) << shift
                    if byte < np.uint64(0x80):
                        nxt = q
                        break
                    shift += _SEVEN
                if nxt >= 0 and wire == 2:
                    at = nxt  # the payload
                    nxt = at + np.int64(value) if value < _MAX_LENGTH else -1
            elif wire == 1 or wire == 5:
                size = 8 if wire == 1 else 4
                if at + size <= end:
                    for k in range(size):
                        value |= np.uint64(data[at + k]) << np.uint64(8 * k)
                    nxt = at + size
            if nxt < 0 or nxt > end:
                ok = False
                break
            if depth == 0:  # TracePacket
                if wire != (2 if number == 11 else 0):
                    ok = False
                    break
                if number == 8:
                    bit, ts, has_ts = 1, value, 1
                elif number == 10:
                    bit, seq = 2, value
                elif number == 11:
                    bit = 4
                elif number == 13:
                    bit, flags = 8, value
                    if value & _ONE:
                        ok = False  # incremental state cleared
                        break
                elif number == 58:
                    bit, clock = 16, value
                elif number == 87:
                    bit = 32  # first_packet_on_sequence: read by nobody
                else:
                    ok = False
                    break
                if (number == 10 or number == 13 or number == 58) and value >= _U32:
                    ok = False  # uint32 fields
                    break
                if seen0 & bit:
                    ok = False
                    break
                seen0 |= bit
                if number == 11:  # into the track event
                    has_te, depth, stop[1], pos = True, 1, nxt, at
                    seen1, kind, uuid, has_uuid, iid1, corr = 0, u0, u0, 0, u0, u0
                    name_at1, name_len1, cat_at, cat_len1, f0 = 0, u0, 0, u0, f_n
                    continue
            elif depth == 1:  # TrackEvent
                bit = 0
                if number == 9 and wire == 0:
                    bit, kind = 1, value
                elif number == 11 and wire == 0:
                    bit, uuid, has_uuid = 2, value, 1
                elif number == 10 and wire == 0:
                    bit, iid1 = 4, value  # name_iid or name: one of them
                elif number == 23 and wire == 2:
                    if value == u0:
                        ok = False  # "": protobuf's reading differs
                        break
                    bit, name_at1, name_len1 = 4, at, value + _ONE
                elif number == 4 and wire == 2:  # into a debug annotation
                    depth, stop[2], pos = 2, nxt, at
                    seen2, aname_at, aname_len, aiid, has_value, nt, n_el = (
                        0,
                        0,
                        u0,
                        u0,
                        False,
                        0,
                        0,
                    )
                    continue
                elif ((number == 47 or number == 48) and wire == 1) or (
                    (number == 36 or number == 42) and wire == 0
                ):
                    group = 0 if number == 47 else 1 if number == 48 else 2 if number == 36 else 3
                    F[0, f_n], F[1, f_n], F[2, f_n], F[3, f_n] = ne, value, group & 1, group
                    f_n += 1
                elif number == 52 and wire == 0:
                    bit, corr = 8, value
                elif (number == 30 and wire == 0) or (number == 44 and wire == 1):
                    bit = 16  # the counter's value: one of them
                elif number == 22 and wire == 2:
                    bit, cat_at, cat_len1 = 32, at, value + _ONE  # one category, inline
                else:
                    ok = False
                    break
                if seen1 & bit:
                    ok = False
                    break
                seen1 |= bit
            elif depth == 2:  # DebugAnnotation
                bit = 0
                if number == 1 and wire == 0:
                    bit, aiid = 1, value
                elif number == 10 and wire == 2:
                    bit, aname_at, aname_len = 1, at, value
                elif _is_value(number, wire):
                    bit, has_value, vf, vv, vd = 2, True, number, value, at
                elif (number == 11 or number == 12) and wire == 2:  # into an element
                    depth, stop[3], pos, el_field = 3, nxt, at, number
                    seen3, x_has = 0, False
                    n_el += 1
                    continue
                else:
                    ok = False
                    break
                if seen2 & bit:
                    ok = False
                    break
                seen2 |= bit
            else:  # an element: a name (not read: kept under its annotation's) and a value
                if (number == 1 and wire == 0) or (number == 10 and wire == 2):
                    bit = 1
                elif _is_value(number, wire):
                    bit, x_has, xf, xv, xd = 2, True, number, value, at
                else:
                    ok = False
                    break
                if seen3 & bit:
                    ok = False
                    break
                seen3 |= bit
            pos = nxt
        if not ok:
            slow[i] = True  # its rows are dropped
            continue
        na, nv, nf = a_n, v_n, f_n
        if has_te:
            E[E_RECORD, ne], E[E_SEQ, ne], E[E_FLAGS, ne] = i, seq, flags
            E[E_TS, ne], E[E_HAS_TS, ne], E[E_CLOCK, ne] = ts, has_ts, clock
            E[E_KIND, ne], E[E_UUID, ne], E[E_HAS_UUID, ne] = kind, uuid, has_uuid
            E[E_NAME_IID, ne], E[E_NAME_AT, ne], E[E_NAME_LEN1, ne] = iid1, name_at1, name_len1
            E[E_CAT_AT, ne], E[E_CAT_LEN1, ne], E[E_CORR, ne] = cat_at, cat_len1, corr
            ne += 1
    return slow, E[:, :ne].copy(), A[:, :na].copy(), V[:, :nv].copy(), F[:, :nf].copy()


@register_jitable
def _records(data, end, out, fill):
    """One pass of :func:`scan`: (records, where it stopped, at something else); written into
    ``out`` when ``fill``."""
    k, pos = 0, 0
    while pos < end:
        if data[pos] != _PACKET_TAG:
            return k, pos, True
        length, start = _varint(data, pos + 1, end)
        if start == _CUT:
            break
        if start < 0 or length > _MAX_RECORD:
            return k, pos, True
        stop = start + np.int64(length)
        if stop > end:
            break
        if fill:
            out[k, 0], out[k, 1], out[k, 2] = pos, start, stop
        k += 1
        pos = stop
    return k, pos, False


def scan(data, end):
    """Packet records of ``data[:end]`` on the common path (a packet tag, a length varint):
    ``(records (n, 3): record offset, payload start, payload end; where the scan stopped;
    whether it stopped at something else)``, which :func:`perfetto_stream.scan_records` then
    reads (other top-level fields, framing errors). A cut record at the end is not "else"."""
    k, pos, other = _records(data, end, np.empty((0, 3), dtype=np.int64), False)
    out = np.empty((k, 3), dtype=np.int64)
    _records(data, end, out, True)
    return out, pos, other


def pack(data, start, length):
    """The bytes of the strings at the spans, one after the other (:func:`perfetto_fast.texts`)."""
    n = len(start)
    total = 0
    for i in range(n):
        total += length[i]
    out = np.empty(total, dtype=np.uint8)
    k = 0
    for i in range(n):
        at = start[i]
        for j in range(length[i]):
            out[k] = data[at + j]
            k += 1
    return out


def name_codes(words, start, length):
    """Codes of equal byte strings at the spans (in order of first appearance) and each code's
    first span: an open-addressing table keyed by a hash of the length and the first and last
    8 bytes (``words``: the buffer's word at every byte offset, ``perfetto_wire.Buffer``; one
    unaligned load each), members compared word by word, so the codes are exact
    (:func:`perfetto_fast.distinct_spans`)."""
    n = len(start)
    bits = 6
    while (1 << bits) < 2 * n:
        bits += 1
    table = np.full(1 << bits, -1, dtype=np.int64)  # slot -> code
    first = np.empty(n, dtype=np.int64)  # code -> its first span
    codes = np.empty(n, dtype=np.int64)
    mask = np.uint64((1 << bits) - 1)
    m = 0
    for i in range(n):
        at, size_i = start[i], length[i]
        # Strings of under 8 bytes: one word, its bytes beyond the string zeroed.
        keep = ~np.uint64(0) if size_i >= 8 else (_ONE << np.uint64(8 * size_i)) - _ONE
        last = at + size_i - 8 if size_i >= 8 else at
        head, tail = words[at] & keep, words[last] & keep
        h = (head * np.uint64(0x9E3779B97F4A7C15)) ^ (tail * np.uint64(0xC2B2AE3D27D4EB4F))
        h ^= np.uint64(size_i) * np.uint64(0x165667B19E3779F9)
        slot = h >> np.uint64(64 - bits)  # the top bits: they depend on every bit of the words
        while True:
            code = table[slot]
            if code < 0:
                table[slot] = m
                first[m] = i
                codes[i] = m
                m += 1
                break
            other = first[code]
            if length[other] == size_i:
                o = start[other]
                same = words[o] & keep == head and words[o + (last - at)] & keep == tail
                k = 8
                while same and k < size_i - 8:  # the words between the first and the last
                    same = words[o + k] == words[at + k]
                    k += 8
                if same:
                    codes[i] = code
                    break
            slot = (slot + _ONE) & mask
    return codes, first[:m].copy()
