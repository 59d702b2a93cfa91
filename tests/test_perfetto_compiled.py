"""The compiled Perfetto walk (parsers/perfetto_kernel.py): the same columns as the numpy walk
and as protobuf's reading of every packet, on the packets that take it and the ones it leaves;
its framing fallbacks; numba neither needed nor imported for small files."""

from __future__ import annotations

import dataclasses
import random
import subprocess
import sys
import zlib

import numpy as np
import pandas as pd
import pytest

from tests.fuzz_helpers import mutate_bytes
from tests.test_perfetto import BEGIN, END, TraceBuilder, _mixed_state_trace
from tests.test_perfetto_neuron import _device_trace
from tracediag.parsers import perfetto_decode as D
from tracediag.parsers import perfetto_fast
from tracediag.parsers.perfetto_stream import scan_records
from tracediag.parsers.protos.perfetto_trace_pb2 import Trace, TracePacket

pytest.importorskip("numba")
WANTED = frozenset(
    {"hlo_name", "layer", "id", "raw_flops", "inst_dep_ids", "opcode", "hbm_read_bytes"}
)


def _decode(path, compiled: bool, monkeypatch):
    """decode() on the compiled walk (every file) or on the numpy walk (none)."""
    monkeypatch.setattr(D, "COMPILE_ABOVE_BYTES", 0 if compiled else 1 << 62)
    if compiled:
        assert D._kernels() is not None  # numba works here: the compiled path is what is tested
    else:
        D._kernels.cache_clear()  # "already loaded" would choose the compiled walk
    try:
        return dataclasses.asdict(D.decode(path, WANTED))
    except Exception as exc:  # a refused file: the same error both ways
        return (type(exc).__name__, str(exc))
    finally:
        D._kernels.cache_clear()


def _same(a, b) -> None:
    if isinstance(a, tuple):
        assert a == b
        return
    for key in ("events", "annotations", "flows", "tracks"):
        pd.testing.assert_frame_equal(a[key], b[key], check_exact=True)
        for col in a[key].columns:  # object columns: str vs bytes, int vs bool, None vs NaN
            if a[key][col].dtype == object:
                assert [type(v) for v in a[key][col]] == [type(v) for v in b[key][col]], col
    for key in ("clocks", "primary_clock", "counts", "packets"):
        assert a[key] == b[key], key


def test_compiled_walk_gives_the_protobuf_reading(tmp_path, monkeypatch):
    """Interning, resets, drops, defaults, every annotation value kind, dictionaries, arrays
    and flows: compiled, numpy and protobuf-only readings are one (protobuf is the reference)."""
    path = _mixed_state_trace(tmp_path / "t.pftrace")
    fast = _decode(path, True, monkeypatch)
    assert _decode(path, False, monkeypatch) is not None
    _same(fast, _decode(path, False, monkeypatch))
    shapes = perfetto_fast.shapes

    def all_slow(*args):
        got = shapes(*args)
        got.slow[:] = True
        return got

    monkeypatch.setattr(perfetto_fast, "shapes", all_slow)
    _same(fast, _decode(path, False, monkeypatch))
    # What the trace holds, read off the compiled columns (values written by the builder).
    events = fast["events"]
    assert events["name"].tolist().count("after reset") == 8
    ids = fast["annotations"][fast["annotations"]["name"] == "id"]["value"]
    assert min(ids) == -(2**40) - 39
    assert set(fast["flows"]["id"]) >= {-1, -4, 7}


def test_compiled_walk_leaves_what_it_does_not_know_to_protobuf(tmp_path, monkeypatch):
    """Packets past the fast shapes (an unknown field, a repeated singular field, a value and
    elements together, an empty name, a cleared state) are read by protobuf: the compiled walk
    marks them slow, and the columns stay those of the numpy walk."""
    b = TraceBuilder()
    b.track(1, thread=(1, 2, "main"))
    for i in range(30):
        p = b.event(BEGIN, 100 * i, 1, f"op{i % 4}", annotations=[("opcode", f"X{i}")])
        p.track_event.flow_ids.extend([5, 6])
        p.track_event.terminating_flow_ids_old.append(9)
        p.track_event.flow_ids_old.append(8)
        if i % 5 == 1:
            p.track_event.debug_annotations[0].array_values.add(int_value=i)  # value + elements
        if i % 5 == 2:
            p.track_event.name = ""  # an empty inline name
        if i % 5 == 3:
            p.track_event.categories.extend(["a", "b"])  # two categories: joined by protobuf
        if i % 7 == 4:
            p.sequence_flags = 1  # incremental state cleared
        b.event(END, 100 * i + 50, 1)
    data = bytearray(b.data())
    extra = TracePacket(trusted_packet_sequence_id=1, timestamp=7)
    extra.track_event.type = BEGIN
    raw = extra.SerializeToString() + bytes([0xF8, 0x7F, 0x01])  # unknown field 2047, varint
    data += bytes([0x0A, len(raw)]) + raw
    path = tmp_path / "odd.pftrace"
    path.write_bytes(bytes(data))
    _same(_decode(path, True, monkeypatch), _decode(path, False, monkeypatch))
    kernels = D._kernels()
    padded = np.frombuffer(bytes(data) + bytes(24), dtype=np.uint8)
    records, _, _ = kernels.scan(padded, len(data))
    slow, *_ = kernels.walk(padded, records[:, 1], records[:, 2])
    D._kernels.cache_clear()
    assert slow[-1] and not slow[-2]  # the unknown field; a plain end
    assert slow[0] and slow[1 + 2 * 1] and slow[1 + 2 * 2] and slow[1 + 2 * 3]  # track, odd ones
    assert not slow[1] and not slow[1 + 2 * 5]  # flows of both kinds, in the fast shape


@pytest.mark.parametrize("seed", range(8))
def test_compiled_walk_on_damaged_bytes(seed, tmp_path, monkeypatch):
    """Byte mutations of the Neuron device trace: the same columns, or the same refusal."""
    rng = random.Random(seed)
    _, data = mutate_bytes(_device_trace().data(), rng)
    path = tmp_path / "rank_0.pftrace"
    path.write_bytes(data)
    _same(_decode(path, True, monkeypatch), _decode(path, False, monkeypatch))


def test_compiled_scan_hands_other_records_and_errors_to_the_interpreted_scan(
    tmp_path, monkeypatch
):
    """A top-level field that is no packet, a compressed bundle, long varint lengths, and a
    corrupt length: the same counts, records and error messages (with byte offsets)."""
    b = TraceBuilder()
    b.track(1, thread=(1, 2, "main"))
    for i in range(5):
        b.slice(1, 10 * i, 5, "work")
    plain = b.data()
    first = scan_records(plain, {})[0][0][2]  # the end of the first record
    inner = TraceBuilder()
    inner.slice(1, 100, 5, "bundled")
    bundle = TracePacket(compressed_packets=zlib.compress(inner.data())).SerializeToString()
    body = TracePacket(trusted_packet_sequence_id=1, timestamp=3).SerializeToString()
    cases = {
        "unknown": plain[:first] + bytes([0x10, 0x05]) + plain[first:],  # field 2: counted
        "bundle": plain + bytes([0x0A, len(bundle)]) + bundle,
        "long": plain + bytes([0x0A, 0x80 | len(body), 0x80, 0x00]) + body,  # 3-byte length
        "corrupt": plain + bytes([0x0A, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F]),
        "cut": plain[:-3],
    }
    for name, data in cases.items():
        path = tmp_path / f"{name}.pftrace"
        path.write_bytes(data)
        got = _decode(path, True, monkeypatch)
        _same(got, _decode(path, False, monkeypatch))
        if name in ("unknown", "long"):
            assert got["packets"] == len(b.trace.packet) + (name == "long")
        if name == "unknown":
            assert got["counts"] == {"top-level records of unknown field 2: skipped": 1}
        if name in ("corrupt", "cut"):
            assert got[0] == "TraceInputError" and "byte offset" in got[1]


def _child(code: str) -> str:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_small_files_do_not_import_numba_and_big_ones_read_without_it(tmp_path):
    """Below COMPILE_ABOVE_BYTES numba is not imported; with numba missing a big file is read
    by the numpy walk, the same columns, nothing printed."""
    path = _mixed_state_trace(tmp_path / "t.pftrace")
    probe = (
        "import sys\nfrom tracediag.parsers import perfetto_decode as D\n"
        f"d = D.decode({str(path)!r}, frozenset({{'layer', 'id'}}))\n"
        "print(d.packets, len(d.events), len(d.annotations), sys.modules.get('numba') is not None)"
    )
    small = _child(probe)
    assert small.endswith("False")
    forced = _child("import sys; sys.modules['numba'] = None\n" + probe.replace(
        "D.decode(", "setattr(D, 'COMPILE_ABOVE_BYTES', 0) or D.decode("
    ))  # fmt: skip
    assert forced == small  # the same columns' sizes, and numba never loaded
    assert int(small.split()[0]) == len(Trace.FromString(path.read_bytes()).packet)
