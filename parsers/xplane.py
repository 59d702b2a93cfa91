"""Reader of XPlane profiles (``*.xplane.pb``: JAX, TensorFlow, PyTorch/XLA), one file or the
TensorBoard layout ``<logdir>/plugins/profile/<run>/<host>.xplane.pb``.

Ranks: every device plane (``/device:GPU:k``, ``/device:TPU:k``, ``/device:CUSTOM:k``) with
events is a rank, numbered by its ordinal k; with several host files of one run, each file's
devices follow the previous file's (files in natural name order). Host planes (``/host:CPU``)
hold the threads of the process that drove those devices. A host line (thread) goes to the
device its launches reach (by ``correlation_id``; most of them, if several); a line that
launches nothing (the Python thread, which dispatches through the launch threads) goes to the
device with the most non-copy launches, the one that computes: a device that only receives
copies is not where the program's host time waits. A CPU-only profile is rank 0. The ranks
are ``rank_source = "default"``, so files given together are renumbered rather than rejected
when ordinals repeat. The devices of one file are on its host's clock (the profiler converts
device times to host time): they share one ``clock_domain`` and need no alignment.

Tracks are lines. On a device plane: stream lines (``Stream #7(...)``) are ``gpu_stream``
tracks of kernels (``compute``; memcpy/memset ``dma``; NCCL/RCCL kernels and XLA collective ops
``collective``); the ``XLA Ops`` line is the device's op sequence (``compute`` on a
``compute_engine`` track) only where the plane has no stream lines (TPUs), since on GPUs its
ops aggregate the stream kernels; ``XLA Modules``, ``Steps`` and other derived lines are
markers. Host lines are ``cpu_thread`` tracks of ``host`` events; a host event and a kernel with
the same ``correlation_id`` are joined by a ``launch`` edge, and the producer and consumers of
one TSL context (stats ``_pt``/``_p`` and ``_ct``/``_c``: a thread pool's
``ThreadpoolListener::Record`` and the worker's ``ThreadpoolListener::StartRegion`` of that
task) by a ``flow`` edge.

Times: see :mod:`xplane_events`; profilers that normalise line times to the profile start
(lines before ``Task Environment``'s ``profile_start_time``) get that start added back, so
files of one job share the host clock.
"""

from __future__ import annotations

from pathlib import Path

from google.protobuf.message import DecodeError

from tracediag.io import files as fileio
from tracediag.model import schema as S
from tracediag.model.assembly import RankPart
from tracediag.model.errors import TraceInputError
from tracediag.parsers.neuron_common import natural_key
from tracediag.parsers.perfetto_sniff import first_record_fields, head
from tracediag.parsers.perfetto_stream import FramingError, scan_records
from tracediag.parsers.protos.xplane_pb2 import XPlane, XSpace
from tracediag.parsers.xplane_events import plane_table
from tracediag.parsers.xplane_part import DEVICE_PLANE, device_part, host_frame, host_owners
from tracediag.parsers.xplane_source import fill_sources, hlo_sources

FORMAT = "xplane"

_PLANE_FIELDS = frozenset(range(1, 7))
_SUFFIX = ".xplane.pb"


def sniff(path: Path) -> bool:
    """An XSpace file (its first plane record reads as an XPlane with a name), or a directory
    holding ``*.xplane.pb`` files directly or under ``plugins/profile/<run>/``."""
    path = Path(path)
    if path.is_dir():
        return bool(_run_files(path))
    if not path.is_file():
        return False
    fields = first_record_fields(head(path))
    if not fields or any(number not in _PLANE_FIELDS for number, _, _ in fields):
        return False
    names = [value for number, wire, value in fields if number == 2 and wire == 2]
    try:
        return bool(names) and names[0].decode("utf-8").isprintable()
    except UnicodeDecodeError:
        return False


def _run_files(folder: Path) -> list[Path]:
    """The xplane files of ``folder``: its own, else those of its latest profile run."""
    own = sorted(folder.glob(f"*{_SUFFIX}"), key=lambda p: natural_key(p.name))
    if own:
        return own
    runs = sorted((folder / "plugins" / "profile").glob("*"), key=lambda p: natural_key(p.name))
    runs = [r for r in runs if r.is_dir() and any(r.glob(f"*{_SUFFIX}"))]
    return _run_files(runs[-1]) if runs else []


def read(path: Path) -> list[RankPart]:
    """The ranks of one file, or of every host file of a run folder (see the module docstring)."""
    path = Path(path)
    files = _run_files(path) if path.is_dir() else [path]
    parts: list[RankPart] = []
    for file in files:
        got = _read_file(file, first_rank=max((p.meta.rank for p in parts), default=-1) + 1)
        if path.is_dir():
            for part in got:
                part.meta.info["run"] = str(file.parent)
        parts.extend(got)
    return parts


def _space(path: Path) -> XSpace:
    data = fileio.read_bytes(path)
    try:
        return XSpace.FromString(data)
    except DecodeError:
        raise TraceInputError(path, _where_corrupt(data)) from None


def _where_corrupt(data: bytes) -> str:
    """The byte offset and problem of an XSpace that does not decode, found plane by plane."""
    try:
        records, used = scan_records(data, {})
    except FramingError as exc:
        return f"byte offset {exc.offset}: {exc.problem}"
    for offset, start, end in records:
        try:
            XPlane.FromString(data[start:end])
        except DecodeError:
            return f"byte offset {offset}: plane record does not decode as an XPlane"
    if used < len(data):
        return f"truncated at byte offset {len(data)}: the record at byte offset {used} is cut"
    return "does not decode as an XSpace"


def _read_file(path: Path, first_rank: int) -> list[RankPart]:
    space = _space(path)
    counts: dict[str, int] = {}
    shift = _time_shift(space)
    sources = hlo_sources(space)  # source lines of the HLO ops (xplane_source)
    devices: dict[int, list] = {}
    hosts, idle = [], []
    for plane in space.planes:  # a loop over planes
        match = DEVICE_PLANE.match(plane.name)
        if not any(len(line.events) for line in plane.lines):
            if match:
                idle.append(plane.name)  # profiled but ran nothing: not a rank
            continue
        table, own = plane_table(plane, shift, counts)
        fill_sources(table, sources)
        if match:
            devices.setdefault(int(match.group(2)), []).append((plane, table, own))
        else:
            hosts.append((plane, table))
    if not devices and not hosts:
        raise TraceInputError(path, "no events (the XSpace holds no timeline lines)")
    ordinals = sorted(devices) or [0]
    owner = host_owners(hosts, devices, ordinals[0])
    domain = f"host {space.hostnames[0]}" if space.hostnames else f"xspace {path}"
    parts = []
    for ordinal in ordinals:
        planes = devices.get(ordinal, [])
        rank = first_rank + ordinal
        meta = S.RankMeta(rank=rank, sources=[str(path)], format=FORMAT)
        # One process drives every device of the file (graph.idle_waits: its threads' waits).
        meta.info.update(
            rank_source="default",
            hostnames=list(space.hostnames),
            clock_domain=domain,
            host_process=str(path),
        )
        mine = [
            (plane, table[rows == ordinal])
            for (plane, table), rows in zip(hosts, owner, strict=True)
        ]
        mine = [(plane, table) for plane, table in mine if len(table)]
        host = host_frame(mine, meta) if mine else None
        parts.append(device_part(meta, planes, host))
    for reason, n in counts.items():
        parts[0].meta.count(reason, n)
    if idle:
        parts[0].meta.info["device_planes_without_events"] = idle
    if space.errors:
        parts[0].meta.info["profiler_errors"] = list(space.errors)
    return parts


def _time_shift(space: XSpace) -> int:
    """``profile_start_time`` when line times are relative to it (normalised), else 0."""
    start = 0
    for plane in space.planes:
        names = {int(k): m.name for k, m in plane.stat_metadata.items()}
        for stat in plane.stats:
            if names.get(stat.metadata_id) == "profile_start_time":
                start = int(stat.uint64_value or stat.int64_value)
    if not start:
        return 0
    first = min(
        (line.timestamp_ns for plane in space.planes for line in plane.lines if line.events),
        default=start,
    )
    # Normalised lines start near 0, absolute ones near the start: a line that begins a little
    # before the profile's start (its timestamp is any instant up to its first event) is not.
    return start if first < start // 2 else 0
