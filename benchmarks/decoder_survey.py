"""Decoder survey: JSON libraries that could turn a Chrome trace's ``traceEvents`` into columns.

    python benchmarks/decoder_survey.py                    # the four big real traces, 3 rounds
    python benchmarks/decoder_survey.py --rounds 5 FILE... # other traces

For each trace, each round times ``orjson.loads`` of the decompressed text (the floor) and then
every decoder, in turn, so that each ratio compares moments seconds apart. A decoder's time is
the decoding of the events to the columns tracediag reads (``ph cat name pid tid`` as text,
``ts dur`` as numbers, flow ``id bind_id bp``, and the ``args`` keys of
:mod:`tracediag.parsers.chrome_columns`): for the libraries that build Python objects, the
decode plus one pass taking those fields out; for the columnar ones (pyarrow.json, DuckDB), the
work of getting the text into the layout they take, plus their read into Arrow columns. Cyclic
GC is paused throughout, as the reader pauses it. The median ratio to the floor of the same
round is printed. Optional libraries that are not installed are skipped (``pip install
pysimdjson yyjson duckdb``); none of them is a dependency of tracediag.
"""

from __future__ import annotations

import argparse
import gc
import gzip
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cases import REAL_TRACES  # noqa: E402

from tracediag.parsers import chrome_columns as cc  # noqa: E402

DEFAULT = (
    "df_index_resolver_1rank",
    "negative_queue_rank0",
    "resnet50_train_worker0.pt.trace",
    "mi300_resnet_act_checkpoint",
)
TEXT = cc.TEXT_KEYS
ARG_KEYS = cc.NUMBER_ARGS + cc.VALUE_ARGS
_STRUCTURAL = np.zeros(256, bool)
_STRUCTURAL[list(b"[]{},")] = True  # a lookup table: np.isin over the text is 10x slower
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')


def _real_quotes(b: np.ndarray) -> np.ndarray:
    """Positions of the quotes that open or close strings: a quote after an odd number of
    backslashes is escaped (those are few: counted one by one)."""
    quotes = np.flatnonzero(b == ord('"'))
    after_backslash = quotes[b[np.maximum(quotes - 1, 0)] == ord("\\")]
    drop = []
    for q in after_backslash.tolist():
        k = q - 1
        while k >= 0 and b[k] == ord("\\"):
            k -= 1
        if (q - 1 - k) % 2:
            drop.append(q)
    return np.setdiff1d(quotes, np.array(drop, np.int64)) if drop else quotes


def events_span(text: bytes) -> tuple[int, int]:
    """Start and end (past ``]``) of the ``traceEvents`` array, found by bracket depth outside
    strings (numpy over the bytes): what a reader that wants the bare array pays."""
    start = _EVENTS_KEY.search(text).end() - 1
    b = np.frombuffer(text, np.uint8)
    quotes = _real_quotes(b)
    opens = np.flatnonzero((b == ord("[")) | (b == ord("{")) | (b == ord("]")) | (b == ord("}")))
    outside = np.searchsorted(quotes, opens) % 2 == 0
    opens = opens[outside]
    step = np.where((b[opens] == ord("[")) | (b[opens] == ord("{")), 1, -1)
    depth = np.cumsum(step)
    at = np.searchsorted(opens, start)
    level = depth[at] - 1
    end = opens[at + 1 :][depth[at + 1 :] == level][0]
    return int(start), int(end) + 1


def _separators_to_newlines(text: bytes, span: tuple[int, int]) -> bytes:
    """The events as newline-delimited JSON: newlines (never raw inside JSON strings) made
    spaces, then the commas between top-level events (depth 1 of the array) made newlines."""
    body = bytearray(text[span[0] + 1 : span[1] - 1].replace(b"\n", b" "))
    b = np.frombuffer(body, np.uint8)
    quotes = _real_quotes(b)
    marks = np.flatnonzero(_STRUCTURAL[b])
    marks = marks[np.searchsorted(quotes, marks) % 2 == 0]
    kind = b[marks]
    step = np.where((kind == ord("[")) | (kind == ord("{")), 1, 0) - np.where(
        (kind == ord("]")) | (kind == ord("}")), 1, 0
    )
    depth = np.cumsum(step) - step  # depth before the mark
    commas = marks[(kind == ord(",")) & (depth == 0)]
    del b
    out = np.frombuffer(body, np.uint8).copy()
    out[commas] = ord("\n")
    return out.tobytes()


# -- the decoders: each returns the number of events it turned into columns ------------------


def floor(text: bytes) -> int:
    return len(orjson.loads(text)["traceEvents"])


def _dict_columns(events: list) -> int:
    """The fields out of decoded dicts, one list per column (what the dict-based paths cost)."""
    cols = {k: [e.get(k) for e in events] for k in (*TEXT, "ts", "dur", "id", "bind_id", "bp")}
    args = [e.get("args") or {} for e in events]
    for key in ARG_KEYS:
        cols[key] = [a.get(key) for a in args]
    np.array(cols["ts"], dtype=np.float64)
    return len(cols["ts"])


def orjson_columns(text: bytes) -> int:
    return _dict_columns(orjson.loads(text)["traceEvents"])


def msgspec_reader(text: bytes) -> int:
    """tracediag's reader now: msgspec into typed records of the keys read, then columns
    (exact ns times, categorical text), one piece per 4 MiB run, one process."""
    from tracediag.parsers.chrome_stream import read_columns

    return len(read_columns(Path("survey.json"), data=text))


def msgspec_records(text: bytes, span: tuple[int, int]) -> int:
    """msgspec's decode alone into the typed records (no columns)."""
    run = text[span[0] : span[1]]
    try:
        return len(cc._TYPED_DECODER.decode(run))
    except Exception:  # a string where a number is typed: untyped records, as the reader does
        return len(cc._DECODER.decode(run))


def simdjson_columns(text: bytes) -> int:
    import simdjson

    events = simdjson.Parser().parse(text)["traceEvents"]
    return _dict_columns(events.as_list())


def simdjson_lazy(text: bytes) -> int:
    """pysimdjson's lazy proxies, fields read one by one (no whole conversion)."""
    import simdjson

    events = simdjson.Parser().parse(text)["traceEvents"]
    ts = [e.get("ts") for e in events]
    for k in (*TEXT, "dur"):
        [e.get(k) for e in events]
    return len(ts)


def yyjson_columns(text: bytes) -> int:
    import yyjson

    return _dict_columns(yyjson.Document(text).get_pointer("/traceEvents"))


def _arrow_schema():
    import pyarrow as pa

    num = pa.float64()
    args = [(k, num) for k in cc.NUMBER_ARGS] + [("name", pa.string())]
    return pa.schema(
        [(k, pa.string()) for k in ("ph", "cat", "name")]
        + [("ts", num), ("dur", num), ("args", pa.struct(args))]
    )


def pyarrow_ndjson(text: bytes) -> int:
    """Array -> newline-delimited text (numpy), then pyarrow.json.read_json with a schema.
    pid/tid are left to inference and collective args out: explicit types fail on their mixed
    types (a number in one event, text in another)."""
    return pyarrow_read(_separators_to_newlines(text, events_span(text)))


def pyarrow_read(nd: bytes) -> int:
    """pyarrow.json's read of newline-delimited events into a table of the typed columns."""
    import pyarrow.json as pj

    opts = pj.ParseOptions(explicit_schema=_arrow_schema(), unexpected_field_behavior="ignore")
    table = pj.read_json(
        pa_buffer(nd), parse_options=opts, read_options=pj.ReadOptions(block_size=8 << 20)
    )
    return table.num_rows


def pa_buffer(data: bytes):
    import pyarrow as pa

    return pa.BufferReader(pa.py_buffer(data))


def duckdb_columns(text: bytes, tmp: Path) -> int:
    """The events array written to a file (DuckDB reads files), then read_json(format='array')
    with the columns typed: text as VARCHAR (numbers given as their text), times DOUBLE."""
    start, end = events_span(text)
    tmp.write_bytes(memoryview(text)[start:end])
    return duckdb_read(tmp)


def duckdb_read(tmp: Path) -> int:
    """DuckDB's read_json of a file holding the bare events array, into Arrow columns."""
    import duckdb

    args = (
        ", ".join(f'"{k}" DOUBLE' for k in cc.NUMBER_ARGS)
        + ', "name" VARCHAR, '
        + ", ".join(f'"{k}" JSON' for k in cc.RARE_ARGS)
    )
    cols = (
        "{ph: 'VARCHAR', cat: 'VARCHAR', name: 'VARCHAR', pid: 'VARCHAR', tid: 'VARCHAR', "
        "ts: 'DOUBLE', dur: 'DOUBLE', id: 'JSON', bind_id: 'JSON', bp: 'VARCHAR', "
        f"args: 'STRUCT({args})'}}"
    )
    con = duckdb.connect()
    table = con.sql(
        f"select * from read_json('{tmp}', format='array', columns={cols}, "
        "maximum_object_size=1000000000)"
    ).to_arrow_table()
    con.close()
    return table.num_rows


def decoders(tmp: Path, text: bytes) -> dict[str, Callable[[bytes], int]]:
    """The decoders present, by the name the table shows (the "alone" rows read inputs that
    were prepared here, untimed, from ``text``)."""
    nd = _separators_to_newlines(text, events_span(text))
    start, end = events_span(text)
    bare = tmp.with_name("bare.json")
    bare.write_bytes(memoryview(text)[start:end])
    found = {
        "orjson -> dicts -> columns": orjson_columns,
        "msgspec: tracediag reader now": msgspec_reader,
        "msgspec: typed records alone": lambda t: msgspec_records(t, (start, end)),
    }
    try:
        import simdjson  # noqa: F401

        found["pysimdjson -> lists -> columns"] = simdjson_columns
        found["pysimdjson lazy, 6 fields"] = simdjson_lazy
    except ImportError:
        pass
    try:
        import yyjson  # noqa: F401

        found["yyjson -> dicts -> columns"] = yyjson_columns
    except ImportError:
        pass
    found["events span + NDJSON (numpy)"] = lambda t: len(
        _separators_to_newlines(t, events_span(t))
    )
    found["pyarrow.json (NDJSON incl.)"] = pyarrow_ndjson
    found["pyarrow.json alone"] = lambda t: pyarrow_read(nd)
    try:
        import duckdb  # noqa: F401

        found["duckdb read_json (file incl.)"] = lambda t: duckdb_columns(t, tmp)
        found["duckdb read_json alone"] = lambda t: duckdb_read(bare)
    except ImportError:
        pass
    return found


def _timed(fn: Callable[[bytes], int], text: bytes) -> tuple[float, float, str]:
    gc.disable()
    t, c = time.perf_counter(), time.process_time()
    try:
        out = fn(text)
    except Exception as exc:  # a decoder that cannot take the trace: say why, keep going
        out = f"{type(exc).__name__}: {str(exc).splitlines()[0][:60]}"
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    gc.enable()
    gc.collect()
    return wall, cpu, out


def survey(path: Path, rounds: int) -> None:
    text = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    with tempfile.TemporaryDirectory() as tmp:
        found = decoders(Path(tmp) / "events.json", text)
        ratios: dict[str, list[float]] = {k: [] for k in found}
        cpus: dict[str, list[float]] = {k: [] for k in found}
        notes: dict[str, str] = {}
        floors = []
        for _ in range(rounds):
            for name, fn in found.items():
                fw, fc, n = _timed(floor, text)
                floors.append(fw)
                w, c, out = _timed(fn, text)
                if isinstance(out, str):
                    notes[name] = out
                ratios[name].append(w / fw)
                cpus[name].append(c / fc)
    print(
        f"\n{path.name}: {len(text) / 2**20:.1f} MiB, {n:,} events, "
        f"orjson.loads median {statistics.median(floors):.3f} s"
    )
    print(f"{'decoder':<34}{'x floor (wall)':>15}{'x floor (cpu)':>15}")
    for name in found:
        note = f"  failed: {notes[name]}" if name in notes else ""
        print(
            f"{name:<34}{statistics.median(ratios[name]):>15.2f}"
            f"{statistics.median(cpus[name]):>15.2f}{note}"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="*", type=Path)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    paths = args.traces or [REAL_TRACES / f"kineto_{n}.json.gz" for n in DEFAULT]
    for p in paths:
        if p.exists():
            survey(p, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
