"""Chrome trace reader: sniffing, errors, exact times, phases, nesting, rank and metadata."""

from __future__ import annotations

import numpy as np
import pytest

from tests.chrome_helpers import TRACES, X, named, read_one, shared, write
from tracediag.model import schema as S
from tracediag.model.errors import TraceInputError
from tracediag.parsers import chrome_json
from tracediag.parsers.chrome_events import pair_stack
from tracediag.parsers.chrome_nesting import SliceNesting

# ---- sniffing --------------------------------------------------------------------------------


def test_sniff_accepts_kineto_files_and_bare_event_lists(tmp_path):
    for name in (
        "kineto_alexnet_1rank.json.gz",
        "kineto_amd_mi250_minitoy.json.gz",
        "kineto_sampled_rank-0.json.gz",
    ):
        assert chrome_json.sniff(shared(name))
    events = [X("cpu_op", "a", 1, 2)]
    assert chrome_json.sniff(write(tmp_path / "list.json", events))
    assert chrome_json.sniff(
        write(tmp_path / "list.bin", events, gz=True)
    )  # content, not extension
    # Large metadata pushes "traceEvents" past the first kilobytes (Kineto's device properties).
    big_meta = {
        "deviceProperties": [{"id": i, "name": "x" * 5000} for i in range(8)],
        "traceEvents": events,
    }
    assert chrome_json.sniff(write(tmp_path / "big.json", big_meta))


def test_sniff_rejects_other_content(tmp_path):
    neuron = {
        "summary": [{"total_time": 5}],
        "instruction": [{"timestamp": 1, "duration": 2, "opcode": "MATMUL"}],
    }
    assert not chrome_json.sniff(write(tmp_path / "ntff.json", neuron))
    assert not chrome_json.sniff(tmp_path)  # a directory
    assert not chrome_json.sniff(write(tmp_path / "empty.json", b""))
    assert not chrome_json.sniff(write(tmp_path / "nums.json", [1, 2, 3]))
    assert not chrome_json.sniff(write(tmp_path / "garbage.gz", b"\x1f\x8bnot really gzip"))
    perfetto = TRACES / "perfetto_nested_tracks.perfetto-trace"
    if perfetto.exists():
        assert not chrome_json.sniff(perfetto)


# ---- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"", "empty file"),
        (b"\x00\x01garbage", "not valid JSON"),
        (
            b'{"traceEvents": [{"ph": "X", "ts": 1',
            "not valid JSON: unexpected end of data at line 1 column 37",
        ),
        (b"42", "top level is a JSON number"),
        (b'{"schemaVersion": 1}', "without a 'traceEvents' list"),
        (b'{"traceEvents": {"ph": "X"}}', "'traceEvents' is a JSON object, not a list"),
        (b'{"traceEvents": []}', "has no events"),
        (
            b'{"traceEvents": [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "x"}}]}',
            "no timed events",
        ),
    ],
)
def test_unusable_files_raise_trace_input_error(tmp_path, content, problem):
    path = write(tmp_path / "bad.json", content)
    with pytest.raises(TraceInputError, match=problem) as info:
        chrome_json.read(path)
    assert info.value.path == str(path)


def test_truncated_gzip_is_a_trace_input_error(tmp_path):
    data = shared("kineto_alexnet_1rank.json.gz").read_bytes()
    path = write(tmp_path / "cut.json.gz", data[: len(data) // 2])
    assert chrome_json.sniff(path)  # the head still decompresses
    with pytest.raises(TraceInputError, match="truncated gzip"):
        chrome_json.read(path)


# ---- times, phases, repairs ------------------------------------------------------------------


def test_sub_microsecond_timestamps_become_exact_nanoseconds(tmp_path):
    doc = (
        b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1695835542514261.123, "dur": 0.5},'
        b' {"ph": "X", "cat": "cpu_op", "name": "b", "pid": 1, "tid": 1, "ts": 1695835542514262.0005, "dur": 1e1}]}'
    )
    _, trace = read_one(write(tmp_path / "t.json", doc))
    a, b = named(trace, "a"), named(trace, "b")
    assert a[S.TS] == 1695835542514261123 and a[S.DUR] == 500
    assert b[S.TS] == 1695835542514262001 and b[S.DUR] == 10000  # 0.5 ns rounds up; 1e1 us


def test_exact_times_when_other_ts_keys_break_the_fast_path(tmp_path):
    # A "ts" inside args and a string ts: the literal texts no longer line up with the events.
    doc = (
        b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1695835542514261.123,'
        b' "dur": 2.25, "args": {"ts": 7}}, {"ph": "X", "cat": "cpu_op", "name": "b", "pid": 1, "tid": 1,'
        b' "ts": "1695835542514270.999", "dur": 1}]}'
    )
    _, trace = read_one(write(tmp_path / "t.json", doc))
    assert named(trace, "a")[S.TS] == 1695835542514261123
    assert named(trace, "a")[S.DUR] == 2250
    assert named(trace, "b")[S.TS] == 1695835542514270999


def test_nan_literals_are_read_as_missing_and_counted(tmp_path):
    doc = (
        b'[{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 5, "dur": NaN},'
        b' {"ph": "X", "cat": "cpu_op", "name": "b", "pid": 1, "tid": 1, "ts": 7.5, "dur": 1}]'
    )
    part, trace = read_one(write(tmp_path / "nan.json", doc))
    assert trace.events[S.NAME].astype(str).tolist() == ["b"]
    assert named(trace, "b")[S.TS] == 7500
    assert part.meta.repairs == {
        "NaN/Infinity literals read as null": 1,
        "events: dropped, no valid timestamp or duration": 1,
    }


def test_begin_end_pairs_nest_and_unmatched_ones_are_counted(tmp_path):
    events = [
        {"ph": "B", "name": "outer", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 10},
        {"ph": "B", "name": "inner", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 12},
        {"ph": "E", "pid": 1, "tid": 1, "ts": 15},
        {"ph": "E", "pid": 1, "tid": 1, "ts": 20},
        {"ph": "E", "pid": 1, "tid": 1, "ts": 21},  # stray end
        {"ph": "B", "name": "other thread", "cat": "cpu_op", "pid": 1, "tid": 2, "ts": 11},
        {"ph": "E", "pid": 1, "tid": 2, "ts": 13},
        {"ph": "B", "name": "never ends", "cat": "cpu_op", "pid": 1, "tid": 2, "ts": 30},
        {"ph": "i", "name": "mark", "pid": 1, "tid": 1, "ts": 16, "s": "t"},
        {"ph": "C", "name": "counter", "pid": 1, "ts": 16, "args": {"v": 1}},
        {"ph": "X", "name": "no dur", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 40},
        {"ph": "X", "name": "negative", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 50, "dur": -3},
        {"ph": "Q", "name": "unknown phase", "pid": 1, "tid": 1, "ts": 1},
        "not an object",
    ]
    part, trace = read_one(write(tmp_path / "be.json", {"traceEvents": events}))
    assert (named(trace, "outer")[S.TS], named(trace, "outer")[S.DUR]) == (10_000, 10_000)
    assert (named(trace, "inner")[S.TS], named(trace, "inner")[S.DUR]) == (12_000, 3_000)
    assert named(trace, "other thread")[S.DUR] == 2_000
    mark = named(trace, "mark")
    assert (mark[S.KIND], mark[S.DUR]) == ("marker", 0)
    assert named(trace, "negative")[S.DUR] == 0
    assert "counter" not in set(trace.events[S.NAME].astype(str))
    assert part.meta.repairs == {
        "B/E end without begin: skipped": 1,
        "B/E begin without end: skipped": 1,
        "events: dropped, no valid timestamp or duration": 1,
        "events: negative duration clamped to 0": 1,
        "events of unsupported phase 'Q': skipped": 1,
        "trace entries that are not JSON objects: skipped": 1,
    }


def _reference_pairs(key, is_begin, ts):
    stacks, pairs = {}, set()
    for i in sorted(range(len(key)), key=lambda i: (key[i], ts[i], i)):
        stack = stacks.setdefault(key[i], [])
        if is_begin[i]:
            stack.append(i)
        elif stack:
            pairs.add((stack.pop(), i))
    return pairs


def test_pair_stack_matches_a_reference_stack():
    rng = np.random.default_rng(7)
    for _ in range(50):
        n = int(rng.integers(1, 40))
        key = rng.integers(0, 3, n)
        is_begin = rng.random(n) < 0.55
        ts = rng.integers(0, 10, n)
        begin, end = pair_stack(key, is_begin, ts)
        assert set(zip(begin.tolist(), end.tolist(), strict=True)) == _reference_pairs(
            key, is_begin, ts
        )


def test_slice_nesting_finds_the_innermost_enclosing_slice():
    rng = np.random.default_rng(3)
    # Properly nested slices: children cut out of their parent, recursively.
    starts, ends = [], []

    def fill(lo, hi, depth):
        t = lo
        while depth < 4 and t < hi - 2 and rng.random() < 0.7:
            a = int(rng.integers(t, hi - 1))
            b = int(rng.integers(a, min(hi, a + 20) + 1))
            starts.append(a)
            ends.append(b)
            fill(a, b, depth + 1)
            t = b
        return t

    fill(0, 500, 0)
    s, e = np.array(starts), np.array(ends)
    nesting = SliceNesting(np.zeros(len(s), dtype=np.int64), s, e)
    points = np.arange(0, 501)
    got = nesting.innermost(np.zeros(len(points), dtype=np.int64), points)
    for t, g in zip(points, got, strict=True):
        at_start = np.flatnonzero(s == t)
        inside = np.flatnonzero((s <= t) & (t < e))
        candidates = at_start if len(at_start) else inside
        if not len(candidates):
            assert g == -1
            continue
        # innermost: latest start, then shortest
        best = candidates[np.lexsort((e[candidates] - s[candidates], -s[candidates]))[0]]
        assert (s[g], e[g]) == (s[best], e[best])


# ---- metadata, rank ---------------------------------------------------------------------------


def test_rank_and_metadata(tmp_path):
    part, _ = read_one(shared("kineto_sampled_rank-1.json.gz"))
    assert part.meta.rank == 1 and part.meta.info["rank_source"] == "metadata"
    assert part.meta.info["world_size"] == 128 and part.meta.info["backend"] == "nccl"
    assert part.meta.format == "chrome-json" and part.meta.sources == [
        str(TRACES / "kineto_sampled_rank-1.json.gz")
    ]
    part, _ = read_one(shared("kineto_alexnet_1rank.json.gz"))
    assert part.meta.hardware == "NVIDIA A100-PG509-200" and part.meta.info["schemaVersion"] == 1
    for name, rank in (
        ("trace_rank_3.json", 3),
        ("job.worker12.json", 12),
        ("rank5.json", 5),
        ("x.json", 0),
    ):
        part, _ = read_one(write(tmp_path / name, [X("cpu_op", "a", 1, 1)]))
        assert part.meta.rank == rank
        assert part.meta.info["rank_source"] == ("default" if name == "x.json" else "filename")


def test_large_integers_do_not_break_the_reader(tmp_path):
    part, trace = read_one(shared("kineto_large_integer_rank-70.pt.trace.json.gz"))
    assert part.meta.rank == 70 and part.meta.info["rank_source"] == "filename"
    assert named(trace, "record_param_comms")[S.KIND] == "marker"
    assert list(trace.collectives[S.COLL_OP]) == ["AllReduce"]
    beyond_64_bits = b'[{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 5, "dur": 1, "args": {"id": 123456789012345678901234567890}}]'
    part, trace = read_one(write(tmp_path / "huge.json", beyond_64_bits))
    assert named(trace, "a")[S.TS] == 5000
    assert part.meta.repairs == {"integers beyond 64 bits (not read as exact integers)": 1}
