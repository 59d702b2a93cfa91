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

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from pandas.api.types import infer_dtype

from tracediag.parsers.perfetto_stream import packets

SEQ_INCREMENTAL_STATE_CLEARED = 1
SEQ_NEEDS_INCREMENTAL_STATE = 2
TYPE_SLICE_BEGIN, TYPE_SLICE_END, TYPE_INSTANT, TYPE_COUNTER = 1, 2, 3, 4
#: Our code for Chrome legacy complete events (TYPE_UNSPECIFIED with phase 'X').
TYPE_COMPLETE = 5
_PHASE_COMPLETE = ord("X")
#: Annotation value kinds.
VALUE_TEXT, VALUE_INT, VALUE_FLOAT = 0, 1, 2
_U64 = 1 << 64
_I64_MAX = (1 << 63) - 1


@dataclass
class _Sequence:
    valid: bool = False
    track: int = 0  # TrackEventDefaults.track_uuid
    clock: int = 0  # TracePacketDefaults.timestamp_clock_id (0: the trace's clock)
    names: dict = field(default_factory=dict)
    categories: dict = field(default_factory=dict)
    annotation_names: dict = field(default_factory=dict)
    strings: dict = field(default_factory=dict)

    def clear(self) -> None:
        """SEQ_INCREMENTAL_STATE_CLEARED: interned data and defaults start afresh."""
        self.valid, self.track, self.clock = True, 0, 0
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
    ts, clock, kinds, track, name, cat, dur, corr = [], [], [], [], [], [], [], []
    ann = {"ev": [], "name": [], "kind": [], "value": []}
    flow_ev, flow_id, flow_end = [], [], []
    tracks: dict[int, dict] = {}
    clocks: list[dict[int, int]] = []
    primary = 0
    canonical: dict[str, str] = {}  # annotation name -> its wanted lower-case name, or ""
    sequences: dict[int, _Sequence] = {}
    last_id, seq = None, _Sequence()
    n_packets = skipped_lost = counters = unsupported = untimed = 0
    for _, packet in packets(path, counts):
        n_packets += 1
        seq_id = packet.trusted_packet_sequence_id
        if seq_id != last_id:
            seq = sequences.setdefault(seq_id, _Sequence())
            last_id = seq_id
        flags = packet.sequence_flags
        if packet.previous_packet_dropped:
            seq.valid = False
        if flags & SEQ_INCREMENTAL_STATE_CLEARED or packet.incremental_state_cleared:
            seq.clear()
        if packet.HasField("trace_packet_defaults"):
            defaults = packet.trace_packet_defaults
            seq.clock = defaults.timestamp_clock_id
            seq.track = defaults.track_event_defaults.track_uuid
        if packet.HasField("interned_data"):
            _intern(seq, packet.interned_data)
        data = packet.WhichOneof("data")
        if data == "track_event":
            if flags & SEQ_NEEDS_INCREMENTAL_STATE and not seq.valid:
                skipped_lost += 1
                continue
            te = packet.track_event
            kind = te.type
            length = -1
            if kind == TYPE_COUNTER:
                counters += 1
                continue
            if not TYPE_SLICE_BEGIN <= kind <= TYPE_INSTANT:
                legacy = te.legacy_event
                if kind or legacy.phase != _PHASE_COMPLETE:
                    unsupported += 1
                    continue
                kind, length = TYPE_COMPLETE, legacy.duration_us * 1000
            if not packet.HasField("timestamp"):
                untimed += 1
                continue
            index = len(ts)
            ts.append(packet.timestamp)
            clock.append(packet.timestamp_clock_id or seq.clock)
            kinds.append(kind)
            uuid = te.track_uuid
            if not uuid and seq.track and not te.HasField("track_uuid"):
                uuid = seq.track
            track.append(uuid)
            name.append(te.name or seq.names.get(te.name_iid))
            iids, texts = te.category_iids, te.categories
            if iids or texts:
                known = seq.categories
                cat.append(",".join([*texts, *(known.get(i, "") for i in iids)]))
            else:
                cat.append(None)
            dur.append(length)
            corr.append(te.correlation_id or -1)
            for a in te.debug_annotations:
                key = _text(a.name) or seq.annotation_names.get(a.name_iid, "")
                canon = canonical.get(key)
                if canon is None:
                    canon = canonical[key] = key.lower() if key.lower() in wanted else ""
                if canon:
                    _annotation(ann, a, index, canon, seq)
            for ids, ends in (
                (te.flow_ids, False),
                (te.terminating_flow_ids, True),
                (te.flow_ids_old, False),
                (te.terminating_flow_ids_old, True),
            ):
                for flow in ids:
                    flow_ev.append(index)
                    flow_id.append(_wrap(flow))
                    flow_end.append(ends)
        elif data == "track_descriptor":
            _track(tracks, packet.track_descriptor)
        elif data == "clock_snapshot":
            snap = packet.clock_snapshot
            clocks.append({c.clock_id: c.timestamp for c in snap.clocks})
            primary = primary or snap.primary_trace_clock
    for reason, n in (
        ("track events after lost incremental state: skipped", skipped_lost),
        # metrics (DMA throughput, utilisation), not work: reported, not a loss (TRC501 info)
        ("counter values (metrics, not events): not modelled", counters),
        ("track events of unsupported type: skipped", unsupported),
        ("track events without a timestamp: skipped", untimed),
    ):
        if n:
            counts[reason] = n
    events = pd.DataFrame(
        {
            "ts": np.array(ts, dtype=np.uint64).astype(np.int64),
            "clock": np.array(clock, dtype=np.int64),
            "type": np.array(kinds, dtype=np.int8),
            "track": np.array(track, dtype=np.uint64),
            "name": _texts(name, counts, "event names"),
            "cat": _texts(cat, counts, "event categories"),
            "dur": np.array(dur, dtype=np.int64),
            "corr": np.array([_wrap(c) for c in corr], dtype=np.int64),
        }
    )
    values = np.array(ann["value"] + [None], dtype=object)[:-1]  # [None]: never a 2-d array
    kind = np.array(ann["kind"], dtype=np.int8)
    values[kind == VALUE_TEXT] = _texts(
        list(values[kind == VALUE_TEXT]), counts, "annotation values"
    )
    annotations = pd.DataFrame(
        {
            "ev": np.array(ann["ev"], dtype=np.int64),
            "name": np.array(ann["name"], dtype=object),
            "kind": kind,
            "value": values,
        }
    )
    flows = pd.DataFrame(
        {
            "ev": np.array(flow_ev, dtype=np.int64),
            "id": np.array(flow_id, dtype=np.int64),
            "terminating": np.array(flow_end, dtype=bool),
        }
    )
    return Decoded(
        events, annotations, flows, _track_table(tracks), clocks, primary, counts, n_packets
    )


def _texts(values: list, counts: dict[str, int], what: str) -> np.ndarray:
    """Strings as an object array. protobuf hands proto2 strings that are not valid UTF-8 over
    as bytes (corrupt data): those are decoded with replacement characters and counted."""
    out = np.array(values + [None], dtype=object)[:-1]
    if infer_dtype(out, skipna=True) in ("string", "empty"):  # one C-level scan
        return out
    raw = np.fromiter((isinstance(v, bytes) for v in out), dtype=bool, count=len(out))
    out[raw] = [v.decode("utf-8", "replace") for v in out[raw]]
    counts[f"{what}: invalid UTF-8 replaced"] = int(raw.sum())
    return out


def _text(value) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _intern(seq: _Sequence, data) -> None:
    for entry in data.event_names:
        seq.names[entry.iid] = entry.name
    for entry in data.event_categories:
        seq.categories[entry.iid] = _text(entry.name)
    for entry in data.debug_annotation_names:
        seq.annotation_names[entry.iid] = _text(entry.name)
    for entry in data.debug_annotation_string_values:
        seq.strings[entry.iid] = entry.str.decode("utf-8", "replace")


def _annotation(ann: dict, a, index: int, name: str, seq: _Sequence) -> None:
    """One wanted annotation's value(s); array elements and dictionary entries (nested
    annotations) are kept under the annotation's own name."""
    which = a.WhichOneof("value")
    if which is None:
        for element in (*a.array_values, *a.dictionary_entries):
            _annotation(ann, element, index, name, seq)
        return
    if which in ("string_value", "legacy_json_value"):
        kind, value = VALUE_TEXT, getattr(a, which)
    elif which == "string_value_iid":
        kind, value = VALUE_TEXT, seq.strings.get(a.string_value_iid)
    elif which == "double_value":
        kind, value = VALUE_FLOAT, a.double_value
    else:
        kind, value = VALUE_INT, _wrap(int(getattr(a, which)))
    ann["ev"].append(index)
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
