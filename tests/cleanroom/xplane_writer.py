"""Clean-room writer of JAX-profiler-like XPlane (``.xplane.pb``) fixtures with a known truth.

Written only from ``shared/reference/protobuf-formats.md`` (its XPlane section; ``chrome-trace.md``
and ``peers.md`` for context) and from what is publicly known of what jax.profiler / the XLA CUPTI
tracer write, WITHOUT reading the project's readers, parsers, rules or tests. It imports nothing
from tracediag and no generated ``_pb2`` classes: the protobuf wire format (varints,
length-delimited fields, fixed64 doubles, packed and unpacked repeated fields) is encoded by hand.

What it simulates: a small JAX data-parallel training step run for ``steps`` steps on
``hosts`` hosts x ``devices_per_host`` devices, in integer nanoseconds of a "true" clock.

* GPU flavour, per device: every step copies its input (``MemcpyH2D`` on a memcpy stream), runs
  a chain of XLA ops on the compute stream (fusions and cuBLAS/cutlass GEMMs, one op made of two
  kernels), four collectives (all-gather, reduce-scatter, all-reduce, collective-permute), each
  one NCCL kernel on a collective stream, and copies the loss back (``MemcpyD2H``). All GPU work
  of a device is one dependency chain: an activity starts at ``max(launch end + launch latency,
  end of the previous activity)``. Each activity is launched by the device's launch thread on the
  host (``cuLaunchKernel`` / ``cuLaunchKernelEx`` for NCCL / ``cuMemcpy*Async_v2``), sharing its
  ``correlation_id`` with the GPU event (correlation ids are unique per host process, NOT across
  hosts: the counters of different hosts overlap on purpose).
* Collectives rendezvous: the NCCL kernel (TPU: the collective op) starts on each device when that
  device reaches it (its *arrival*); the transfer starts when the LAST device arrives; every
  device's kernel ends at ``max(arrivals) + transfer_ns``. Early devices wait inside the kernel.
* The host: the python thread dispatches ``PjitFunction(train_step)`` and then blocks until the
  step's loss has reached the host on every local device (``block_until_ready``), so the next
  step's launches start only after that.
* TPU flavour: ``/device:TPU:k`` planes with ``XLA Modules``, ``XLA Ops`` and ``Steps`` lines and
  no streams, no launches, no correlation ids.

Files: one ``XSpace`` per host, ``<out>/<host>.xplane.pb`` (``layout="single"``, one host) or the
TensorBoard layout ``<out>/plugins/profile/<run>/<host>.xplane.pb``. A host's file is written on
its own clock: ``local_ns = true_ns + clock_offset_ns[host]`` (host 0's offset is 0, so the true
clock is host 0's clock). Absolute time of an event in ps = ``line.timestamp_ns * 1000 +
event.offset_ps``; times are epoch nanoseconds (~1.7e18).

Everything in ``truth.json`` comes from the simulation, never from reading the files back. The
straggler saving is the same simulation (same random draws) re-run without the slowdown.

Public API: :data:`DEFAULTS`, :data:`FORMAT_CHOICES`, :data:`SCENARIOS`, :data:`SCENARIO_NOTES`,
:func:`write_job`, :func:`write_scenario`.
"""

from __future__ import annotations

import datetime
import json
import os
import struct
import zlib

import numpy as np

__all__ = [
    "DEFAULTS",
    "FORMAT_CHOICES",
    "SCENARIOS",
    "SCENARIO_NOTES",
    "write_job",
    "write_scenario",
]

# Format details the documentation leaves open. A keyword left at None is drawn from the seed;
# the value used is recorded in truth["variation"].
FORMAT_CHOICES: dict[str, tuple] = {
    # string stats as XStat.str_value, as XStat.ref_value (the string is the name of a
    # stat_metadata entry), or ref for hlo_op/hlo_module and str for the others
    "stat_strings": ("str", "ref", "mixed"),
    # integer stats as uint64_value or int64_value
    "int_stats": ("uint", "int"),
    # True: C++ kernels have the mangled name in XEventMetadata.name and the demangled one in
    # display_name (lines get a display_name too); False: demangled name only, no display_name
    "display_names": (True, False),
    # XLine.timestamp_ns: "session" (profile start, same for every line of a file),
    # "first_event" (the line's first event), "jitter" (a random time before the first event)
    "line_timestamps": ("session", "first_event", "jitter"),
    "event_order": ("sorted", "shuffled"),
    # per-op-constant stats (hlo_op, hlo_module, kernel_details, hlo_category, program_id) on
    # each XEvent or on its XEventMetadata; per-instance ones (correlation_id...) always on XEvent
    "stats_on": ("event", "metadata"),
    # extra planes/lines with nothing in them (/host:metadata, Task Environment, idle stream)
    "empty": (False, True),
    # fields with numbers the schema does not define, of every wire type
    "unknown_fields": (False, True),
    # "natural": device planes in ordinal order then the host, ids like the XLA tracer;
    # "shuffled": planes in random order with random ids
    "plane_order": ("natural", "shuffled"),
    # metadata ids 1, 2, 3... in first-use order, or sparse random ids written unsorted
    "metadata_ids": ("dense", "sparse"),
    # XEventMetadata.child_id (repeated int64) packed (proto3 default) or one field per value
    "child_id_packing": ("packed", "unpacked"),
    # map<int64, X> entries: value carries its id too ("both") or only the map key does
    "map_value_id": ("both", "key_only"),
}

DEFAULTS: dict = {
    "platform": "gpu",  # "gpu" | "tpu"
    "hosts": 1,
    "devices_per_host": 4,
    "steps": 3,
    "seed": 0,
    "layout": "single",  # "single" (<out>/<host>.xplane.pb, one host) | "tensorboard"
    "first_step": 1,  # step number of the first profiled step
    "straggler_device": None,  # global rank whose compute is slowed by straggler_factor
    "straggler_factor": 1.0,
    "launch_ns": (3_000, 7_000),  # host launch API duration range
    "launch_gap_ns": (500, 2_000),  # host time between two launches
    "kernel_scale": 1.0,  # multiplies every compute kernel duration range
    "bytes_scale": 1.0,  # multiplies the bytes of every collective and copy
    "clock_offsets_ns": None,  # None (all 0) | list per host (host 0 forced to 0)
    "steps_line": True,  # GPU: write the derived "Steps" line
    "derived_lines": True,  # GPU: write the derived "XLA Ops" / "XLA Modules" lines
    "async_collectives": False,  # GPU hlo names all-reduce-start.1 instead of all-reduce.1
    "nccl_naming": "dev",  # "dev": ncclDevKernel_*; "legacy": ncclKernel_*
    "epoch_ns": 1_733_235_548_000_000_000,  # true time of the profile start
    **dict.fromkeys(FORMAT_CHOICES),
}

SCENARIOS: dict[str, dict] = {
    "clean": {
        "stat_strings": "str",
        "int_stats": "uint",
        "child_id_packing": "packed",
        "map_value_id": "both",
        "display_names": True,
        "line_timestamps": "session",
        "event_order": "sorted",
        "stats_on": "event",
        "empty": False,
        "unknown_fields": False,
        "plane_order": "natural",
        "metadata_ids": "dense",
    },
    "straggler_device": {
        "straggler_device": 2,
        "straggler_factor": 1.35,
        "stat_strings": "ref",
        "stats_on": "metadata",
        "event_order": "shuffled",
        "line_timestamps": "first_event",
    },
    "host_bound": {
        "launch_ns": (50_000, 80_000),
        "launch_gap_ns": (5_000, 15_000),
        "kernel_scale": 0.25,
        "bytes_scale": 1 / 32,
        "steps_line": False,
        "display_names": False,
        "unknown_fields": True,
        "empty": True,
        "plane_order": "shuffled",
        "metadata_ids": "sparse",
    },
    "tpu": {
        "platform": "tpu",
        "stat_strings": "mixed",
        "line_timestamps": "jitter",
        "child_id_packing": "unpacked",
        "map_value_id": "key_only",
    },
    "two_hosts": {
        "hosts": 2,
        "devices_per_host": 2,
        "layout": "tensorboard",
        "clock_offsets_ns": [0, 1_734_567_891],
        "async_collectives": True,
        "nccl_naming": "legacy",
        "plane_order": "shuffled",
        "line_timestamps": "first_event",
        "int_stats": "int",
    },
    "raw_gpu_no_derived_lines": {
        "derived_lines": False,
        "steps_line": False,
        "unknown_fields": True,
        "stat_strings": "mixed",
        "event_order": "shuffled",
    },
}

SCENARIO_NOTES: dict[str, str] = {
    "clean": "4 GPUs on one host, balanced, 3 steps; str stats, display names, line timestamps "
    "at the session start, sorted events, stats on events, natural plane order",
    "straggler_device": "GPU rank 2's compute kernels x1.35; others wait in every collective; "
    "ref_value strings, stats on metadata, shuffled events, per-line timestamps",
    "host_bound": "launches of 50-80 us for kernels of a few us: the GPUs idle between kernels; "
    "no Steps line, no display names, unknown fields, empty planes/lines, shuffled planes, "
    "sparse metadata ids",
    "tpu": "4 TPU devices: XLA Modules / XLA Ops / Steps lines, no streams, no launches",
    "two_hosts": "2 hosts x 2 GPUs, TensorBoard layout, host 1's clock 1.734567891 s ahead; "
    "async collective hlo names, legacy NCCL kernel names, shuffled planes",
    "raw_gpu_no_derived_lines": "GPU planes with stream lines only (no XLA Ops / XLA Modules / "
    "Steps): ops and steps only through the kernels' hlo_op / hlo_module stats",
}

# Derived-line ids as in the XLA tracer's derived timeline (kThreadIdDerivedMin = 0xdeadbeef).
_LINE_ID_STEPS = 0xDEADBEEF
_LINE_ID_HLO_MODULE = 0xDEADBEEF + 4
_LINE_ID_HLO_OP = 0xDEADBEEF + 5
_HOST_PLANE_ID = 49
_STREAM_H2D, _STREAM_COMPUTE, _STREAM_D2H, _STREAM_NCCL, _STREAM_IDLE = 14, 13, 15, 21, 7
_MODULE = "jit_train_step"
_PROGRAM_ID = 7_315_208_464_152_812_733
_PYTHON_TID = 1_104_711
_LAUNCH_TID0 = 1_104_902

_CUTLASS = "cutlass_80_tensorop_s1688gemm_128x128_32x3_tn_align4"
_CUBLAS_SM90 = (
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_"
    "execute_segment_k_off_kernel__5x_cublas"
)
# (demangled, mangled): C++ kernels; XLA-emitted and cuBLAS kernels are extern "C" (no mangling)
_CPP_KERNELS = {
    "cutlass": (
        f"void cutlass::Kernel2<{_CUTLASS}>({_CUTLASS}::Params)",
        f"_ZN7cutlass7Kernel2I{len(_CUTLASS)}{_CUTLASS}EEvNT_6ParamsE",
    ),
}
_NCCL_BASE = {
    "dev": {
        "all-reduce": "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
        "all-gather": "ncclDevKernel_AllGather_RING_LL",
        "reduce-scatter": "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL",
        "collective-permute": "ncclDevKernel_SendRecv",
    },
    "legacy": {
        "all-reduce": "ncclKernel_AllReduce_RING_LL_Sum_float",
        "all-gather": "ncclKernel_AllGather_RING_LL_Sum_int8_t",
        "reduce-scatter": "ncclKernel_ReduceScatter_RING_LL_Sum_float",
        "collective-permute": "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t",
    },
}
_NCCL_ARGS = {
    "dev": ("(ncclDevKernelArgsStorage<4096ul>)", "24ncclDevKernelArgsStorageILm4096EE"),
    "legacy": ("(ncclDevComm*, unsigned long, ncclWork*)", "P11ncclDevCommmP8ncclWork"),
}

# One step's program. Op: (kind, hlo op, hlo category, payload). Compute payload: kernels as
# (kernel key or extern-C name, grid, block, regs, duration range ns). Collective payload: bytes.
_GPU_PROGRAM = [
    ("memcpy", "MemcpyH2D", "", 4 << 20),
    ("coll", "all-gather.1", "all-gather", 16 << 20),
    ("comp", "fusion.1", "loop fusion", [("loop_convert_fusion", 512, 256, 16, (18e3, 26e3))]),
    ("comp", "custom-call.2", "custom-call", [("cutlass", 264, 128, 232, (110e3, 150e3))]),
    (
        "comp",
        "fusion.3",
        "input fusion",
        [
            ("input_reduce_fusion", 1024, 256, 32, (30e3, 40e3)),
            ("input_reduce_fusion_1", 64, 1024, 40, (8e3, 12e3)),
        ],
    ),
    ("comp", "custom-call.4", "custom-call", [(_CUBLAS_SM90, 132, 384, 168, (140e3, 190e3))]),
    ("coll", "reduce-scatter.1", "reduce-scatter", 16 << 20),
    ("comp", "fusion.5", "loop fusion", [("loop_multiply_fusion", 512, 256, 18, (20e3, 28e3))]),
    ("comp", "custom-call.6", "custom-call", [("cutlass", 264, 128, 232, (90e3, 130e3))]),
    ("coll", "all-reduce.1", "all-reduce", 32 << 20),
    ("comp", "fusion.7", "loop fusion", [("loop_add_fusion", 1024, 256, 20, (25e3, 35e3))]),
    ("coll", "collective-permute.1", "collective-permute", 2 << 20),
    ("comp", "fusion.8", "loop fusion", [("loop_select_fusion", 256, 256, 16, (6e3, 10e3))]),
    ("memcpy", "MemcpyD2H", "", 4),
]
_TPU_PROGRAM = [
    ("comp", "fusion.1", "non-fusion elementwise", (15e3, 22e3)),
    ("coll", "all-gather.1", "all-gather", 16 << 20),
    ("comp", "convolution.2", "convolution", (120e3, 160e3)),
    ("comp", "fusion.3", "convolution fusion", (60e3, 80e3)),
    ("coll", "reduce-scatter.1", "reduce-scatter", 16 << 20),
    ("comp", "convolution.4", "convolution", (100e3, 140e3)),
    ("coll", "all-reduce.1", "all-reduce", 32 << 20),
    ("comp", "fusion.5", "loop fusion", (20e3, 30e3)),
    ("coll", "collective-permute.1", "collective-permute", 2 << 20),
    ("comp", "fusion.6", "loop fusion", (5e3, 9e3)),
]
# link bandwidth (bytes/ns) and fixed latency (ns) of a collective transfer
_BW = {"gpu": 100.0, "tpu": 200.0}
_COLL_LATENCY_NS = 12_000


# --------------------------------------------------------------------------- wire format
def _uvarint(n: int) -> bytes:
    n &= 0xFFFF_FFFF_FFFF_FFFF  # negative int64 -> 10-byte two's complement varint
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _tag(field: int, wire_type: int) -> bytes:
    return _uvarint(field << 3 | wire_type)


def _fv(field: int, value: int, always: bool = False) -> bytes:
    """Varint field; proto3 drops zeros unless the field is a set member of a oneof."""
    return _tag(field, 0) + _uvarint(value) if (value or always) else b""


def _fb(field: int, data: bytes, always: bool = False) -> bytes:
    if not data and not always:
        return b""
    return _tag(field, 2) + _uvarint(len(data)) + data


def _fs(field: int, text: str, always: bool = False) -> bytes:
    return _fb(field, text.encode("utf-8"), always)


def _fd(field: int, value: float) -> bytes:
    return _tag(field, 1) + struct.pack("<d", value)


def _unknown_fields(salt: int) -> bytes:
    """Fields numbered past the schema, one of each wire type (varint, fixed64, bytes, fixed32)."""
    return (
        _fv(900 + salt, 123_456_789 + salt, always=True)
        + _tag(901 + salt, 1)
        + struct.pack("<Q", 0xFEED_FACE_0000 + salt)
        + _fb(902 + salt, b"\x08\x01\x12\x03xyz", always=True)
        + _tag(903 + salt, 5)
        + struct.pack("<I", 0xC0FFEE)
    )


# --------------------------------------------------------------------------- XPlane builder
class _Plane:
    """Collects one XPlane: metadata tables, lines and events, then encodes it."""

    def __init__(self, name, plane_id, fmt, rng):
        self.name, self.id, self.fmt, self.rng = name, plane_id, fmt, rng
        self.event_md: dict[str, dict] = {}
        self.stat_md: dict[str, int] = {}
        self.lines: list[dict] = []
        self.stats: list[tuple] = []
        self._used_ids: set[int] = set()
        self._next = {"event": 1, "stat": 1}

    def _new_id(self, table: str) -> int:
        if self.fmt["metadata_ids"] == "dense":
            self._next[table] += 1
            return self._next[table] - 1
        while True:
            new = int(self.rng.integers(1_000, 1 << 40))
            if new not in self._used_ids:
                self._used_ids.add(new)
                return new

    def stat_id(self, name: str) -> int:
        if name not in self.stat_md:
            self.stat_md[name] = self._new_id("stat")
        return self.stat_md[name]

    def event_id(self, name, display=None, stats=(), children=()) -> int:
        if name not in self.event_md:
            self.event_md[name] = {
                "id": self._new_id("event"),
                "display": display,
                "stats": list(stats),
                "children": list(children),
                "used": False,
            }
        return self.event_md[name]["id"]

    def line(self, line_id, name, display=None) -> dict:
        ln = {"id": line_id, "name": name, "display": display, "events": []}
        self.lines.append(ln)
        return ln

    def add(self, line, name, start_ns, dur_ns, stats=(), md_stats=(), display=None):
        """Event on `line` at local epoch ns `start_ns`.

        ``md_stats`` are the stats that depend on the event's name only; with
        ``stats_on="metadata"`` they go to the XEventMetadata, except those that differ from
        what an earlier event of the same name put there (a cutlass kernel used by two HLO ops):
        those stay on the event, which a reader must let override the metadata.
        """
        md_id = self.event_id(name, display)
        md = self.event_md[name]
        if self.fmt["stats_on"] == "metadata":
            if not md["used"]:
                md["stats"] = list(md_stats)
            ev_stats = [kv for kv in md_stats if kv not in md["stats"]] + list(stats)
        else:
            ev_stats = list(md_stats) + list(stats)
        md["used"] = True
        line["events"].append((md_id, int(start_ns), int(dur_ns), ev_stats))

    # encoding
    def _stat(self, name: str, value) -> bytes:
        body = _fv(1, self.stat_id(name))
        if isinstance(value, float):
            body += _fd(2, value)
        elif isinstance(value, bool | int | np.integer):
            value = int(value)
            field = 3 if self.fmt["int_stats"] == "uint" and value >= 0 else 4
            body += _fv(field, value, always=True)
        else:
            mode = self.fmt["stat_strings"]
            as_ref = mode == "ref" or (mode == "mixed" and name in ("hlo_op", "hlo_module"))
            if as_ref:
                body += _fv(7, self.stat_id(value), always=True)
            else:
                body += _fs(5, value, always=True)
        return body

    def _stats(self, field: int, stats) -> bytes:
        return b"".join(_fb(field, self._stat(k, v), always=True) for k, v in stats)

    def _line_bytes(self, ln, session_ns, salt) -> bytes:
        events = sorted(ln["events"], key=lambda e: (e[1], -e[2]))
        if events:
            first = events[0][1]
            last = max(e[1] + e[2] for e in events)
            mode = self.fmt["line_timestamps"]
            if mode == "session":
                ts = session_ns
            elif mode == "first_event":
                ts = first
            else:
                ts = first - int(self.rng.integers(0, 2_000_000))
            dur_ps = (last - ts) * 1000
        else:
            ts, dur_ps = session_ns, 0
        if self.fmt["event_order"] == "shuffled" and len(events) > 1:
            events = [events[i] for i in self.rng.permutation(len(events))]
        body = _fv(1, ln["id"]) + _fs(2, ln["name"]) + _fv(3, ts)
        for md_id, start, dur, stats in events:
            ev = _fv(1, md_id) + _fv(2, (start - ts) * 1000, always=True) + _fv(3, dur * 1000)
            ev += self._stats(4, stats)
            if self.fmt["unknown_fields"]:
                ev += _unknown_fields(salt % 7)
            body += _fb(4, ev, always=True)
        body += _fv(9, dur_ps)
        if ln["display"] is not None:
            body += _fv(10, ln["id"]) + _fs(11, ln["display"])
        if self.fmt["unknown_fields"]:
            body += _unknown_fields(salt % 5 + 10)
        return body

    def encode(self, session_ns: int) -> bytes:
        out = _fv(1, self.id) + _fs(2, self.name)
        for i, ln in enumerate(self.lines):
            out += _fb(3, self._line_bytes(ln, session_ns, i), always=True)
        # stat metadata must include strings used by ref_value: encode stats first (above)
        out += self._stats(6, self.stats)
        with_id = self.fmt["map_value_id"] == "both"
        ev_entries = []
        for name, md in self.event_md.items():
            val = (_fv(1, md["id"]) if with_id else b"") + _fs(2, name)
            val += self._stats(5, md["stats"])
            if md["display"] is not None:
                val += _fs(4, md["display"])
            if md["children"]:
                ids = [self.event_md[c]["id"] for c in md["children"]]
                if self.fmt["child_id_packing"] == "packed":
                    val += _fb(6, b"".join(_uvarint(i) for i in ids))
                else:
                    val += b"".join(_fv(6, i, always=True) for i in ids)
            ev_entries.append(_fv(1, md["id"], always=True) + _fb(2, val, always=True))
        st_entries = [
            _fv(1, sid, always=True)
            + _fb(2, (_fv(1, sid) if with_id else b"") + _fs(2, name), always=True)
            for name, sid in self.stat_md.items()
        ]
        if self.fmt["metadata_ids"] == "sparse":
            ev_entries = [ev_entries[i] for i in self.rng.permutation(len(ev_entries))]
            st_entries = [st_entries[i] for i in self.rng.permutation(len(st_entries))]
        out += b"".join(_fb(4, e, always=True) for e in ev_entries)
        out += b"".join(_fb(5, e, always=True) for e in st_entries)
        if self.fmt["unknown_fields"]:
            out += _unknown_fields(20)
        return out


# --------------------------------------------------------------------------- simulation
def _kernel_names(key: str, display_names: bool) -> tuple[str, str | None, str]:
    """(metadata name, display_name or None, demangled name) of a compute kernel."""
    if key in _CPP_KERNELS:
        demangled, mangled = _CPP_KERNELS[key]
        return (mangled, demangled, demangled) if display_names else (demangled, None, demangled)
    return key, None, key


def _nccl_names(coll: str, naming: str, display_names: bool) -> tuple[str, str | None, str]:
    base = _NCCL_BASE[naming][coll]
    args_demangled, args_mangled = _NCCL_ARGS[naming]
    demangled = base + args_demangled
    mangled = f"_Z{len(base)}{base}{args_mangled}"
    return (mangled, demangled, demangled) if display_names else (demangled, None, demangled)


def _transfer_ns(platform: str, kind: str, nbytes: int, n: int) -> int:
    factor = {"all-reduce": 2 * (n - 1) / n, "collective-permute": 1.0}.get(kind, (n - 1) / n)
    return int(_COLL_LATENCY_NS + factor * nbytes / _BW[platform])


class _Draws:
    """Every random duration of the job, drawn once so that a re-run differs only by the
    injected slowdown."""

    def __init__(self, o, n_act, n_dev, n_hosts):
        rng = np.random.default_rng([o["seed"], 0])
        s = o["steps"]
        self.u_act = rng.random((s, n_dev, n_act))  # position in each activity's range
        self.launch = rng.integers(*o["launch_ns"], size=(s, n_dev, n_act), endpoint=True)
        self.gap = rng.integers(*o["launch_gap_ns"], size=(s, n_dev, n_act), endpoint=True)
        self.latency = rng.integers(2_000, 5_000, size=(s, n_dev, n_act), endpoint=True)
        # the device's own time between two dependent activities
        self.kk_gap = rng.integers(500, 1_500, size=(s, n_dev, n_act), endpoint=True)
        self.dispatch = rng.integers(150_000, 250_000, size=(s, n_hosts), endpoint=True)
        self.python = rng.integers(40_000, 90_000, size=(s, n_hosts), endpoint=True)
        self.thread_start = rng.integers(5_000, 15_000, size=(s, n_dev), endpoint=True)


def _activities(o):
    """Flatten one step's program into activities (one GPU kernel / memcpy, or one TPU op)."""
    acts = []
    if o["platform"] == "tpu":
        for kind, hlo, cat, payload in _TPU_PROGRAM:
            act = {"kind": "collective" if kind == "coll" else "op", "hlo": hlo, "cat": cat}
            if kind == "coll":
                act["bytes"], act["coll"] = max(1, int(payload * o["bytes_scale"])), cat
            else:
                act["range"] = payload
            acts.append(act)
        return acts
    for kind, hlo, cat, payload in _GPU_PROGRAM:
        if kind == "memcpy":
            nbytes = max(1, int(payload * o["bytes_scale"]))
            acts.append({"kind": "memcpy", "hlo": None, "name": hlo, "bytes": nbytes})
            # a copy of a few bytes is latency-bound, a large one bandwidth-bound
            acts[-1]["range"] = (2e3 + nbytes / 24.0, 3e3 + nbytes / 20.0)
        elif kind == "coll":
            nbytes = max(1, int(payload * o["bytes_scale"]))
            act = {"kind": "collective", "hlo": hlo, "cat": cat, "bytes": nbytes, "coll": cat}
            if o["async_collectives"]:
                act["hlo"] = hlo.replace(".", "-start.", 1)
            acts.append(act)
        else:
            for kernel, grid, block, regs, rng_ns in payload:
                acts.append(
                    {
                        "kind": "kernel",
                        "hlo": hlo,
                        "cat": cat,
                        "kernel": kernel,
                        "grid": grid,
                        "block": block,
                        "regs": regs,
                        "range": tuple(x * o["kernel_scale"] for x in rng_ns),
                    }
                )
    return acts


def _simulate(o, draws, acts, slow_factor):
    """Run the job; returns per activity (step, device, index) arrays of true-clock times."""
    steps, n_dev, n_hosts = o["steps"], o["hosts"] * o["devices_per_host"], o["hosts"]
    dph = o["devices_per_host"]
    n_act = len(acts)
    shape = (steps, n_dev, n_act)
    start, end = np.zeros(shape, np.int64), np.zeros(shape, np.int64)
    l_start, l_end = np.zeros(shape, np.int64), np.zeros(shape, np.int64)
    transfer = np.zeros((steps, n_act), np.int64)
    disp = np.zeros((steps, n_hosts, 2), np.int64)  # python dispatch [start, end]
    block = np.zeros((steps, n_hosts, 2), np.int64)  # python block_until_ready [start, end]
    dur = np.zeros(shape, np.int64)
    for j, a in enumerate(acts):
        if a["kind"] != "collective":
            lo, hi = a["range"]
            dur[:, :, j] = np.rint(lo + draws.u_act[:, :, j] * (hi - lo)).astype(np.int64)
            if a["kind"] in ("kernel", "op") and o["straggler_device"] is not None:
                r = o["straggler_device"]
                dur[:, r, j] = np.rint(dur[:, r, j] * slow_factor).astype(np.int64)
    t0 = o["epoch_ns"] + 1_000_000
    host_ready = np.full(n_hosts, t0, np.int64)
    prev_end = np.zeros(n_dev, np.int64)
    for s in range(steps):
        disp[s, :, 0] = host_ready
        disp[s, :, 1] = host_ready + draws.dispatch[s]
        host_of = np.arange(n_dev) // dph
        ready = disp[s, host_of, 1] + draws.thread_start[s]  # launch thread / TPU queue
        if o["platform"] == "tpu":  # no launches: the step's program is queued at once
            prev_end = np.maximum(prev_end, ready + draws.latency[s, :, 0])
        launch_at = ready.copy()
        for j, a in enumerate(acts):
            if o["platform"] == "tpu":
                avail = prev_end + draws.kk_gap[s, :, j]
            else:
                l_start[s, :, j] = launch_at
                l_end[s, :, j] = launch_at + draws.launch[s, :, j]
                launch_at = l_end[s, :, j] + draws.gap[s, :, j]
                avail = np.maximum(
                    l_end[s, :, j] + draws.latency[s, :, j], prev_end + draws.kk_gap[s, :, j]
                )
            start[s, :, j] = avail  # for a collective: the device's arrival
            if a["kind"] == "collective":
                transfer[s, j] = _transfer_ns(o["platform"], a["coll"], a["bytes"], n_dev)
                end[s, :, j] = avail.max() + transfer[s, j]
            else:
                end[s, :, j] = avail + dur[s, :, j]
            prev_end = end[s, :, j].copy()
        step_done = end[s, :, -1].reshape(n_hosts, dph).max(axis=1)
        block[s, :, 0] = disp[s, :, 1]
        block[s, :, 1] = np.maximum(step_done + 20_000, disp[s, :, 1])
        host_ready = block[s, :, 1] + draws.python[s]
    return {
        "start": start,
        "end": end,
        "transfer": transfer,
        "launch_start": l_start,
        "launch_end": l_end,
        "dispatch": disp,
        "block": block,
    }


def _union_ns(starts, ends) -> int:
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    run_end = np.maximum.accumulate(e)
    # an interval opens a new run when it starts after everything before it ended
    new_run = np.concatenate([[True], s[1:] > run_end[:-1]])
    run_start = s[new_run]
    run_stop = np.maximum.reduceat(e, np.flatnonzero(new_run))
    return int((run_stop - run_start).sum())


# --------------------------------------------------------------------------- file writing
def _kernel_details(regs, grid, block) -> str:
    return f"regs:{regs} static_shared:0 dynamic_shared:0 grid:{grid},1,1 block:{block},1,1"


class _Writer:
    """Turns the simulation into one XSpace per host (on that host's clock)."""

    def __init__(self, o, acts, sim, out_dir, fmt):
        self.o, self.acts, self.sim, self.out_dir, self.fmt = o, acts, sim, out_dir, fmt
        self.dph = o["devices_per_host"]
        prefix = "tpu-vm" if o["platform"] == "tpu" else "gpu-node"
        self.hostnames = [f"{prefix}-{h}" for h in range(o["hosts"])]
        self.offsets = _offsets(o)
        self.module = f"{_MODULE}({_PROGRAM_ID % 10**9})"

    def file_path(self, h: int) -> str:
        if self.o["layout"] == "tensorboard":
            stamp = datetime.datetime.fromtimestamp(self.o["epoch_ns"] // 10**9, datetime.UTC)
            run = stamp.strftime("%Y_%m_%d_%H_%M_%S")
            return os.path.join(
                self.out_dir, "plugins", "profile", run, self.hostnames[h] + ".xplane.pb"
            )
        return os.path.join(self.out_dir, self.hostnames[h] + ".xplane.pb")

    def write(self) -> list[str]:
        paths = []
        for h in range(self.o["hosts"]):
            path = self.file_path(h)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(self._space(h))
            paths.append(path)
        return paths

    def _disp(self, text):
        return text if self.fmt["display_names"] else None

    def _space(self, h: int) -> bytes:
        o, fmt = self.o, self.fmt
        rng = np.random.default_rng([o["seed"], 2, h])
        off = self.offsets[h]
        session = o["epoch_ns"] + off  # profile start on this host's clock
        host_plane = _Plane("/host:CPU", _HOST_PLANE_ID, fmt, rng)
        self._host_python(host_plane, h, off)
        planes = []
        corr = self._correlation_ids(h)
        dev_type = "TPU" if o["platform"] == "tpu" else "GPU"
        for k in range(self.dph):
            plane = _Plane(f"/device:{dev_type}:{k}", k + 1, fmt, rng)
            if o["platform"] == "gpu":
                launch = host_plane.line(
                    _LAUNCH_TID0 + k, f"tf_pjrt_gpu_{k}_execute", self._disp(f"gpu_{k}_execute")
                )
                self._gpu_plane(plane, host_plane, launch, h * self.dph + k, off, corr[:, k])
            else:
                self._tpu_plane(plane, h * self.dph + k, off)
            planes.append(plane)
        planes.append(host_plane)
        if fmt["empty"]:
            planes.append(_Plane("/host:metadata", _HOST_PLANE_ID + 1, fmt, rng))
            env = _Plane("Task Environment", _HOST_PLANE_ID + 2, fmt, rng)
            stop = int(self.sim["block"][-1, h, 1]) + off + 1_000_000
            env.stats = [("profile_start_time", session), ("profile_stop_time", stop)]
            planes.append(env)
        if fmt["plane_order"] == "shuffled":
            ids = rng.choice(np.arange(100, 10_000), size=len(planes), replace=False)
            for plane, pid in zip(planes, ids, strict=True):
                plane.id = int(pid)
            planes = [planes[i] for i in rng.permutation(len(planes))]
        body = b"".join(_fb(1, p.encode(session), always=True) for p in planes)
        body += _fs(4, self.hostnames[h])
        if fmt["unknown_fields"]:
            body += _unknown_fields(30)
        return body

    def _correlation_ids(self, h: int) -> np.ndarray:
        """CUPTI-like ids: one process-wide counter in launch order over all local devices,
        with gaps (other API calls take ids too), starting at the same value on every host."""
        launch = self.sim["launch_start"][:, h * self.dph : (h + 1) * self.dph, :]
        order = np.argsort(launch.ravel(), kind="stable")
        ids = np.empty(launch.size, np.int64)
        ids[order] = 100_017 + np.cumsum(1 + np.arange(launch.size) % 3)
        return ids.reshape(launch.shape)  # (steps, local device, activity)

    def _host_python(self, plane, h, off):
        py = plane.line(_PYTHON_TID + h, "python3", self._disp("MainThread"))
        disp, block = self.sim["dispatch"], self.sim["block"]
        for s in range(self.o["steps"]):
            a, b = disp[s, h]
            plane.add(py, "PjitFunction(train_step)", a + off, b - a)
            a, b = block[s, h]
            plane.add(py, "block_until_ready", a + off, b - a)

    def _step_stats(self, s):
        return [("group_id", s), ("step_num", self.o["first_step"] + s)]

    def _gpu_plane(self, plane, host_plane, launch_line, r, off, corr):
        o, sim, acts, fmt = self.o, self.sim, self.acts, self.fmt
        plane.stats = [
            ("devcap_clock_rate", 1_980_000),
            ("devcap_core_count", 132),
            ("devcap_memory_bandwidth", 4_800_000_000_000),
            ("devcap_memory_size", 85_520_809_984),
            ("devcap_compute_cap_major", 9),
            ("devcap_compute_cap_minor", 0),
        ]
        streams = {
            _STREAM_H2D: "MemcpyH2D",
            _STREAM_COMPUTE: "Compute",
            _STREAM_NCCL: "Compute",
            _STREAM_D2H: "MemcpyD2H",
        }
        lines = {
            sid: plane.line(sid, f"Stream #{sid}({what})", self._disp(f"Stream #{sid}"))
            for sid, what in streams.items()
        }
        if fmt["empty"]:
            plane.line(_STREAM_IDLE, f"Stream #{_STREAM_IDLE}(Compute)")
        if o["derived_lines"]:
            mod_line = plane.line(_LINE_ID_HLO_MODULE, "XLA Modules")
            ops_line = plane.line(_LINE_ID_HLO_OP, "XLA Ops")
            ops = [j for j, a in enumerate(acts) if a["kind"] != "memcpy"]
            hlos = list(dict.fromkeys(acts[j]["hlo"] for j in ops))
            plane.event_id(self.module, children=hlos)
        steps_line = plane.line(_LINE_ID_STEPS, "Steps") if o["steps_line"] else None
        for s in range(o["steps"]):
            start, end = sim["start"][s, r], sim["end"][s, r]
            for j, a in enumerate(acts):
                cid = int(corr[s, j])
                per_event = [("correlation_id", cid), ("group_id", s)]
                if a["kind"] == "memcpy":
                    kind = "HtoD" if a["name"] == "MemcpyH2D" else "DtoH"
                    sid = _STREAM_H2D if kind == "HtoD" else _STREAM_D2H
                    details = f"kind:{kind} size:{a['bytes']} dest:{r % self.dph} async:1"
                    per_event.append(("memcpy_details", details))
                    name, disp, md_stats, api = a["name"], None, [], f"cuMemcpy{kind}Async_v2"
                else:
                    if a["kind"] == "collective":
                        name, disp, _ = _nccl_names(
                            a["coll"], o["nccl_naming"], fmt["display_names"]
                        )
                        sid, api, details = (
                            _STREAM_NCCL,
                            "cuLaunchKernelEx",
                            _kernel_details(96, 16, 512),
                        )
                    else:
                        name, disp, _ = _kernel_names(a["kernel"], fmt["display_names"])
                        sid, api = _STREAM_COMPUTE, "cuLaunchKernel"
                        details = _kernel_details(a["regs"], a["grid"], a["block"])
                    md_stats = [
                        ("hlo_op", a["hlo"]),
                        ("hlo_module", _MODULE),
                        ("kernel_details", details),
                    ]
                plane.add(
                    lines[sid], name, start[j] + off, end[j] - start[j], per_event, md_stats, disp
                )
                l0, l1 = sim["launch_start"][s, r, j], sim["launch_end"][s, r, j]
                host_plane.add(
                    launch_line,
                    api,
                    l0 + off,
                    l1 - l0,
                    [("correlation_id", cid), ("device_id", r % self.dph)],
                )
            if o["derived_lines"]:
                self._derived(plane, ops_line, mod_line, ops, start, end, off, s)
            if steps_line is not None:
                t0, t1 = start.min(), end.max()
                plane.add(
                    steps_line, str(o["first_step"] + s), t0 + off, t1 - t0, self._step_stats(s)
                )

    def _derived(self, plane, ops_line, mod_line, ops, start, end, off, s):
        """XLA Ops: one event per HLO op spanning its kernels; XLA Modules: the program."""
        acts = self.acts
        for hlo in dict.fromkeys(acts[j]["hlo"] for j in ops):
            js = [j for j in ops if acts[j]["hlo"] == hlo]
            t0, t1 = start[js].min(), end[js].max()
            md = [("hlo_category", acts[js[0]]["cat"]), ("program_id", _PROGRAM_ID)]
            plane.add(ops_line, hlo, t0 + off, t1 - t0, [("run_id", s)], md)
        t0, t1 = start[ops].min(), end[ops].max()
        md = [("program_id", _PROGRAM_ID)]
        plane.add(mod_line, self.module, t0 + off, t1 - t0, [("run_id", s)], md)

    def _tpu_plane(self, plane, r, off):
        o, sim, acts = self.o, self.sim, self.acts
        plane.stats = [
            ("peak_teraflops_per_second", 197.0),
            ("peak_hbm_bw_gigabytes_per_second", 819.0),
        ]
        steps_line = plane.line(1, "Steps", self._disp("Steps"))
        mod_line = plane.line(2, "XLA Modules", self._disp("XLA Modules"))
        ops_line = plane.line(3, "XLA Ops", self._disp("XLA Ops"))
        if self.fmt["empty"]:
            plane.line(4, "XLA TraceMe")
        plane.event_id(self.module, children=[a["hlo"] for a in acts])
        for s in range(o["steps"]):
            start, end = sim["start"][s, r], sim["end"][s, r]
            for j, a in enumerate(acts):
                flops = 0 if a["kind"] == "collective" else 2 * 1024**3 * (j + 1)
                md = [
                    ("hlo_category", a["cat"]),
                    ("program_id", _PROGRAM_ID),
                    ("flops", flops),
                    ("bytes_accessed", int(a.get("bytes", 1 << 22))),
                ]
                plane.add(
                    ops_line, a["hlo"], start[j] + off, end[j] - start[j], [("run_id", s)], md
                )
            t0, t1 = start.min(), end.max()
            md = [("program_id", _PROGRAM_ID)]
            plane.add(mod_line, self.module, t0 + off, t1 - t0, [("run_id", s)], md)
            plane.add(steps_line, str(o["first_step"] + s), t0 + off, t1 - t0, self._step_stats(s))


# --------------------------------------------------------------------------- truth
_DEFINITIONS = {
    "rank": "host index * devices_per_host + the ordinal k of the host's /device:<X>:k plane "
    "(hosts ordered by hostname = file name)",
    "true clock": "host 0's clock, epoch ns; a host's file is written on local = true + "
    "clock_offset_ns[host]; event time ps = line.timestamp_ns * 1000 + offset_ps",
    "all times in this truth": "true clock, epoch ns",
    "kernel": "compute kernels on the compute stream (NCCL kernels excluded)",
    "collective": "GPU: NCCL kernels (one per XLA collective op); TPU: collective XLA Ops",
    "memcpy": "MemcpyH2D / MemcpyD2H events on the memcpy streams",
    "host_launch": "cuLaunchKernel / cuLaunchKernelEx / cuMemcpy*Async_v2 events on the device's "
    "launch thread of the host plane; each shares correlation_id with one GPU event of the same "
    "host (ids are unique per host file only)",
    "xla_op": "events of the XLA Ops line (one per HLO op per step; fusion.3 spans two kernels)",
    "step window": "[first device event of the step, last device event) on that rank; equals "
    "the Steps line event where there is one",
    "step_time_ns": "max over ranks of step end - min over ranks of step start",
    "makespan_ns": "last step end - first step start over all ranks",
    "arrival": "start of the rank's collective event (NCCL kernel / TPU op)",
    "collective end": "every participant ends at max(arrivals) + transfer_ns",
    "wait_ns": "max(arrivals) - arrival",
    "idle_share": "1 - union of the rank's device events (kernels, NCCL, memcpy / TPU ops) "
    "within its step window / window length",
    "stat precedence": "a stat on the XEvent overrides the same stat on its XEventMetadata "
    "(stats_on='metadata': a kernel shared by two HLO ops keeps the first op's hlo_op on the "
    "metadata and carries the other's on its events)",
    "saving_ns": "makespan minus the makespan of the same job (same draws) without the slowdown",
}


def _offsets(o) -> list[int]:
    given = list(o["clock_offsets_ns"] or [0] * o["hosts"])
    return [0] + [int(x) for x in given[1 : o["hosts"]]]


def _step_windows(sim):
    return sim["start"][:, :, 0], sim["end"][:, :, -1]  # (steps, devices)


def _makespan(sim) -> int:
    s0, s1 = _step_windows(sim)
    return int(s1[-1].max() - s0[0].min())


def _step_times(sim) -> list[int]:
    s0, s1 = _step_windows(sim)
    return [int(x) for x in s1.max(axis=1) - s0.min(axis=1)]


def _counts(o, acts) -> dict:
    kinds = [a["kind"] for a in acts]
    hlos = {a["hlo"] for a in acts if a["kind"] != "memcpy"}
    s = o["steps"]
    gpu = o["platform"] == "gpu"
    return {
        "kernel": s * kinds.count("kernel"),
        "memcpy": s * kinds.count("memcpy"),
        "collective": s * kinds.count("collective"),
        "host_launch": s * len(acts) if gpu else 0,
        "xla_op": s * len(hlos) if (o["derived_lines"] or not gpu) else 0,
        "xla_module": s if (o["derived_lines"] or not gpu) else 0,
        "step": s if (o["steps_line"] or not gpu) else 0,
    }


def _truth(o, fmt, acts, sim, base_sim, writer, paths, scenario):
    n_dev = o["hosts"] * o["devices_per_host"]
    dph = o["devices_per_host"]
    dev_type = "TPU" if o["platform"] == "tpu" else "GPU"
    out_dir = writer.out_dir
    s0, s1 = _step_windows(sim)
    ranks = [
        {
            "rank": r,
            "host": writer.hostnames[r // dph],
            "file": os.path.relpath(paths[r // dph], out_dir),
            "plane": f"/device:{dev_type}:{r % dph}",
            "ordinal": r % dph,
        }
        for r in range(n_dev)
    ]
    steps = []
    for s in range(o["steps"]):
        per = {str(r): {"start_ns": int(s0[s, r]), "end_ns": int(s1[s, r])} for r in range(n_dev)}
        steps.append(
            {
                "step": s,
                "step_num": o["first_step"] + s,
                "per_rank": per,
                "step_time_ns": int(s1[s].max() - s0[s].min()),
            }
        )
    collectives, wait = [], np.zeros(n_dev, np.int64)
    for s in range(o["steps"]):
        for j, a in enumerate(acts):
            if a["kind"] != "collective":
                continue
            arr = sim["start"][s, :, j]
            last = int(arr.max())
            wait += last - arr
            entry = {
                "step": s,
                "hlo_op": a["hlo"],
                "kind": a["coll"],
                "bytes": a["bytes"],
                "arrival_ns": {str(r): int(arr[r]) for r in range(n_dev)},
                "last_rank": int(np.argmax(arr)),
                "start_ns": last,
                "end_ns": int(sim["end"][s, 0, j]),
                "transfer_ns": int(sim["transfer"][s, j]),
                "wait_ns": {str(r): int(last - arr[r]) for r in range(n_dev)},
            }
            if o["platform"] == "gpu":
                entry["kernel"] = _nccl_names(a["coll"], o["nccl_naming"], False)[2]
            collectives.append(entry)
    idle = {}
    for r in range(n_dev):
        windows = s1[:, r] - s0[:, r]
        busy = [_union_ns(sim["start"][s, r], sim["end"][s, r]) for s in range(o["steps"])]
        idle_ns = windows - np.array(busy)
        idle[str(r)] = {
            "per_step_idle_ns": [int(x) for x in idle_ns],
            "per_step_window_ns": [int(x) for x in windows],
            "idle_share": float(idle_ns.sum() / windows.sum()),
        }
    straggler = None
    if o["straggler_device"] is not None:
        r = int(o["straggler_device"])
        others = [x for x in range(n_dev) if x != r]
        base_times = _step_times(base_sim)
        straggler = {
            "rank": r,
            "factor": o["straggler_factor"],
            "others_wait_ns": int(wait[others].sum()),
            "wait_ns_per_rank": {str(x): int(wait[x]) for x in range(n_dev)},
            "step_times_ns": _step_times(sim),
            "baseline_step_times_ns": base_times,
            "saving_per_step_ns": [
                a - b for a, b in zip(_step_times(sim), base_times, strict=True)
            ],
            "makespan_ns": _makespan(sim),
            "baseline_makespan_ns": _makespan(base_sim),
            "saving_ns": _makespan(sim) - _makespan(base_sim),
        }
    counts = _counts(o, acts)
    gpu = o["platform"] == "gpu"
    hosts = {
        name: {
            "clock_offset_ns": writer.offsets[h],
            "file": os.path.relpath(paths[h], out_dir),
            "ranks": list(range(h * dph, (h + 1) * dph)),
            "python_thread": "python3",
            "launch_threads": [f"tf_pjrt_gpu_{k}_execute" for k in range(dph)] if gpu else [],
        }
        for h, name in enumerate(writer.hostnames)
    }
    variation = {k: o[k] for k in DEFAULTS if k not in FORMAT_CHOICES}
    variation.update(fmt)
    return {
        "format": "xplane",
        "scenario": scenario,
        "seed": o["seed"],
        "platform": o["platform"],
        "layout": o["layout"],
        "variation": variation,
        "n_ranks": n_dev,
        "ranks": ranks,
        "hosts": hosts,
        "clock_offsets_ns": {name: writer.offsets[h] for h, name in enumerate(writer.hostnames)},
        "counts_per_rank": {str(r): dict(counts) for r in range(n_dev)},
        "xla_module": writer.module,
        "steps": steps,
        "step_times_ns": _step_times(sim),
        "makespan_ns": _makespan(sim),
        "collectives": collectives,
        "collective_wait_ns_per_rank": {str(r): int(wait[r]) for r in range(n_dev)},
        "idle": idle,
        "host_bound": scenario == "host_bound",
        "straggler": straggler,
        "idle_share_mean": float(np.mean([v["idle_share"] for v in idle.values()])),
        "launch_names": sorted(
            {"cuLaunchKernel", "cuLaunchKernelEx", "cuMemcpyHtoDAsync_v2", "cuMemcpyDtoHAsync_v2"}
        )
        if gpu
        else [],
        "device_line_names": _device_line_names(o, fmt),
        "event_stats": _EVENT_STATS["gpu" if gpu else "tpu"],
        "definitions": _DEFINITIONS,
    }


# Stats each kind of event carries (on the XEvent, or partly on its XEventMetadata when
# stats_on="metadata": hlo_op, hlo_module, kernel_details, hlo_category, program_id, flops,
# bytes_accessed). An XEvent stat overrides a metadata stat of the same name.
_EVENT_STATS = {
    "gpu": {
        "kernel": ["correlation_id", "group_id", "hlo_op", "hlo_module", "kernel_details"],
        "memcpy": ["correlation_id", "group_id", "memcpy_details"],
        "host_launch": ["correlation_id", "device_id"],
        "xla_op": ["run_id", "hlo_category", "program_id"],
        "xla_module": ["run_id", "program_id"],
        "step": ["group_id", "step_num"],
    },
    "tpu": {
        "xla_op": ["run_id", "hlo_category", "program_id", "flops", "bytes_accessed"],
        "xla_module": ["run_id", "program_id"],
        "step": ["group_id", "step_num"],
    },
}


def _device_line_names(o, fmt) -> list[str]:
    if o["platform"] == "tpu":
        names = ["Steps", "XLA Modules", "XLA Ops"]
        return names + (["XLA TraceMe"] if fmt["empty"] else [])
    names = [
        f"Stream #{_STREAM_H2D}(MemcpyH2D)",
        f"Stream #{_STREAM_COMPUTE}(Compute)",
        f"Stream #{_STREAM_NCCL}(Compute)",
        f"Stream #{_STREAM_D2H}(MemcpyD2H)",
    ]
    if fmt["empty"]:
        names.append(f"Stream #{_STREAM_IDLE}(Compute)")
    if o["derived_lines"]:
        names += ["XLA Modules", "XLA Ops"]
    return names + (["Steps"] if o["steps_line"] else [])


# --------------------------------------------------------------------------- entry points
def _resolve(variation, scenario=None) -> tuple[dict, dict]:
    unknown = sorted(set(variation) - set(DEFAULTS))
    if unknown:
        raise TypeError(f"unknown write_job option(s): {', '.join(unknown)}")
    o = dict(DEFAULTS)
    o.update(variation)
    o["seed"], o["steps"], o["hosts"] = int(o["seed"]), int(o["steps"]), int(o["hosts"])
    o["devices_per_host"] = int(o["devices_per_host"])
    if o["platform"] not in ("gpu", "tpu"):
        raise ValueError("platform must be 'gpu' or 'tpu'")
    if o["layout"] == "single" and o["hosts"] != 1:
        raise ValueError("layout='single' holds one host; use layout='tensorboard'")
    if o["hosts"] * o["devices_per_host"] < 2 or o["steps"] < 1:
        raise ValueError("need >= 2 devices and >= 1 step")
    if o["straggler_device"] is not None:
        o["straggler_device"] = int(o["straggler_device"])
        if not 0 <= o["straggler_device"] < o["hosts"] * o["devices_per_host"]:
            raise ValueError("straggler_device out of range")
    if o["platform"] == "tpu":
        o["derived_lines"], o["steps_line"] = True, True
    # the scenario's name enters the draw so that one seed varies differently per scenario
    rng = np.random.default_rng([o["seed"], 1, zlib.crc32((scenario or "").encode())])
    fmt = {}
    for key, allowed in FORMAT_CHOICES.items():
        drawn = allowed[int(rng.integers(len(allowed)))]
        value = drawn if o[key] is None else o[key]
        if value not in allowed:
            raise ValueError(f"{key} must be one of {allowed}, got {value!r}")
        fmt[key] = value
    o.update(fmt)
    return o, fmt


def write_job(out_dir, _scenario=None, **variation) -> dict:
    """Simulate the job, write its ``.xplane.pb`` file(s) and ``truth.json`` into out_dir.

    Every keyword of :data:`DEFAULTS` may be given (unknown ones raise TypeError); a format
    keyword of :data:`FORMAT_CHOICES` left at None is drawn from the seed. Returns the truth.
    """
    o, fmt = _resolve(variation, _scenario)
    acts = _activities(o)
    n_dev = o["hosts"] * o["devices_per_host"]
    draws = _Draws(o, len(acts), n_dev, o["hosts"])
    sim = _simulate(o, draws, acts, o["straggler_factor"])
    base_sim = _simulate(o, draws, acts, 1.0)
    out_dir = os.fspath(out_dir)
    writer = _Writer(o, acts, sim, out_dir, fmt)
    paths = writer.write()
    truth = _truth(o, fmt, acts, sim, base_sim, writer, paths, _scenario)
    text = json.dumps(truth, indent=1) + "\n"
    with open(os.path.join(out_dir, "truth.json"), "w", encoding="utf-8") as f:
        f.write(text)
    return json.loads(text)  # exactly what truth.json holds (tuples become lists)


def write_scenario(name, out_dir, **variation) -> dict:
    """Write the preset ``SCENARIOS[name]`` (keywords override it) into out_dir; returns truth."""
    if name not in SCENARIOS:
        raise KeyError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}")
    return write_job(out_dir, _scenario=name, **{**SCENARIOS[name], **variation})
