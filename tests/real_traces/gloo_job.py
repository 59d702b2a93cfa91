"""What the real-trace generators share: a local gloo job of spawned ranks, its traces and truth.

``make_gloo_traces.py`` (DDP) and ``make_gloo_pipeline.py`` (a pipeline) both run WORLD ranks
on CPU with the gloo backend (torch.multiprocessing spawn, MASTER_ADDR=127.0.0.1, a free port),
export each rank's Chrome/Kineto trace gzip'ed as ``rank-<r>.json.gz`` (gzip -9, mtime 0), read
back only their own ``ProfilerStep#N`` ends to state the clock the trace follows, and gather
every rank's own readings to rank 0, which writes them for the parent to build ``truth.json``.
Imported by those scripts (run as files, so this folder is on ``sys.path``); needs torch.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import shutil
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the job's rendezvous)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_rank(rank: int, port: int, world: int) -> None:
    """Join the local gloo job as ``rank`` with one compute thread (4 ranks share the cores)."""
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)


def extra_compute(a: torch.Tensor, b: torch.Tensor, iters: int) -> torch.Tensor:
    """Fixed real work: ``iters`` matmuls (few large ones keep the trace small)."""
    acc = a
    for _ in range(iters):
        acc = torch.tanh(acc @ b)
    return acc


def profiler_step_ends(raw_trace: Path) -> tuple[int, dict[int, int]]:
    """The trace's ``baseTimeNanoseconds`` and, per ``ProfilerStep#N``, its end in epoch ns."""
    trace = json.loads(raw_trace.read_text())
    base_ns = int(trace.get("baseTimeNanoseconds", 0))
    ends = {}
    for ev in trace["traceEvents"]:
        name = ev.get("name", "")
        if ev.get("ph") == "X" and name.startswith("ProfilerStep#"):
            end = base_ns + round((float(ev["ts"]) + float(ev["dur"])) * 1000)
            ends[int(name.split("#")[1])] = end
    return base_ns, ends


def export_gzip(raw_trace: Path, out: Path) -> int:
    """Gzip the exported trace to ``out`` (-9, mtime 0: reproducible bytes), remove the raw file;
    returns its uncompressed size."""
    raw_size = raw_trace.stat().st_size
    with (
        raw_trace.open("rb") as src,
        gzip.GzipFile(out, "wb", compresslevel=9, mtime=0) as dst,
    ):
        shutil.copyfileobj(src, dst)
    raw_trace.unlink()
    return raw_size


def gather_and_finish(mine: dict, world: int, tmp_dir: Path) -> None:
    """Gather every rank's readings to rank 0, which writes them to ``ranks.json``; leave the
    job."""
    everyone: list = [None] * world
    dist.all_gather_object(everyone, mine)
    if dist.get_rank() == 0:
        (tmp_dir / "ranks.json").write_text(json.dumps(everyone))
    dist.barrier()
    dist.destroy_process_group()


def ms(ns: float) -> float:
    """ns as ms, rounded to the µs."""
    return round(ns / 1e6, 3)


def mean(xs) -> float:
    """The mean, rounded to the µs (0.0 for none)."""
    xs = list(xs)
    return round(statistics.fmean(xs), 3) if xs else 0.0


def ranks_summary(ranks: list) -> dict:
    """Per rank (str): its process id and the size of its trace before gzip."""
    return {
        str(r["rank"]): {"pid": r["pid"], "trace_uncompressed_bytes": r["trace_uncompressed_bytes"]}
        for r in ranks
    }


def host_provenance() -> dict:
    """What ran the job: torch, Python, the host's platform and cores, threads per rank."""
    return {
        "torch_version": torch.__version__,
        "python_version": sys.version,
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "torch_num_threads_per_rank": 1,
    }


def profiler_provenance(schedule: dict, record_shapes: bool, **more) -> dict:
    """The profiler settings a truth.json states (CPU activities, no stacks)."""
    return {
        "activities": ["CPU"],
        "schedule": schedule,
        "record_shapes": record_shapes,
        "with_stack": False,
        **more,
    }


def run_job(worker: Callable, cfg: dict, world: int, out_dir: Path) -> tuple[list, float]:
    """Spawn ``world`` ranks of ``worker(rank, cfg)`` writing traces to ``out_dir`` (old ones
    removed first); returns the ranks' gathered readings and the wall seconds it took."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("rank-*.json.gz"):
        old.unlink()
    tmp_dir = Path(tempfile.mkdtemp(prefix=f"gloo-{out_dir.name}-"))
    cfg = {**cfg, "port": free_port(), "out_dir": str(out_dir), "tmp_dir": str(tmp_dir)}
    t0 = time.time()
    try:
        mp.spawn(worker, args=(cfg,), nprocs=world, join=True)
        ranks = json.loads((tmp_dir / "ranks.json").read_text())
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)
    return ranks, round(time.time() - t0, 1)


def write_truth(out_dir: Path, truth: dict) -> None:
    """Write ``truth.json`` and say how big the folder is and what the answer is."""
    (out_dir / "truth.json").write_text(json.dumps(truth, indent=1) + "\n")
    size = sum(p.stat().st_size for p in out_dir.iterdir())
    wall = truth["provenance"]["wall_seconds"]
    print(f"{truth['scenario']}: {wall} s, {size / 1024:.0f} KiB in {out_dir}")
    print(f"  {truth['expected_answer']}")


def main_loop(doc: str, scenarios: tuple, default_out: str, run, extra_args=None) -> None:
    """The generators' command line: ``--scenario`` (repeatable, default all) and ``--out``;
    ``extra_args(parser)`` adds a script's own options; ``run(scenario, out, cmdline, args)``."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--scenario", action="append", choices=scenarios)
    ap.add_argument("--out", default=default_out)
    if extra_args is not None:
        extra_args(ap)
    args = ap.parse_args()
    cmdline = [sys.executable, *sys.argv]
    for sc in args.scenario or scenarios:
        run(sc, Path(args.out), cmdline, args)
