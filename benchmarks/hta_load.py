"""HTA's load of one trace, for the benchmark's optional column: run by the Python of a venv
where HolisticTraceAnalysis is installed (not tracediag's: its pins differ).

    /path/to/htavenv/bin/python benchmarks/hta_load.py TRACE.json.gz

Prints one JSON line: ``wall`` and ``cpu`` seconds of ``TraceAnalysis(trace_dir=...)`` (the
import of hta is not timed) and ``events`` (rows of its rank's frame).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path


def main(trace: Path) -> dict:
    from hta.trace_analysis import TraceAnalysis

    with tempfile.TemporaryDirectory() as folder:  # HTA reads a directory of rank files
        os.symlink(trace.resolve(), Path(folder) / trace.name)
        t, c = time.perf_counter(), time.process_time()
        analysis = TraceAnalysis(trace_dir=folder)
        wall, cpu = time.perf_counter() - t, time.process_time() - c
    events = sum(len(analysis.t.get_trace(r)) for r in analysis.t.get_all_traces())
    return {"wall": wall, "cpu": cpu, "events": events}


if __name__ == "__main__":
    figures = main(Path(sys.argv[1]))
    print(json.dumps(figures))
