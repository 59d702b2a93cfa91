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


def _floor_json(files: list[Path]) -> int:
    """Read and ``orjson.loads`` each file, cyclic GC paused (as the reader decodes): with it
    running, the collector's passes over millions of fresh dicts take several times the parse."""
    import gc

    import orjson

    n = 0
    gc.disable()
    for f in files:
        doc = orjson.loads(f.read_bytes())
        n += len(doc["traceEvents"]) if isinstance(doc, dict) else len(doc)
        del doc
    gc.enable()
    return n


def _floor_parquet(files: list[Path]) -> int:
    import pyarrow.parquet as pq

    tables = [pq.read_table(f) for f in files]  # held together, as a reader holds them
    return sum(t.num_rows for t in tables)


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
    from tracediag.graph.replay import WhatIf, replay

    floors = {"floor-orjson": _floor_json, "floor-parquet": _floor_parquet}
    if stage in floors:
        with _Timed() as t:
            n = floors[stage]([Path(f) for f in files])
        return t.figures(n)
    if stage == "read":
        with _Timed() as t:
            trace = _load(inputs)
        return t.figures(len(trace))
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
