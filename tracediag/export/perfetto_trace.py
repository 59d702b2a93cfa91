"""A diagnosed job as a Perfetto trace, to open in the Perfetto UI (``tracediag export``).

Layout: one process ``rank <r>`` per rank, one thread track per track of the rank (named like
the track); every event is a slice (BEGIN/END) whose interned category holds its kind and its
track's kind, engine and device (``compute,track:compute_engine,engine:tensor,device:nc0``), so
our reader restores them. The critical path's events share one flow, drawn as arrows from event
to event. A process ``tracediag findings`` holds one track per finding with one slice over its
window, annotated with the finding's code, severity, message, impact, saving and suggestion.

Each event's fields are debug annotations under the names the Neuron Perfetto trace uses and
our reader maps (``transfer_size``, ``raw_flops``, ``evt_wait_time_ns``, ``layer``,
``hlo_name``, ``nki_source_location``, ``dtype``; ``id``: the event's id in the job), each
collective's start the ``CcOp`` fields (``operation``, ``op_id``: its instance, the same on
every rank, ``replica_group``, ``input_size``, ``trigger_start_ts``: its arrival, the
algorithm, bandwidths and dtype), and each dependency the ``tracediag_dep_<kind>`` annotation of
its later event holding the earlier one's id. A ``tracediag metadata`` slice in the findings
process holds each rank's hardware, format info and vendor summary
(:mod:`tracediag.model.own_export`).

Events are encoded column by column (:mod:`tracediag.io.protowire`): no message object per event.
A track's events must nest to be paired back; an event that overlaps a neighbour only partly
goes to a ``<track> (overlap)`` thread beside it (``(overlap 2)``, ... when those overlap too). Times are the aligned ns; a trace with
negative times is shifted to start at 0 (the shift is in the findings' annotations).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from tracediag.io import protowire as W
from tracediag.model import own_export
from tracediag.model import schema as S
from tracediag.parsers.perfetto_tracks import FINDINGS_PROCESS
from tracediag.parsers.protos.perfetto_trace_pb2 import Trace, TrackEvent

if TYPE_CHECKING:
    from tracediag.engine.diagnosis import Diagnosis

_EVENTS_SEQ, _FINDINGS_SEQ = 1, 2
_PATH_FLOW = own_export.PATH_FLOW
_MAX_LANES = 64
_FINDINGS_UUID = 1
#: Event annotations by value type: (annotation name, event column); collective annotations
#: (name, collective column); dependencies one name per edge kind. Names are interned: the
#: iid of a name is its position in :data:`ANNOTATION_NAMES` plus one.
_EVENT_NUMBERS = (
    ("transfer_size", S.BYTES), ("raw_flops", S.FLOPS), ("evt_wait_time_ns", S.WAIT),
    ("transpose_flops", S.TRANSPOSE_FLOPS), ("step", S.STEP),
)  # fmt: skip
_EVENT_TEXTS = (("layer", S.LAYER), ("hlo_name", S.OP), ("nki_source_location", S.SOURCE))
_COLL_TEXTS = (("operation", S.COLL_OP), ("algorithm", S.ALGORITHM), ("dtype", S.DTYPE))
_COLL_NUMBERS = (
    ("input_size", S.BYTES), ("algorithm_bandwidth", S.ALGBW), ("bus_bandwidth", S.BUSBW),
)  # fmt: skip
DEPENDENCY_PREFIX, META_ANNOTATION = own_export.DEPENDENCY_PREFIX, own_export.META_ANNOTATION
ANNOTATION_NAMES = (
    "id", *(n for n, _ in _EVENT_NUMBERS), *(n for n, _ in _EVENT_TEXTS),
    *(n for n, _ in _COLL_TEXTS), *(n for n, _ in _COLL_NUMBERS),
    "op_id", "replica_group", "trigger_start_ts",
    *(DEPENDENCY_PREFIX + k for k in S.EDGE_KINDS),
)  # fmt: skip
_IID = {name: i for i, name in enumerate(ANNOTATION_NAMES, start=1)}


def _process_uuid(rank: np.ndarray | int):
    return (np.asarray(rank, dtype=np.int64) + 1) << 40  # tracks below: + lane << 32 + track


def critical_path_events(diagnosis: Diagnosis) -> np.ndarray:
    """Event ids on the critical path, in time order."""
    events = diagnosis.analysis.path.segments["event"].to_numpy(dtype=np.int64)
    events = np.unique(events[events >= 0])
    return events[np.argsort(diagnosis.trace.events[S.TS].to_numpy()[events], kind="stable")]


def time_shift(diagnosis: Diagnosis) -> int:
    """What to add to every time so none is negative (Perfetto times are unsigned)."""
    ts = diagnosis.trace.events[S.TS].to_numpy()
    starts = [f.start_ns for f in diagnosis.findings]
    low = min([int(ts.min()) if len(ts) else 0, *starts, 0])
    return -low


def _partial(track: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """True for events that start inside an earlier event of their track and end after it."""
    order = np.lexsort((-end, start, track))
    tr, st, en = track[order], start[order], end[order]
    running = pd.Series(en).groupby(tr).cummax().to_numpy()
    before = np.r_[np.iinfo(np.int64).min, running[:-1]]
    before[np.r_[True, tr[1:] != tr[:-1]]] = np.iinfo(np.int64).min
    out = np.zeros(len(track), dtype=bool)
    out[order] = (st < before) & (en > before)
    return out


def overlap_lanes(trace: S.Trace) -> np.ndarray:
    """Each event's lane on its track: 0, or k > 0 when it overlaps events of lanes below only
    partly (such events cannot nest there, so they move to the ``(overlap k)`` thread)."""
    ev = trace.events
    track = ev[S.TRACK].to_numpy(dtype=np.int64)
    start = ev[S.TS].to_numpy(dtype=np.int64)
    end = start + ev[S.DUR].to_numpy(dtype=np.int64)
    lane = np.zeros(len(ev), dtype=np.int64)
    for k in range(_MAX_LANES):  # a loop over lanes (few), each pass vectorised
        mine = np.flatnonzero(lane == k)
        moved = mine[_partial(track[mine], start[mine], end[mine])]
        if not len(moved):
            break
        lane[moved] = k + 1
    return lane


def lane_suffix(lane: int) -> str:
    """The thread-name suffix of an overlap lane."""
    return "" if lane == 0 else " (overlap)" if lane == 1 else f" (overlap {lane})"


def write_perfetto(diagnosis: Diagnosis, path: Path) -> None:
    """Write the diagnosed trace to ``path`` (see the module docstring)."""
    trace = diagnosis.trace
    shift = time_shift(diagnosis)
    lanes = overlap_lanes(trace)
    names = trace.events[S.NAME].astype(str).astype("category")
    cats = _categories(trace)
    header = Trace()
    first = header.packet.add(trusted_packet_sequence_id=_EVENTS_SEQ, sequence_flags=1)
    for iid, name in enumerate(names.cat.categories, start=1):  # a loop over distinct names
        first.interned_data.event_names.add(iid=iid, name=name)
    for iid, cat in enumerate(cats.categories, start=1):
        first.interned_data.event_categories.add(iid=iid, name=cat)
    for iid, name in enumerate(ANNOTATION_NAMES, start=1):
        first.interned_data.debug_annotation_names.add(iid=iid, name=name)
    notes = _EventNotes(trace, shift)
    for iid, text in enumerate(notes.strings, start=1):  # a loop over distinct texts
        first.interned_data.debug_annotation_string_values.add(iid=iid, str=text.encode())
    _describe_tracks(header, trace, lanes)
    body = _event_records(
        trace, shift, lanes, names.cat.codes.to_numpy(), cats.codes, diagnosis, notes.column()
    )
    findings = _findings(diagnosis, shift)
    with open(path, "wb") as f:
        f.write(header.SerializeToString())
        f.write(body)
        f.write(findings.SerializeToString())


def _categories(trace: S.Trace) -> pd.Categorical:
    """Per event: ``kind,track:<kind>,engine:<engine>,device:<device>``."""
    tracks = trace.tracks
    per_track = (
        "track:" + tracks[S.TRACK_KIND].astype(str)
        + ",engine:" + tracks[S.ENGINE].astype(str)
        + ",device:" + tracks[S.DEVICE].astype(str)
    ).to_numpy(dtype=object)  # fmt: skip
    kind = trace.events[S.KIND].astype(str).to_numpy(dtype=object)
    pair = pd.Series(kind + ",") + pd.Series(per_track[trace.events[S.TRACK].to_numpy()])
    return pd.Categorical(pair)


def _describe_tracks(header: Trace, trace: S.Trace, lanes: np.ndarray) -> None:
    """One process per rank, one thread per track (and per overlap lane in use)."""
    tracks = trace.tracks
    for rank in trace.ranks:  # a loop over ranks and tracks
        td = header.packet.add(trusted_packet_sequence_id=_EVENTS_SEQ).track_descriptor
        td.uuid = int(_process_uuid(rank))
        td.process.pid, td.process.process_name = rank + 1, f"rank {rank}"
    used = pd.DataFrame({"t": trace.events[S.TRACK].to_numpy(), "l": lanes})
    used = used[used["l"] > 0].drop_duplicates()
    pairs = [(t, 0) for t in range(len(tracks))] + list(used.itertuples(index=False, name=None))
    for tid, lane in pairs:
        row = tracks.iloc[tid]
        td = header.packet.add(trusted_packet_sequence_id=_EVENTS_SEQ).track_descriptor
        td.uuid = int(_process_uuid(row[S.RANK])) + (int(lane) << 32) + tid + 1
        td.parent_uuid = int(_process_uuid(row[S.RANK]))
        td.name = f"{row[S.TRACK_NAME]}{lane_suffix(int(lane))}"
        td.thread.pid = int(row[S.RANK]) + 1
        td.thread.tid = int(lane) * len(tracks) + tid + 1
        td.thread.thread_name = td.name


def _take(column: W.Column, rows: np.ndarray) -> W.Column:
    """Rows ``rows`` of ``column`` (repeats allowed), in that order."""
    flat, length = column
    start = np.cumsum(length) - length
    out = length[rows]
    out_start = np.cumsum(out) - out
    return flat[np.repeat(start[rows] - out_start, out) + np.arange(int(out.sum()))], out


def _annotation(name: str, value: W.Column, present: np.ndarray) -> W.Column:
    """A ``debug_annotations`` field (interned name, one value) on the rows where ``present``."""
    n = len(present)
    name_field = W.constant(W.tag(1, 0) + W.varints(np.array([_IID[name]]))[0].tobytes(), n)
    return W.masked(W.field_message(4, W.join([name_field, value])), present)


def _ints(values: np.ndarray) -> W.Column:
    return W.field_varint(4, values)  # int_value


def _doubles(values: np.ndarray) -> W.Column:
    bits = np.nan_to_num(np.asarray(values, dtype="<f8")).view("<u8")
    return W.join([W.constant(W.tag(5, 1), len(bits)), W.fixed64(bits)])  # double_value


class _EventNotes:
    """Every event's annotations (see the module docstring) as one column, a row per event;
    ``strings`` are the distinct texts, interned (iid = position + 1)."""

    def __init__(self, trace: S.Trace, shift: int):
        self.trace, self.shift = trace, shift
        ev, co = trace.events, trace.collectives
        self.n = n = len(ev)
        self.coll = np.full(n, -1, dtype=np.int64)  # per event: its collective row, -1: none
        self.coll[co[S.EVENT].to_numpy(dtype=np.int64)] = np.arange(len(co))
        self.texts: dict[str, np.ndarray] = {}  # annotation name -> text per event (None)
        for name, col in _EVENT_TEXTS:
            if col in ev:
                self.texts[name] = S.strings(ev[col])
        dtype = S.strings(ev[S.DTYPE]) if S.DTYPE in ev else np.full(n, None, dtype=object)
        for name, col in (*_COLL_TEXTS, ("replica_group", S.GROUP)):
            known = (co[col].notna() & (co[col].astype(str) != "")).to_numpy()
            text = co[col].astype(str)
            if name == "replica_group":  # the Neuron CcOp form: [[0,1,2,3]]
                text = "[[" + text + "]]"
            values = np.where(known, text.to_numpy(dtype=object), None)
            per_event = np.append(values, None)[self.coll]
            if name == "dtype":  # the collective's dtype, else the event's own
                per_event = np.where(self.coll >= 0, per_event, dtype)
            per_event[pd.isna(per_event)] = None
            self.texts[name] = per_event
        every = pd.unique(np.concatenate([t[pd.notna(t)] for t in self.texts.values()]))
        self.strings = [str(t) for t in every]
        self.index = pd.Index(self.strings)

    def column(self) -> W.Column:
        """The annotations of every event, one row each (rows in event order)."""
        ev, co, n, coll = self.trace.events, self.trace.collectives, self.n, self.coll
        is_coll = coll >= 0
        parts = [_annotation("id", _ints(np.arange(n)), np.ones(n, bool))]
        for name, col in _EVENT_NUMBERS:
            if col in ev:
                v = ev[col].to_numpy(dtype=np.float64)
                keep = np.isfinite(v) & ~(is_coll & (col == S.BYTES))  # input_size says it
                parts.append(_annotation(name, _doubles(v), keep))
        for name, text in self.texts.items():
            iid = self.index.get_indexer(np.where(pd.notna(text), text, "")) + 1
            parts.append(_annotation(name, W.field_varint(17, iid), pd.notna(text) & (iid > 0)))
        rows = np.where(is_coll, coll, 0)
        if len(co):
            for name, col in _COLL_NUMBERS:
                v = co[col].to_numpy(dtype=np.float64)[rows]
                parts.append(_annotation(name, _doubles(v), is_coll & np.isfinite(v)))
            key = co[S.COLL_KEY].to_numpy(dtype=np.int64)[rows]
            parts.append(_annotation("op_id", _ints(key), is_coll))
            arrival = co[S.ARRIVAL].to_numpy(dtype=np.int64)[rows] + self.shift
            parts.append(_annotation("trigger_start_ts", _ints(arrival), is_coll))
        parts.append(self._dependencies())
        return W.join(parts)

    def _dependencies(self) -> W.Column:
        """Per event, a ``tracediag_dep_<kind>`` annotation per edge into it (its source's id)."""
        ed = self.trace.edges
        dst = ed[S.DST].to_numpy(dtype=np.int64)
        order = np.argsort(dst, kind="stable")
        kinds = ed[S.EDGE_KIND].astype(str).to_numpy(dtype=object)[order]
        src = ed[S.SRC].to_numpy(dtype=np.int64)[order]
        one = W.join(
            [_annotation(DEPENDENCY_PREFIX + k, _ints(src), kinds == k) for k in S.EDGE_KINDS]
        )
        # edges are in their events' order: each event's row is the run of its edges' bytes
        length = np.bincount(dst[order], weights=one[1], minlength=self.n).astype(np.int64)
        return one[0], length


def _event_records(
    trace: S.Trace, shift: int, lanes, name_codes, cat_codes, diagnosis, notes: W.Column
) -> bytes:
    """BEGIN/END packets of every event, encoded column-wise and sorted so they pair back."""
    ev = trace.events
    n = len(ev)
    start = ev[S.TS].to_numpy(dtype=np.int64) + shift
    dur = ev[S.DUR].to_numpy(dtype=np.int64)
    end = start + dur
    uuid = _process_uuid(ev[S.RANK].to_numpy()) + ev[S.TRACK].to_numpy(dtype=np.int64) + 1
    uuid = uuid + (lanes << 32)
    on_path = np.zeros(n, dtype=bool)
    on_path[critical_path_events(diagnosis)] = True
    begin = np.r_[np.ones(n, bool), np.zeros(n, bool)]
    ts = np.r_[start, end]
    # At one instant: ends of slices with a length, then begins (outer first), then the ends of
    # zero-length slices (inner first): the order that pairs each END with its own BEGIN.
    phase = np.r_[np.ones(n), np.where(dur > 0, 0, 2)]
    tie = np.r_[-end, -start]
    order = np.lexsort((tie, phase, ts))
    begin, ts = begin[order], ts[order]
    row = np.r_[np.arange(n), np.arange(n)][order]
    te = W.join(
        [
            W.field_varint(
                9, np.where(begin, TrackEvent.TYPE_SLICE_BEGIN, TrackEvent.TYPE_SLICE_END)
            ),
            W.field_varint(11, uuid[row]),
            W.masked(W.field_varint(10, name_codes[row].astype(np.int64) + 1), begin),
            W.masked(W.field_varint(3, cat_codes[row].astype(np.int64) + 1), begin),
            W.masked(
                W.join([W.constant(W.tag(47, 1), 2 * n), W.fixed64(np.full(2 * n, _PATH_FLOW))]),
                begin & on_path[row],
            ),
            W.masked(_take(notes, row), begin),
        ]
    )
    packet = W.join(
        [
            W.field_varint(8, ts),
            W.field_message(11, te),
            W.field_varint(10, np.full(2 * n, _EVENTS_SEQ)),
            W.field_varint(13, np.full(2 * n, 2)),  # SEQ_NEEDS_INCREMENTAL_STATE (interned names)
        ]
    )
    return W.field_message(1, packet)[0].tobytes()


def _findings(diagnosis: Diagnosis, shift: int) -> Trace:
    """The findings process: a track and an annotated slice per finding (few: message objects)."""
    out = Trace()
    td = out.packet.add(trusted_packet_sequence_id=_FINDINGS_SEQ).track_descriptor
    td.uuid = _FINDINGS_UUID
    ranks = diagnosis.trace.ranks
    td.process.pid, td.process.process_name = (max(ranks) + 2 if ranks else 1), FINDINGS_PROCESS
    _meta_slice(out, diagnosis, shift)
    for i, f in enumerate(diagnosis.findings):  # a loop over findings
        uuid = _FINDINGS_UUID + 1 + i
        td = out.packet.add(trusted_packet_sequence_id=_FINDINGS_SEQ).track_descriptor
        td.uuid, td.parent_uuid, td.name = uuid, _FINDINGS_UUID, f"{i + 1}. {f.code}"
        begin = out.packet.add(
            trusted_packet_sequence_id=_FINDINGS_SEQ, timestamp=f.start_ns + shift
        )
        begin.track_event.type = TrackEvent.TYPE_SLICE_BEGIN
        begin.track_event.track_uuid = uuid
        begin.track_event.name = f"{f.code} {f.title}"
        begin.track_event.categories.append("finding")
        notes = {
            "code": f.code, "severity": f.severity.name.lower(), "message": f.message,
            "ranks": ",".join(str(r) for r in f.ranks), "engine": f.engine, "track": f.track,
            "layer": f.layer, "op": f.op, "impact_ns": f.impact_ns, "impact_pct": f.impact_pct,
            "saving_ns": f.saving_ns, "suggestion": f.suggestion, "time_shift_ns": shift,
        }  # fmt: skip
        for key, value in notes.items():
            a = begin.track_event.debug_annotations.add(name=key)
            if isinstance(value, str):
                a.string_value = value
            elif isinstance(value, float):
                a.double_value = value
            else:
                a.int_value = int(value)
        end = out.packet.add(
            trusted_packet_sequence_id=_FINDINGS_SEQ, timestamp=max(f.end_ns, f.start_ns) + shift
        )
        end.track_event.type = TrackEvent.TYPE_SLICE_END
        end.track_event.track_uuid = uuid
    return out


def _meta_slice(out: Trace, diagnosis: Diagnosis, shift: int) -> None:
    """The ``tracediag metadata`` slice on the findings process: the ranks' meta as JSON."""
    block = {"schema": own_export.SCHEMA, "ranks": own_export.rank_block(diagnosis.trace.meta)}
    ts = diagnosis.trace.events[S.TS].to_numpy()
    at = (int(ts.min()) if len(ts) else 0) + shift
    begin = out.packet.add(trusted_packet_sequence_id=_FINDINGS_SEQ, timestamp=at)
    begin.track_event.type = TrackEvent.TYPE_SLICE_BEGIN
    begin.track_event.track_uuid = _FINDINGS_UUID
    begin.track_event.name = "tracediag metadata"
    note = begin.track_event.debug_annotations.add(name=META_ANNOTATION)
    note.string_value = own_export.dumps(block).decode()
    end = out.packet.add(trusted_packet_sequence_id=_FINDINGS_SEQ, timestamp=at)
    end.track_event.type = TrackEvent.TYPE_SLICE_END
    end.track_event.track_uuid = _FINDINGS_UUID
