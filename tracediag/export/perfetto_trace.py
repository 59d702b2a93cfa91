"""A diagnosed job as a Perfetto trace, to open in the Perfetto UI (``tracediag export``).

Layout: one process ``rank <r>`` per rank, one thread track per track of the rank (named like
the track); every event is a slice (BEGIN/END) whose interned category holds its kind and its
track's kind, engine and device (``compute,track:compute_engine,engine:tensor,device:nc0``), so
our reader restores them. The critical path's events share one flow, drawn as arrows from event
to event. A process ``tracediag findings`` holds one track per finding with one slice over its
window, annotated with the finding's code, severity, message, impact, saving and suggestion.

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
from tracediag.model import schema as S
from tracediag.parsers.perfetto_tracks import FINDINGS_PROCESS
from tracediag.parsers.protos.perfetto_trace_pb2 import Trace, TrackEvent

if TYPE_CHECKING:
    from tracediag.engine.diagnosis import Diagnosis

_EVENTS_SEQ, _FINDINGS_SEQ = 1, 2
_PATH_FLOW = 1
_MAX_LANES = 64
_FINDINGS_UUID = 1


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
    _describe_tracks(header, trace, lanes)
    body = _event_records(trace, shift, lanes, names.cat.codes.to_numpy(), cats.codes, diagnosis)
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


def _event_records(trace: S.Trace, shift: int, lanes, name_codes, cat_codes, diagnosis) -> bytes:
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
