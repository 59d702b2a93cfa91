"""Hostile input for the protobuf readers (Perfetto, XPlane), through the CLI.

Byte mutations of a Neuron-style Perfetto trace and of a TPU XSpace, random streams of track
events (unmatched begin/end, overlaps, extreme timestamps, odd annotations) and random planes
(negative and huge times, numbers where text stats belong, dangling metadata), and exact counts
for what the readers repair (see :mod:`tests.fuzz_helpers` for the contract).
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz_helpers import fresh_dir, fuzz_settings, mutate_bytes, run_report, sweep
from tests.test_perfetto import BEGIN, COUNTER, END, INSTANT, TraceBuilder
from tests.test_perfetto_neuron import _device_trace
from tests.test_xplane import START, PlaneBuilder, _tpu_space
from tracediag.parsers.protos.xplane_pb2 import XSpace

# ---- Perfetto -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def device_trace() -> bytes:
    """The Neuron device trace of the Perfetto tests (engine, DMA, semaphore, counter tracks)."""
    return _device_trace().data()


@pytest.mark.parametrize("seed", range(sweep(6)))
def test_perfetto_byte_mutations(seed, device_trace, tmp_path):
    rng = random.Random(seed)
    kind, data = mutate_bytes(device_trace, rng)
    path = tmp_path / "rank_0.pftrace"
    path.write_bytes(data)
    run_report([path], tmp_path, f"Perfetto {kind} (seed {seed})")


TRACK_NAMES = [
    "TensorMatrix Engine - Row 0", "Vector Engine - Row 1", "qSyncIO0 - Row 0",
    "DMA Engine 64 - Row 2", "S[5] (Tensor)", "CC Stream 1 - Row 0", "gid1-nc0-tid5-neuron_rt",
    "thread", "",
]  # fmt: skip
TIMES = [0, 1, 100, 1000, 2**53 + 1, 2**62, 2**63 - 1, 2**63, 2**64 - 1]
ANNOTATIONS = [
    ("id", 1), ("id", 2), ("inst_dep_ids", [1, 2]), ("inst_dep_ids", "[99999999999999999999, 1]"),
    ("inst_dep_ids", "none"), ("hbm_read_bytes", 1e308), ("transfer_size", float("nan")),
    ("opcode", "X"), ("layer", "l0"), ("raw_flops", "x"), ("evt_wait_time", -5),
    ("cpu_timestamp_ns", 2**62), ("nc_timestamp_ns", 5),
]  # fmt: skip

events = st.lists(
    st.tuples(
        st.sampled_from([BEGIN, END, BEGIN, END, INSTANT, COUNTER]),
        st.one_of(st.integers(0, 500), st.sampled_from(TIMES)),
        st.integers(0, 3),  # track 3 has no descriptor
        st.sampled_from(["a", "b", None]),
        st.lists(st.sampled_from(ANNOTATIONS), max_size=2),
    ),
    max_size=25,
)


@fuzz_settings(10)
@given(tracks=st.lists(st.sampled_from(TRACK_NAMES), min_size=1, max_size=3), stream=events)
def test_perfetto_event_streams(tracks, stream, tmp_path):
    b = TraceBuilder()
    for uuid, name in enumerate(tracks):
        b.track(10 + uuid, name)
    for kind, ts, track, name, notes in stream:
        b.event(kind, ts, 10 + track, name, annotations=notes)
    case = fresh_dir(tmp_path)
    path = b.write(case / "rank_2.pftrace")
    run_report([path], case, f"Perfetto tracks {tracks}, events {stream}")


def test_perfetto_unmatched_begin_and_end_are_counted(tmp_path):
    b = TraceBuilder()
    b.track(10, "TensorMatrix Engine - Row 0")
    b.track(11, "Vector Engine - Row 0")
    b.event(BEGIN, 100, 10, "open")  # never ended
    b.slice(10, 200, 50, "MATMUL")  # nested in it: read
    b.slice(11, 150, 40, "ADD")
    b.event(END, 300, 11)  # ends nothing
    b.slice(11, 150, 40, "ADD")  # a duplicate: kept (an overlap on the serial track)
    outcome = run_report([b.write(tmp_path / "t.pftrace")], tmp_path)
    assert outcome.code == 0
    repairs = outcome.repairs()
    assert repairs["slice begins without an end: skipped"] == 1
    assert repairs["slice ends without a begin: skipped"] == 1


def test_perfetto_ids_beyond_int64_in_text_match_nothing(tmp_path):
    b = TraceBuilder()
    b.track(10, "TensorMatrix Engine - Row 0")
    b.slice(10, 100, 50, "A", annotations=[("id", 1)])
    b.slice(
        10, 200, 50, "B", annotations=[("id", 2), ("inst_dep_ids", "[1, 99999999999999999999]")]
    )
    outcome = run_report([b.write(tmp_path / "t.pftrace")], tmp_path)
    assert outcome.code == 0
    assert outcome.repairs() == {"inst_dep_ids: id matches no instruction": 1}


def test_perfetto_rank_beyond_int32_is_one_error_line(tmp_path):
    b = TraceBuilder()
    b.track(10, "TensorMatrix Engine - Row 0")
    b.slice(10, 100, 50, "A")
    path = b.write(tmp_path / "rank_4294967296.pftrace")
    outcome = run_report([path], tmp_path)
    assert outcome.code == 2
    assert outcome.err == (
        f"tracediag: error: {path}: rank 4294967296 is out of range (0 to 2147483647; "
        "from filename)\n"
    )


# ---- XPlane -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tpu_space() -> bytes:
    """The two-TPU XSpace of the XPlane tests, with a host plane."""
    return _tpu_space().SerializeToString()


@pytest.mark.parametrize("seed", range(sweep(6)))
def test_xplane_byte_mutations(seed, tpu_space, tmp_path):
    rng = random.Random(seed)
    kind, data = mutate_bytes(tpu_space, rng)
    path = tmp_path / "host.xplane.pb"
    path.write_bytes(data)
    run_report([path], tmp_path, f"XPlane {kind} (seed {seed})")


I64 = [0, -1, -(2**63), 2**63 - 1, 2**62, -(2**40), 10**15]
STAT_VALUES = ["x", "", 1.5, float("nan"), float("inf"), 7, -1, 2**63 - 1, -(2**63)]
STAT_NAMES = ["flops", "bytes_accessed", "correlation_id", "hlo_op", "tf_op", "group_id",
              "memcpy_details", "long_name", "size"]  # fmt: skip

xevents = st.lists(
    st.tuples(
        st.sampled_from(["fusion.1", "all-reduce.3", "ncclKernel_AllReduce", "Memcpy DtoH", ""]),
        st.one_of(st.integers(0, 10**7), st.sampled_from(I64)),  # offset_ps
        st.one_of(st.integers(0, 10**6), st.sampled_from(I64)),  # duration_ps
        st.dictionaries(st.sampled_from(STAT_NAMES), st.sampled_from(STAT_VALUES), max_size=2),
    ),
    max_size=8,
)


@fuzz_settings(10)
@given(
    planes=st.lists(
        st.tuples(
            st.sampled_from(["/device:TPU:0", "/device:GPU:1", "/host:CPU", "weird"]),
            st.sampled_from(["XLA Ops", "Stream #7(Compute)", "Steps", "python", ""]),
            st.one_of(st.just(START), st.sampled_from(I64)),
            xevents,
        ),
        min_size=1,
        max_size=3,
    )
)
def test_xplane_random_planes(planes, tmp_path):
    space = XSpace(hostnames=["h"])
    for name, line_name, line_ts, evs in planes:
        p = PlaneBuilder(space, name)
        line = p.line(line_name, line_ts)
        for ev_name, offset, duration, stats in evs:
            p.event(line, ev_name, offset, duration, **stats)
    case = fresh_dir(tmp_path)
    path = case / "h.xplane.pb"
    path.write_bytes(space.SerializeToString())
    run_report([path], case, f"XPlane {planes}")


def test_xplane_bad_times_and_numbers_for_text_are_counted_or_read(tmp_path):
    space = XSpace(hostnames=["h"])
    p = PlaneBuilder(space, "/device:TPU:0")
    ops = p.line("XLA Ops", START)
    p.event(ops, "fusion.1", 0, 1_000_000, tf_op=5, correlation_id=float("inf"))
    p.event(ops, "fusion.2", 2_000_000, -5_000_000)  # negative duration: clamped
    p.event(ops, "fusion.3", 2**63 - 1, 1_000)  # ~106 days of ps past the line: still read
    far = p.line("XLA Ops", 2**63 - 10)  # start overflows: dropped
    p.event(far, "fusion.4", 10**15, 1_000)
    path = tmp_path / "h.xplane.pb"
    path.write_bytes(space.SerializeToString())
    outcome = run_report([path], tmp_path)
    assert outcome.code == 0
    assert outcome.repairs() == {
        "events: negative duration clamped to 0": 1,
        "events: dropped, no valid timestamp or duration": 1,
    }
