"""Perfetto reader: streaming, tracks, begin/end pairing, interning and resets, defaults, clocks,
annotations, flows, compressed bundles, gzip, and the real nested-tracks trace."""

from __future__ import annotations

import gzip
import zlib

import numpy as np

from tests.chrome_helpers import shared
from tests.perfetto_fast_paths import assert_same_decoding, decode_fast_and_reference
from tracediag.model import schema as S
from tracediag.model.assembly import assemble
from tracediag.parsers import perfetto
from tracediag.parsers.protos.perfetto_trace_pb2 import Trace, TracePacket, TrackEvent

BEGIN, END, INSTANT, COUNTER = (
    TrackEvent.TYPE_SLICE_BEGIN,
    TrackEvent.TYPE_SLICE_END,
    TrackEvent.TYPE_INSTANT,
    TrackEvent.TYPE_COUNTER,
)


class TraceBuilder:
    """Builds Perfetto traces packet by packet with the generated classes."""

    def __init__(self) -> None:
        self.trace = Trace()

    def packet(self, seq: int = 1, **fields) -> TracePacket:
        p = self.trace.packet.add()
        p.trusted_packet_sequence_id = seq
        for key, value in fields.items():
            setattr(p, key, value)
        return p

    def track(self, uuid, name="", parent=0, thread=None, process=None, counter=False, seq=1):
        td = self.packet(seq).track_descriptor
        td.uuid = uuid
        if name:
            td.name = name
        if parent:
            td.parent_uuid = parent
        if thread is not None:  # (pid, tid, name)
            td.thread.pid, td.thread.tid, td.thread.thread_name = thread
        if process is not None:  # (pid, name)
            td.process.pid, td.process.process_name = process
        if counter:
            td.counter.SetInParent()
        return td

    def event(self, kind, ts, track=None, name=None, seq=1, annotations=(), **fields):
        p = self.packet(seq, timestamp=ts)
        te = p.track_event
        te.type = kind
        if track is not None:
            te.track_uuid = track
        if isinstance(name, int):
            te.name_iid = name
        elif name is not None:
            te.name = name
        for key, value in annotations:
            a = te.debug_annotations.add()
            if isinstance(key, int):
                a.name_iid = key
            else:
                a.name = key
            if isinstance(value, str):
                a.string_value = value
            elif isinstance(value, float):
                a.double_value = value
            elif isinstance(value, list):
                for v in value:
                    a.array_values.add().int_value = v
            else:
                a.int_value = value
        for key, values in fields.items():
            getattr(te, key).extend(values)
        return p

    def slice(self, track, ts, dur, name=None, seq=1, annotations=(), **fields):
        self.event(BEGIN, ts, track, name, seq, annotations, **fields)
        self.event(END, ts + dur, track, seq=seq)

    def data(self) -> bytes:
        return self.trace.SerializeToString()

    def write(self, path, gz: bool = False):
        path.write_bytes(gzip.compress(self.data()) if gz else self.data())
        return path


def only(path):
    parts = perfetto.read(path)
    assert len(parts) == 1
    return parts[0]


def rows(part, *cols):
    ev = part.events.sort_values([S.TS, S.NAME]).reset_index(drop=True)
    return [
        tuple(str(v) if isinstance(v, str) else v for v in r)
        for r in ev[list(cols)].itertuples(index=False, name=None)
    ]


def test_sniff_accepts_perfetto_only(tmp_path):
    b = TraceBuilder()
    b.track(1, "t")
    b.slice(1, 10, 5, "s")
    assert perfetto.sniff(b.write(tmp_path / "a.pb"))
    assert perfetto.sniff(b.write(tmp_path / "a.pftrace.gz", gz=True))
    (tmp_path / "j.json").write_text('{"traceEvents": []}')
    assert not perfetto.sniff(tmp_path / "j.json")
    assert not perfetto.sniff(tmp_path)
    (tmp_path / "bin").write_bytes(b"\x0a\x05hello")
    assert not perfetto.sniff(tmp_path / "bin")


def test_begin_end_pairs_nest_per_track_instants_are_markers(tmp_path):
    b = TraceBuilder()
    b.track(1, thread=(10, 11, "main"))
    b.track(2, "async lane")
    b.event(BEGIN, 100, 1, "outer")
    b.event(BEGIN, 120, 1, "inner")
    b.event(BEGIN, 130, 2, "other")
    b.event(END, 150, 1)  # closes inner
    b.event(INSTANT, 160, 1, "mark")
    b.event(END, 200, 1)  # closes outer
    b.event(END, 210, 2)
    b.event(END, 220, 2)  # no begin left on track 2
    b.event(BEGIN, 230, 1, "never ends")
    part = only(b.write(tmp_path / "t.pftrace"))
    assert rows(part, S.NAME, S.TS, S.DUR, S.KIND, "track_label") == [
        ("outer", 100, 100, "host", "main"),
        ("inner", 120, 30, "host", "main"),
        ("other", 130, 80, "marker", "async lane"),
        ("mark", 160, 0, "marker", "main"),
    ]
    assert part.meta.repairs == {
        "slice ends without a begin: skipped": 1,
        "slice begins without an end: skipped": 1,
    }
    assert set(part.events["track_kind"].astype(str)) == {"cpu_thread", "other"}


def test_interning_is_per_sequence_and_reset_by_incremental_state_cleared(tmp_path):
    b = TraceBuilder()
    b.track(1, "t")
    p = b.packet(1, sequence_flags=1)
    p.interned_data.event_names.add(iid=1, name="first")
    p.interned_data.debug_annotation_names.add(iid=7, name="hlo_name")
    p.interned_data.debug_annotation_string_values.add(iid=3, str=b"%dot.1")
    q = b.packet(2, sequence_flags=1)
    q.interned_data.event_names.add(iid=1, name="other sequence")
    b.slice(1, 10, 5, 1, annotations=[(7, "ignored")])
    b.trace.packet[-2].track_event.debug_annotations[0].string_value_iid = 3
    b.slice(1, 20, 5, 1, seq=2)
    p = b.packet(1, sequence_flags=1)  # reset: iid 1 now means "second"
    p.interned_data.event_names.add(iid=1, name="second")
    b.slice(1, 30, 5, 1)
    b.packet(1, previous_packet_dropped=True)
    b.event(BEGIN, 40, 1, 1).sequence_flags = 2  # needs state that was lost: skipped
    b.event(END, 45, 1).sequence_flags = 2
    part = only(b.write(tmp_path / "t.pftrace"))
    assert rows(part, S.NAME, S.TS) == [("first", 10), ("other sequence", 20), ("second", 30)]
    ops = part.events.sort_values(S.TS)[S.OP]
    assert ops.iloc[0] == "%dot.1" and ops.iloc[1:].isna().all()
    assert part.meta.repairs == {"track events after lost incremental state: skipped": 2}


def test_packet_defaults_give_track_and_clock(tmp_path):
    b = TraceBuilder()
    b.track(5, "default lane")
    b.track(6, "explicit lane")
    snap = b.packet(1).clock_snapshot
    snap.clocks.add(clock_id=6, timestamp=1_000_000)  # BOOTTIME, the trace clock
    snap.clocks.add(clock_id=3, timestamp=400)  # MONOTONIC
    p = b.packet(1, sequence_flags=1)
    p.trace_packet_defaults.track_event_defaults.track_uuid = 5
    p.trace_packet_defaults.timestamp_clock_id = 3
    b.slice(None, 500, 10, "on default track and clock")
    b.slice(6, 600, 10, "explicit track")
    b.event(BEGIN, 1_000_700, 6, "boottime").timestamp_clock_id = 6
    b.event(END, 1_000_720, 6).timestamp_clock_id = 6
    part = only(b.write(tmp_path / "t.pftrace"))
    assert rows(part, S.NAME, S.TS, S.DUR, "track_label") == [
        ("on default track and clock", 1_000_100, 10, "default lane"),
        ("explicit track", 1_000_200, 10, "explicit lane"),
        ("boottime", 1_000_700, 20, "explicit lane"),
    ]


def test_counters_and_counter_tracks_are_not_events(tmp_path):
    b = TraceBuilder()
    b.track(1, thread=(1, 2, "worker"))
    b.track(9, "DMA Throughput", counter=True)
    for ts in (10, 20, 30):
        b.event(COUNTER, ts, 9).track_event.counter_value = ts
    b.slice(1, 10, 5, "work")
    part = only(b.write(tmp_path / "t.pftrace"))
    assert len(part.events) == 1
    assert part.meta.repairs == {"counter values (metrics, not events): not modelled": 3}


def test_flows_chain_events_and_terminating_ids_end_chains(tmp_path):
    b = TraceBuilder()
    b.track(1, thread=(1, 1, "a"))
    b.track(2, thread=(1, 2, "b"))
    b.slice(1, 10, 5, "s1", flow_ids=[77])
    b.slice(2, 20, 5, "s2", flow_ids=[77])
    b.slice(1, 30, 5, "s3", terminating_flow_ids=[77])
    b.slice(2, 40, 5, "s4", flow_ids=[77])  # a new flow with a reused id
    b.slice(1, 50, 5, "s5", flow_ids=[77])
    b.slice(2, 60, 5, "lonely", flow_ids=[1 << 63])
    part = only(b.write(tmp_path / "t.pftrace"))
    names = part.events[S.NAME].astype(str).to_numpy()
    got = {(names[s], names[d], str(k)) for s, d, k in part.edges.itertuples(index=False)}
    assert got == {("s1", "s2", "flow"), ("s2", "s3", "flow"), ("s4", "s5", "flow")}


def test_compressed_bundles_and_gzip_read_like_plain_packets(tmp_path):
    plain = TraceBuilder()
    plain.track(1, thread=(1, 1, "t"))
    for i in range(50):
        plain.slice(1, 100 * i, 40, f"op{i % 3}")
    inner = Trace()
    inner.packet.extend(plain.trace.packet[1:])
    bundled = Trace()
    bundled.packet.add().CopyFrom(plain.trace.packet[0])
    bundled.packet.add(trusted_packet_sequence_id=1).compressed_packets = zlib.compress(
        inner.SerializeToString()
    )
    (tmp_path / "bundled.pftrace").write_bytes(bundled.SerializeToString())
    expected = rows(only(plain.write(tmp_path / "plain.pftrace")), S.NAME, S.TS, S.DUR)
    assert len(expected) == 50
    assert rows(only(tmp_path / "bundled.pftrace"), S.NAME, S.TS, S.DUR) == expected
    assert (
        rows(only(plain.write(tmp_path / "p.pftrace.gz", gz=True)), S.NAME, S.TS, S.DUR) == expected
    )


def test_legacy_complete_events_keep_their_duration(tmp_path):
    b = TraceBuilder()
    b.track(1, thread=(1, 1, "t"))
    p = b.event(0, 1_000, 1, "legacy X")
    p.track_event.legacy_event.phase = ord("X")
    p.track_event.legacy_event.duration_us = 3
    b.event(0, 2_000, 1, "legacy B").track_event.legacy_event.phase = ord("B")
    part = only(b.write(tmp_path / "t.pftrace"))
    assert rows(part, S.NAME, S.TS, S.DUR) == [("legacy X", 1_000, 3_000)]
    assert part.meta.repairs == {"track events of unsupported type: skipped": 1}


def test_rank_from_file_name_and_duplicate_thread_names(tmp_path):
    b = TraceBuilder()
    b.track(1, thread=(10, 1, "worker"))
    b.track(2, thread=(10, 2, "worker"))
    b.slice(1, 10, 5, "a")
    b.slice(2, 10, 5, "b")
    part = only(b.write(tmp_path / "profile_rank_3.pftrace"))
    assert part.meta.rank == 3 and part.meta.info["rank_source"] == "filename"
    assert sorted(set(part.events["track_label"].astype(str))) == [
        "worker (pid 10 tid 1)",
        "worker (pid 10 tid 2)",
    ]


def test_real_nested_tracks_trace():
    path = shared("perfetto_nested_tracks.perfetto-trace")
    assert perfetto.sniff(path)
    part = only(path)
    ev = part.events
    assert len(ev) == 1364 and part.meta.repairs == {}
    assert ev["track_label"].nunique() == 1364  # one slice per track
    assert set(ev[S.KIND].astype(str)) == {"marker"}  # custom tracks, no thread: markers
    first = ev[ev[S.NAME] == "L1 Slice 1"].iloc[0]
    assert (first[S.TS], first[S.DUR], str(first["track_label"])) == (
        1_000_000,
        10_000_000,
        "L1 Track 01",
    )
    assert len(part.edges) == 1360
    src, dst = part.edges[S.SRC].to_numpy(), part.edges[S.DST].to_numpy()
    ts = ev[S.TS].to_numpy()
    assert (ts[src] < ts[dst]).all()  # flows run forward in time
    # 340 slices fan out to 4 flows each, every flow ends on its own slice.
    assert np.bincount(np.bincount(src, minlength=len(ev))).tolist() == [1024, 0, 0, 0, 340]
    assert np.bincount(dst, minlength=len(ev)).max() == 1 and len(np.unique(dst)) == 1360
    names = ev[S.NAME].astype(str).to_numpy()
    assert {names[d] for s, d in zip(src, dst, strict=True) if names[s] == "L1 Slice 1"} == {
        "L2 Slice 2",
        "L2 Slice 87",
        "L2 Slice 172",
        "L2 Slice 257",
    }
    trace = assemble([part])
    assert len(trace.tracks) == 1364


def test_counters_are_reported_but_not_as_lost_rows(tmp_path):
    # Real Neuron device traces carry counter tracks (DMA throughput...): TRC501 lists them at
    # info severity instead of warning that rows were lost.
    from tracediag.engine.diagnose import diagnose
    from tracediag.loading.loader import load

    b = TraceBuilder()
    b.track(1, thread=(1, 2, "worker"))
    b.track(9, "DMA Throughput", counter=True)
    for ts in (10, 20, 30):
        b.event(COUNTER, ts, 9).track_event.counter_value = ts
    b.slice(1, 10, 5, "work")
    trc = [
        f for f in diagnose(load([b.write(tmp_path / "t.pftrace")])).findings if f.code == "TRC501"
    ]
    assert [(f.severity.name, f.evidence["dropped"]) for f in trc] == [("INFO", 0)]


def _mixed_state_trace(path):
    """Interning, resets, drops and defaults on two sequences, between plain track events with
    every annotation value kind (the fast path's shapes and the protobuf loop's packets)."""
    b = TraceBuilder()
    b.track(1, thread=(1, 2, "main"))
    b.track(2, "lane")
    for seq in (1, 2):
        p = b.packet(seq, sequence_flags=1)
        p.interned_data.event_names.add(iid=1, name=f"op{seq}")
        p.interned_data.debug_annotation_names.add(iid=4, name="HLO_Name")  # matched lower-case
        p.interned_data.debug_annotation_string_values.add(iid=6, str=b"%fusion.\xff")
    for i in range(40):
        seq = 1 + i % 2
        if i == 17:
            b.packet(1, previous_packet_dropped=True)
        if i == 23:
            p = b.packet(1, sequence_flags=1)  # reset: iid 1 is now "after reset"
            p.interned_data.event_names.add(iid=1, name="after reset")
            p.trace_packet_defaults.track_event_defaults.track_uuid = 2
        annotations = [("layer", f"L{i % 3}"), (4, "ignored"), ("id", -(2**40) - i)]
        annotations += [("raw_flops", 1.5 * i), ("inst_dep_ids", [i, 2**62])]
        begin = b.event(BEGIN, 100 * i, 1 if i < 23 else None, 1, seq, annotations)
        begin.sequence_flags = 2
        begin.track_event.debug_annotations[1].string_value_iid = 6
        flag = begin.track_event.debug_annotations.add(name="opcode")
        flag.dictionary_entries.add(name="x", bool_value=True)
        begin.track_event.flow_ids.append(2**64 - 1 - i % 4)
        begin.track_event.terminating_flow_ids_old.append(7)
        end = b.event(END, 100 * i + 50, 1 if i < 23 else None, seq=seq)
        end.sequence_flags = 2
        end.track_event.debug_annotations.add(name="hbm_read_bytes", uint_value=2**63 + i)
    b.event(INSTANT, 5000, 1, "\xe9v\xe9nement", categories=["cat"])
    return b.write(path)


def test_fast_columns_equal_the_protobuf_reading(tmp_path, monkeypatch):
    """The columnar decoding of the common packets gives exactly the protobuf loop's columns
    (the reading of every packet by protobuf, forced here, is the reference)."""
    path = _mixed_state_trace(tmp_path / "t.pftrace")
    wanted = frozenset({"hlo_name", "layer", "id", "raw_flops", "inst_dep_ids", "opcode"})
    wanted |= {"hbm_read_bytes"}
    fast, reference, shares = decode_fast_and_reference(monkeypatch, path, wanted)
    total, slow = shares[0]
    assert slow < total / 4  # most packets took the fast path
    assert_same_decoding(fast, reference)
    # What the trace says, read off the columns: the reset renames iid 1 and the drop loses
    # the sequence-1 events until it; the interned value is invalid UTF-8 (replaced, counted).
    names = fast.events["name"].tolist()
    assert names.count("after reset") == 8 and "op1" in names and "op2" in names  # i = 24..38
    assert fast.counts["track events after lost incremental state: skipped"] == 2 * 3
    hlo = fast.annotations[fast.annotations["name"] == "hlo_name"]["value"]
    assert set(hlo) == {"%fusion.\ufffd"}
    ids = fast.annotations[fast.annotations["name"] == "id"]["value"]
    assert min(ids) == -(2**40) - 39
    assert set(fast.flows["id"]) >= {-1, -4, 7}


def test_wire_walk_reads_the_values_written():
    """Varints of one to ten bytes, fixed64 and lengths, read back by the numpy walk."""
    from tracediag.parsers import perfetto_wire as W

    te = TrackEvent(type=BEGIN, track_uuid=2**64 - 1, name="n" * 300)
    te.flow_ids.append(2**63 + 5)
    te.debug_annotations.add(name="v", int_value=-3)
    data = te.SerializeToString()
    buf = W.Buffer(data)
    f = W.walk(buf, np.array([0]), np.array([len(data)]))
    got = {int(k): int(v) for k, v in zip(f.field, f.value, strict=True)}
    assert not f.bad.any()
    assert got[9] == BEGIN and got[11] == 2**64 - 1 and got[47] == 2**63 + 5 and got[23] == 300
    a = f.of(4, W.WIRE_LEN)[0]
    inner = W.walk(buf, f.data[[a]], f.data[[a]] + f.value[[a]].astype(np.int64))
    assert int(inner.value[inner.field == 4][0]) == 2**64 - 3  # -3 as the uint64 varint
    cut = W.walk(buf, np.array([0]), np.array([len(data) - 1]))
    assert cut.bad.all()  # a message cut short is left to protobuf
