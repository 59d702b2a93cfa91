"""Benchmark stages, each run in a fresh process by ``bench.py`` so peak RSS is the stage's own.

A stage first does its prerequisites untimed (``replay`` needs a graph, so it reads and analyses
first), then times its own work. It prints one JSON line: ``wall`` and ``cpu`` (seconds of the
timed work; CPU time is steadier than wall time on a shared machine), ``events`` and
``rss_before_mib`` (the high-water mark before the timed work; the parent takes the process's
final peak from ``wait4``).
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def _json_bytes(files: list[Path]) -> list[bytes]:
    """The files' JSON text (gzipped ones decompressed): read before the floor is timed."""
    import gzip

    return [gzip.decompress(f.read_bytes()) if f.suffix == ".gz" else f.read_bytes() for f in files]


def _floor_json(texts: list[bytes]) -> int:
    """``orjson.loads`` of each file's text, cyclic GC paused (as the reader decodes): with it
    running, the collector's passes over millions of fresh dicts take several times the parse."""
    import gc

    import orjson

    n = 0
    gc.disable()
    for text in texts:
        doc = orjson.loads(text)
        n += len(doc["traceEvents"]) if isinstance(doc, dict) else len(doc)
        del doc
    gc.enable()
    return n


def _floor_parquet(files: list[Path]) -> int:
    import pyarrow.parquet as pq

    tables = [pq.read_table(f) for f in files]  # held together, as a reader holds them
    return sum(t.num_rows for t in tables)


def _floor_protobuf(data: list[bytes]) -> int:
    """protobuf's (upb) parse of each Perfetto file's bytes as one ``Trace``: the packets."""
    from tracediag.parsers.protos.perfetto_trace_pb2 import Trace

    return sum(len(Trace.FromString(d).packet) for d in data)


def _decode_perfetto(files: list[Path]) -> int:
    """The Perfetto reader's decoding of every file into columns: the packets."""
    from tracediag.parsers import perfetto_collectives, perfetto_events
    from tracediag.parsers.perfetto_decode import decode
    from tracediag.parsers.perfetto_system import SYSTEM_WANTED

    wanted = perfetto_events.WANTED | perfetto_collectives.WANTED | SYSTEM_WANTED
    return sum(decode(f, wanted).packets for f in files)


def _load(inputs: list[str]):
    from tracediag.loading.loader import load

    return load(inputs, align=False, cache=False, jobs=1)  # serial: CPU time is all in-process


def _align(trace) -> None:
    from tracediag.loading.clock_alignment import align_clocks
    from tracediag.loading.collective_matching import split_mismatched

    align_clocks(trace)
    split_mismatched(trace)


class _Timed:
    """Wall and CPU seconds of a block, and the RSS high-water mark before it."""

    def __enter__(self) -> _Timed:
        self.before = _rss_mib()
        self.t, self.c = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc) -> None:
        self.wall = time.perf_counter() - self.t
        self.cpu = time.process_time() - self.c

    def figures(self, events: int, **extra) -> dict:
        return {
            "wall": self.wall,
            "cpu": self.cpu,
            "events": events,
            "rss_before_mib": self.before,
            **extra,
        }


def run_stage(stage: str, inputs: list[str], files: list[str]) -> dict:
    """Run ``stage`` on the case's ``inputs`` (``files``: its data files, for the floors)."""
    from tracediag.analysis.context import analyse
    from tracediag.engine.diagnose import diagnose
    from tracediag.graph.changes import WhatIf
    from tracediag.graph.replay import replay
    from tracediag.parsers import chrome_stream

    paths = [Path(f) for f in files]
    if stage == "floor-orjson":
        texts = _json_bytes(paths)
        with _Timed() as t:
            n = _floor_json(texts)
        return t.figures(n, bytes=sum(map(len, texts)))
    if stage == "floor-protobuf":
        data = [f.read_bytes() for f in paths]
        with _Timed() as t:
            n = _floor_protobuf(data)
        return t.figures(n, bytes=sum(map(len, data)))
    if stage == "decode":
        with _Timed() as t:
            n = _decode_perfetto(paths)
        return t.figures(n)
    if stage == "floor-parquet":
        with _Timed() as t:
            n = _floor_parquet(paths)
        return t.figures(n)
    if stage == "read":
        with _Timed() as t:
            trace = _load(inputs)
        # Chrome documents the piecewise reader gave up on and decoded a second time, whole.
        return t.figures(len(trace), chrome_fallbacks=dict(chrome_stream.FALLBACKS))
    trace = _load(inputs)
    _align(trace)
    if stage == "graph+path":
        with _Timed() as t:
            g = analyse(trace).graph
        return t.figures(len(trace), graph_edges=int(len(g.pred_src)))
    if stage == "replay":
        g = analyse(trace).graph
        first = g.order[:1]
        change = WhatIf.durations(first, g.dur[first] // 2)  # halve the first node
        with _Timed() as t:
            replay(g, change)
        return t.figures(len(g))
    if stage == "diagnose":
        with _Timed() as t:
            diagnosis = diagnose(trace)
        return t.figures(len(trace), findings=len(diagnosis.findings))
    raise SystemExit(f"unknown stage {stage!r}")


if __name__ == "__main__":
    spec = json.loads(Path(sys.argv[1]).read_text())
    print(json.dumps(run_stage(spec["stage"], spec["inputs"], spec["files"])))
