"""The common Perfetto packet shapes, decoded columnar from the wire (no protobuf object per
packet): track events with their debug annotations and flow ids, on a sequence whose state they
read but do not change.

A packet is read here when every field of it, of its ``TrackEvent``, of its debug annotations and
of their array or dictionary elements is one this module knows, with the wire type the schema
gives it, at most once where the schema says optional, and parses (:func:`shapes`). Every other
packet (interned data, defaults, descriptors, clock snapshots, incremental-state resets or drops,
compressed bundles, categories, legacy events, anything damaged or unusual) is *slow*: the
protobuf loop of :mod:`perfetto_decode` reads it, in file order, and records the sequence state
it leaves (:class:`SequenceLog`). A fast packet then takes the state of the last slow packet of
its sequence before it, and its interned ids resolve to the latest entry of the same sequence
generation written before it (:func:`asof`): the values the protobuf loop would have used.

The wire fields of the fast packets come as :class:`Wired` columns, from the numpy walk here
(:func:`shapes`, :func:`wired`) or, on big files, from the compiled one of ``perfetto_kernel``
(:func:`compiled_wired`); :func:`events` resolves either against the sequence log.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import pandas as pd
import pyarrow as pa

from tracediag.parsers import perfetto_wire as W
from tracediag.parsers.perfetto_asof import asof

SUB_BITS = 24  # a packet's position: record index << SUB_BITS | index inside a bundle
_W0, _W1, _W2 = W.WIRE_VARINT, W.WIRE_FIXED64, W.WIRE_LEN
_U32 = 1 << 32
#: TracePacket fields of a fast packet: timestamp, sequence id, track_event, sequence_flags,
#: timestamp_clock_id, first_packet_on_sequence (read by nobody).
_PACKET = {8: _W0, 10: _W0, 11: _W2, 13: _W0, 58: _W0, 87: _W0}
#: TrackEvent: type, track_uuid, name_iid, name, debug_annotations, flow_ids,
#: terminating_flow_ids, flow_ids_old, terminating_flow_ids_old, correlation_id, counter values.
_EVENT = {9: _W0, 11: _W0, 10: _W0, 23: _W2, 4: _W2, 47: _W1, 48: _W1, 36: _W0, 42: _W0}
_EVENT |= {52: _W0, 30: _W0, 44: _W1, 22: _W2}  # and categories: one, inline
_EVENT_REPEATED = (4, 47, 48, 36, 42)
#: DebugAnnotation: name_iid, name, the values, dictionary_entries, array_values.
_VALUES = {2: _W0, 3: _W0, 4: _W0, 5: _W1, 6: _W2, 17: _W0, 7: _W0, 9: _W2}
_ANNOTATION = {1: _W0, 10: _W2, **_VALUES, 11: _W2, 12: _W2}
_TEXT_VALUES, _FLOAT_VALUE, _IID_VALUE, _BOOL_VALUE = (6, 9), 5, 17, 2


def _in(values: np.ndarray, group) -> np.ndarray:
    """``np.isin`` for small non-negative integer sets, by table look-up (larger values: the
    last entry, False)."""
    table = np.zeros(max(group) + 2, dtype=bool)
    table[list(group)] = True
    return table.take(values, mode="clip")


def _unexpected(f: W.Fields, allowed: dict[int, int], n: int) -> np.ndarray:
    """Per message: a field outside ``allowed`` or with another wire type."""
    top = max(allowed) + 1  # field numbers from here on: unknown (-1 matches no wire type)
    expected = np.array([allowed.get(k, -1) for k in range(top)] + [-1])
    ok = expected.take(f.field, mode="clip") == f.wire  # field numbers are positive
    return W.any_per(f.msg, np.flatnonzero(~ok), n)


def _repeated_singular(f: W.Fields, groups: list[tuple[int, ...]], n: int) -> np.ndarray:
    """Per message: more than one field of a group (disjoint groups: a singular field, or the
    members of a oneof), counted in one pass."""
    table = np.full(max(max(g) for g in groups) + 2, -1, dtype=np.int64)
    for i, group in enumerate(groups):  # a loop over the schema's fields
        table[list(group)] = i
    which = table.take(f.field, mode="clip")
    rows = which >= 0
    counts = np.bincount(f.msg[rows] * len(groups) + which[rows], minlength=n * len(groups))
    out = np.zeros(n, dtype=bool)
    out[np.flatnonzero(counts > 1) // len(groups)] = True
    return out


@dataclass
class Shapes:
    """The wire fields of one chunk's packets and which of them are slow."""

    packet: W.Fields
    event: W.Fields
    annotation: W.Fields
    element: W.Fields
    slow: np.ndarray  # per record
    event_of_packet: np.ndarray  # per packet: its track event's row in ``event`` spans, or -1
    event_packet: np.ndarray  # per track event: its packet
    annotation_event: np.ndarray  # per annotation: its track event
    element_annotation: np.ndarray  # per element: its annotation
    element_order: np.ndarray  # per element: arrays first, then dictionary entries


def shapes(buf: W.Buffer, starts: np.ndarray, ends: np.ndarray) -> Shapes:
    """Walk the packets ``buf[starts:ends]`` down to annotation elements; mark the slow ones."""
    n = len(starts)
    p = W.walk(buf, starts, ends)
    slow = p.bad | _unexpected(p, _PACKET, n)
    slow |= _repeated_singular(p, [(k,) for k in _PACKET], n)
    big = _in(p.field, (10, 13, 58)) & (p.value >= _U32)  # uint32 fields
    slow |= W.any_per(p.msg, np.flatnonzero(big), n)
    flags = p.of(13, _W0)
    slow[p.msg[flags[(p.value[flags] & 1) != 0]]] = True  # incremental state cleared
    te, event_packet = p.ordered(p.of(11, _W2))
    e = W.walk(buf, p.data[te], p.data[te] + p.value[te].astype(np.int64))
    ne = len(te)
    bad_e = e.bad | _unexpected(e, _EVENT, ne)
    oneofs = [(10, 23), (30, 44)]  # name_iid or name; the counter values
    singular = [(k,) for k in _EVENT if k not in (*_EVENT_REPEATED, 22, *sum(oneofs, ()))]
    singular += oneofs
    bad_e |= _repeated_singular(e, singular, ne)
    typ = e.of(9, _W0)
    kind = W.last_per(e.msg, typ, e.value, ne, np.uint64(0))
    bad_e |= (kind < 1) | (kind > 4)
    bad_e |= W.count_per(e.msg, e.of(22, _W2), ne) > 1  # joined by protobuf's reader: slow
    names = e.of(23, _W2)
    bad_e[e.msg[names[e.value[names] == 0]]] = True  # "": protobuf's reading differs
    da, annotation_event = e.ordered(e.of(4, _W2))
    a = W.walk(buf, e.data[da], e.data[da] + e.value[da].astype(np.int64))
    na = len(da)
    bad_a = a.bad | _unexpected(a, _ANNOTATION, na)
    bad_a |= _repeated_singular(a, [(1, 10), tuple(_VALUES)], na)
    has_value = W.any_per(a.msg, np.flatnonzero(_in(a.field, tuple(_VALUES))), na)
    el, element_annotation = a.ordered(np.flatnonzero(_in(a.field, (11, 12))))
    bad_a |= has_value & W.any_per(a.msg, el, na)  # a value and elements
    x = W.walk(buf, a.data[el], a.data[el] + a.value[el].astype(np.int64))
    nx = len(el)
    bad_x = x.bad | _unexpected(x, {1: _W0, 10: _W2, **_VALUES}, nx)
    bad_x |= _repeated_singular(x, [(1, 10), tuple(_VALUES)], nx)
    # Arrays before dictionary entries (the reader's order), each in wire order.
    element_order = np.lexsort((np.arange(nx), a.field[el] == 11, element_annotation))
    rank = np.empty(nx, dtype=np.int64)
    rank[element_order] = np.arange(nx)
    bad_a[element_annotation[bad_x]] = True
    bad_e[annotation_event[bad_a]] = True
    slow[event_packet[bad_e]] = True
    event_of_packet = np.full(n, -1, dtype=np.int64)
    event_of_packet[event_packet] = np.arange(ne)
    return Shapes(p, e, a, x, slow, event_of_packet, event_packet, annotation_event,
                  element_annotation, rank)  # fmt: skip


@dataclass
class SequenceLog:
    """What the slow loop leaves for fast packets: the sequence state after each slow packet
    and every interned entry, with the packet positions where they were written."""

    seq: list[int] = field(default_factory=list)
    pos: list[int] = field(default_factory=list)
    context: list[int] = field(default_factory=list)  # a sequence generation (reset to reset)
    valid: list[bool] = field(default_factory=list)
    track: list[int] = field(default_factory=list)
    clock: list[int] = field(default_factory=list)
    #: kind ("names", "annotation_names", "strings") -> (context, iid, value, pos) lists
    entries: dict = field(default_factory=dict)

    def state(self, seq: int, pos: int, context: int, valid: bool, track: int, clock: int):
        """Record a sequence's state after the slow packet at ``pos``."""
        self.seq.append(seq)
        self.pos.append(pos)
        self.context.append(context)
        self.valid.append(valid)
        self.track.append(track)
        self.clock.append(clock)

    def entry(self, kind: str, context: int, iid: int, value, pos: int) -> None:
        """Record an interned entry."""
        lists = self.entries.setdefault(kind, ([], [], [], []))
        for column, item in zip(lists, (context, iid, value, pos), strict=True):
            column.append(item)

    def lookup(self, kind: str, context: np.ndarray, iid: np.ndarray, pos: np.ndarray, missing):
        """The values of ``kind`` entries at the queries (``missing`` where none precedes)."""
        lists = self.entries.get(kind)
        out = np.full(len(iid), missing, dtype=object)
        if not lists or not len(iid):
            return out
        ctx = np.array(lists[0], dtype=np.int64)
        ids = np.array(lists[1], dtype=np.uint64).view(np.int64)
        at = asof(ctx, ids, np.array(lists[3], dtype=np.int64), context, iid.view(np.int64), pos)
        values = np.array(lists[2] + [None], dtype=object)[:-1]
        found = at >= 0
        out[found] = values[at[found]]
        return out


def texts(buf: W.Buffer, start: np.ndarray, length: np.ndarray, kernels=None) -> np.ndarray:
    """The strings at the spans, as protobuf gives proto2 strings (str; bytes if not UTF-8):
    their bytes gathered into one buffer (by numpy, or by ``kernels.pack`` where the compiled
    kernels are loaded) that pyarrow checks as UTF-8 and turns into str objects at once."""
    n = len(start)
    out = np.empty(n, dtype=object)
    if not n:
        return out
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(length, out=offsets[1:])
    if kernels is not None:
        chars = kernels.pack(buf.bytes, start, length)
    else:  # byte j of the packed strings comes from start - offset + j of its string
        chars = buf.bytes[np.repeat(start - offsets[:-1], length) + np.arange(offsets[-1])]
    strings = pa.LargeStringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(chars))
    try:
        strings.validate(full=True)  # UTF-8
    except pa.ArrowInvalid:
        for i, (at, size) in enumerate(zip(start.tolist(), length.tolist(), strict=True)):
            value = buf.bytes[at : at + size].tobytes()  # a loop over strings, only on odd data
            try:
                out[i] = value.decode("utf-8")
            except UnicodeDecodeError:
                out[i] = value
        return out
    out[:] = strings.to_numpy(zero_copy_only=False)
    return out


def shared_texts(buf: W.Buffer, start: np.ndarray, length: np.ndarray, kernels=None):
    """:func:`texts` of spans that repeat (annotation values, event names): with the compiled
    kernels, each distinct byte string is decoded once and its members share the object (the
    numpy codes cost more than they save)."""
    spans = None
    if kernels is not None and len(start):
        spans = distinct_spans(buf, start, length, kernels)
    if spans is None:
        return texts(buf, start, length, kernels)
    codes, first = spans
    return texts(buf, start[first], length[first], kernels)[codes]


def distinct_spans(buf: W.Buffer, start: np.ndarray, length: np.ndarray, kernels=None):
    """Codes of equal byte strings at the spans (in order of first appearance) and each code's
    first span, by ``kernels.name_codes`` where the compiled kernels are loaded, else by numpy:
    strings keyed by a hash of their 8-byte words, every member then compared with its code's
    first member, word by word, so the codes are exact (None on a hash collision)."""
    if kernels is not None:
        return kernels.name_codes(buf.words, start, length)
    words = [_word(buf, start, length), _word(buf, start + 8, length - 8)]
    h = (words[0] * np.uint64(0x9E3779B97F4A7C15)) ^ (words[1] * np.uint64(0xC2B2AE3D27D4EB4F))
    h ^= length.astype(np.uint64) * np.uint64(0x165667B19E3779F9)
    longer = np.flatnonzero(length > 16)  # names past two words (rare): their further words
    extra = int((length[longer].max() + 7) // 8) if len(longer) else 0
    for k in range(2, extra):  # a loop over word positions
        rows = longer[length[longer] > 8 * k]
        w = _word(buf, start[rows] + 8 * k, length[rows] - 8 * k)
        h[rows] = (h[rows] ^ w) * np.uint64(0x100000001B3) + np.uint64(k)
    codes, _ = pd.factorize(h.view(np.int64))
    # Codes come in order of first appearance: a code's first member is where it first exceeds
    # every code before it.
    first = np.flatnonzero(codes > np.maximum.accumulate(np.concatenate([[-1], codes[:-1]])))
    rep = first[codes]
    same = (length == length[rep]) & (words[0] == words[0][rep]) & (words[1] == words[1][rep])
    for k in range(2, extra):
        rows = longer[length[longer] > 8 * k]
        left = length[rows] - 8 * k
        same[rows] &= _word(buf, start[rows] + 8 * k, left) == _word(
            buf, start[rep[rows]] + 8 * k, left
        )
    if not same.all():
        return None
    return codes, first


def _word(buf: W.Buffer, at: np.ndarray, left: np.ndarray) -> np.ndarray:
    """The word at ``at`` with the bytes beyond ``left`` zeroed."""
    return buf.words[at] & W.BYTE_MASKS[np.clip(left, 0, 8)]


@dataclass
class FastEvents:
    """The columns of one chunk's fast packets (``pos``: packet positions; annotations and flows
    name their event by its packet's position)."""

    packets: int
    lost: int
    counters: int
    untimed: int
    events: dict
    annotations: dict
    flows: dict


def _state(log: SequenceLog, seq: np.ndarray, pos: np.ndarray):
    """Per query the state the last slow packet of the sequence left: context (-1: none yet),
    valid, default track, default clock (a fresh sequence: invalid, no defaults)."""
    if not log.seq:
        zero = np.zeros(len(seq), dtype=np.int64)
        return zero - 1, np.zeros(len(seq), dtype=bool), zero.astype(np.uint64), zero
    at = asof(
        np.array(log.seq, dtype=np.int64), np.zeros(len(log.seq), dtype=np.int64),
        np.array(log.pos, dtype=np.int64), seq.astype(np.int64),
        np.zeros(len(seq), dtype=np.int64), pos,
    )  # fmt: skip
    some = at >= 0
    i = np.maximum(at, 0)
    context = np.where(some, np.array(log.context, dtype=np.int64)[i], -1)
    valid = some & np.array(log.valid, dtype=bool)[i]
    track = np.where(some, np.array(log.track, dtype=np.uint64)[i], np.uint64(0))
    clock = np.where(some, np.array(log.clock, dtype=np.int64)[i], 0)
    return context, valid, track, clock


@dataclass
class Wired:
    """What the wire gives of one chunk's fast packets, by the numpy walk (:func:`wired`) or the
    compiled one (:func:`compiled_wired`): per fast packet with a track event (in record order),
    its packet's and event's fields; the debug annotations of those events, their value rows
    and their flow points, each in the protobuf reader's order."""

    packets: int  # fast packets, with a track event or not
    record: np.ndarray  # the packet's record index in the chunk
    seq: np.ndarray  # uint64 fields below; 0 when absent
    flags: np.ndarray
    ts: np.ndarray
    has_ts: np.ndarray
    clock: np.ndarray  # int64
    kind: np.ndarray
    uuid: np.ndarray
    has_uuid: np.ndarray
    name_iid: np.ndarray
    name_at: np.ndarray  # the inline name's span (length -1: none)
    name_len: np.ndarray
    cat_at: np.ndarray  # the inline category's span (length -1: none)
    cat_len: np.ndarray
    corr: np.ndarray
    ann_event: np.ndarray  # per annotation: its event's row above
    ann_name_at: np.ndarray  # its inline name (length 0: none or "": the interned one)
    ann_name_len: np.ndarray
    ann_iid: np.ndarray
    val_ann: np.ndarray  # per value row: its annotation; own value, array values, entries
    val_field: np.ndarray
    val_value: np.ndarray  # varint or fixed64; a string's length
    val_data: np.ndarray  # a string's start
    flow_event: np.ndarray  # per flow point: flow_ids, terminating, then the old fields
    flow_id: np.ndarray
    flow_terminating: np.ndarray


def wired(sh: Shapes) -> Wired:
    """The :class:`Wired` columns of a chunk walked by :func:`shapes`."""
    p, e, a, x = sh.packet, sh.event, sh.annotation, sh.element
    n, ne, na = len(sh.slow), len(sh.event_packet), len(sh.annotation_event)
    u0 = np.uint64(0)
    fast = np.flatnonzero(~sh.slow)
    row = sh.event_of_packet[fast]
    pk, er = fast[row >= 0], row[row >= 0]  # fast packets with a track event, and the event

    def packet_field(number: int) -> np.ndarray:
        return W.last_per(p.msg, p.of(number, _W0), p.value, n, u0)[pk]

    def event_field(number: int, wire: int = _W0) -> np.ndarray:
        return W.last_per(e.msg, e.of(number, wire), e.value, ne, u0)[er]

    def span(number: int) -> tuple[np.ndarray, np.ndarray]:
        rows = e.of(number, _W2)
        at = np.zeros(ne, dtype=np.int64)
        length = np.full(ne, -1, dtype=np.int64)
        owner = e.msg[rows]
        at[owner], length[owner] = e.data[rows], e.value[rows].astype(np.int64)
        return at[er], length[er]

    name_at, name_len = span(23)
    cat_at, cat_len = span(22)
    event_row = np.full(ne, -1, dtype=np.int64)
    event_row[er] = np.arange(len(er))
    # Annotations of these events, in order, and their value rows.
    ae = event_row[sh.annotation_event]
    mine = _rows_or_all(ae >= 0)
    inline = a.of(10, _W2)
    ann_at = np.zeros(na, dtype=np.int64)
    ann_len = np.zeros(na, dtype=np.int64)
    named = a.msg[inline]
    ann_at[named], ann_len[named] = a.data[inline], a.value[inline]
    iid = W.last_per(a.msg, a.of(1, _W0), a.value, na, u0)
    ann_row = np.arange(na)  # per annotation: its row among those of these events, or -1
    if mine is not None:
        ann_row = np.full(na, -1, dtype=np.int64)
        ann_row[mine] = np.arange(len(mine))
    a_val = np.flatnonzero(_in(a.field, tuple(_VALUES)))
    owner_a = a.msg[a_val]
    keep = _rows_or_all(ae[owner_a] >= 0)
    a_val, owner_a = _pick(a_val, keep), _pick(owner_a, keep)
    x_val = np.flatnonzero(_in(x.field, tuple(_VALUES)))
    owner_x = sh.element_annotation[x.msg[x_val]]
    x_val, owner_x = x_val[ae[owner_x] >= 0], owner_x[ae[owner_x] >= 0]
    owner = np.concatenate([owner_a, owner_x])
    sub = np.concatenate([np.zeros(len(a_val), np.int64), 1 + sh.element_order[x.msg[x_val]]])
    # By annotation, then own value before elements (ties stay in order): one stable sort of
    # two sorted runs.
    order = np.argsort(owner * (int(sub.max(initial=0)) + 1) + sub, kind="stable")
    # Flow points: flow_ids, terminating_flow_ids, then the old fields, each in wire order.
    groups = {47: (0, False), 48: (1, True), 36: (2, False), 42: (3, True)}
    rows = np.flatnonzero(_in(e.field, tuple(groups)) & (event_row[e.msg] >= 0))
    group = np.select([e.field[rows] == k for k in groups], [g for g, _ in groups.values()])
    rows = rows[np.lexsort((rows, group, e.msg[rows]))]
    return Wired(
        packets=len(fast),
        record=pk,
        seq=packet_field(10),
        flags=packet_field(13),
        ts=packet_field(8),
        has_ts=W.any_per(p.msg, p.of(8, _W0), n)[pk],
        clock=packet_field(58).astype(np.int64),
        kind=event_field(9),
        uuid=event_field(11),
        has_uuid=W.any_per(e.msg, e.of(11, _W0), ne)[er],
        name_iid=event_field(10),
        name_at=name_at,
        name_len=name_len,
        cat_at=cat_at,
        cat_len=cat_len,
        corr=event_field(52),
        ann_event=_pick(ae, mine),
        ann_name_at=_pick(ann_at, mine),
        ann_name_len=_pick(ann_len, mine),
        ann_iid=_pick(iid, mine),
        val_ann=ann_row[owner[order]],
        val_field=np.concatenate([a.field[a_val], x.field[x_val]])[order],
        val_value=np.concatenate([a.value[a_val], x.value[x_val]])[order],
        val_data=np.concatenate([a.data[a_val], x.data[x_val]])[order],
        flow_event=event_row[e.msg[rows]],
        flow_id=e.value[rows],
        flow_terminating=_in(e.field[rows], (48, 42)),
    )


def _rows_or_all(mask: np.ndarray) -> np.ndarray | None:
    """The rows of ``mask``, or None where that is every row (nothing to gather)."""
    return None if mask.all() else np.flatnonzero(mask)


def _pick(values: np.ndarray, rows: np.ndarray | None) -> np.ndarray:
    """``values[rows]``; ``values`` itself where ``rows`` is None (every row)."""
    return values if rows is None else values[rows]


def compiled_wired(slow: np.ndarray, E, A, V, F) -> Wired:
    """The :class:`Wired` columns from the compiled walk's matrices (see ``perfetto_kernel``;
    its row numbers are repeated here so that this module never imports numba)."""
    i64 = np.int64
    return Wired(
        packets=int(len(slow) - np.count_nonzero(slow)),
        record=E[0].astype(i64),
        seq=E[1],
        flags=E[2],
        ts=E[3],
        has_ts=E[4] != 0,
        clock=E[5].astype(i64),
        kind=E[6],
        uuid=E[7],
        has_uuid=E[8] != 0,
        name_iid=E[9],
        name_at=E[10].astype(i64),
        name_len=E[11].astype(i64) - 1,
        cat_at=E[12].astype(i64),
        cat_len=E[13].astype(i64) - 1,
        corr=E[14],
        ann_event=A[0].astype(i64),
        ann_name_at=A[1].astype(i64),
        ann_name_len=A[2].astype(i64),
        ann_iid=A[3],
        val_ann=V[0].astype(i64),
        val_field=V[1].astype(i64),
        val_value=V[2],
        val_data=V[3].astype(i64),
        flow_event=F[0].astype(i64),
        flow_id=F[1],
        flow_terminating=F[2] != 0,
    )


class Kernels(NamedTuple):
    """The compiled kernels (``perfetto_kernel``), where loaded: the same results as the numpy
    code they stand in for."""

    walk: Callable
    scan: Callable
    pack: Callable
    name_codes: Callable


def events(
    buf: W.Buffer, w: Wired, record_pos: np.ndarray, log: SequenceLog, name_code, kernels=None
) -> FastEvents:
    """Decode a chunk's fast packets (:class:`Wired`) against the slow loop's ``log``;
    ``name_code(name)`` gives each annotation name's code in the decode's table of wanted
    lower-case names, or -1; ``kernels``: the compiled :class:`Kernels`, or None."""
    pos = record_pos[w.record]
    context, valid, track_default, clock_default = _state(log, w.seq, pos)
    lost = ((w.flags & np.uint64(2)) != 0) & ~valid
    counter = ~lost & (w.kind == 4)
    untimed = ~lost & ~counter & ~w.has_ts
    keep = _rows_or_all(~lost & ~counter & ~untimed)
    kept = len(w.record) if keep is None else len(keep)

    def k(values: np.ndarray) -> np.ndarray:
        return _pick(values, keep)

    pos, context = k(pos), k(context)
    uuid = k(w.uuid)
    use_default = (uuid == 0) & (k(track_default) != 0) & ~k(w.has_uuid)
    name = log.lookup("names", context, k(w.name_iid), pos, None)
    length = k(w.name_len)
    own = length >= 0
    name[own] = shared_texts(buf, k(w.name_at)[own], length[own], kernels)
    cat = np.full(kept, None, dtype=object)
    length = k(w.cat_len)
    own = length >= 0
    cat[own] = shared_texts(buf, k(w.cat_at)[own], length[own], kernels)
    corr = k(w.corr).view(np.int64)
    clock = k(w.clock)
    out_events = {
        "pos": pos,
        "ts": k(w.ts).view(np.int64),
        "clock": np.where(clock != 0, clock, k(clock_default)),
        "type": k(w.kind).astype(np.int8),
        "track": np.where(use_default, k(track_default), uuid),
        "name": name,
        "cat": cat,
        "dur": np.full(kept, -1, dtype=np.int64),
        "corr": np.where(corr != 0, corr, -1),
    }
    kept_event = np.arange(kept)  # per event row: its row among the kept ones, or -1
    if keep is not None:
        kept_event = np.full(len(w.record), -1, dtype=np.int64)
        kept_event[keep] = np.arange(kept)
    return FastEvents(
        w.packets, int(lost.sum()), int(counter.sum()), int(untimed.sum()), out_events,
        _annotations(buf, w, kept_event, pos, context, log, name_code, kernels),
        _flows(w, kept_event, pos),
    )  # fmt: skip


def _annotations(buf, w: Wired, kept_event, pos, context, log: SequenceLog, name_code, kernels):
    """The wanted annotations of the kept events (values, and elements of valueless ones):
    ``event`` (the row among the chunk's kept events), ``name`` (the wanted name's code),
    ``kind``, ``value``."""
    na = len(w.ann_event)
    ev = kept_event[w.ann_event]  # per annotation: its kept event, or -1
    mine = ev >= 0
    # Names: inline text, else the interned name of the sequence generation ("" if missing).
    # Each distinct name is coded once: inline names by their byte codes, interned ones
    # (looked up only where no inline name is) by their few distinct values.
    inline = np.flatnonzero(mine & (w.ann_name_len > 0))  # "": the interned name
    code = np.full(na, -1, dtype=np.int32)  # per annotation: its wanted name's code, or -1
    by_iid = np.flatnonzero(mine & (w.ann_name_len <= 0))
    if len(by_iid):
        key = log.lookup(
            "annotation_names", context[ev[by_iid]], w.ann_iid[by_iid], pos[ev[by_iid]], ""
        )
        codes, uniq = pd.factorize(key)
        code[by_iid] = np.array([name_code(k) for k in uniq], dtype=np.int32)[codes]
    if len(inline):
        at, length = w.ann_name_at[inline], w.ann_name_len[inline]
        spans = distinct_spans(buf, at, length, kernels)
        if spans is None:  # a hash collision: decode each name
            codes, first = np.arange(len(at)), np.arange(len(at))
        else:
            codes, first = spans
        names = [
            buf.bytes[a : a + m].tobytes().decode("utf-8", "replace")
            for a, m in zip(at[first].tolist(), length[first].tolist(), strict=True)
        ]  # a loop over distinct names
        code[inline] = np.array([name_code(k) for k in names], dtype=np.int32)[codes]
    # Value rows of the wanted annotations (their own value, or their elements').
    rows = _rows_or_all(code[w.val_ann] >= 0)
    owner, fnum = _pick(w.val_ann, rows), _pick(w.val_field, rows)
    value, data = _pick(w.val_value, rows), _pick(w.val_data, rows)
    event = ev[owner]
    kind = np.where(_in(fnum, (*_TEXT_VALUES, _IID_VALUE)), 0, np.where(fnum == 5, 2, 1))
    out = np.empty(len(fnum), dtype=object)
    integer = kind == 1
    whole = value[integer].view(np.int64)
    out[integer] = np.where(fnum[integer] == _BOOL_VALUE, whole != 0, whole).astype(object)
    double = fnum == _FLOAT_VALUE
    out[double] = value[double].view(np.float64).astype(object)
    text = _in(fnum, _TEXT_VALUES)
    out[text] = shared_texts(buf, data[text], value[text].astype(np.int64), kernels)
    interned = fnum == _IID_VALUE
    out[interned] = log.lookup(
        "strings", context[event[interned]], value[interned], pos[event[interned]], None
    )
    return {"event": event, "name": code[owner], "kind": kind.astype(np.int8), "value": out}


def _flows(w: Wired, kept_event: np.ndarray, pos: np.ndarray) -> dict:
    """Flow points of the kept events (already in the reader's order)."""
    rows = np.flatnonzero(kept_event[w.flow_event] >= 0)
    return {
        "pos": pos[kept_event[w.flow_event[rows]]],
        "id": w.flow_id[rows].view(np.int64),
        "terminating": w.flow_terminating[rows],
    }
