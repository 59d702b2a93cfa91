"""Kineto (PyTorch profiler) meaning of Chrome trace slices: kinds, tracks, launches, waits, ops, steps.

Categories are matched by family, not by one vendor's names: ``kernel``; ``*memcpy*``/``*memset*``;
``*_runtime``/``*_driver`` (CUDA, HIP, ...); ``*_sync`` (CUPTI synchronisation records, kept as
GPU-side markers whose args describe waits); ``gpu_*`` annotations; ``cpu_op``; ``user_annotation``
(``record_function`` ranges) and ``python_function`` (Python stack and module ranges), markers
that name layers (:mod:`kineto_layers`); anything else is a marker. GPU slices sit on
``gpu{pid}/stream {tid}`` tracks on the host clock (Kineto converts GPU times to it); CPU slices on
``cpu {pid}/{tid}`` threads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracediag import schema as S
from tracediag.builder import TRACK_CLOCK, TRACK_DEVICE, TRACK_ENGINE, TRACK_KIND_COL, TRACK_LABEL
from tracediag.parsers.chrome_columns import ArgColumns, RowArgs
from tracediag.parsers.chrome_nesting import SliceNesting

#: Host calls that block until GPU work completes.
SYNC_CALL = re.compile(r"^(?:cuda|hip|cu)(?:Stream|Device|Event|Ctx)Synchronize", re.IGNORECASE)
#: NCCL/RCCL communication kernels, both naming generations (ncclKernel_*, ncclDevKernel_*).
COMM_KERNEL = re.compile(r"(?:^|[\s:])(?:nccl|rccl)", re.IGNORECASE)
PROFILER_STEP = re.compile(r"^ProfilerStep\s*#\s*(\d+)$")
GPU_WORK = ("kernel", "memcpy", "memset")
GPU_FAMILIES = (*GPU_WORK, "gpu_sync", "gpu_marker")


def category_family(cat: str) -> str:
    """The family of a Chrome ``cat`` (see the module docstring)."""
    c = cat.lower()
    if c == "kernel" or c.endswith("_kernel"):
        return "kernel"
    if "memcpy" in c:
        return "memcpy"
    if "memset" in c:
        return "memset"
    if c in ("runtime", "driver") or c.endswith(("_runtime", "_driver")):
        return "runtime"
    if c.endswith("_sync"):
        return "gpu_sync"
    if c.startswith("gpu_"):
        return "gpu_marker"
    if c in ("cpu_op", "operator"):
        return "cpu_op"
    if c == "user_annotation":
        return "annotation"
    if c == "python_function":
        return "python"
    return "other"


FAMILIES = (
    "kernel",
    "memcpy",
    "memset",
    "runtime",
    "gpu_sync",
    "gpu_marker",
    "cpu_op",
    "annotation",
    "python",
    "other",
)


@dataclass
class Rows:
    """Per-slice arrays shared by the Kineto passes (slices already sanitised)."""

    family: np.ndarray  # index into FAMILIES
    name: np.ndarray  # object array of text
    name_codes: np.ndarray  # codes into name_categories: regexes run once per distinct name
    name_categories: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    thread: np.ndarray  # integer code of (gpu?, pid, tid): one per track
    ts: np.ndarray
    end: np.ndarray
    args: RowArgs  # the args keys the passes read, per slice
    corr: np.ndarray  # args.correlation, NaN when absent
    on_gpu: np.ndarray

    def where(self, *families: str, gpu: bool | None = None) -> np.ndarray:
        """Row positions of the given families (on the GPU or the CPU side when ``gpu`` is set)."""
        mask = np.isin(self.family, [FAMILIES.index(f) for f in families])
        if gpu is not None:
            mask &= self.on_gpu == gpu
        return np.flatnonzero(mask)

    def matches(self, pattern: re.Pattern, rows: np.ndarray) -> np.ndarray:
        """Whether each given row's name matches ``pattern`` (evaluated per distinct name)."""
        per_name = np.array(
            [bool(pattern.search(str(n))) for n in self.name_categories], dtype=bool
        )
        return per_name[self.name_codes[rows]] if len(per_name) else np.zeros(len(rows), dtype=bool)


def describe(slices: pd.DataFrame, args: ArgColumns) -> Rows:
    """Families, thread codes, times and correlation ids of the slices (``args`` by their
    ``pos``)."""
    cat = slices["cat"].astype("category").array
    per_cat = np.array(
        [FAMILIES.index(category_family(str(c))) for c in cat.categories] or [0], dtype=np.int8
    )
    family = per_cat[cat.codes]
    on_gpu = np.isin(family, [FAMILIES.index(f) for f in GPU_FAMILIES])
    name = slices["name"].astype("category").array
    pid = slices["pid"].astype("category").array
    tid = slices["tid"].astype("category").array
    thread = (
        pd.DataFrame({"g": on_gpu, "p": pid.codes, "t": tid.codes})
        .groupby(["g", "p", "t"], sort=False)
        .ngroup()
    )
    ts = slices[S.TS].to_numpy(dtype=np.int64)
    args = RowArgs(args, slices["pos"].to_numpy(dtype=np.int64))
    rows = Rows(
        family=family,
        name=np.asarray(name, dtype=object),
        name_codes=name.codes,
        name_categories=np.asarray(name.categories, dtype=object),
        pid=np.asarray(pid, dtype=object),
        tid=np.asarray(tid, dtype=object),
        thread=thread.to_numpy(dtype=np.int64),
        ts=ts,
        end=ts + slices[S.DUR].to_numpy(dtype=np.int64),
        args=args,
        corr=np.full(len(slices), np.nan),
        on_gpu=on_gpu,
    )
    has_corr = rows.where("runtime", *GPU_FAMILIES)
    rows.corr[has_corr] = args.number("correlation", has_corr)
    return rows


def event_kinds(rows: Rows) -> np.ndarray:
    """The canonical kind of every slice."""
    kind = np.full(len(rows.family), "marker", dtype=object)
    kernels = rows.where("kernel", gpu=True)
    kind[kernels] = np.where(rows.matches(COMM_KERNEL, kernels), "collective", "compute")
    kind[rows.where("memcpy", "memset", gpu=True)] = "dma"
    calls = rows.where("runtime", gpu=False)
    kind[calls] = np.where(rows.matches(SYNC_CALL, calls), "sync", "host")
    return kind


def track_columns(rows: Rows, thread_names: dict[tuple[str, str], str]) -> dict[str, np.ndarray]:
    """Track label, kind, engine, device and clock of every slice (one loop step per track)."""
    n_tracks = int(rows.thread.max()) + 1 if len(rows.thread) else 0
    first = np.zeros(n_tracks, dtype=np.int64)
    first[rows.thread[::-1]] = np.arange(len(rows.thread))[::-1]
    label, kind, engine, device = [], [], [], []
    for i in first:
        pid, tid = rows.pid[i], rows.tid[i]
        if rows.on_gpu[i]:
            label.append(f"gpu{pid}/stream {tid}")
            kind.append("gpu_stream")
            engine.append("gpu")
            device.append(f"gpu{pid}")
        else:
            name = thread_names.get((pid, tid), "")
            suffix = f" ({name})" if name and tid not in name else ""
            label.append(f"cpu {pid}/{tid}{suffix}")
            kind.append("cpu_thread")
            engine.append("cpu")
            device.append("host")
    return {
        TRACK_LABEL: _per_track(label, rows.thread),
        TRACK_KIND_COL: _per_track(kind, rows.thread),
        TRACK_ENGINE: _per_track(engine, rows.thread),
        TRACK_DEVICE: _per_track(device, rows.thread),
        TRACK_CLOCK: _per_track(["host"] * n_tracks, rows.thread),
    }


def _per_track(values: list[str], thread: np.ndarray) -> pd.Categorical:
    """A per-row categorical column from one value per track."""
    codes, categories = pd.factorize(np.array(values, dtype=object))
    return pd.Categorical.from_codes(codes[thread], categories=pd.Index(categories, dtype=object))


def launch_edges(rows: Rows) -> tuple[pd.DataFrame, np.ndarray]:
    """CPU runtime call -> GPU work with the same correlation id; and each row's launcher (-1)."""
    calls = rows.where("runtime", gpu=False)
    calls = calls[np.isfinite(rows.corr[calls])]
    work = rows.where(*GPU_WORK, gpu=True)
    work = work[np.isfinite(rows.corr[work])]
    by_corr = pd.Series(calls, index=rows.corr[calls])
    by_corr = by_corr[~by_corr.index.duplicated(keep="first")]
    src = by_corr.reindex(rows.corr[work]).to_numpy()
    ok = ~np.isnan(src)
    edges = pd.DataFrame({S.SRC: src[ok].astype(np.int64), S.DST: work[ok], S.EDGE_KIND: "launch"})
    launcher = np.full(len(rows.family), -1, dtype=np.int64)
    launcher[work[ok]] = src[ok].astype(np.int64)
    return edges, launcher


def launching_ops(rows: Rows, launcher: np.ndarray) -> np.ndarray:
    """Per slice, the row of the ``cpu_op`` that launched it (runtime calls and GPU work), or -1.

    The op is the innermost ``cpu_op`` enclosing the launch call on its thread; where there is no
    launch call, the GPU slice's ``External id`` names the op, unless it merely repeats the
    correlation id (older Kineto numbered GPU slices that way, colliding with real op ids).
    """
    op_row = np.full(len(rows.family), -1, dtype=np.int64)
    ops = rows.where("cpu_op", gpu=False)
    calls = rows.where("runtime", gpu=False)
    if len(ops) and len(calls):
        nesting = SliceNesting(rows.thread[ops], rows.ts[ops], rows.end[ops])
        inner = nesting.innermost(rows.thread[calls], rows.ts[calls])
        op_row[calls] = np.where(inner >= 0, ops[np.maximum(inner, 0)], -1)
    gpu = np.flatnonzero(launcher >= 0)
    op_row[gpu] = op_row[launcher[gpu]]
    orphans = rows.where(*GPU_WORK, gpu=True)
    orphans = orphans[launcher[orphans] < 0]
    if len(orphans) and len(ops):
        ext = rows.args.number("External id", orphans)
        by_ext = pd.Series(ops, index=rows.args.number("External id", ops))
        by_ext = by_ext[~by_ext.index.duplicated(keep="last")]
        named = by_ext.reindex(ext).to_numpy(dtype=np.float64)
        trusted = np.isfinite(ext) & (ext != rows.corr[orphans]) & np.isfinite(named)
        op_row[orphans] = np.where(trusted, np.nan_to_num(named, nan=-1), -1).astype(np.int64)
    return op_row


def names_of(rows: Rows, at: np.ndarray) -> pd.Categorical:
    """The names of the slices at rows ``at`` (missing where -1), as ``pd.Categorical`` of those
    names would give them (the names used, sorted), built from codes: no string is hashed."""
    codes = np.where(at >= 0, rows.name_codes[np.maximum(at, 0)], -1)
    used = np.flatnonzero(np.bincount(codes[codes >= 0], minlength=len(rows.name_categories)))
    names = rows.name_categories[used]
    order = np.argsort(names.astype(str), kind="stable")
    renumber = np.full(len(rows.name_categories) + 1, -1, dtype=np.int64)  # last: for -1
    renumber[used[order]] = np.arange(len(used))
    return pd.Categorical.from_codes(renumber[codes], categories=pd.Index(list(names[order])))


def steps(rows: Rows, launcher: np.ndarray) -> np.ndarray:
    """ProfilerStep#N enclosing each CPU slice's start; GPU work takes its launcher's step."""
    step = np.full(len(rows.family), np.nan)
    cpu = np.flatnonzero(~rows.on_gpu)
    marks = cpu[rows.matches(PROFILER_STEP, cpu)]
    if not len(marks):
        return step
    marks = marks[np.argsort(rows.ts[marks], kind="stable")]
    number = np.array(
        [int(PROFILER_STEP.match(str(rows.name[i])).group(1)) for i in marks], dtype=np.float64
    )
    k = np.searchsorted(rows.ts[marks], rows.ts[cpu], side="right") - 1
    inside = (k >= 0) & (rows.ts[cpu] < rows.end[marks[np.maximum(k, 0)]])
    step[cpu] = np.where(inside, number[np.maximum(k, 0)], np.nan)
    gpu = np.flatnonzero(launcher >= 0)
    step[gpu] = step[launcher[gpu]]
    return step
