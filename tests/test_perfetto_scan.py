"""The numpy record scan and the packed as-of look-up of the Perfetto decoder against the
readings they stand in for, and the fast path against the protobuf loop on a trace read in many
small chunks (records cut at chunk ends, several sequences, interning changing mid-stream)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from tests.perfetto_fast_paths import assert_same_decoding, decode_fast_and_reference
from tests.test_perfetto import BEGIN, END, INSTANT, TraceBuilder
from tracediag.parsers import (
    perfetto_asof,
    perfetto_decode,
    perfetto_scan,
    perfetto_stream,
)
from tracediag.parsers.perfetto_stream import FramingError, scan_records


def _varint(v: int) -> bytes:
    out = bytearray()
    while True:
        out.append(v & 0x7F | (0x80 if v >> 7 else 0))
        v >>= 7
        if not v:
            return bytes(out)


def _buffer(rng: random.Random) -> bytes:
    """Packet records of every header width, other top-level fields and odd framing."""
    parts = []
    for _ in range(rng.randint(0, 40)):
        r = rng.random()
        if r < 0.8:
            n = rng.choice([0, 1, 127, 128, 300, 16383, 16384, 20000, rng.randint(0, 200)])
            body = bytes(rng.choice([0x0A, 0x80, 0x01, 0x7F, 0x33]) for _ in range(min(n, 300)))
            parts.append(b"\x0a" + _varint(n) + body + bytes(max(n - 300, 0)))
        elif r < 0.86:
            parts.append(_varint(2 << 3) + _varint(rng.randrange(1 << 40)))  # field 2 varint
        elif r < 0.9:
            parts.append(_varint(3 << 3 | 2) + b"\x03abc")  # field 3, length-delimited
        elif r < 0.93:
            parts.append(b"\x0a\x80\x80\x80\x80\x01")  # a five-byte length header
        elif r < 0.96:
            parts.append(b"\x0a" + _varint(1 << 29))  # longer than any record we take
        else:
            parts.append(bytes([rng.randrange(256)]))  # garbage
    data = b"".join(parts)
    return data[: rng.randrange(len(data) + 1)] if data and rng.random() < 0.5 else data


def test_numpy_scan_gives_the_records_counts_and_errors_of_scan_records():
    rng = random.Random(7)
    seen = {"records": 0, "errors": 0, "cut": 0}
    for _ in range(600):
        data = _buffer(rng)
        want_counts, got_counts = {}, {}
        try:
            want = scan_records(data, want_counts)
        except FramingError as exc:
            with pytest.raises(FramingError) as got:
                perfetto_scan.scan(data, got_counts)
            assert (got.value.offset, got.value.problem) == (exc.offset, exc.problem)
            seen["errors"] += 1
            continue
        records, used = perfetto_scan.scan(data, got_counts)
        assert used == want[1] and got_counts == want_counts
        assert np.array_equal(records, np.array(want[0], dtype=np.int64).reshape(-1, 3))
        seen["records"] += len(records)
        seen["cut"] += used < len(data)
    assert seen["records"] > 1000 and seen["errors"] > 50 and seen["cut"] > 50


def test_packed_asof_equals_the_sorted_reading():
    """Keys small and large (64-bit ids), positions near and far, entries tied at a position."""
    rng = np.random.default_rng(3)
    packed = 0
    for _ in range(1500):
        ne, nq = int(rng.integers(0, 30)), int(rng.integers(0, 60))
        shift = np.int64(1 << 61) if rng.random() < 0.2 else np.int64(1)
        k1 = [rng.integers(0, 4, n).astype(np.int64) * shift - 7 for n in (ne, nq)]
        k2 = [rng.integers(0, 5, n).astype(np.int64) for n in (ne, nq)]
        far = 44 if rng.random() < 0.3 else 0  # spans whose packed keys do not fit
        pos = [rng.integers(0, 30, n).astype(np.int64) << far for n in (ne, nq)]
        args = (k1[0], k2[0], pos[0], k1[1], k2[1], pos[1])
        got = perfetto_asof.asof(*args)
        assert np.array_equal(got, perfetto_asof.asof_sorted(*args))
        packed += not far and ne > 0
    assert packed > 500


def _many_sequences_trace(path, gz: bool = False):
    """Three sequences interleaved: interned and inline names and annotation names, interning
    growing on packets that also carry events, resets that rename iids, a drop, an unknown
    top-level field between records."""
    b = TraceBuilder()
    b.track(1, thread=(1, 2, "main"))
    for seq in (1, 2, 3):
        b.track(10 + seq, f"lane {seq}", seq=seq)
        p = b.packet(seq, sequence_flags=1)
        p.interned_data.event_names.add(iid=1, name=f"op{seq}")
        p.interned_data.debug_annotation_names.add(iid=4, name="Layer")
        p.interned_data.debug_annotation_string_values.add(iid=6, str=f"v{seq}".encode())
    for i in range(900):
        seq = 1 + i % 3
        track = 10 + seq
        if i % 97 == 50:  # a reset: iid 1 renamed, a default track
            p = b.packet(seq, sequence_flags=1)
            p.interned_data.event_names.add(iid=1, name=f"op{seq} after {i}")
            p.interned_data.debug_annotation_names.add(iid=4, name="Layer")
            p.trace_packet_defaults.track_event_defaults.track_uuid = track
        if i == 400:
            b.packet(2, previous_packet_dropped=True)
        name = 1 if i % 4 else f"inline {i % 5}"
        ann = [(4, f"L{i % 7}"), ("id", i), ("raw_flops", 0.5 * i)]
        begin = b.event(BEGIN, 1000 * i, track, name, seq, ann)
        begin.sequence_flags = 2
        begin.track_event.debug_annotations.add(name="hlo_name", string_value_iid=6)
        if i % 31 == 7:  # an event that also interns: slow, and its names serve later packets
            begin.interned_data.event_names.add(iid=100 + i, name=f"new {i}")
        if i % 31 == 10:  # the same sequence three events on
            begin.track_event.name_iid = 100 + i - 3
            begin.track_event.ClearField("name")
        end = b.event(END, 1000 * i + 400, track if i % 5 else None, seq=seq)
        end.sequence_flags = 2
        if i % 11 == 0:
            b.event(INSTANT, 1000 * i + 1, track, f"mark {i}", seq)
    data = b.data()
    cut = len(data) // 2
    cut = next(o for o, _, _ in scan_records(data, {})[0] if o >= cut)
    data = data[:cut] + _varint(2 << 3) + _varint(12345) + data[cut:]  # an unknown field 2
    path.write_bytes(__import__("gzip").compress(data) if gz else data)
    return path


@pytest.mark.parametrize("gz", [False, True])
def test_fast_path_equals_the_protobuf_loop_read_in_small_chunks(tmp_path, monkeypatch, gz):
    path = _many_sequences_trace(tmp_path / "t.pftrace", gz)
    wanted = frozenset({"layer", "id", "raw_flops", "hlo_name"})
    monkeypatch.setattr(perfetto_decode, "_compiled_pays", lambda path: False)  # numpy path
    whole = perfetto_decode.decode(path, wanted)
    monkeypatch.setattr(perfetto_stream, "CHUNK_BYTES", 700)  # records cut at chunk ends
    fast, reference, shares = decode_fast_and_reference(monkeypatch, path, wanted)
    chunks, total, slow = len(shares), *np.sum(shares, axis=0)
    assert chunks > 50 and slow < total / 5  # many chunks; most packets took the fast path
    for got in (fast, whole):
        assert_same_decoding(got, reference)
    names = set(fast.events["name"].dropna())
    assert {"op1", "op3 after 50", "inline 0", "new 7", "mark 0"} <= names
    assert fast.counts["top-level records of unknown field 2: skipped"] == 1
    assert fast.counts["track events after lost incremental state: skipped"] > 0
    layers = fast.annotations[fast.annotations["name"] == "layer"]["value"]
    assert set(layers) == {f"L{k}" for k in range(7)}
    hlo = fast.annotations[fast.annotations["name"] == "hlo_name"]["value"]
    assert set(hlo) == {"v1", "v2", "v3", None}  # after a reset the string iid is unknown
