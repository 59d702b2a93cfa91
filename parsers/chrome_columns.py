"""Chrome trace events as columns, decoded a piece at a time, with no dict per event kept.

:func:`decode_run` decodes one run of events (:mod:`chrome_chunks` cuts them, :mod:`chrome_stream`
schedules them) with msgspec into small typed records holding only the keys tracediag reads
(others are skipped while parsing, not built), and turns it into columns at once: peak memory is
the columns plus one piece, not a dict per event (a run holding integers beyond 64 bits is
decoded by orjson instead, as the whole document would be). Documents outside that path (not
the plain layout, NaN literals, invalid JSON) go through :func:`read_whole`, one
:func:`chrome_decode.decode` whose error messages and repairs are the reference; both end in the
same :class:`EventColumns`, built by the same code from per-piece object arrays, so their
results are identical.

Times: each piece's ``ts``/``dur`` go through :meth:`Decoded.times` with that piece's own bytes,
exact to the ns as for a whole document. Text columns accumulate per piece as (codes, distinct
values) and are joined at the end with the numbering :func:`categorical_text` gives a whole
document. ``args``: the keys the Kineto passes read are kept, numbers as float64 columns and the
rest sparse (positions and values where present).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import repeat
from operator import attrgetter, is_not
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import orjson
import pandas as pd

from tracediag.parsers.chrome_decode import HUGE_INTS, Decoded, count_huge_ints, decode, paused_gc

# args keys read as numbers (float64, NaN where absent or not a number) ...
NUMBER_ARGS = (
    "correlation",
    "External id",
    "device",
    "stream",
    "wait_on_stream",
    "wait_on_cuda_event_record_corr_id",
    "bytes",
    "Sequence number",  # autograd: a backward op's number is its forward op's (kineto_source)
    "Fwd thread id",
)
# The collective fields Kineto puts in a kernel's or CPU op's args (kineto_collectives).
COLLECTIVE_ARGS = (
    "Collective name",
    "In msg nelems",
    "Out msg nelems",
    "In msg size",
    "Out msg size",
    "dtype",
    "Process Group Name",
    "Process Group Ranks",
    "Seq",
)
# The scalar inputs of an op, given with record_shapes only: a ``c10d::send``/``recv_``'s peer
# rank (kineto_host). On every op then, so read in a pass of its own, not with the rare keys.
SHAPE_ARGS = ("Concrete Inputs",)
# ... and as the values given (None where absent): thread names, sync kinds, collective fields.
VALUE_ARGS = ("name", "cuda_sync_kind", *COLLECTIVE_ARGS, *SHAPE_ARGS)  # "name": of M events
META_ARGS = ("name",)
# The other value keys: on few events (collectives, sync records).
RARE_ARGS = tuple(k for k in VALUE_ARGS if k not in META_ARGS + SHAPE_ARGS)
_NO_RARE_ARGS = (None,) * len(RARE_ARGS)
TEXT_KEYS = ("ph", "cat", "name", "pid", "tid")
# Phases whose ``id``/``bind_id``/``bp`` are read: flows and async begin/end.
ID_PHASES = ("s", "t", "f", "b", "e", "S", "F")
_ARG_FIELDS = {f"a{i}": key for i, key in enumerate(NUMBER_ARGS + VALUE_ARGS)}


_JSON_OTHER = int | float | str | bool | None | list  # what a non-object entry may be
# Typed number args: msgspec reads ints into float fields as numpy's astype does; text (ROCm
# writes "bytes": "1024") is kept as given and coerced as the untyped path coerces it.
_NUMBER = float | str | None
# Typed times keep integers as ints: an integer literal gives its exact ns without its text.
_TIME = int | float | None


def _records(number: Any) -> tuple[type, type]:
    """The event and args record types (msgspec Structs, untracked by the GC: they hold no
    cycles), with ``number`` the type of ts, dur and the :data:`NUMBER_ARGS`."""
    args = msgspec.defstruct(
        "_Args",
        [(attr, number if key in NUMBER_ARGS else Any, None) for attr, key in _ARG_FIELDS.items()],
        rename=_ARG_FIELDS,
        gc=False,
    )
    event = msgspec.defstruct(
        "_Event",
        [
            *((k, Any, None) for k in TEXT_KEYS),
            *((k, _TIME if number is _NUMBER else number, None) for k in ("ts", "dur")),
            *((k, Any, None) for k in ("bind_id", "bp")),
            ("id", Any, msgspec.UNSET),  # absent and null differ: flows fall back to bind_id
            ("args", args | (None if number is _NUMBER else _JSON_OTHER), None),
        ],
        gc=False,
    )
    return event, args


# Typed records: times arrive as numbers (ints kept exact), number args as floats or text, every
# entry is an event object and its args an object or null, so no type pass over the entries is
# needed; a run holding other values (text times, booleans, entries or args that are not
# objects) is decoded again into untyped ones.
_TypedEvent, _TypedArgs = _records(_NUMBER)
_Event, _Args = _records(Any)
# What infer_dtype says of object arrays holding only numbers (and None).
_PLAIN_NUMBERS = ("integer", "floating", "mixed-integer-float", "empty")
# Of flow and async events: ``id`` (async pairs), ``id`` else ``bind_id`` (flows), ``bp``.
_ID_KEYS = ("id", "flow_id", "bp")
_ATTR_OF = {key: attr for attr, key in _ARG_FIELDS.items()}
_TYPED_DECODER = msgspec.json.Decoder(list[_TypedEvent])
_DECODER = msgspec.json.Decoder(list[_Event | _JSON_OTHER])


@dataclass(frozen=True)
class _Access:
    """How event fields are read from one decoding's records (msgspec structs or dicts)."""

    event_type: type
    args_type: type
    get: Callable[[str, Iterable], Iterator]  # event key -> values (None where absent)
    arg: Callable[[str, Iterable], Iterator]  # args key of args records -> values
    args_tuple: Callable[[tuple[str, ...], Iterable], Iterator]  # several keys -> tuples
    has_id: Callable[[Iterable], Iterator]  # whether each event has an "id" key (even null)
    typed: bool = False  # times and number args decoded as floats (NaN: absent)


def _struct_access(event_type: type, args_type: type, typed: bool) -> _Access:
    return _Access(
        event_type,
        args_type,
        get=lambda key, events: map(attrgetter(key), events),
        arg=lambda key, args: map(attrgetter(_ATTR_OF[key]), args),
        args_tuple=lambda keys, args: map(attrgetter(*(_ATTR_OF[k] for k in keys)), args),
        has_id=lambda events: map(is_not, map(attrgetter("id"), events), repeat(msgspec.UNSET)),
        typed=typed,
    )


_TYPED = _struct_access(_TypedEvent, _TypedArgs, typed=True)
_STRUCTS = _struct_access(_Event, _Args, typed=False)
_DICTS = _Access(
    dict,
    dict,
    get=lambda key, events: map(dict.get, events, repeat(key)),
    arg=lambda key, args: map(dict.get, args, repeat(key)),
    args_tuple=lambda keys, args: (tuple(map(d.get, keys)) for d in args),
    has_id=lambda events: map(dict.__contains__, events, repeat("id")),
)


class Unfit(Exception):
    """The document is not for the piecewise path (it is decoded whole instead)."""


@dataclass(frozen=True)
class Refused:
    """A run the decoder refused. ``truncated``: it ends inside a string or a nested value, as
    the run before a misplaced cut does (the caller joins it with the next run); else the run
    is wrong in itself (a NaN literal, damage), or it is the run after a misplaced cut (joined
    to the one before, never read alone)."""

    truncated: bool


@dataclass
class ArgColumns:
    """The ``args`` keys tracediag reads, per event position (see the module docstring)."""

    numbers: dict[str, np.ndarray]
    values: dict[str, tuple[np.ndarray, np.ndarray]]  # key -> (sorted positions, values)

    def number(self, key: str, pos: np.ndarray) -> np.ndarray:
        """``args[key]`` of the events at ``pos`` as float64 (NaN where absent or no number)."""
        return self.numbers[key][pos]

    def value(self, key: str, pos: np.ndarray) -> np.ndarray:
        """``args[key]`` of the events at ``pos`` as given (None where absent)."""
        return _sparse_at(self.values[key], pos)


@dataclass
class RowArgs:
    """The args of a table's rows: row ``i`` is the event at position ``pos[i]``."""

    columns: ArgColumns
    pos: np.ndarray

    def number(self, key: str, rows: np.ndarray) -> np.ndarray:
        """``args[key]`` of the given rows as float64 (NaN where absent or not a number)."""
        return self.columns.number(key, self.pos[rows])

    def value(self, key: str, rows: np.ndarray) -> np.ndarray:
        """``args[key]`` of the given rows as given (None where absent)."""
        return self.columns.value(key, self.pos[rows])


@dataclass
class EventColumns:
    """Every event object of a trace as columns (position = index among the objects)."""

    metadata: dict
    text: dict[str, pd.Categorical]  # TEXT_KEYS, as categorical_text gives them
    ts: np.ndarray
    ts_ok: np.ndarray
    dur: np.ndarray
    dur_ok: np.ndarray
    ids: dict[str, tuple[np.ndarray, np.ndarray]]  # _ID_KEYS of ID_PHASES events
    args: ArgColumns
    entries: int  # entries of the event array, objects or not (a '{}' terminator left out)
    rewritten: dict[str, int] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.ts)

    def id_values(self, key: str, pos: np.ndarray) -> np.ndarray:
        """``id``, ``flow_id`` (``id``, else ``bind_id``) or ``bp`` of flow and async events at
        ``pos`` (None where absent)."""
        return _sparse_at(self.ids[key], pos)


def _sparse_at(sparse: tuple[np.ndarray, np.ndarray], pos: np.ndarray) -> np.ndarray:
    """The values of a sparse column ``(sorted positions, values)`` at ``pos`` (None: absent)."""
    where, values = sparse
    out = np.full(len(pos), None, dtype=object)
    if len(where):
        i = np.minimum(np.searchsorted(where, pos), len(where) - 1)
        hit = where[i] == pos
        out[hit] = values[i[hit]]
    return out


def decode_run(path: Path, text: bytes) -> ColumnBuilder | Refused:
    """The columns of one run of whole events (``b"[{...}, {...}]"``) of the document at
    ``path``, as a builder of one piece, or :class:`Refused` when the run does not decode.

    A run with integers beyond 64 bits is decoded by orjson, as the whole document is (msgspec
    reads them exactly, orjson as floats), and they are counted; raises :class:`Unfit` when
    orjson refuses them (older versions do: the whole-document path quotes them)."""
    with paused_gc():
        access = _TYPED
        try:
            try:
                entries = _TYPED_DECODER.decode(text)
            except msgspec.ValidationError:  # not numbers where numbers are expected
                access, entries = _STRUCTS, _DECODER.decode(text)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            return Refused(truncated="truncated" in str(exc))  # msgspec: "Input data was truncated"
        builder = ColumnBuilder()
        huge = count_huge_ints(text)
        if huge:
            del entries
            try:
                entries = orjson.loads(text)
            except orjson.JSONDecodeError:
                raise Unfit from None
            builder.rewritten[HUGE_INTS] = huge
            builder.add_dicts(Decoded(path, text, {}, entries, {HUGE_INTS: huge}))
        else:
            builder._add(Decoded(path, text, {}, entries), access)
        return builder


def read_whole(path: Path, data: bytes) -> EventColumns:
    """The trace's events as columns by one ``orjson.loads`` of the whole document (the
    reference path, and the one for documents that cannot be read in pieces)."""
    with paused_gc():
        decoded = decode(path, data)
        if decoded.events and decoded.events[-1] == {}:
            decoded.events.pop()  # trace-viewer JSON's terminator: not an event
        builder = ColumnBuilder()
        builder.add_dicts(decoded)
        return builder.finish(decoded.metadata, decoded.rewritten, drop_terminator=False)


class ColumnBuilder:
    """Accumulates the columns of successive pieces of one document (picklable: a helper
    process returns the builder of its piece, :meth:`extend` appends it)."""

    def __init__(self) -> None:
        self.text = {k: _TextColumn() for k in TEXT_KEYS}
        self.times: dict[str, list[np.ndarray]] = {k: [] for k in ("ts", "ts_ok", "dur", "dur_ok")}
        self.numbers: dict[str, list[np.ndarray]] = {k: [] for k in NUMBER_ARGS}
        self.values = {k: _Sparse() for k in VALUE_ARGS}
        self.ids = {k: _Sparse() for k in _ID_KEYS}
        self.counts: dict[str, int] = {}
        self.n = 0  # objects added
        self.entries = 0  # entries added, objects or not
        self.rewritten: dict[str, int] = {}  # literals not read as written, by reason

    def extend(self, other: ColumnBuilder) -> None:
        """Append the pieces of ``other`` (built from the runs that follow this one's)."""
        for key, column in self.text.items():
            column.codes += other.text[key].codes
            column.texts += other.text[key].texts
        for mine, theirs in ((self.times, other.times), (self.numbers, other.numbers)):
            for key, parts in mine.items():
                parts += theirs[key]
        for mine, theirs in ((self.values, other.values), (self.ids, other.ids)):
            for key, sparse in mine.items():
                sparse.pos += [pos + self.n for pos in theirs[key].pos]
                sparse.values += theirs[key].values
        for reason, n in other.counts.items():
            _count(self.counts, reason, n)
        for reason, n in other.rewritten.items():
            _count(self.rewritten, reason, n)
        self.n += other.n
        self.entries += other.entries

    def add_dicts(self, decoded: Decoded) -> None:
        """Add the event dicts of a whole-document decode."""
        self._add(decoded, _DICTS)

    def _add(self, piece: Decoded, access: _Access) -> None:
        """Add a piece's events, decoded as ``access`` reads them (other JSON values are
        counted and skipped)."""
        self.entries += len(piece.events)
        events = piece.events
        if not access.typed:  # (typed decoding admits event objects only)
            events = _objects_only(events, access.event_type, self.counts)
        n = len(events)
        for key in TEXT_KEYS:
            self.text[key].add(_array(access.get(key, events), n))
        for key in ("ts", "dur"):
            if access.typed:  # ints, floats and None (_TIME)
                ns, ok = piece.number_times(key, _array(access.get(key, events), n))
            else:
                ns, ok = piece.times(key, _array(access.get(key, events), n))
            self.times[key].append(ns)
            self.times[f"{key}_ok"].append(ok)
        id_rows = np.flatnonzero(self.text["ph"].last_in(ID_PHASES))
        if len(id_rows):
            self._add_ids(
                _array(map(events.__getitem__, id_rows.tolist()), len(id_rows)), id_rows, access
            )
        self._add_args(_array(access.get("args", events), n), access)
        self.n += n

    def _add_ids(self, events: np.ndarray, rows: np.ndarray, access: _Access) -> None:
        """``id``, ``id`` else ``bind_id``, and ``bp`` of the flow and async events."""
        n = len(rows)
        ids = _array(access.get("id", events), n)
        given = np.fromiter(access.has_id(events), bool, n)
        bind_ids = _array(access.get("bind_id", events), n)
        self.ids["id"].add(np.where(given, ids, None), self.n, rows)
        self.ids["flow_id"].add(np.where(given, ids, bind_ids), self.n, rows)
        self.ids["bp"].add(_array(access.get("bp", events), n), self.n, rows)

    def _add_args(self, args: np.ndarray, access: _Access) -> None:
        """The ``args`` keys tracediag reads."""
        n = len(args)
        if access.typed:  # (typed decoding admits objects and null only)
            with_args = np.flatnonzero(np.fromiter(map(is_not, args, repeat(None)), bool, n))
        else:
            types = _array(map(type, args), n)
            with_args = np.flatnonzero(np.equal(types, access.args_type))
            given = n - len(with_args) - int(np.equal(types, type(None)).sum())
            if given:
                _count(self.counts, "events whose args is not a JSON object: args ignored", given)
        objects = args[with_args]
        m = len(objects)
        for key in NUMBER_ARGS:
            numbers = np.full(n, np.nan)  # (typed: floats, None, or text coerced as untyped)
            numbers[with_args] = _numbers(_array(access.arg(key, objects), m))
            self.numbers[key].append(numbers)
        meta = with_args[self.text["ph"].last_in(("M",))[with_args]]
        for key in META_ARGS:  # read from metadata events only
            self.values[key].add(_array(access.arg(key, args[meta]), len(meta)), self.n, meta)
        # The rare keys in one pass: a tuple per args object, unpacked where not all None.
        tuples = _array(access.args_tuple(RARE_ARGS, objects), m)
        some = np.flatnonzero(np.fromiter(map(_NO_RARE_ARGS.__ne__, tuples), bool, m))
        if len(some):
            for key, values in zip(RARE_ARGS, zip(*tuples[some], strict=True), strict=True):
                self.values[key].add(_array(values, len(some)), self.n, with_args[some])
        for key in SHAPE_ARGS:
            self.values[key].add(_array(access.arg(key, objects), m), self.n, with_args)

    def finish(self, metadata: dict, rewritten: dict, drop_terminator: bool) -> EventColumns:
        """The columns of everything added; ``drop_terminator`` drops a final ``{}`` event.
        ``rewritten``: the literals of the document outside the pieces, counted by reason."""
        rewritten = dict(rewritten)
        for reason, n in self.rewritten.items():
            _count(rewritten, reason, n)
        dropped = 1 if drop_terminator and self.n else 0
        n = self.n - dropped
        cut = slice(0, n)
        return EventColumns(
            metadata=metadata,
            text={k: c.finish()[cut] for k, c in self.text.items()},
            ts=_joined(self.times["ts"], np.int64)[cut],
            ts_ok=_joined(self.times["ts_ok"], bool)[cut],
            dur=_joined(self.times["dur"], np.int64)[cut],
            dur_ok=_joined(self.times["dur_ok"], bool)[cut],
            ids={k: s.finish(n) for k, s in self.ids.items()},
            args=ArgColumns(
                {k: _joined(v, np.float64)[cut] for k, v in self.numbers.items()},
                {k: s.finish(n) for k, s in self.values.items()},
            ),
            entries=self.entries - dropped,
            rewritten=rewritten,
            counts=self.counts,
        )


class _TextColumn:
    """A text column built piece by piece, numbered as :func:`categorical_text` numbers a whole
    document: categories in order of first appearance, '' last unless a value is ''."""

    def __init__(self) -> None:
        self.codes: list[np.ndarray] = []
        self.texts: list[list[str]] = []

    def add(self, values: np.ndarray) -> None:
        try:
            codes, uniq = pd.factorize(values)
        except TypeError:  # unhashable values (lists, objects) stand for themselves as text
            as_text = pd.Series(values, dtype=object).astype(str).to_numpy(dtype=object)
            codes, uniq = pd.factorize(as_text)
        self.codes.append(codes)
        self.texts.append([u if isinstance(u, str) else _number_text(u) for u in uniq])

    def last_in(self, texts: tuple[str, ...]) -> np.ndarray:
        """Whether each value of the last piece added is one of ``texts``."""
        hit = np.array([t in texts for t in self.texts[-1]] + [False], dtype=bool)
        return hit[self.codes[-1]]  # code -1 (missing) reads the final False

    def finish(self) -> pd.Categorical:
        """The whole column."""
        sizes = [len(t) for t in self.texts]
        all_texts = np.array([t for texts in self.texts for t in texts] + [""], dtype=object)
        remap, categories = pd.factorize(all_texts)
        missing = remap[-1]
        offsets = np.cumsum([0, *sizes])[:-1]
        codes = [
            np.where(c < 0, missing, remap[np.maximum(c, 0) + off])
            for c, off in zip(self.codes, offsets, strict=True)
        ]
        joined = np.concatenate(codes) if codes else np.zeros(0, dtype=np.int64)
        return pd.Categorical.from_codes(joined, categories=pd.Index(categories, dtype=object))


class _Sparse:
    """Values of some events (where given, not None), by event position."""

    def __init__(self) -> None:
        self.pos: list[np.ndarray] = []
        self.values: list[np.ndarray] = []

    def add(self, values: np.ndarray, base: int, at: np.ndarray) -> None:
        """Keep the ``values`` (of the events at positions ``at`` of this piece) that are given."""
        keep = pd.notna(values)
        self.pos.append(at[keep] + base)
        self.values.append(values[keep])

    def finish(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Positions (sorted) and values of the first ``n`` events."""
        pos = _joined(self.pos, np.int64)
        values = np.concatenate(self.values) if self.values else np.zeros(0, dtype=object)
        inside = pos < n
        return pos[inside], values[inside]


def categorical_text(values: np.ndarray) -> pd.Categorical:
    """Values as categorical text ('' when missing): pids, tids and names may be numbers."""
    column = _TextColumn()
    column.add(values)
    return column.finish()


def _number_text(v) -> str:
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def _objects_only(entries: list, kind: type, counts: dict[str, int]) -> list:
    """The entries that are JSON objects; the others are counted."""
    types = _array(map(type, entries), len(entries))
    is_object = np.equal(types, kind)
    if is_object.all():
        return entries
    _count(counts, "trace entries that are not JSON objects: skipped", int((~is_object).sum()))
    return [e for e, ok in zip(entries, is_object, strict=True) if ok]


def _numbers(values: np.ndarray) -> np.ndarray:
    """Object values as float64 (NaN where absent or not a number), as pandas coerces them."""
    if pd.api.types.infer_dtype(values, skipna=True) in _PLAIN_NUMBERS:
        return values.astype(np.float64)  # None -> NaN; several times faster than to_numeric
    return pd.to_numeric(pd.Series(values, dtype=object), errors="coerce").to_numpy(np.float64)


def _array(values, n: int) -> np.ndarray:
    """An object array from an iterator (``fromiter`` never mistakes a list value for a row)."""
    return np.fromiter(values, dtype=object, count=n)


def _joined(parts: list[np.ndarray], dtype) -> np.ndarray:
    return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype)


def _count(counts: dict[str, int], reason: str, n: int) -> None:
    counts[reason] = counts.get(reason, 0) + n
