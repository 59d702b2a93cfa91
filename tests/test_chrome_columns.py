"""The piecewise Chrome decoder equals the whole-document one, whatever the cuts meet."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

import numpy as np
import pytest

from tests.chrome_helpers import TRACES
from tracediag.model.errors import TraceInputError
from tracediag.parsers import chrome_chunks, chrome_columns, chrome_json, chrome_stream
from tracediag.parsers.chrome_columns import EventColumns, read_whole
from tracediag.parsers.chrome_decode import _HUGE_INT, HUGE_INTS, count_huge_ints, huge_int_literals
from tracediag.parsers.chrome_stream import read_columns

SAMPLES = Path(__file__).parents[1] / "sample_traces"


@pytest.fixture
def fallbacks():
    """How many documents fell back to the whole-document decoding since the test began."""
    before = sum(chrome_stream.FALLBACKS.values())
    return lambda: sum(chrome_stream.FALLBACKS.values()) - before


def assert_same(a: EventColumns, b: EventColumns) -> None:
    """Every column of two decodings equal (NaN equal to NaN), counts included."""
    assert a.metadata == b.metadata
    assert (a.entries, a.rewritten, a.counts) == (b.entries, b.rewritten, b.counts)
    for key, col in a.text.items():
        other = b.text[key]
        assert list(col.categories) == list(other.categories), key
        assert np.array_equal(col.codes, other.codes), key
    for key in ("ts", "ts_ok", "dur", "dur_ok"):
        assert np.array_equal(getattr(a, key), getattr(b, key)), key
    for key, values in a.args.numbers.items():
        assert np.array_equal(values, b.args.numbers[key], equal_nan=True), key
    for mine, theirs in ((a.args.values, b.args.values), (a.ids, b.ids)):
        for key, (pos, values) in mine.items():
            assert np.array_equal(pos, theirs[key][0]), key
            assert list(values) == list(theirs[key][1]), key


def assert_same_outcome(path: Path, doc: bytes, piece_bytes: int, on_disk: bool = False) -> None:
    """Read in pieces, ``doc`` gives the whole-document columns, or its very error line;
    ``on_disk``: ``doc`` is written to ``path`` and read from the file (as spans of it)."""
    if on_disk:
        path.write_bytes(doc)
    data = None if on_disk else doc
    try:
        expected = read_whole(path, doc)
    except TraceInputError as exc:
        with pytest.raises(TraceInputError) as got:
            read_columns(path, data, piece_bytes)
        assert str(got.value) == str(exc)
    else:
        assert_same(read_columns(path, data, piece_bytes), expected)


def runs(data: bytes, piece_bytes: int) -> list[bytes]:
    return list(chrome_chunks.Pieces(io.BytesIO(data), piece_bytes))


def event(i: int, **extra) -> dict:
    return {"ph": "X", "cat": "kernel", "name": f"k{i % 7}", "pid": 0, "tid": 7,
            "ts": 1_700_000_000_000_000 + i * 10.125, "dur": 3.5,
            "args": {"correlation": i, "External id": i + 1000}, **extra}  # fmt: skip


TRICKY = [
    event(0, args={"name": 'a "quoted" }, {"ph":"X"} string'}),
    event(1, args={"nested": [{"a": 1}, {"b": [2, {"c": 3}]}], "correlation": 5}),
    {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "stream 7"}},
    {"ph": "s", "id": 4, "cat": "fwdbwd", "name": "f", "pid": 0, "tid": 7, "ts": 1.5},
    {
        "ph": "f",
        "bind_id": 4,
        "cat": "fwdbwd",
        "name": "f",
        "pid": 0,
        "tid": 7,
        "ts": 2.5,
        "bp": "e",
    },
    {"ph": "b", "id": None, "cat": "async", "name": "a", "pid": 1, "tid": 1, "ts": 3},
    {"ph": "e", "cat": "async", "name": "a", "pid": 1, "tid": 1, "ts": 4},
    event(2, args=[1, 2]),
    7,
    event(3, pid="Spans", tid=1.0),
    event(4, args={"Collective name": "allreduce", "In msg nelems": 4096, "Seq": "3"}),
    # Not numbers where the typed records expect them: that run is decoded untyped.
    event(5, ts="1700000000000000.5", args={"stream": "7", "device": True, "bytes": 2**60 + 1}),
    event(6, dur=False, args={"correlation": [1], "External id": -0.0}),
]


def documents() -> dict[str, bytes]:
    events = [event(i) for i in range(300)]
    events[50:50] = TRICKY
    docs = {
        "one line": json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}).encode(),
        "a line per event": (
            b'{"schemaVersion": 1, "traceEvents": [\n'
            + b",\n".join(json.dumps(e).encode() for e in events)
            + b'\n], "after": [1, [2]], "deviceProperties": [{"id": 0}]}\n'
        ),
        "indented": json.dumps({"traceEvents": events}, indent=2).encode(),
        "bare list": json.dumps(events).encode(),
        "trace-viewer terminator": json.dumps({"traceEvents": [*events, {}]}).encode(),
    }
    for sample in sorted(SAMPLES.glob("chrome_*/chrome/*.json.gz"))[:2]:
        docs[sample.parent.parent.name + "/" + sample.name] = gzip.decompress(sample.read_bytes())
    return docs


@pytest.mark.parametrize("name", list(documents()))
@pytest.mark.parametrize("piece_bytes", [64, 997, 20_000])
def test_pieces_decode_as_the_whole_document(name, piece_bytes, fallbacks):
    data = documents()[name]
    path = Path(name)
    if piece_bytes < 1000:
        assert len(runs(data, piece_bytes)) > 5  # the cuts really happen
    assert_same(read_columns(path, data, piece_bytes), read_whole(path, data))
    if "/" in name:  # from the file itself, streamed
        sample = SAMPLES / name.split("/")[0] / "chrome" / name.split("/")[1]
        assert_same(read_columns(sample, None, piece_bytes), read_whole(path, data))
    assert fallbacks() == 0  # read in pieces, not decoded twice


@pytest.mark.parametrize("name", list(documents()))
@pytest.mark.parametrize("piece_bytes", [64, 997])
def test_plain_files_are_cut_into_spans_read_where_decoded(
    name, piece_bytes, tmp_path, monkeypatch
):
    """An uncompressed file is cut by reading small windows (here 16 bytes, so that windows
    grow and boundaries straddle them) and each run is read from the file by its decoder."""
    monkeypatch.setattr("tracediag.parsers.chrome_chunks._WINDOW_BYTES", 16)
    data = documents()[name]
    path = tmp_path / "t.json"
    path.write_bytes(data)
    spans = list(chrome_chunks.Spans(path, piece_bytes))
    assert len(spans) > 5 and isinstance(spans[0][0], tuple)
    assert_same(read_columns(path, None, piece_bytes), read_whole(path, data))


def test_a_file_shorter_than_when_it_was_cut_is_read_whole(tmp_path, monkeypatch):
    """A span beyond the file's end (it shrank while read) is not decoded as a shorter run:
    the whole-document path reads what the file now holds."""
    data = documents()["a line per event"]
    path = tmp_path / "t.json"
    path.write_bytes(data)
    real_read_span = chrome_chunks.read_span

    def shrink_then_read(p, span):
        path.write_bytes(data[: len(data) // 2])
        return real_read_span(p, span)

    monkeypatch.setattr(chrome_chunks, "read_span", shrink_then_read)
    with pytest.raises(TraceInputError, match="not valid JSON"):
        read_columns(path, None, 997)


def test_misplaced_cuts_are_moved_on():
    # Every event holds the cut pattern in a string and in a nested array of objects.
    events = [event(i, args={"s": "}, {", "l": [{"a": i}, {"b": i}]}) for i in range(200)]
    data = json.dumps({"traceEvents": events}).encode()
    assert len(runs(data, 100)) > 20
    columns = read_columns(Path("t.json"), data, 100)
    assert len(columns) == 200
    assert_same(columns, read_whole(Path("t.json"), data))


@pytest.mark.parametrize(
    "doc",
    [
        b'{"meta": {"traceEvents": [{"ph": "X"}]}, "traceEvents": []}',  # nested key first
        b'{"traceEvents": [{"ph": "X", "ts": 1, "dur": 1}], "x": NaN}',
        b'{"traceEvents": [{"ph": "X", "ts": 1, "dur": 1, "pid": 123456789012345678901}]}',
        b'{"traceEvents": [{"ph": "X", "ts": 1, "dur": 1},  ]}',
        b"[1, 2",
        b'{"traceEvents": {"ph": "X"}}',
    ],
)
def test_documents_outside_the_plain_layout_give_the_whole_document_result(doc):
    """Not split, or a piece the decoder refuses: the whole-document path answers, repairs and
    error messages included."""
    assert_same_outcome(Path("odd.json"), doc, 8)


def test_terminator_is_dropped_only_when_last():
    events = [event(i) for i in range(40)]
    with_terminator = json.dumps({"traceEvents": [*events, {}]}).encode()
    columns = read_columns(Path("t.json"), with_terminator, 200)
    assert (len(columns), columns.entries) == (40, 40)
    inner_empty = json.dumps({"traceEvents": [{}, *events]}).encode()
    assert len(read_columns(Path("t.json"), inner_empty, 200)) == 41


def test_reader_results_do_not_depend_on_piece_size(monkeypatch):
    sample = sorted(SAMPLES.glob("chrome_*/chrome/*.json.gz"))[0]
    whole = chrome_json.read(sample)[0]
    monkeypatch.setattr("tracediag.parsers.chrome_stream._PIECE_BYTES", 4096)
    assert len(runs(gzip.decompress(sample.read_bytes()), 4096)) > 10
    pieces = chrome_json.read(sample)[0]
    for a, b in ((whole.events, pieces.events), (whole.edges, pieces.edges)):
        assert a.equals(b)
    assert whole.meta.repairs == pieces.meta.repairs


@pytest.mark.parametrize("name", ["a line per event", "trace-viewer terminator"])
def test_helper_processes_decoding_pieces_change_nothing(name, monkeypatch):
    """With two helper processes (as the loader allows by --jobs) the pieces are decoded by
    them and appended in order: same columns as the whole document."""
    monkeypatch.setattr("tracediag.io.worker_pool.helper_processes", lambda: 2)
    data = documents()[name]
    assert_same(read_columns(Path(name), data, 512), read_whole(Path(name), data))


@pytest.mark.parametrize("on_disk", [False, True])
def test_misplaced_cuts_are_joined_when_a_helper_decodes_too(on_disk, tmp_path, monkeypatch):
    monkeypatch.setattr("tracediag.io.worker_pool.helper_processes", lambda: 2)
    events = [event(i, args={"s": "}, {", "l": [{"a": i}, {"b": i}]}) for i in range(300)]
    data = json.dumps({"traceEvents": events}).encode()
    assert_same_outcome(tmp_path / "t.json", data, 300, on_disk=on_disk)


@pytest.mark.parametrize("seed", range(40))
def test_damaged_documents_read_in_pieces_as_whole(seed, tmp_path):
    """Truncations and flipped bytes anywhere in a multi-piece document: the piecewise read
    gives exactly the whole-document outcome (its columns, or its error line)."""
    rng = np.random.default_rng(seed)
    data = bytearray(documents()["a line per event"])
    for _ in range(int(rng.integers(1, 4))):
        at = int(rng.integers(0, len(data)))
        if rng.random() < 0.3:
            del data[at:]
        else:
            data[at] = int(rng.choice(list(b'{}[],:"\\0 x\n')))
    assert_same_outcome(tmp_path / "damaged.json", bytes(data), 700)
    assert_same_outcome(tmp_path / "damaged.json", bytes(data), 700, on_disk=True)


@pytest.mark.parametrize("digits", [19, 20, 21, 40])
def test_integers_beyond_64_bits_are_found_at_every_alignment(digits):
    """The strided pre-check of ``count_huge_ints`` never misses a run of 20 digits."""
    for offset in range(12):
        text = b'[{"a":' + b" " * offset + b"9" * digits + b"}]"
        assert count_huge_ints(text) == (1 if digits >= 20 else 0), offset
    # Digit-dense text with no long run is passed by the pre-check without a full scan.
    assert count_huge_ints(b"1234567890123456789," * 1000) == 0


def _kineto_tail(events: list[dict]) -> bytes:
    """A document laid out as Kineto writes it: keys after the events whose values hold ']' in
    strings (log lines) and arrays of objects (deviceProperties), as the real MTIA and H100
    traces have."""
    head = json.dumps({"schemaVersion": 1, "deviceProperties": [{"id": 0}, {"id": 1}]})[:-1]
    return (
        head.encode()
        + b', "traceEvents": [\n'
        + b",\n".join(json.dumps(e).encode() for e in events)
        + b"\n],\n"
        + json.dumps(
            {
                "deviceProperties": [{"id": 0, "name": "A]"}, {"id": 1}],
                "distributedInfo": {"pg_config": [{"ranks": [0, 1]}, {"ranks": [2]}]},
                "INFO": [f"INFO:2024-02-08 Profiler.cpp:{i}] line {i}" for i in range(40)],
                "traceName": "x.json",
            }
        )[1:].encode()
    )


@pytest.mark.parametrize("on_disk", [False, True])
@pytest.mark.parametrize("piece_bytes", [300, 20_000])
def test_keys_after_the_events_are_found_without_a_second_decoding(
    on_disk, piece_bytes, tmp_path, fallbacks
):
    """The array's end is told from ']' inside the later keys' values (more than a few of
    them): the document is read in pieces, not read again whole."""
    events = [event(i) for i in range(60)]
    events[30:30] = TRICKY
    data = _kineto_tail(events)
    assert data.count(b"]", data.rindex(b'"INFO"')) > 40
    assert_same_outcome(tmp_path / "t.json", data, piece_bytes, on_disk=on_disk)
    columns = read_columns(tmp_path / "t.json", None if on_disk else data, piece_bytes)
    assert fallbacks() == 0
    assert columns.metadata["traceName"] == "x.json" and len(columns.metadata["INFO"]) == 40
    assert columns.entries == 60 + len(TRICKY)


@pytest.mark.parametrize("piece_bytes", [64, 997])
def test_empty_event_arrays_with_keys_after_are_read_in_pieces(piece_bytes, fallbacks):
    data = b'{"a": [{"b": 1}], "traceEvents": [ ], "c": [{"d": 2}]}'
    columns = read_columns(Path("e.json"), data, piece_bytes)
    assert (columns.entries, columns.metadata) == (0, {"a": [{"b": 1}], "c": [{"d": 2}]})
    assert fallbacks() == 0


@pytest.mark.parametrize("on_disk", [False, True])
def test_integers_beyond_64_bits_are_read_in_pieces_as_whole(on_disk, tmp_path, fallbacks):
    """Runs holding them are decoded as the whole document is (orjson: as floats) and they
    are counted, those among the keys after the events too."""
    events = [event(i) for i in range(200)]
    events[20]["args"]["Comms Id"] = 123456789012345678901234  # 24 digits
    events[150]["pid"] = -98765432109876543210
    events[151]["args"]["External id"] = 18446744073709551615  # 2**64 - 1: still exact
    doc = {"traceEvents": events, "distributedInfo": {"rank": 3, "id": 10**21}}
    data = json.dumps(doc).encode()
    assert_same_outcome(tmp_path / "t.json", data, 997, on_disk=on_disk)
    columns = read_columns(tmp_path / "t.json", None if on_disk else data, 997)
    assert fallbacks() == 0
    assert columns.rewritten == {HUGE_INTS: 3}
    assert columns.metadata["distributedInfo"]["id"] == 1e21
    # Read as a float, as orjson reads the whole document: its digits are not all kept.
    assert str(int(float(-98765432109876543210))) in list(columns.text["pid"].categories)


def test_a_run_wrong_in_itself_is_read_whole_at_once(monkeypatch, fallbacks):
    """A NaN literal in the first run: no join can mend it, so the runs after it are not joined
    on (each join decoding all of them again) before the whole document is read."""
    events = [event(i) for i in range(400)]
    data = json.dumps({"traceEvents": events}).encode().replace(b'"dur": 3.5', b'"dur": NaN', 1)
    decoded = []
    real = chrome_stream.decode_run

    def counting(path, text):
        decoded.append(len(text))
        return real(path, text)

    monkeypatch.setattr(chrome_stream, "decode_run", counting)
    columns = read_columns(Path("nan.json"), data, 997)
    assert columns.rewritten == {"NaN/Infinity literals read as null": 1}
    assert fallbacks() == 1 and chrome_stream.FALLBACKS["Unfit"] >= 1
    assert sum(decoded) < 2 * len(data)  # before: ~ runs^2 / 2 times the run size


def test_huge_int_literals_are_those_the_regex_finds():
    """The digit-run search gives what a regex scan of the whole text gives, on random text of
    digits, signs, spaces and JSON punctuation."""
    rng = np.random.default_rng(7)
    alphabet = [b"9", b"0", b"-", b" ", b"\n", b"\x0b", b":", b",", b"[", b"]", b"}", b"{", b'"']
    for _ in range(3000):
        parts = [
            b"9" * int(rng.integers(15, 26))
            if rng.random() < 0.3
            else alphabet[int(rng.integers(len(alphabet)))] * int(rng.integers(1, 3))
            for _ in range(int(rng.integers(1, 12)))
        ]
        text = b"".join(parts)
        assert huge_int_literals(text) == [m[1] for m in _HUGE_INT.findall(text)], text


REAL = sorted(p.name for p in TRACES.glob("kineto_*.json.gz")) or ["kineto_alexnet_1rank.json.gz"]


@pytest.mark.parametrize("name", REAL)
def test_real_traces_are_read_in_pieces_without_a_second_decoding(name, fallbacks):
    path = TRACES / name
    if not path.exists():
        pytest.skip(f"{path} not available")
    columns = read_columns(path)
    assert fallbacks() == 0
    assert columns.entries > 0 and "traceEvents" not in columns.metadata
    if path.stat().st_size < 2 << 20:  # the whole-document read of the big ones takes seconds
        assert_same(columns, read_whole(path, gzip.decompress(path.read_bytes())))


def test_integer_times_and_text_number_args_stay_on_the_typed_path(monkeypatch):
    """Epoch-µs integer times give their exact ns as decoded (no text read), and ROCm's text
    ``"bytes": "1024"`` is coerced as the untyped path coerces it: the run is not decoded a
    second time, and the columns equal the whole-document ones."""

    def kernel(ts, dur, **args) -> dict:
        return {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": ts,
                "dur": dur, "args": args}  # fmt: skip

    events = [
        kernel(1669783687464181, 45, bytes="1024", **{"External id": 3}),
        kernel(-5, 4611686018427388),  # dur beyond the int64 ns range: not valid
        kernel(1669783687464190, 2, bytes="n/a"),
    ]
    doc = json.dumps({"traceEvents": events}).encode()

    class Untyped:
        def decode(self, text):
            raise AssertionError("the run was decoded a second time, untyped")

    monkeypatch.setattr(chrome_columns, "_DECODER", Untyped())
    columns = read_columns(Path("rocm.json"), doc)
    assert columns.ts.tolist() == [1669783687464181000, -5000, 1669783687464190000]
    assert columns.dur.tolist() == [45000, 0, 2000]
    assert columns.dur_ok.tolist() == [True, False, True]
    assert np.array_equal(columns.args.numbers["bytes"], [1024.0, np.nan, np.nan], equal_nan=True)
    assert np.array_equal(
        columns.args.numbers["External id"], [3.0, np.nan, np.nan], equal_nan=True
    )
    monkeypatch.undo()
    assert_same(columns, read_whole(Path("rocm.json"), doc))


@pytest.mark.parametrize("tail", [b"", b",", b"}, 0.08888888888888889"])
def test_the_20_digit_check_is_exact_at_every_alignment(tail):
    """Runs of 15 to 24 digits at every offset, at the end of the text or not: a run of 20 is
    found, 17-digit float fractions (which pass the strided pre-check) are not."""
    from tracediag.parsers.chrome_decode import _may_hold_20_digits

    for offset in range(9):
        for digits in range(15, 25):
            text = b"x" * offset + b"7" * digits + tail
            assert _may_hold_20_digits(text) == (digits >= 20), (offset, digits, tail)
