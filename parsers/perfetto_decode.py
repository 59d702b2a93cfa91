"""Perfetto packets -> columns: track descriptors, track events, annotations and flow points,
with the per-sequence state the format needs.

This is the reader's one loop over packets: protobuf offers no columnar decoding, so each packet
is read once and its few fields are appended to plain lists that become numpy columns at the end
(the loop is kept flat and binds its list methods locally: it is the reader's hot path).

Per sequence (``trusted_packet_sequence_id``) the loop keeps the interned event names,
annotation names and annotation string values, the ``TracePacketDefaults`` (default track and
clock) and whether the incremental state is valid. ``SEQ_INCREMENTAL_STATE_CLEARED`` resets all
of it; after ``previous_packet_dropped`` the state is invalid until the next reset, and events
flagged ``SEQ_NEEDS_INCREMENTAL_STATE`` meanwhile are skipped and counted (as Perfetto does).
Interned entries always precede their use, so names are resolved as the packets are read.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
from pandas.api.types import infer_dtype

from tracediag.io.compiled import compiled
from tracediag.io.files import GZIP_MAGIC
from tracediag.parsers import perfetto_fast as F
from tracediag.parsers import perfetto_scan
from tracediag.parsers import perfetto_wire as Wire
from tracediag.parsers.perfetto_stream import FramingError, decoded, frames, scan_records

SEQ_INCREMENTAL_STATE_CLEARED = 1
SEQ_NEEDS_INCREMENTAL_STATE = 2
TYPE_SLICE_BEGIN, TYPE_SLICE_END, TYPE_INSTANT, TYPE_COUNTER = 1, 2, 3, 4
#: Our code for Chrome legacy complete events (TYPE_UNSPECIFIED with phase 'X').
TYPE_COMPLETE = 5
_PHASE_COMPLETE = ord("X")
#: Annotation value kinds.
VALUE_TEXT, VALUE_INT, VALUE_FLOAT = 0, 1, 2
_U64 = 1 << 64
#: The dtype pandas gives a column of strings (``str``: pyarrow's large strings, NaN missing).
_STR = pd.Series(np.array(["x"], dtype=object)).dtype
_I64_MAX = (1 << 63) - 1


@dataclass
class _Sequence:
    valid: bool = False
    track: int = 0  # TrackEventDefaults.track_uuid
    clock: int = 0  # TracePacketDefaults.timestamp_clock_id (0: the trace's clock)
    context: int = -1  # this generation of its state, for the fast packets' look-ups
    names: dict = field(default_factory=dict)
    categories: dict = field(default_factory=dict)
    annotation_names: dict = field(default_factory=dict)
    strings: dict = field(default_factory=dict)

    def clear(self, context: int) -> None:
        """SEQ_INCREMENTAL_STATE_CLEARED: interned data and defaults start afresh."""
        self.valid, self.track, self.clock, self.context = True, 0, 0, context
        self.names, self.categories, self.annotation_names, self.strings = {}, {}, {}, {}


@dataclass
class Decoded:
    """Columns of one Perfetto file.

    ``events``: ``ts``, ``clock`` (0: the trace's clock), ``type``, ``track`` (uuid), ``name``
    (None: unnamed), ``cat`` (categories joined by ",", None: none), ``dur`` (legacy complete
    events; else -1), ``corr`` (-1: none).
    ``annotations`` (only the wanted names, lower-cased): ``ev``, ``name``, ``kind``, ``value``.
    ``flows``: ``ev``, ``id``, ``terminating``. ``tracks``: one row per track uuid.
    ``clocks``: the clock snapshots as {clock id: timestamp}.
    """

    events: pd.DataFrame
    annotations: pd.DataFrame
    flows: pd.DataFrame
    tracks: pd.DataFrame
    clocks: list[dict[int, int]]
    primary_clock: int
    counts: dict[str, int]
    packets: int


def _wrap(value: int) -> int:
    """A uint64 as the int64 with the same bits (ids keep their identity)."""
    return value - _U64 if value > _I64_MAX else value


def decode(path: Path, wanted: frozenset[str]) -> Decoded:
    """Read every packet of ``path`` into columns, keeping the annotations named in ``wanted``
    (lower-case names, matched case-insensitively)."""
    counts: dict[str, int] = {}
    loop = _Slow(wanted)
    fast: list[F.FastEvents] = []
    first_record = 0
    kernels = _kernels() if _compiled_pays(path) else None
    scan = _compiled_scan(kernels.scan) if kernels else perfetto_scan.scan
    for buf, records, base in frames(path, counts, scan):
        bounds = np.asarray(records, dtype=np.int64).reshape(-1, 3)
        wire = Wire.Buffer(buf)
        if kernels:
            slow, *matrices = kernels.walk(wire.bytes, bounds[:, 1], bounds[:, 2])
            wired = F.compiled_wired(slow, *matrices)
        else:
            shapes = F.shapes(wire, bounds[:, 1], bounds[:, 2])
            slow = shapes.slow
        record_pos = (first_record + np.arange(len(bounds), dtype=np.int64)) << F.SUB_BITS
        first_record += len(bounds)
        slow = np.flatnonzero(slow)
        picked = [tuple(r) for r in bounds[slow].tolist()]  # the slow records, in order
        last, sub = -1, 0
        for i, _, packet in decoded(path, buf, picked, base, counts):
            sub = sub + 1 if i == last else 0  # packets of one compressed bundle
            last = i
            loop.packet(int(record_pos[slow[i]]) + sub, packet)
        if len(slow) < len(bounds):
            if not kernels:
                wired = F.wired(shapes)
            fast.append(F.events(wire, wired, record_pos, loop.log, loop.name_code, kernels))
    return loop.finish(fast, counts)


#: Files of this many decompressed bytes and more are walked by the compiled kernels
#: (:mod:`perfetto_kernel`): numba's import and loading the cached machine code cost ~0.35-0.5
#: CPU s the first time in a process (compiling it, once per installation, several seconds
#: more), which the kernels win back only on big files: cold, the numpy path read a 19 MB
#: Neuron device trace (99k packets) in 0.40-0.54 CPU s and the compiled one in 0.70-0.98; at
#: 76 MB (397k packets) the compiled one was ahead (1.8 vs 1.9-2.5). Once loaded, the kernels
#: serve every file.
COMPILE_ABOVE_BYTES = 48 << 20


def _compiled_pays(path: Path) -> bool:
    if _kernels.cache_info().currsize:  # already loaded (or known unusable) in this process
        return True
    try:
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            if size >= 18:
                f.seek(0)
                if f.read(2) == GZIP_MAGIC:  # the trailer's ISIZE: the content's size mod 2**32
                    f.seek(-4, 2)
                    size = max(size, int.from_bytes(f.read(4), "little"))
    except OSError:
        return False  # the reading reports it
    return size >= COMPILE_ABOVE_BYTES


def _kernel_function(name: str) -> Callable:
    """The Python function of kernel ``name`` (its module imports numba: imported here, late)."""
    from tracediag.parsers import perfetto_kernel

    return getattr(perfetto_kernel, name)


@functools.cache
def _kernels() -> F.Kernels | None:
    """The compiled kernels, or None where numba is missing or cannot compile them (the numpy
    walk and the interpreted scan give the same records and columns)."""
    z, one = np.zeros(32, dtype=np.uint8), np.ones(1, dtype=np.int64)
    words = Wire.Buffer(bytes(32)).words  # unaligned and strided, as in every call
    samples = {
        "walk": (z, one - 1, one * 4), "scan": (z, 32), "pack": (z, one, one),
        "name_codes": (words, one, one),
    }  # fmt: skip
    kernels = {}
    for name, sample in samples.items():
        kernels[name] = compiled(functools.partial(_kernel_function, name), *sample, lazy=True)
        if kernels[name] is None:
            return None
    return F.Kernels(**kernels)


def _compiled_scan(kernel):
    """:func:`perfetto_stream.scan_records` with its common path compiled: the records as an
    ``(n, 3)`` array. What the kernel does not read (other top-level fields, framing errors)
    is read by ``scan_records`` from where the kernel stopped, to the end of the buffer."""

    def scan(buf: bytes, counts: dict[str, int]):
        records, pos, other = kernel(np.frombuffer(buf, dtype=np.uint8), len(buf))
        if not other:
            return records, int(pos)
        try:
            rest, used = scan_records(buf[pos:], counts)  # a copy of the rest: rare
        except FramingError as exc:
            raise FramingError(pos + exc.offset, exc.problem) from None
        rest = np.array(rest, dtype=np.int64).reshape(-1, 3) + pos
        return np.concatenate([records, rest]), int(pos + used)

    return scan


class _Slow:
    """The protobuf reading of the packets the fast path leaves (see :mod:`perfetto_fast`): the
    one loop over those packets, with the per-sequence state; it logs that state for the fast
    packets and keeps its columns in plain lists (its hot path binds nothing per packet)."""

    def __init__(self, wanted: frozenset[str]):
        self.wanted = wanted
        self.ev = {k: [] for k in ("pos", "ts", "clock", "type", "track", "name", "cat", "dur")}
        self.ev["corr"] = []
        #: per annotation row: its event's row in ``ev``, its name's code in ``names``
        self.ann = {"event": [], "name": [], "kind": [], "value": []}
        self.flows = {"pos": [], "id": [], "terminating": []}
        self.tracks: dict[int, dict] = {}
        self.clocks: list[dict[int, int]] = []
        self.primary = 0
        self.canonical: dict[str, str] = {}  # annotation name -> its wanted name, or ""
        self.names: dict[str, int] = {}  # wanted name -> its code (annotations' name column)
        self.sequences: dict[int, _Sequence] = {}
        self.contexts = 0
        self.log = F.SequenceLog()
        self.n = {"packets": 0, "lost": 0, "counters": 0, "unsupported": 0, "untimed": 0}

    def canon(self, key: str) -> str:
        """The wanted lower-case name of annotation name ``key``, or ""."""
        canon = self.canonical.get(key)
        if canon is None:
            canon = self.canonical[key] = key.lower() if key.lower() in self.wanted else ""
        return canon

    def name_code(self, key: str) -> int:
        """The code of annotation name ``key``'s wanted name (see :attr:`names`), or -1."""
        canon = self.canon(key)
        if not canon:
            return -1
        code = self.names.get(canon)
        if code is None:
            code = self.names[canon] = len(self.names)
        return code

    def packet(self, pos: int, packet) -> None:
        """Read one packet (at position ``pos``, see :data:`perfetto_fast.SUB_BITS`)."""
        self.n["packets"] += 1
        seq_id = packet.trusted_packet_sequence_id
        seq = self.sequences.get(seq_id)
        if seq is None:
            seq = self.sequences[seq_id] = _Sequence()
        flags = packet.sequence_flags
        if packet.previous_packet_dropped:
            seq.valid = False
        if flags & SEQ_INCREMENTAL_STATE_CLEARED or packet.incremental_state_cleared:
            self.contexts += 1
            seq.clear(self.contexts)
        if packet.HasField("trace_packet_defaults"):
            defaults = packet.trace_packet_defaults
            seq.clock = defaults.timestamp_clock_id
            seq.track = defaults.track_event_defaults.track_uuid
        if packet.HasField("interned_data"):
            _intern(seq, packet.interned_data, self.log, pos)
        self.log.state(seq_id, pos, seq.context, seq.valid, seq.track, seq.clock)
        data = packet.WhichOneof("data")
        if data == "track_event":
            self._event(pos, packet, seq, flags)
        elif data == "track_descriptor":
            _track(self.tracks, packet.track_descriptor)
        elif data == "clock_snapshot":
            snap = packet.clock_snapshot
            self.clocks.append({c.clock_id: c.timestamp for c in snap.clocks})
            self.primary = self.primary or snap.primary_trace_clock

    def _event(self, pos: int, packet, seq: _Sequence, flags: int) -> None:
        if flags & SEQ_NEEDS_INCREMENTAL_STATE and not seq.valid:
            self.n["lost"] += 1
            return
        te = packet.track_event
        kind = te.type
        length = -1
        if kind == TYPE_COUNTER:
            self.n["counters"] += 1
            return
        if not TYPE_SLICE_BEGIN <= kind <= TYPE_INSTANT:
            legacy = te.legacy_event
            if kind or legacy.phase != _PHASE_COMPLETE:
                self.n["unsupported"] += 1
                return
            kind, length = TYPE_COMPLETE, legacy.duration_us * 1000
        if not packet.HasField("timestamp"):
            self.n["untimed"] += 1
            return
        ev = self.ev
        ev["pos"].append(pos)
        ev["ts"].append(packet.timestamp)
        ev["clock"].append(packet.timestamp_clock_id or seq.clock)
        ev["type"].append(kind)
        uuid = te.track_uuid
        if not uuid and seq.track and not te.HasField("track_uuid"):
            uuid = seq.track
        ev["track"].append(uuid)
        ev["name"].append(te.name or seq.names.get(te.name_iid))
        iids, texts = te.category_iids, te.categories
        if iids or texts:
            known = seq.categories
            ev["cat"].append(",".join([*texts, *(known.get(i, "") for i in iids)]))
        else:
            ev["cat"].append(None)
        ev["dur"].append(length)
        ev["corr"].append(te.correlation_id or -1)
        row = len(ev["pos"]) - 1
        for a in te.debug_annotations:
            code = self.name_code(_text(a.name) or seq.annotation_names.get(a.name_iid, ""))
            if code >= 0:
                _annotation(self.ann, a, row, code, seq)
        for ids, ends in (
            (te.flow_ids, False),
            (te.terminating_flow_ids, True),
            (te.flow_ids_old, False),
            (te.terminating_flow_ids_old, True),
        ):
            for flow in ids:
                self.flows["pos"].append(pos)
                self.flows["id"].append(_wrap(flow))
                self.flows["terminating"].append(ends)

    def finish(self, fast: list[F.FastEvents], counts: dict[str, int]) -> Decoded:
        """The columns of both paths in packet order."""
        n = self.n
        for part in fast:
            n["packets"] += part.packets
            n["lost"] += part.lost
            n["counters"] += part.counters
            n["untimed"] += part.untimed
        for reason, k in (
            ("track events after lost incremental state: skipped", n["lost"]),
            # metrics (DMA throughput, utilisation), not work: reported, not a loss (TRC501 info)
            ("counter values (metrics, not events): not modelled", n["counters"]),
            ("track events of unsupported type: skipped", n["unsupported"]),
            ("track events without a timestamp: skipped", n["untimed"]),
        ):
            if k:
                counts[reason] = k
        ev = self.ev
        pos = np.concatenate(
            [np.array(ev["pos"], dtype=np.int64), *(f.events["pos"] for f in fast)]
        )
        # Slow events (before the fast ones) among fast ones: merged by position.
        order = None if (pos[1:] >= pos[:-1]).all() else np.argsort(pos, kind="stable")
        pos = pos if order is None else pos[order]

        def column(key: str, slow: np.ndarray) -> np.ndarray:
            joined = np.concatenate([slow, *(f.events[key] for f in fast)])
            return joined if order is None else joined[order]

        def objects(key: str) -> np.ndarray:
            return column(key, np.array(ev[key] + [None], dtype=object)[:-1])

        events = pd.DataFrame(
            {
                "ts": column("ts", np.array(ev["ts"], dtype=np.uint64).view(np.int64)),
                "clock": column("clock", np.array(ev["clock"], dtype=np.int64)),
                "type": column("type", np.array(ev["type"], dtype=np.int8)),
                "track": column("track", np.array(ev["track"], dtype=np.uint64)),
                "name": _str_column(_texts(objects("name"), counts, "event names")),
                "cat": _texts(objects("cat"), counts, "event categories"),
                "dur": column("dur", np.array(ev["dur"], dtype=np.int64)),
                "corr": column("corr", np.array([_wrap(c) for c in ev["corr"]], dtype=np.int64)),
            },
            copy=False,  # fresh arrays
        )
        # Each event's row in the table: its index among the slow events, then the fast ones.
        row = np.arange(len(pos)) if order is None else np.argsort(order)
        first = np.cumsum([len(ev["pos"]), *(len(f.events["pos"]) for f in fast)])[:-1]
        annotations = _rows(self.ann, [f.annotations for f in fast], first, row, self.names, counts)
        flows = self.flows
        fpos = np.concatenate([np.array(flows["pos"], np.int64), *(f.flows["pos"] for f in fast)])
        forder = np.argsort(fpos, kind="stable")
        flows = pd.DataFrame(
            {
                "ev": np.searchsorted(pos, fpos[forder]).astype(np.int64),
                "id": np.concatenate(
                    [np.array(flows["id"], np.int64), *(f.flows["id"] for f in fast)]
                )[forder],
                "terminating": np.concatenate(
                    [np.array(flows["terminating"], bool), *(f.flows["terminating"] for f in fast)]
                )[forder],
            }
        )
        return Decoded(
            events, annotations, flows, _track_table(self.tracks), self.clocks, self.primary,
            counts, n["packets"],
        )  # fmt: skip


def _rows(
    slow: dict, fast: list[dict], first: np.ndarray, row: np.ndarray, names: dict, counts: dict
) -> pd.DataFrame:
    """Annotation rows of both paths, in event order (each event's rows come from one path, in
    the order that path read them); ``ev`` is the event's row: ``row`` of its index among the
    slow events, then each fast chunk's (which start at ``first``); ``name`` the wanted name of
    its code in ``names``."""
    fast_index = (f["event"] + k for f, k in zip(fast, first, strict=True))
    index = np.concatenate([np.array(slow["event"], np.int64), *fast_index])
    values = np.concatenate(
        [np.array(slow["value"] + [None], dtype=object)[:-1], *(f["value"] for f in fast)]
    )
    kind = np.concatenate([np.array(slow["kind"], np.int8), *(f["kind"] for f in fast)])
    codes = np.concatenate([np.array(slow["name"], np.int32), *(f["name"] for f in fast)])
    ev = row[index]
    if len(ev) > 1 and not (ev[1:] >= ev[:-1]).all():  # slow rows among fast ones: merge
        order = np.argsort(ev, kind="stable")
        ev, values, kind, codes = ev[order], values[order], kind[order], codes[order]
    text = kind == VALUE_TEXT
    strings = values[text]
    if infer_dtype(strings, skipna=True) not in ("string", "empty"):  # bytes, from protobuf
        values[text] = _texts(strings, counts, "annotation values")
    columns = {"ev": ev, "name": text_column(list(names), codes), "kind": kind, "value": values}
    return pd.DataFrame(columns, copy=False)  # fresh arrays: no copy of 1M value objects


def text_column(table: list[str], codes: np.ndarray):
    """The strings ``table[codes]`` as the column pandas makes of them (its ``str`` dtype; an
    empty column: object), gathered by pyarrow instead of converted one object at a time."""
    if not len(codes) or _STR.storage != "pyarrow":
        return np.array(table + [None], dtype=object)[:-1][codes]
    strings = pa.array(table, type=pa.large_string()).take(pa.array(codes))
    return pd.array(strings, dtype=_STR)


def _str_column(values: np.ndarray):
    """Strings and None (fixed by :func:`_texts`) as the column pandas makes of them: its
    ``str`` dtype where any is a string, built by pyarrow at once; else the object array."""
    if _STR.storage != "pyarrow" or infer_dtype(values, skipna=True) != "string":
        return values
    return pd.array(pa.array(values, type=pa.large_string(), from_pandas=True), dtype=_STR)


def _texts(out: np.ndarray, counts: dict[str, int], what: str) -> np.ndarray:
    """A fresh object array of strings, fixed in place. protobuf hands proto2 strings that are
    not valid UTF-8 over as bytes (corrupt data): those are decoded with replacement characters
    and counted."""
    if infer_dtype(out, skipna=True) in ("string", "empty"):  # one C-level scan
        return out
    raw = np.fromiter((isinstance(v, bytes) for v in out), dtype=bool, count=len(out))
    out[raw] = [v.decode("utf-8", "replace") for v in out[raw]]
    counts[f"{what}: invalid UTF-8 replaced"] = int(raw.sum())
    return out


def _text(value) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _intern(seq: _Sequence, data, log: F.SequenceLog, pos: int) -> None:
    for entry in data.event_names:
        seq.names[entry.iid] = entry.name
        log.entry("names", seq.context, entry.iid, entry.name, pos)
    for entry in data.event_categories:
        seq.categories[entry.iid] = _text(entry.name)
    for entry in data.debug_annotation_names:
        seq.annotation_names[entry.iid] = name = _text(entry.name)
        log.entry("annotation_names", seq.context, entry.iid, name, pos)
    for entry in data.debug_annotation_string_values:
        seq.strings[entry.iid] = value = entry.str.decode("utf-8", "replace")
        log.entry("strings", seq.context, entry.iid, value, pos)


def _annotation(ann: dict, a, event: int, name: int, seq: _Sequence) -> None:
    """One wanted annotation's value(s), of the event at row ``event``; array elements and
    dictionary entries (nested annotations) are kept under the annotation's own name (code)."""
    which = a.WhichOneof("value")
    if which is None:
        for element in (*a.array_values, *a.dictionary_entries):
            _annotation(ann, element, event, name, seq)
        return
    if which in ("string_value", "legacy_json_value"):
        kind, value = VALUE_TEXT, getattr(a, which)
    elif which == "string_value_iid":
        kind, value = VALUE_TEXT, seq.strings.get(a.string_value_iid)
    elif which == "double_value":
        kind, value = VALUE_FLOAT, a.double_value
    else:
        kind, value = VALUE_INT, _wrap(int(getattr(a, which)))
    ann["event"].append(event)
    ann["name"].append(name)
    ann["kind"].append(kind)
    ann["value"].append(value)


def _track(tracks: dict[int, dict], td) -> None:
    """Merge a descriptor into the track's row (descriptors are re-emitted after resets)."""
    row = tracks.setdefault(
        td.uuid,
        {
            "uuid": td.uuid, "parent": 0, "name": "", "pid": -1, "tid": -1, "thread": "",
            "process": "", "counter": False,
        },
    )  # fmt: skip
    row["name"] = _text(td.name or td.static_name) or row["name"]
    row["parent"] = td.parent_uuid or row["parent"]
    row["counter"] = row["counter"] or td.HasField("counter")
    if td.HasField("thread"):
        t = td.thread
        row.update(pid=t.pid, tid=t.tid, thread=_text(t.thread_name) or row["thread"])
    if td.HasField("process"):
        p = td.process
        row.update(pid=p.pid, process=_text(p.process_name) or row["process"])


def _track_table(tracks: dict[int, dict]) -> pd.DataFrame:
    columns = ["uuid", "parent", "name", "pid", "tid", "thread", "process", "counter"]
    table = pd.DataFrame(list(tracks.values()), columns=columns)
    return table.astype({"uuid": np.uint64, "parent": np.uint64, "pid": np.int64, "tid": np.int64})
