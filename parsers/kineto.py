"""Kineto (PyTorch profiler) meaning of Chrome trace slices: kinds, tracks, launches, waits, ops, steps.

Categories are matched by family, not by one vendor's names: ``kernel``; ``*memcpy*``/``*memset*``;
``*_runtime``/``*_driver`` (CUDA, HIP, ...); ``*_sync`` (CUPTI synchronisation records, kept as
GPU-side markers whose args describe waits); ``gpu_*`` annotations; ``cpu_op``; ``user_annotation``
(``record_function`` ranges) and ``python_function`` (Python stack and module ranges), markers
that name layers (:mod:`kineto_layers`). A category of none of these families on a *device
process* (a numeric pid with no CPU op, annotation or Python slice: Kineto numbers accelerator
processes by device, e.g. MTIA's ``mtia_ccp_events`` on pid 17) is ``device`` work of an
accelerator Kineto has no family for: kind by name (copies ``dma``, waits and event records
markers, the rest ``compute``) on ``{accelerator}{pid}/{thread}`` tracks. Other unknown categories
stay markers and are counted (:attr:`Rows.unread`), never dropped silently. GPU slices sit on
``gpu{pid}/stream {tid}`` tracks on the host clock (Kineto converts GPU times to it); CPU slices on
``cpu {pid}/{tid}`` threads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from tracediag.model import schema as S
from tracediag.model.assembly import (
    TRACK_CLOCK,
    TRACK_DEVICE,
    TRACK_ENGINE,
    TRACK_KIND_COL,
    TRACK_LABEL,
)
from tracediag.parsers.chrome_columns import ArgColumns, RowArgs
from tracediag.parsers.chrome_events import any_of
from tracediag.parsers.chrome_nesting import SliceNesting

#: Host calls that block until GPU work completes.
SYNC_CALL = re.compile(r"^(?:cuda|hip|cu)(?:Stream|Device|Event|Ctx)Synchronize", re.IGNORECASE)
#: NCCL/RCCL communication kernels, both naming generations (ncclKernel_*, ncclDevKernel_*).
COMM_KERNEL = re.compile(r"(?:^|[\s:])(?:nccl|rccl)", re.IGNORECASE)
PROFILER_STEP = re.compile(r"^ProfilerStep\s*#\s*(\d+)$")
GPU_WORK = ("kernel", "memcpy", "memset")
GPU_FAMILIES = (*GPU_WORK, "gpu_sync", "gpu_marker", "device")
#: Categories outside the families that are known not to be device work: the profiler's own span
#: (``Trace``) and CPU instant events.
HOST_OTHER = frozenset({"", "nan", "none", "trace", "cpu_instant_event"})
#: Events of an unknown accelerator's categories, by name: copies, and waits/records (no work).
DEVICE_DMA = re.compile(r"dma|memcpy|memset|copy", re.IGNORECASE)
DEVICE_MARK = re.compile(r"wait|sync|record|barrier|semaphore|fence", re.IGNORECASE)
#: Code of each canonical kind in ``S.KINDS``: the passes compare small integers, not strings.
KIND = {k: i for i, k in enumerate(S.KINDS)}


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
    "device",
)


@dataclass
class Rows:
    """Per-slice arrays shared by the Kineto passes (slices already sanitised).

    Text columns are kept as categorical codes and categories (no object per row): the ``*_of``
    methods give the text of some rows, NaN where a code is -1, as ``np.asarray`` of the
    categorical would."""

    family: np.ndarray  # index into FAMILIES
    name_codes: np.ndarray  # codes into name_categories: regexes run once per distinct name
    name_categories: np.ndarray
    pid_codes: np.ndarray
    tid_codes: np.ndarray
    thread: np.ndarray  # integer code of (gpu?, pid, tid): one per track
    track_first: np.ndarray  # per thread code, its first row
    ts: np.ndarray
    end: np.ndarray
    args: RowArgs  # the args keys the passes read, per slice
    corr: np.ndarray  # args.correlation, NaN when absent
    on_gpu: np.ndarray
    pid_categories: np.ndarray
    tid_categories: np.ndarray
    #: Per pid code: the accelerator of a device process read from an unknown category ("").
    accelerator: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=object))
    #: Unknown categories left as markers (not on a device process) -> their number of slices.
    unread: dict = field(default_factory=dict)
    _per_name: dict = field(default_factory=dict, repr=False)  # pattern -> match per name

    def name_of(self, rows: np.ndarray) -> np.ndarray:
        """The names of the given rows (object array)."""
        return _with_nan(self.name_categories)[self.name_codes[rows]]

    def pid_of(self, rows: np.ndarray) -> np.ndarray:
        """The pids (text) of the given rows (object array)."""
        return _with_nan(self.pid_categories)[self.pid_codes[rows]]

    def tid_of(self, rows: np.ndarray) -> np.ndarray:
        """The tids (text) of the given rows (object array)."""
        return _with_nan(self.tid_categories)[self.tid_codes[rows]]

    def where(self, *families: str, gpu: bool | None = None) -> np.ndarray:
        """Row positions of the given families (on the GPU or the CPU side when ``gpu`` is set)."""
        mask = in_families(self.family, families)
        if gpu is not None:
            mask &= self.on_gpu == gpu
        return np.flatnonzero(mask)

    def matches(self, pattern: re.Pattern, rows: np.ndarray) -> np.ndarray:
        """Whether each given row's name matches ``pattern`` (evaluated once per distinct name,
        and once per pattern for all the passes)."""
        per_name = self._per_name.get(pattern)
        if per_name is None:
            per_name = np.array(
                [bool(pattern.search(str(n))) for n in self.name_categories], dtype=bool
            )
            self._per_name[pattern] = per_name
        return per_name[self.name_codes[rows]] if len(per_name) else np.zeros(len(rows), dtype=bool)


def in_families(family: np.ndarray, families: tuple[str, ...]) -> np.ndarray:
    """Whether each family code is one of ``families``."""
    return any_of(family, [FAMILIES.index(f) for f in families])


def _with_nan(categories: np.ndarray) -> np.ndarray:
    """Categories with a NaN appended, so that code -1 reads NaN."""
    return np.append(np.asarray(categories, dtype=object), np.nan)


def describe(slices: pd.DataFrame, args: ArgColumns) -> Rows:
    """Families, thread codes, times and correlation ids of the slices (``args`` by their
    ``pos``)."""
    cat = slices["cat"].astype("category").array
    per_cat = np.array(
        [FAMILIES.index(category_family(str(c))) for c in cat.categories] or [0], dtype=np.int8
    )
    family = per_cat[cat.codes]
    name = slices["name"].astype("category").array
    pid = slices["pid"].astype("category").array
    tid = slices["tid"].astype("category").array
    accelerator, unread = _unknown_devices(family, cat, pid)
    on_gpu = in_families(family, GPU_FAMILIES)
    # Tracks numbered in order of first appearance (as groupby(sort=False).ngroup() numbers
    # them), from one integer key per row instead of a three-column groupby.
    key = on_gpu.astype(np.int64) * (len(pid.categories) + 1) + pid.codes.astype(np.int64) + 1
    key = key * (len(tid.categories) + 1) + tid.codes.astype(np.int64) + 1
    thread, tracks = pd.factorize(key)
    first = np.zeros(len(tracks), dtype=np.int64)
    first[thread[::-1]] = np.arange(len(thread))[::-1]  # the last write, the first row, wins
    ts = slices[S.TS].to_numpy(dtype=np.int64)
    args = RowArgs(args, slices["pos"].to_numpy(dtype=np.int64))
    rows = Rows(
        family=family,
        name_codes=name.codes,
        name_categories=np.asarray(name.categories, dtype=object),
        pid_codes=pid.codes,
        tid_codes=tid.codes,
        thread=thread.astype(np.int64),
        track_first=first,
        ts=ts,
        end=ts + slices[S.DUR].to_numpy(dtype=np.int64),
        args=args,
        corr=np.where(
            in_families(family, ("runtime", *GPU_FAMILIES)),
            args.columns.number("correlation", args.pos),
            np.nan,
        ),
        on_gpu=on_gpu,
        pid_categories=np.asarray(pid.categories, dtype=object),
        tid_categories=np.asarray(tid.categories, dtype=object),
        accelerator=accelerator,
        unread=unread,
    )
    return rows


def _unknown_devices(
    family: np.ndarray, cat: pd.Categorical, pid: pd.Categorical
) -> tuple[np.ndarray, dict[str, int]]:
    """Rows of unknown categories on device processes become family ``device`` (in place).

    Returns, per pid code, the accelerator named by its device category's prefix (``mtia`` of
    ``mtia_ccp_events``; "" for other processes), and the unknown categories left as markers
    with their slice counts. Tested per category and per pid, indexed by row."""
    cats = np.asarray(cat.categories.astype(str), dtype=object)
    unknown_cat = np.array(
        [category_family(c) == "other" and c.lower() not in HOST_OTHER for c in cats] + [False]
    )
    accelerator = np.full(len(pid.categories), "", dtype=object)
    unknown = unknown_cat[cat.codes]
    if not unknown.any():
        return accelerator, {}
    host_rows = in_families(family, ("cpu_op", "annotation", "python"))
    n_pid = len(pid.categories)
    pid_codes = np.where(pid.codes >= 0, pid.codes, n_pid)
    hosts = np.bincount(pid_codes[host_rows], minlength=n_pid + 1)[:n_pid] > 0
    numeric = np.array([str(p).lstrip("-").isdigit() for p in pid.categories], dtype=bool)
    device_pid = np.append(numeric & ~hosts, False)
    device = unknown & device_pid[pid_codes]
    family[device] = FAMILIES.index("device")
    if device.any():  # the accelerator of each device pid: the prefix of its first category
        first = pd.Series(cat.codes[device]).groupby(pid_codes[device]).first()
        accelerator[first.index.to_numpy()] = [
            re.split(r"[_\s]", cats[c], maxsplit=1)[0].lower() or "device" for c in first
        ]
    left = unknown & ~device
    unread = {}
    if left.any():
        counts = np.bincount(cat.codes[left], minlength=len(cats))
        unread = {str(cats[c]): int(counts[c]) for c in np.flatnonzero(counts)}
    return accelerator, unread


def event_kinds(rows: Rows) -> np.ndarray:
    """The canonical kind of every slice, as int8 codes into ``S.KINDS`` (see :data:`KIND`)."""
    kind = np.full(len(rows.family), KIND["marker"], dtype=np.int8)
    kernels = rows.where("kernel", gpu=True)
    kind[kernels] = np.where(
        rows.matches(COMM_KERNEL, kernels), KIND["collective"], KIND["compute"]
    )
    kind[rows.where("memcpy", "memset", gpu=True)] = KIND["dma"]
    device = rows.where("device", gpu=True)
    kind[device] = np.where(
        rows.matches(DEVICE_DMA, device),
        KIND["dma"],
        np.where(rows.matches(DEVICE_MARK, device), KIND["marker"], KIND["compute"]),
    )
    calls = rows.where("runtime", gpu=False)
    kind[calls] = np.where(rows.matches(SYNC_CALL, calls), KIND["sync"], KIND["host"])
    return kind


def _thread_name(name: str, tid: str) -> str:
    """What a ``thread_name`` adds to the thread's id: Kineto's ``thread 11982 (python)`` ->
    ``python`` (the part users know), ``dataloader`` as it is, ``thread 11982`` -> nothing."""
    m = re.fullmatch(rf"thread\s+{re.escape(str(tid))}\s*(?:\((.*)\))?\s*", name)
    return (m.group(1) or "").strip() if m else name


def track_columns(rows: Rows, thread_names: dict[tuple[str, str], str]) -> dict[str, np.ndarray]:
    """Track label, kind, engine, device and clock of every slice (one loop step per track)."""
    first = rows.track_first
    n_tracks = len(first)
    label, kind, engine, device = [], [], [], []
    for i, pid, tid in zip(first, rows.pid_of(first), rows.tid_of(first), strict=True):
        accel = rows.accelerator[rows.pid_codes[i]] if len(rows.accelerator) else ""
        if rows.on_gpu[i] and accel:  # an accelerator Kineto has no family for (MTIA)
            name = thread_names.get((pid, tid), "") or f"stream {tid}"
            label.append(f"{accel}{pid}/{name}")
            kind.append("gpu_stream")
            engine.append(accel)
            device.append(f"{accel}{pid}")
        elif rows.on_gpu[i]:
            # Newer Kineto writes the tid as "stream 7" already: name it once.
            stream = tid if str(tid).startswith("stream") else f"stream {tid}"
            label.append(f"gpu{pid}/{stream}")
            kind.append("gpu_stream")
            engine.append("gpu")
            device.append(f"gpu{pid}")
        else:
            name = _thread_name(thread_names.get((pid, tid), ""), tid)
            suffix = f" ({name})" if name else ""
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
    per_track = pd.Categorical.from_codes(codes, categories=pd.Index(categories, dtype=object))
    return per_track.take(thread)  # takes the small codes: no per-row cast


def launch_edges(rows: Rows) -> tuple[pd.DataFrame, np.ndarray]:
    """CPU runtime call -> GPU work with the same correlation id; and each row's launcher (-1)."""
    calls = rows.where("runtime", gpu=False)
    calls = calls[np.isfinite(rows.corr[calls])]
    work = rows.where(*GPU_WORK, gpu=True)
    work = work[np.isfinite(rows.corr[work])]
    found = lookup(rows.corr[calls], rows.corr[work])
    ok = found >= 0
    src = calls[found[ok]]
    edges = pd.DataFrame({S.SRC: src, S.DST: work[ok], S.EDGE_KIND: "launch"}, copy=False)
    launcher = np.full(len(rows.family), -1, dtype=np.int64)
    launcher[work[ok]] = src
    return edges, launcher


def lookup(keys: np.ndarray, queries: np.ndarray, keep: str = "first") -> np.ndarray:
    """Per query, the position in ``keys`` of the ``first`` (or ``last``) key equal to it, or -1;
    NaN matches nothing. A sort and binary searches: keys (ids that grow with time) come nearly
    sorted, which the stable sort exploits; a hash index costs more."""
    at = np.flatnonzero(~np.isnan(keys))
    if keep == "last":
        at = at[::-1]
    distinct, first = np.unique(keys[at], return_index=True)  # first occurrence (stable sort)
    if not len(distinct):
        return np.full(len(queries), -1, dtype=np.int64)
    k = np.minimum(np.searchsorted(distinct, queries), len(distinct) - 1)
    return np.where(distinct[k] == queries, at[first[k]], -1)


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
        named = lookup(rows.args.number("External id", ops), ext, keep="last")
        trusted = np.isfinite(ext) & (ext != rows.corr[orphans]) & (named >= 0)
        op_row[orphans] = np.where(trusted, ops[np.maximum(named, 0)], -1)
    return op_row


def names_of(rows: Rows, at: np.ndarray | None = None) -> pd.Categorical:
    """The names of the slices at rows ``at`` (missing where -1; all rows when None), as
    ``pd.Categorical`` of those names would give them (the names used, sorted), built from codes:
    no string is hashed."""
    codes = (
        rows.name_codes if at is None else np.where(at >= 0, rows.name_codes[np.maximum(at, 0)], -1)
    )
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
        [int(PROFILER_STEP.match(str(n)).group(1)) for n in rows.name_of(marks)], dtype=np.float64
    )
    start = rows.ts[cpu]
    k = np.searchsorted(rows.ts[marks], start, side="right") - 1
    at = np.maximum(k, 0)
    inside = (k >= 0) & (start < rows.end[marks][at])
    step[cpu] = np.where(inside, number[at], np.nan)
    gpu = np.flatnonzero(launcher >= 0)
    step[gpu] = step[launcher[gpu]]
    return step
