"""tracediag's critical-path split against HTA's on the real single-GPU traces of ../shared/traces.

    python benchmarks/hta_critical_path.py                 # HTA run live when its venv is there
    python benchmarks/hta_critical_path.py --recorded      # HTA's figures recorded in the test
    python benchmarks/hta_critical_path.py --hta-python /path/to/htavenv/bin/python

HTA's venv: ``python3 -m venv ../htavenv && ../htavenv/bin/pip install
HolisticTraceAnalysis==0.5.0 'pandas<3'`` (HTA 0.5.0's critical path fails on pandas 3.1 with
"Cannot specify both 'axis' and 'index'/'columns'"; its trace loading works on either).

Per trace and window (each ProfilerStep HTA keeps, or one annotation's first instance on a
trace without steps) it prints both splits in five coarse parts, as percentages of each tool's
own path, and the largest difference in points:

- ``compute``: GPU kernels (ours: ``compute``; HTA: ``gpu_compute_bound`` less copies);
- ``comm``: NCCL/RCCL kernels (``collective_transfer`` + ``collective_skew``;
  ``gpu_communication_bound``);
- ``memory``: memcpy/memset (``dma_transfer`` + ``dma_wait``; HTA's compute edges of
  ``Memcpy``/``Memset`` kernels);
- ``cpu``: host ops and launch overhead (``host``; ``cpu_bound`` + ``gpu_kernel_launch_overhead``);
- ``idle``: time nothing explains (``gap``; ``gpu_kernel_kernel_overhead``).

Ours is the report's ``steps[].critical_path_ns`` (the job's path clipped to the step), or the
path clipped to the annotation. HTA's is ``critical_path_analysis(0, annotation, 0)`` then
``get_critical_path_breakdown()`` (benchmarks/hta_path_split.py, run by HTA's own Python: its
pins differ from ours). HTA's path is a longest path whose zero-weight edges (between top-level
ops, into a blocking sync) hold no time, so its total is shorter than the window wherever a
thread idled; the shares compare where each tool says the time on its path went.

A window is *compared* only where HTA's graph is complete: HTA succeeded and warned of no
kernel left without an incoming edge ("No edge was added"); the others are shown, marked, with
the reason.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
SHARED_TRACES = REPO.parent / "shared" / "traces"
HTA_PYTHON = REPO.parent / "htavenv" / "bin" / "python"
PARTS = ("compute", "comm", "memory", "cpu", "idle")

#: Our path categories per coarse part.
OURS = {
    "compute": ("compute",),
    "comm": ("collective_transfer", "collective_skew"),
    "memory": ("dma_transfer", "dma_wait"),
    "cpu": ("host",),
    "idle": ("gap",),
}
#: HTA's ``bound_by`` (memory split off by hta_path_split.py) per coarse part.
HTA = {
    "compute": ("gpu_compute_bound",),
    "comm": ("gpu_communication_bound",),
    "memory": ("gpu_memory_bound",),
    "cpu": ("cpu_bound", "gpu_kernel_launch_overhead"),
    "idle": ("gpu_kernel_kernel_overhead",),
}


@dataclass(frozen=True)
class Case:
    """A trace and how HTA is asked about it."""

    name: str
    file: str
    annotation: str | None = None  # a trace without ProfilerSteps: this annotation's first
    rename: bool = False  # older Kineto category names (see hta_path_split.py)


CASES = (
    Case("resnet50", "kineto_resnet50_train_worker0.pt.trace.json.gz", rename=True),
    Case("df_index", "kineto_df_index_resolver_1rank.json.gz"),
    Case(
        "alexnet",
        "kineto_alexnet_1rank.json.gz",
        annotation="[param|pytorch.model.alex_net|0|0|0|measure|forward]",
    ),
    Case("negative_queue", "kineto_negative_queue_rank0.json.gz"),
    Case("mi300_act_ckpt", "kineto_mi300_resnet_act_checkpoint.json.gz"),
    Case("h100_qwen", "kineto_h100_qwen_inference.json.gz"),
)


def shares(by: dict[str, float], mapping: dict[str, tuple[str, ...]]) -> dict[str, float]:
    """Percent of the path per coarse part (the categories outside ``mapping`` left out)."""
    part = {p: float(sum(by.get(c, 0) for c in cats)) for p, cats in mapping.items()}
    total = sum(part.values())
    return {p: 100.0 * v / total if total else 0.0 for p, v in part.items()}


def points(ours: dict[str, float], hta: dict[str, float]) -> float:
    """The largest difference between two splits, in percentage points."""
    return max(abs(ours[p] - hta[p]) for p in PARTS)


def complete(hta_row: dict) -> str | None:
    """Why HTA's graph of a window is not complete (None: it is)."""
    if not hta_row.get("success"):
        return f"HTA failed: {hta_row.get('error') or 'no critical path'}"
    if hta_row.get("kernels_without_edge"):
        return f"HTA left {hta_row['kernels_without_edge']} kernels without an incoming edge"
    return None


def our_windows(path: Path, annotation: str | None) -> dict[object, dict[str, int]]:
    """Our path's ns per category per window: per step number, or the annotation's first
    instance (key: the annotation)."""
    from tracediag.analysis.context import analyse
    from tracediag.loading.loader import load
    from tracediag.model import schema as S
    from tracediag.model.path_categories import CATEGORIES

    analysis = analyse(load([path], cache=False))
    if annotation is None:
        table = analysis.job_steps.table
        return {
            int(row["number"]): {c: int(row[f"path_{c}_ns"]) for c in CATEGORIES}
            for _, row in table.iterrows()  # a handful of steps
            if row["number"] == row["number"]
        }
    ev = analysis.trace.events
    hit = np.flatnonzero((ev[S.NAME] == annotation).to_numpy())
    first = hit[np.argmin(ev[S.TS].to_numpy()[hit])]
    lo = int(ev[S.TS].iloc[first])
    hi = lo + int(ev[S.DUR].iloc[first])
    seg = analysis.path.segments
    inside = np.clip(np.minimum(seg["end_ns"], hi) - np.maximum(seg["start_ns"], lo), 0, None)
    sums = inside.groupby(seg["category"], observed=False).sum()
    return {annotation: {c: int(sums.get(c, 0)) for c in CATEGORIES}}


def hta_windows(case: Case, hta_python: Path) -> dict[object, dict]:
    """HTA's rows per window, run live by ``hta_python``."""
    cmd = [str(hta_python), str(REPO / "benchmarks" / "hta_path_split.py")]
    cmd.append(str(SHARED_TRACES / case.file))
    if case.annotation:
        cmd += ["--annotation", case.annotation]
    if case.rename:
        cmd.append("--rename-old-categories")
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return {r["step"] if r["step"] is not None else r["annotation"]: r for r in rows}


def recorded_hta() -> dict[str, dict[object, dict]]:
    """HTA's figures as recorded in tests/test_path_vs_hta.py (HTA not needed)."""
    sys.path.insert(0, str(REPO))
    from tests.test_path_vs_hta import HTA_RECORDED

    return HTA_RECORDED


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hta-python", type=Path, default=HTA_PYTHON)
    ap.add_argument("--recorded", action="store_true", help="HTA's figures from the test")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    args = ap.parse_args()
    if not SHARED_TRACES.is_dir():
        print(f"no traces at {SHARED_TRACES}", file=sys.stderr)
        return 2
    live = not args.recorded and args.hta_python.exists()
    recorded = None if live else recorded_hta()
    print(f"HTA: {'run by ' + str(args.hta_python) if live else 'recorded figures'}")
    head = f"{'trace':<16}{'window':>8}  {'tool':<5}" + "".join(f"{p:>9}" for p in PARTS)
    print(head + f"{'points':>8}  note")
    rows, worst = [], 0.0
    for case in CASES:
        path = SHARED_TRACES / case.file
        if not path.exists():
            continue
        ours_by = our_windows(path, case.annotation)
        hta_by = hta_windows(case, args.hta_python) if live else recorded[case.name]
        for key, hta_row in hta_by.items():
            if key not in ours_by:
                continue
            o = shares(ours_by[key], OURS)
            why = complete(hta_row)
            h = shares(hta_row.get("by_bound") or {}, HTA) if why is None else None
            pts = points(o, h) if h else None
            if pts is not None:
                worst = max(worst, pts)
            label = "ann." if case.annotation else str(key)
            print(f"{case.name:<16}{label:>8}  ours " + "".join(f"{o[p]:9.1f}" for p in PARTS))
            if h:
                line = "".join(f"{h[p]:9.1f}" for p in PARTS) + f"{pts:8.1f}"
            else:
                line = " " * (9 * len(PARTS) + 8) + f"  not compared: {why}"
            print(f"{'':<16}{'':>8}  HTA  " + line)
            rows.append({"trace": case.name, "window": key, "ours": o, "hta": h, "points": pts})
            rows[-1]["not_compared"] = why
    print(f"largest difference where HTA's graph is complete: {worst:.1f} points")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
