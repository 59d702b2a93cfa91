"""HTA's critical-path split of one trace, per ProfilerStep: run by the Python of a venv where
HolisticTraceAnalysis is installed (not tracediag's: its pins differ).

    /path/to/htavenv/bin/python benchmarks/hta_path_split.py TRACE.json.gz [STEP ...]
        [--annotation NAME] [--rename-old-categories]

For each ``ProfilerStep#N`` HTA keeps (all of them unless STEP numbers are given; HTA's reader
drops a trace's last one) it runs ``TraceAnalysis.critical_path_analysis(0, "ProfilerStep#N",
0)`` and prints one JSON line: the step, HTA's success flag (or the error it raised), what it
warned about its graph while building it (kernels that got no incoming edge, no ``cuda_sync``
records) and the path's time per ``bound_by`` category (in the trace's unit, µs), with
memcpy/memset kernels (HTA counts them as compute) split off by HTA's own
``MEMORY_KERNEL_RE`` as ``gpu_memory_bound``. ``--annotation NAME``: one line for the first
instance of that annotation instead. ``--rename-old-categories``: HTA reads only the category
names Kineto writes since 2021 (``cpu_op``, ``cuda_runtime``, ``kernel``, ``gpu_memcpy``,
``gpu_memset``); a trace of the older ones (``Operator``, ``Runtime``, ``Kernel``, ``Memcpy``,
``Memset``) is analysed as a copy with only those names changed (HTA fails on it unchanged).
"""

from __future__ import annotations

import argparse
import gzip
import json
import logging
import os
import tempfile
from pathlib import Path


class _Count(logging.Handler):
    """Counts HTA's warnings about its graph (it logs, it does not return them)."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.no_edge = 0
        self.no_sync = False

    def emit(self, record):
        text = record.getMessage()
        self.no_edge += text.startswith("No edge was added")
        self.no_sync |= "does not contain CUDA Synchronization events" in text


def _split(graph) -> dict:
    """ns per bound_by, memcpy/memset kernels apart (``gpu_memory_bound``)."""
    from hta.utils.utils import MEMORY_KERNEL_RE

    df = graph.get_critical_path_breakdown()
    by = df["bound_by"].where(df["bound_by"] != "", "dependency")
    memory = (by == "gpu_compute_bound") & df["s_name"].fillna("").str.match(MEMORY_KERNEL_RE)
    by = by.where(~memory, "gpu_memory_bound")
    return {k: int(v) for k, v in df["duration"].groupby(by).sum().items()}


#: The older Kineto category names and the ones HTA reads.
OLD_CATEGORIES = {
    "Operator": "cpu_op",
    "Runtime": "cuda_runtime",
    "Kernel": "kernel",
    "Memcpy": "gpu_memcpy",
    "Memset": "gpu_memset",
}


def _write_renamed(trace: Path, dest: Path) -> None:
    """A copy of ``trace`` with the older category names changed, nothing else."""
    with gzip.open(trace, "rt") as fh:
        doc = json.load(fh)
    for e in doc["traceEvents"]:
        if e.get("cat") in OLD_CATEGORIES:
            e["cat"] = OLD_CATEGORIES[e["cat"]]
    with gzip.open(dest, "wt") as fh:
        json.dump(doc, fh)


def main(trace: Path, wanted: list[int], annotation: str | None, rename: bool) -> None:
    from hta.configs.config import logger
    from hta.trace_analysis import TraceAnalysis

    with tempfile.TemporaryDirectory() as folder:  # HTA reads a directory of rank files
        if rename:
            _write_renamed(trace, Path(folder) / "rank-0.json.gz")
        else:
            os.symlink(trace.resolve(), Path(folder) / "rank-0.json.gz")
        analysis = TraceAnalysis(trace_dir=folder)
    rank = next(iter(analysis.t.get_all_traces()))
    df = analysis.t.get_trace(rank)
    names = analysis.t.symbol_table.get_sym_table()
    steps = sorted(
        {
            int(names[i].split("#")[1])
            for i in df.loc[df["stream"] == -1, "name"].unique()
            if names[i].startswith("ProfilerStep#")
        }
    )
    if wanted:
        steps = [s for s in steps if s in wanted]
    count = _Count()
    logger.addHandler(count)
    for step in [None] if annotation is not None or not steps else steps:
        count.no_edge, count.no_sync = 0, False
        name = annotation if step is None else f"ProfilerStep#{step}"
        try:
            found, error = analysis.critical_path_analysis(rank, name or "", 0), None
        except (AssertionError, ValueError, KeyError) as exc:  # HTA asserts on what it lacks
            found, error = None, f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        ok = bool(found and found[1])
        out = {"step": step, "annotation": name, "success": ok, "error": error}
        out["kernels_without_edge"] = count.no_edge
        out["no_cuda_sync"] = count.no_sync
        if ok:
            out["by_bound"] = _split(found[0])
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("steps", nargs="*", type=int)
    ap.add_argument("--annotation")
    ap.add_argument("--rename-old-categories", action="store_true")
    args = ap.parse_args()
    main(args.trace, args.steps, args.annotation, args.rename_old_categories)
