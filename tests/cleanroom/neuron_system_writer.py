"""Clean-room fixture writer for AWS Neuron *system* profiles.

Written from ``shared/reference`` only (neuron-real-output.md, neuron-formats.md,
protobuf-formats.md, the copied official pages in neuron-docs/ and their screenshots), plus a
look at how public third-party code reads real ``system_profile.json`` / runtime trace JSON.
The project's own readers, generators, rules, tests and sample traces were not read.

It simulates a small multi-rank Neuron job on the host/runtime side (workers spread over
instances, each running a few executions of one NEFF; a synchronous collective at the end of
every execution couples the ranks) and writes that one run in several layouts:

* ``system_json``: ``system_profile.json`` as ``neuron-explorer view --output-format json``
  writes it (``trace_event`` + ``device_mem_usage``), or the pre-2.22 layout
  (``trace_events`` with numeric ``type``, ``mem_usage``, ``cpu_util``).
* ``runtime_json``: the runtime's own trace, ``{"events": [...], "data_version": 2}``, one file
  per process under ``runtime_trace/``.
* ``perfetto``: ``system_profile.pftrace`` (TrackEvent protobuf written by hand: varints and
  length-delimited fields, no generated code) plus ``device_profile_model_<id>.pftrace`` whose
  timestamps are profile-relative.
* ``raw``: an unprocessed capture folder (``ntrace.pb``, ``trace_info.pb``, ``cpu_util.pb``,
  ``host_mem.pb``, ``.neff``, ``.ntff``) that a reader must refuse with a helpful line.

Three time bases are kept apart on purpose: host epoch ns (runtime events, per-instance host
clock), the device clock (``nc_timestamp_ns``, ~1e11 ns, one per rank) and profile-relative
device-trace time (starts near 0). ``truth.json`` says what really happened.
"""

from __future__ import annotations

import gzip
import json
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["SCENARIOS", "DEFAULTS", "write_job", "write_scenario", "encode_varint"]

TRUTH_SCHEMA = "tracediag.cleanroom.neuron_system/1"
EPOCH_BASE_NS = 1_755_115_500_000_000_000  # 2025-08-13, the era of the screenshots
DEVICE_CLOCK_BASE_NS = 144_000_000_000  # the device clock reads ~144 s (syncpoint screenshot)
ALL_LAYOUTS = ("system_json", "runtime_json", "perfetto", "raw")
THREAD_STYLES = ("gid", "gid_nrt", "nrt", "thread", "thread_literal")

# Numeric ``type`` codes of the pre-2.22 ``trace_events`` rows. Only nrt_tensor_write = 11 and
# framework = 99999 are documented (2.0 beta guide example); the rest are invented and stable.
LEGACY_TYPE_CODES = {
    "nrt_load": 1,
    "nrt_load_collectives": 2,
    "nrt_execute": 3,
    "dlr_infer": 4,
    "enc_barrier": 5,
    "kbl_infer_exec_wait": 6,
    "nc_exec_running": 7,
    "cc_running": 8,
    "nrt_tensor_read": 10,
    "nrt_tensor_write": 11,
    "timestamp_sync_point": 12,
    "nrt_tensor_allocate": 13,
    "kmgr_exec_core": 14,
    "kbl_exec_pre": 15,
    "kbl_exec_core": 16,
    "kbl_exec_wait": 17,
}
LEGACY_FRAMEWORK_TYPE = 99999

DEFAULTS: dict[str, Any] = {
    # job shape / pace
    "compute_ns": 2_000_000,  # device compute per execution before the collective
    "cc_ns": 180_000,  # collective time once every rank has arrived
    "jitter": 0.02,  # relative sd of compute time
    "straggler_rank": None,
    "straggler_factor": 1.3,
    "lnc": 1,  # 2: one nc_exec_running per physical core, sharing a flow id
    "process_per": "worker",  # "worker" (nc_idx 0 in every process) or "instance"
    "cores_per_instance": 32,  # logical cores per instance: worker_gid stride
    # clocks
    "host_skew_ns": (),  # per instance host-clock offset (missing entries: 0)
    "device_drift_ppm": 0.0,
    "sync_error_ns": 0,  # nc_timestamp_ns of a sync point is read this late (|x| < 1000)
    # system_profile.json
    "system_json_variant": "trace_event",  # or "trace_events" (pre-2.22)
    "json_fields": "full",  # or "minimal": only the fields third-party readers name
    "model_id_in_extra": False,  # model_id inside extra_attributes_json instead of a column
    "ints_as_strings": False,  # timestamp / duration as strings
    "hbm_idx_as_string": False,
    "pid_collision": False,  # the same pid on every instance (containers)
    "framework_events": True,
    # runtime trace JSON
    "runtime_stop_data": "minimal",  # stop events carry only nc_timestamp_ns; "full": all
    "runtime_hw_host_ts": True,  # hardware events also carry a host timestamp_ns
    # perfetto
    "thread_style": "gid",
    "hw_slice_name": None,  # "neff" (nc_exec_running /tmp/.../file.neff) or "plain"; None: by style
    "hw_time_base": "host",  # "device": hw slices at the raw device clock
    "sync_instant": True,  # timestamp_sync_point as TYPE_INSTANT, else a zero-length slice
    "intern": False,  # interned event / annotation names
    "gzip_pftrace": False,
    "lnc_hw_track_suffix": False,  # LNC>1: "-pcore<k>" in hw track names (inferred, a variant)
    "device_profile": True,
    "rt_names": None,  # "new" (kmgr_exec_core...) or "old" (dlr_infer...); None: by style
    # raw capture
    "raw_layout": "session",  # "<inst>_pid_<pid>/<session>/files" or "flat"
}


def _preset(**kw: Any) -> dict[str, Any]:
    return kw


SCENARIOS: dict[str, dict[str, Any]] = {
    "clean": _preset(),
    "straggler_worker": _preset(straggler_rank=2),
    "lnc2": _preset(lnc=2),
    "legacy_trace_events": _preset(system_json_variant="trace_events", thread_style="thread"),
    "raw_capture": _preset(layouts=("raw",)),
    # further variants of points the reference leaves open
    "lnc2_extra_attrs": _preset(lnc=2, model_id_in_extra=True, thread_style="gid_nrt"),
    "perfetto_gid_nrt": _preset(thread_style="gid_nrt", straggler_rank=1),
    "perfetto_nrt": _preset(thread_style="nrt", process_per="instance"),
    "perfetto_thread": _preset(thread_style="thread_literal", intern=True, sync_instant=False),
    "hw_device_clock": _preset(hw_time_base="device", straggler_rank=3),
    "skewed_clocks": _preset(
        host_skew_ns=(0, 41_000), device_drift_ppm=15.0, sync_error_ns=400, straggler_rank=0
    ),
    "minimal_json": _preset(json_fields="minimal", ints_as_strings=True, hbm_idx_as_string=True),
    "one_process_per_instance": _preset(process_per="instance", straggler_rank=3),
    "pid_collision": _preset(pid_collision=True, runtime_stop_data="full"),
    "gzip_interned": _preset(gzip_pftrace=True, intern=True, runtime_hw_host_ts=False),
}


# --------------------------------------------------------------------------------------------
# protobuf wire format, by hand
# --------------------------------------------------------------------------------------------


def encode_varint(value: int) -> bytes:
    """Base-128 varint; negative values as 64-bit two's complement (int64 semantics)."""
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _key(number: int, wire_type: int) -> bytes:
    return encode_varint((number << 3) | wire_type)


def _fv(number: int, value: int) -> bytes:  # varint field
    return _key(number, 0) + encode_varint(int(value))


def _fb(number: int, payload: bytes) -> bytes:  # length-delimited field
    return _key(number, 2) + encode_varint(len(payload)) + payload


def _fs(number: int, text: str) -> bytes:
    return _fb(number, text.encode())


def _ff64(number: int, value: int) -> bytes:  # fixed64 field
    return _key(number, 1) + struct.pack("<Q", value & ((1 << 64) - 1))


def _fd(number: int, value: float) -> bytes:  # double field
    return _key(number, 1) + struct.pack("<d", value)


# Perfetto field numbers (protos/perfetto/trace/...)
PKT_TIMESTAMP, PKT_SEQ_ID, PKT_TRACK_EVENT, PKT_INTERNED, PKT_SEQ_FLAGS = 8, 10, 11, 12, 13
PKT_TRACK_DESCRIPTOR = 60
TE_TYPE, TE_TRACK_UUID, TE_NAME_IID, TE_NAME, TE_DEBUG, TE_FLOW_IDS = 9, 11, 10, 23, 4, 47
TE_CATEGORIES = 22
SLICE_BEGIN, SLICE_END, INSTANT = 1, 2, 3
TD_UUID, TD_NAME, TD_PROCESS, TD_THREAD, TD_PARENT = 1, 2, 3, 4, 5
DA_NAME_IID, DA_NAME, DA_BOOL, DA_INT, DA_DOUBLE, DA_STRING = 1, 10, 2, 4, 5, 6
SEQ_CLEARED, SEQ_NEEDS = 1, 2


class _PerfettoWriter:
    """Accumulates TracePackets on one sequence; names inline or interned."""

    def __init__(self, sequence_id: int = 1, intern: bool = False) -> None:
        self.seq = sequence_id
        self.intern = intern
        self.packets: list[tuple[int, int, bytes, list[bytes]]] = []  # ts, order, body, interned
        self.descriptors: list[bytes] = []
        self._names: dict[str, int] = {}
        self._ann: dict[str, int] = {}
        self._order = 0

    def process(self, uuid: int, pid: int, name: str | None) -> None:
        proc = _fv(1, pid) + (_fs(6, name) if name is not None else b"")
        self.descriptors.append(_fv(TD_UUID, uuid) + _fb(TD_PROCESS, proc))

    def thread(self, uuid: int, parent: int, pid: int, tid: int, name: str | None) -> None:
        thr = _fv(1, pid) + _fv(2, tid) + (_fs(5, name) if name is not None else b"")
        self.descriptors.append(_fv(TD_UUID, uuid) + _fv(TD_PARENT, parent) + _fb(TD_THREAD, thr))

    def _annotation(self, name: str, value: Any, interned: list[bytes]) -> bytes:
        if self.intern:
            iid = self._ann.setdefault(name, len(self._ann) + 1)
            interned.append(_fb(3, _fv(1, iid) + _fs(2, name)))  # needed by this packet
            head = _fv(DA_NAME_IID, iid)
        else:
            head = _fs(DA_NAME, name)
        if isinstance(value, bool):
            return head + _fv(DA_BOOL, int(value))
        if isinstance(value, int | np.integer):
            return head + _fv(DA_INT, int(value))
        if isinstance(value, float):
            return head + _fd(DA_DOUBLE, value)
        return head + _fs(DA_STRING, str(value))

    def event(
        self,
        ts: int,
        kind: int,
        track: int,
        name: str | None = None,
        args: dict[str, Any] | None = None,
        flows: list[int] | None = None,
        order: int | None = None,
    ) -> None:
        interned: list[bytes] = []
        body = _fv(TE_TYPE, kind) + _fv(TE_TRACK_UUID, track)
        if name is not None:
            if self.intern:
                iid = self._names.setdefault(name, len(self._names) + 1)
                interned.append(_fb(2, _fv(1, iid) + _fs(2, name)))
                body += _fv(TE_NAME_IID, iid)
            else:
                body += _fs(TE_NAME, name)
        for key, value in (args or {}).items():
            body += _fb(TE_DEBUG, self._annotation(key, value, interned))
        for flow in flows or ():
            body += _ff64(TE_FLOW_IDS, flow)
        self._order += 1
        self.packets.append((ts, self._order if order is None else order, body, interned))

    def to_bytes(self) -> bytes:
        out = bytearray()
        for n, desc in enumerate(self.descriptors):
            pkt = _fv(PKT_SEQ_ID, self.seq) + _fb(PKT_TRACK_DESCRIPTOR, desc)
            if n == 0:
                pkt += _fv(PKT_SEQ_FLAGS, SEQ_CLEARED)
            out += _fb(1, pkt)
        # Interned entries go with the first packet, in file order, that uses them.
        emitted: set[bytes] = set()
        for ts, _order, body, interned in sorted(self.packets, key=lambda q: (q[0], q[1])):
            pkt = _fv(PKT_TIMESTAMP, ts) + _fv(PKT_SEQ_ID, self.seq) + _fb(PKT_TRACK_EVENT, body)
            fresh = [e for e in interned if e not in emitted]
            if self.intern:
                pkt += _fv(PKT_SEQ_FLAGS, SEQ_NEEDS)
            if fresh:
                pkt += _fb(PKT_INTERNED, b"".join(fresh))
                emitted.update(fresh)
            out += _fb(1, pkt)
        return bytes(out)


# --------------------------------------------------------------------------------------------
# simulation
# --------------------------------------------------------------------------------------------


@dataclass
class _Rank:
    rank: int
    instance_index: int
    local_index: int
    instance_id: str
    pid: int
    rt_tid: int  # thread that calls nrt_execute (real Linux tid)
    aux_tid: int
    small_tid: int  # small runtime thread index (gid-style screenshots: tid3, tid5, tid7)
    fw_tid: int  # framework (application) thread
    lnc_idx: int
    worker_gid: int
    device_idx: int
    hbm_idx: int
    device_cores: list[int]
    model_id: int
    model_name: str
    host_skew_ns: int
    device_offset_ns: int  # global ns - device clock ns at the job origin
    execs: list[dict[str, Any]] = field(default_factory=list)
    load: tuple[int, int] = (0, 0)


def _instance_id(rng: np.random.Generator) -> str:
    return "i-0" + "".join(f"{int(x):x}" for x in rng.integers(0, 16, size=16))


def _simulate(
    params: dict[str, Any], instances: int, wpi: int, executions: int, seed: int, t0: int
) -> dict[str, Any]:
    """Pace model of the job, in global ns. Returns per-rank, per-exec global timings."""
    rng = np.random.default_rng(seed + 7)
    n = instances * wpi
    base = params["compute_ns"]
    jitter = rng.normal(0.0, params["jitter"], size=(executions, n)).clip(-0.06, 0.06)
    compute = np.rint(base * (1.0 + jitter)).astype(np.int64)
    strag = params["straggler_rank"]
    if strag is not None:
        compute[:, strag] = np.rint(compute[:, strag] * params["straggler_factor"]).astype(np.int64)
    draws = {
        "stagger": rng.integers(0, 40_000, size=n),
        "launch": rng.integers(22_000, 30_000, size=(executions, n)),
        "gap": rng.integers(54_000, 70_000, size=(executions, n)),
        "complete": rng.integers(10_000, 14_000, size=(executions, n)),
        "pcore_lag": rng.integers(150, 900, size=(executions, n)),
        "pcore_tail": rng.integers(-4_000, 4_000, size=(executions, n)),
    }
    return {"compute": compute, "draws": draws}


def _pace(
    compute: np.ndarray, draws: dict[str, np.ndarray], params: dict, t_start: int
) -> list[list[dict[str, int]]]:
    executions, n = compute.shape
    ready = [t_start + int(draws["stagger"][r]) for r in range(n)]
    out: list[list[dict[str, int]]] = [[] for _ in range(n)]
    cc_ns = params["cc_ns"]
    for k in range(executions):
        rows = []
        for r in range(n):
            s = ready[r]
            dev_s = s + int(draws["launch"][k, r])
            arrive = dev_s + int(compute[k, r])
            rows.append(
                {"nrt_s": s, "dev_s": dev_s, "arrive": arrive, "compute": int(compute[k, r])}
            )
        last = max(row["arrive"] for row in rows)
        cc_e = last + cc_ns
        for r, row in enumerate(rows):
            row["cc_s"] = row["arrive"]
            row["cc_e"] = cc_e
            row["cc_wait"] = last - row["arrive"]
            row["dev_e"] = cc_e + 8_000
            row["nrt_e"] = row["dev_e"] + int(draws["complete"][k, r])
            row["sync"] = row["dev_e"] + 2_500
            row["pcore_lag"] = int(draws["pcore_lag"][k, r])
            row["pcore_tail"] = int(draws["pcore_tail"][k, r])
            out[r].append(row)
            ready[r] = row["nrt_e"] + int(draws["gap"][k, r])
    return out


def _span(paced: list[list[dict[str, int]]]) -> tuple[int, int]:
    start = min(rows[0]["nrt_s"] for rows in paced)
    end = max(rows[-1]["nrt_e"] for rows in paced)
    return start, end


# --------------------------------------------------------------------------------------------
# event model shared by the layouts
# --------------------------------------------------------------------------------------------


@dataclass
class _Ev:
    name: str
    source: str  # neuron_rt | neuron_hw | framework
    start: int  # global ns (converted per layout)
    end: int
    track: str  # rt | aux | hw<p> | fw
    exec_id: int | None = None
    pcore: int | None = None
    instant: bool = False
    flow: int | None = None
    attrs: dict[str, Any] = field(default_factory=dict)
    id: int = 0
    parent_id: int = 0


def _rank_events(rk: _Rank, params: dict, old_names: bool, flow_base: int) -> list[_Ev]:
    evs: list[_Ev] = []
    ls, le = rk.load
    evs.append(_Ev("nrt_load_collectives", "neuron_rt", ls, le, "rt"))
    evs.append(_Ev("nrt_load", "neuron_rt", ls + 1_500, le - 2_000, "rt"))
    evs.append(_Ev("nrt_tensor_allocate", "neuron_rt", ls + 40_000, ls + 95_000, "aux"))
    for x in rk.execs:
        k = x["exec_id"]
        s, e = x["nrt_s"], x["nrt_e"]
        flow = flow_base + k
        model = {"model_id": rk.model_id, "model_name": rk.model_name}
        evs.append(_Ev("nrt_tensor_write", "neuron_rt", s - 20_000, s - 12_000, "rt", k))
        evs.append(_Ev("nrt_execute", "neuron_rt", s, e, "rt", k, flow=flow, attrs=dict(model)))
        if old_names:
            evs.append(_Ev("dlr_infer", "neuron_rt", s + 2_000, e - 1_500, "rt", k))
            evs.append(_Ev("enc_barrier", "neuron_rt", s + 4_000, x["dev_s"] - 3_000, "rt", k))
            evs.append(
                _Ev("kbl_infer_exec_wait", "neuron_rt", x["dev_s"] - 1_500, e - 4_000, "rt", k)
            )
        else:
            evs.append(_Ev("kmgr_exec_core", "neuron_rt", s + 2_000, e - 1_500, "rt", k))
            evs.append(
                _Ev("kbl_exec_pre", "neuron_rt", s + 3_000, s + 12_000, "rt", k, attrs=dict(model))
            )
            evs.append(_Ev("kbl_exec_core", "neuron_rt", s + 13_000, e - 3_000, "rt", k))
            evs.append(_Ev("enc_barrier", "neuron_rt", s + 14_000, x["dev_s"] - 3_000, "rt", k))
            evs.append(_Ev("kbl_exec_wait", "neuron_rt", x["dev_s"] - 1_500, e - 4_000, "rt", k))
        evs.append(
            _Ev("timestamp_sync_point", "neuron_rt", x["sync"], x["sync"], "rt", k, instant=True)
        )
        evs.append(_Ev("nrt_tensor_read", "neuron_rt", e + 3_000, e + 15_000, "rt", k))
        for p, core in enumerate(rk.device_cores):
            lag = x["pcore_lag"] if p else 0
            tail = x["pcore_tail"] if p else 0
            ds, de = x["dev_s"] + lag, x["dev_e"] + min(tail, 0)
            attrs = dict(model, device_core_idx=core)
            evs.append(
                _Ev("nc_exec_running", "neuron_hw", ds, de, f"hw{p}", k, p, flow=flow, attrs=attrs)
            )
            if p == 0:
                evs.append(
                    _Ev(
                        "cc_running",
                        "neuron_hw",
                        x["cc_s"],
                        x["cc_e"],
                        "hw0",
                        k,
                        0,
                        attrs={"device_core_idx": core, "operation": "AllReduce"},
                    )
                )
        if params["framework_events"]:
            evs.append(_Ev("train_step", "framework", s - 30_000, e + 20_000, "fw", None))
    return evs


def _assign_parents(evs: list[_Ev]) -> None:
    """Parent ids by interval nesting on each track (the legacy rows carry parent_id)."""
    by_track: dict[str, list[_Ev]] = {}
    for ev in evs:
        by_track.setdefault(ev.track, []).append(ev)
    for items in by_track.values():
        items.sort(key=lambda e: (e.start, -e.end))
        stack: list[_Ev] = []
        for ev in items:
            while stack and not (stack[-1].start <= ev.start and ev.end <= stack[-1].end):
                stack.pop()
            ev.parent_id = stack[-1].id if stack else 0
            if not ev.instant:
                stack.append(ev)


class _Clock:
    """Host (per instance) and device (per rank) readings of global time."""

    def __init__(self, rk: _Rank, t0: int, drift_ppm: float, sync_error: int) -> None:
        self.rk, self.t0, self.drift, self.err = rk, t0, drift_ppm * 1e-6, sync_error
        self.sync: dict[int, tuple[int, int]] = {}
        for x in rk.execs:
            self.sync[x["exec_id"]] = (self.host(x["sync"]), self.device(x["sync"]) + sync_error)

    def host(self, g: int) -> int:
        return g + self.rk.host_skew_ns

    def device(self, g: int) -> int:
        return g - self.rk.device_offset_ns + int(round((g - self.t0) * self.drift))

    def adjusted(self, g: int, exec_id: int) -> int:
        """What the runtime writes for a hardware event: the documented sync-point formula."""
        cpu, dev = self.sync[exec_id]
        return cpu + (self.device(g) - dev)


# --------------------------------------------------------------------------------------------
# layouts
# --------------------------------------------------------------------------------------------


def _num(value: int, as_string: bool) -> Any:
    return str(value) if as_string else value


def _system_json(
    ranks: list[_Rank], events: dict[int, list[_Ev]], clocks: dict[int, _Clock], p: dict
) -> dict[str, Any]:
    legacy = p["system_json_variant"] == "trace_events"
    minimal = p["json_fields"] == "minimal"
    rows: list[dict[str, Any]] = []
    for rk in ranks:
        clk = clocks[rk.rank]
        for ev in events[rk.rank]:
            hw = ev.source == "neuron_hw"
            ts = clk.adjusted(ev.start, ev.exec_id) if hw else clk.host(ev.start)
            te = clk.adjusted(ev.end, ev.exec_id) if hw else clk.host(ev.end)
            tid = {"fw": rk.fw_tid, "aux": rk.aux_tid}.get(ev.track, rk.rt_tid)
            if legacy:
                row = _legacy_row(rk, ev, ts, te - ts, tid)
            else:
                row = _new_row(rk, ev, ts, te - ts, tid, clk, p, minimal)
            rows.append(row)
    rows.sort(key=lambda r: (int(r["timestamp"]), str(r.get("id", ""))))
    mem = _mem_samples(ranks, clocks, p)
    if legacy:
        host_mem, cpu = _legacy_host_samples(ranks, clocks)
        return {"trace_events": rows, "mem_usage": host_mem, "cpu_util": cpu}
    return {"trace_event": rows, "device_mem_usage": mem}


def _legacy_row(rk: _Rank, ev: _Ev, ts: int, dur: int, tid: int) -> dict[str, Any]:
    fw = ev.source == "framework"
    row: dict[str, Any] = {
        "duration": dur,
        "group": f"framework-{tid}" if fw else f"nrt-nc-{rk.lnc_idx:03d}",
        "id": ev.id,
        "instance_id": rk.instance_id,
        "name": ev.name,
        "process_id": str(rk.pid),
        "thread_id": tid,
        "timestamp": ts,
        "type": LEGACY_FRAMEWORK_TYPE if fw else LEGACY_TYPE_CODES[ev.name],
    }
    if not fw:
        row["lnc_idx"] = str(rk.lnc_idx)
        row["parent_id"] = ev.parent_id
    if ev.name == "nrt_execute":
        row["model_name"] = rk.model_name
        row["exec_id"] = str(ev.exec_id)
    if ev.name in ("nrt_tensor_write", "nrt_tensor_read"):
        row.update(size="4194304", tensor_id=str(4_900_392_441_224_765_051 + ev.exec_id))
        row["tensor_name"] = "_unknown_"
    return row


def _new_row(
    rk: _Rank, ev: _Ev, ts: int, dur: int, tid: int, clk: _Clock, p: dict, minimal: bool
) -> dict[str, Any]:
    strs = p["ints_as_strings"]
    row: dict[str, Any] = {
        "name": ev.name,
        "timestamp": _num(ts, strs),
        "duration": _num(dur, strs),
        "timestamp_unit": "ns",
        "process_id": str(rk.pid),
    }
    if ev.source != "framework":
        row.update(lnc_idx=rk.lnc_idx, nc_idx=rk.lnc_idx)
    if ev.exec_id is not None and ev.source != "framework":
        row["exec_id"] = ev.exec_id
    extra: dict[str, Any] = {}
    if "model_id" in ev.attrs:
        if p["model_id_in_extra"]:
            extra["model_id"] = rk.model_id
        else:
            row["model_id"] = rk.model_id
        row["model_name"] = rk.model_name
    if "device_core_idx" in ev.attrs:
        row["device_core_idx"] = ev.attrs["device_core_idx"]
    if ev.name == "timestamp_sync_point":
        cpu, dev = clk.sync[ev.exec_id]
        row.update(cpu_timestamp_ns=cpu, nc_timestamp_ns=dev)
    if not minimal:
        row.update(
            id=str(ev.id),
            trace_event_source=ev.source,
            instance_id=rk.instance_id,
            thread_id=tid,
        )
        if ev.flow is not None:
            row["flow_id"] = [str(ev.flow)]
        if ev.name == "cc_running":
            extra["operation"] = "AllReduce"
    elif ev.flow is not None and p["lnc"] > 1:
        row["flow_id"] = [str(ev.flow)]
    if extra:
        row["extra_attributes_json"] = json.dumps(extra, sort_keys=True)
    return row


_MEM_SPLIT = {"weights_bytes": 0.62, "tensors_bytes": 0.21, "scratchpad_bytes": 0.12}


def _mem_model(rk: _Rank, p: dict) -> dict[str, int]:
    total = 9_800_000_000 + 131_072_000 * rk.rank
    spill = 100_663_296 if rk.rank == p["straggler_rank"] else 0
    parts = {k: int(total * f) for k, f in _MEM_SPLIT.items()}
    parts["dma_rings_spill_bytes"] = 4_194_304 if spill else 0
    parts["dram_spill_bytes"] = spill
    parts["generic_bytes"] = total - sum(parts.values())
    parts["total_bytes"] = total
    return parts


def _mem_samples(ranks: list[_Rank], clocks: dict[int, _Clock], p: dict) -> list[dict]:
    rows = []
    for rk in ranks:
        parts = _mem_model(rk, p)
        clk = clocks[rk.rank]
        times = [rk.load[0] + 50_000, rk.load[1]] + [x["nrt_e"] for x in rk.execs]
        for i, g in enumerate(times):
            scale = 0.35 if i == 0 else 1.0
            row = {
                "timestamp": clk.host(g),
                "instance_id": rk.instance_id,
                "device_idx": rk.device_idx,
                "hbm_idx": str(rk.hbm_idx) if p["hbm_idx_as_string"] else rk.hbm_idx,
            }
            row.update({k: int(v * scale) for k, v in parts.items()})
            rows.append(row)
    rows.sort(key=lambda r: r["timestamp"])
    return rows


def _legacy_host_samples(ranks: list[_Rank], clocks: dict[int, _Clock]) -> tuple[list, list]:
    mem, cpu = [], []
    seen: set[str] = set()
    for rk in ranks:
        if rk.instance_id in seen:
            continue
        seen.add(rk.instance_id)
        clk = clocks[rk.rank]
        g = rk.load[0]
        for i in range(3):
            ts = clk.host(g + i * 1_000_000)
            mem.append(
                {
                    "duration": 1,
                    "instance_id": rk.instance_id,
                    "percent_usage": 9.7 + i * 0.1,
                    "timestamp": ts,
                    "usage": 51_805_806_592 + i * 4096,
                }
            )
            for c in range(2):
                cpu.append(
                    {
                        "cpu_id": str(c),
                        "duration": 1,
                        "instance_id": rk.instance_id,
                        "timestamp": ts,
                        "util": 2.3 + c + i,
                    }
                )
    return mem, cpu


def _runtime_json(
    procs: dict[tuple[str, int], list[_Rank]],
    events: dict[int, list[_Ev]],
    clocks: dict[int, _Clock],
    p: dict,
) -> dict[tuple[str, int], dict]:
    out = {}
    for key, members in procs.items():
        recs: list[tuple[int, int, dict]] = []
        tracking = 0
        seq = 0
        for rk in members:
            clk = clocks[rk.rank]
            for ev in events[rk.rank]:
                if ev.source == "framework":
                    continue
                tracking += 1
                hw = ev.source == "neuron_hw"
                for phase, g in (("start", ev.start), ("stop", ev.end)):
                    rec: dict[str, Any] = {
                        "event_type": ev.name,
                        "phase": phase,
                        "tracking_id": tracking,
                        "nc_idx": rk.lnc_idx,
                    }
                    host_ts = clk.adjusted(g, ev.exec_id) if hw else clk.host(g)
                    if not hw or p["runtime_hw_host_ts"]:
                        rec["timestamp_ns"] = host_ts
                    data: dict[str, Any] = {}
                    full = phase == "start" or p["runtime_stop_data"] == "full"
                    if hw:
                        data["nc_timestamp_ns"] = clk.device(g)
                        if full:
                            data["exec_id"] = ev.exec_id
                            data["device_core_idx"] = ev.attrs["device_core_idx"]
                    elif ev.name == "timestamp_sync_point":
                        cpu, dev = clk.sync[ev.exec_id]
                        data.update(cpu_timestamp_ns=cpu, nc_timestamp_ns=dev, exec_id=ev.exec_id)
                    elif full and ev.exec_id is not None:
                        data["exec_id"] = ev.exec_id
                        if "model_id" in ev.attrs:
                            data.update(model_id=rk.model_id, model_name=rk.model_name)
                    rec["data"] = data
                    seq += 1
                    recs.append((host_ts, seq, rec))
        recs.sort(key=lambda r: (r[0], r[1]))
        out[key] = {"events": [r[2] for r in recs], "data_version": 2}
    return out


def _thread_name(style: str, rk: _Rank, tid: int, kind: str) -> str | None:
    if style == "gid":
        return f"gid{rk.worker_gid}-nc{rk.lnc_idx}-tid{tid}-{kind}"
    if style == "gid_nrt":
        return f"gid{rk.worker_gid}-nrt-nc{rk.lnc_idx}-tid{tid}-{kind}"
    if style == "nrt":
        return f"nrt-nc{rk.lnc_idx}-tid{tid}-{kind}"
    if style == "thread_literal":
        return f"Thread {tid}"
    return None  # "thread": no name; Perfetto shows "Thread <tid>"


def _perfetto_system(
    ranks: list[_Rank],
    procs: dict[tuple[str, int], list[_Rank]],
    events: dict[int, list[_Ev]],
    clocks: dict[int, _Clock],
    p: dict,
    device_profile_name: str | None,
) -> tuple[bytes, dict[int, dict[str, Any]]]:
    style = p["thread_style"]
    old = style in ("thread", "thread_literal")
    small = style == "gid"
    neff_names = p["hw_slice_name"] or ("neff" if style == "gid" else "plain")
    pw = _PerfettoWriter(1, p["intern"])
    uuid_next = [100]

    def new_uuid() -> int:
        uuid_next[0] += 1
        return uuid_next[0]

    synth_tid = [2]
    tracks: dict[tuple[int, str], int] = {}
    names_out: dict[int, dict[str, Any]] = {}
    for n_proc, ((inst, pid), members) in enumerate(procs.items(), start=1):
        puuid = new_uuid()
        ppid = pid if old else n_proc
        pw.process(puuid, ppid, f"{inst}-pid{pid}")
        for rk in members:
            names_out[rk.rank] = {"process": f"{inst}-pid{pid}", "hw": []}
            shown = rk.small_tid if small else rk.rt_tid
            aux_shown = 0 if small else rk.aux_tid
            plan = [
                ("rt", shown, rk.rt_tid, "neuron_rt"),
                ("aux", aux_shown, rk.aux_tid, "neuron_rt"),
            ]
            for pc in range(len(rk.device_cores)):
                plan.append((f"hw{pc}", shown, rk.rt_tid, "neuron_hw"))
            if p["framework_events"]:
                plan.append(("fw", rk.fw_tid, rk.fw_tid, "framework"))
            for track, shown_tid, real_tid, kind in plan:
                if old and track.startswith("hw"):
                    tracks[(rk.rank, track)] = tracks[(rk.rank, "rt")]
                    continue
                if kind == "framework":
                    name = f"Thread {real_tid}" if style == "thread_literal" else None
                else:
                    name = _thread_name(style, rk, shown_tid, kind)
                    if kind == "neuron_hw" and p["lnc_hw_track_suffix"] and p["lnc"] > 1:
                        name = name.replace("-neuron_hw", f"-pcore{track[2:]}-neuron_hw")
                tuuid = new_uuid()
                if old or kind == "framework":
                    ttid = real_tid
                else:
                    synth_tid[0] += 1
                    ttid = synth_tid[0]
                pw.thread(tuuid, puuid, ppid, ttid, name)
                tracks[(rk.rank, track)] = tuuid
                label = name if name is not None else f"Thread {ttid}"
                if track == "rt":
                    names_out[rk.rank]["rt"] = label
                elif track.startswith("hw"):
                    names_out[rk.rank]["hw"].append(label)
            if old:
                names_out[rk.rank]["hw"] = [names_out[rk.rank]["rt"]] * len(rk.device_cores)
    if old and p["hw_time_base"] == "device":
        raise ValueError("thread styles nest hw slices on the runtime track: host time base only")
    for rk in ranks:
        clk = clocks[rk.rank]
        for ev in events[rk.rank]:
            hw = ev.source == "neuron_hw"
            if hw and p["hw_time_base"] == "device":
                ts, te = clk.device(ev.start), clk.device(ev.end)
            elif hw:
                ts, te = clk.adjusted(ev.start, ev.exec_id), clk.adjusted(ev.end, ev.exec_id)
            else:
                ts, te = clk.host(ev.start), clk.host(ev.end)
            name = ev.name
            if name == "nc_exec_running" and neff_names == "neff":
                name = f"nc_exec_running {rk.model_name}"
            args = _pf_args(rk, ev, ts, te, clk, old, small, device_profile_name)
            track = tracks[(rk.rank, ev.track)]
            flows = [ev.flow] if ev.flow is not None else None
            if ev.instant and p["sync_instant"]:
                pw.event(ts, INSTANT, track, name, args)
            else:
                pw.event(ts, SLICE_BEGIN, track, name, args, flows, order=_order(ev, True))
                pw.event(te, SLICE_END, track, order=_order(ev, False))
    return pw.to_bytes(), names_out


def _order(ev: _Ev, begin: bool) -> int:
    """Tie-break at one timestamp: zero-length slices, then ends (inner first), then begins
    (outer first)."""
    length = ev.end - ev.start
    if length == 0:
        return 0 if begin else 1
    return 10**14 - length if begin else 2 + length


def _pf_args(
    rk: _Rank,
    ev: _Ev,
    ts: int,
    te: int,
    clk: _Clock,
    old: bool,
    small: bool,
    dp_name: str | None,
) -> dict[str, Any]:
    args: dict[str, Any] = {}
    if ev.name == "timestamp_sync_point":
        cpu, dev = clk.sync[ev.exec_id]
        args["cpu_timestamp_ns"] = cpu
    if ev.name == "nrt_execute" and dp_name and rk.rank == 0:
        args["device_profile"] = dp_name
    args["duration"] = te - ts
    if ev.exec_id is not None and ev.source != "framework":
        args["exec_id"] = ev.exec_id
    args["id"] = ev.id
    args["instance_id"] = rk.instance_id
    if ev.source != "framework":
        args["lnc_idx"] = rk.lnc_idx
    if "model_name" in ev.attrs:
        args["model_id"] = rk.model_id
        args["model_name"] = rk.model_name
    if "device_core_idx" in ev.attrs:
        args["device_core_idx"] = ev.attrs["device_core_idx"]
    args["name"] = ev.name
    if ev.source != "framework":
        args["nc_idx"] = rk.lnc_idx
    if ev.name == "timestamp_sync_point":
        args["nc_timestamp_ns"] = clk.sync[ev.exec_id][1]
    args["process_id"] = rk.pid
    if ev.track == "fw":
        args["thread_id"] = rk.fw_tid
    elif ev.track == "aux":
        args["thread_id"] = 0 if small else rk.aux_tid
    else:
        args["thread_id"] = rk.small_tid if small else rk.rt_tid
    args["timestamp"] = ts
    args["timestamp_unit"] = "ns"
    args["trace_event_source"] = ev.source
    if not old and ev.source != "framework":
        args["worker_gid"] = rk.worker_gid
    return args


_ENGINES = (
    ("TensorMatrix", "Tensor", "MATMUL", 2),
    ("Tensor", "Tensor", "LDWEIGHTS", 1),
    ("Vector", "Vector", "TENSOR_TENSOR", 1),
    ("Scalar", "Scalar", "ACTIVATE", 1),
    ("GpSimd", "GpSimd", "DMA_DIRECT2D", 1),
)


def _perfetto_device(rk: _Rank, x: dict[str, int], seed: int) -> tuple[bytes, dict[str, Any]]:
    """device_profile_model_<id>.pftrace: one execution, profile-relative timestamps."""
    rng = np.random.default_rng(seed + 99)
    pw = _PerfettoWriter(1, False)
    pw.process(1, 1, "Instructions")
    uuid = 10
    span = x["dev_e"] - x["dev_s"]
    count = 0
    last_end = 0
    for eng, subgroup, opcode, rows in _ENGINES:
        for row in range(rows):
            uuid += 1
            pw.thread(uuid, 1, 1, uuid, f"{eng} Engine - Row {row}")
            t = 1_000 + int(rng.integers(0, 4_000))
            while True:
                dur = int(rng.integers(300, 9_000))
                if t + dur > x["compute"]:
                    break
                count += 1
                args = {
                    "duration": dur,
                    "hlo_attrs": "[]",
                    "label": eng,
                    "opcode": opcode,
                    "timestamp": t,
                    "fully_qualified_subgraph": "/sg00",
                    "pc": 15_000 + count,
                    "id": int(rng.integers(-(2**62), 2**62)),
                    "layer": "Unknown",
                    "subgroup": subgroup,
                }
                pw.event(t, SLICE_BEGIN, uuid, opcode, args)
                pw.event(t + dur, SLICE_END, uuid)
                last_end = max(last_end, t + dur)
                t += dur + int(rng.integers(2_000, 60_000))
    uuid += 1
    pw.thread(uuid, 1, 1, uuid, "qSyncIO0 - Row 0")
    cc_rel = x["cc_s"] - x["dev_s"]
    pw.event(
        cc_rel, SLICE_BEGIN, uuid, "AllReduce", {"timestamp": cc_rel, "operation": "AllReduce"}
    )
    pw.event(cc_rel + (x["cc_e"] - x["cc_s"]), SLICE_END, uuid)
    info = {
        "instructions": count,
        "span_ns": span,
        "first_ts": 1_000,
        "last_instruction_end": last_end,
    }
    return pw.to_bytes(), info


def _raw_capture(
    out: Path, procs: dict[tuple[str, int], list[_Rank]], p: dict, t0: int
) -> list[str]:
    written = []
    # ntrace.pb parses as a Trace (two field-1 "packets") but holds no Perfetto data: a reader
    # that takes it for Perfetto silently finds nothing, which is the misread to refuse
    junk_pb = b"\x0a\x07\x08\x96\x01\x12\x02nc" + b"\x0a\x03\x18\xe8\x07"
    for (inst, pid), members in procs.items():
        root = out / f"{inst}_pid_{pid}"
        if p["raw_layout"] == "session":
            root = root / str(t0 // 1_000_000_000)
        root.mkdir(parents=True, exist_ok=True)
        files = {
            "ntrace.pb": junk_pb,
            "trace_info.pb": b"\x08\x05\x12\x04ntff",
            "cpu_util.pb": b"\x0a\x03\x08\x01\x10",
            "host_mem.pb": b"\x0a\x02\x08\x02",
        }
        h = 14_382_885_777_943_380_728
        if p["raw_layout"] == "session":
            files[f"neff_{h}_vnc_0.neff"] = b"NEFF\x00\x01junk"
            for rk in members:
                files[f"profile_nc_{rk.lnc_idx}_session_0.ntff"] = b"NTFF\x05\x00\xde\xad"
        else:
            files[f"neff_{h}.neff"] = b"NEFF\x00\x01junk"
            for rk in members:
                files[f"{h}_instid_0_vnc_{rk.lnc_idx}.ntff"] = b"NTFF\x05\x00\xde\xad"
        for name, payload in files.items():
            (root / name).write_bytes(payload)
            written.append(str((root / name).relative_to(out)))
    return sorted(written)


# --------------------------------------------------------------------------------------------
# public API
# --------------------------------------------------------------------------------------------


def _check(params: dict[str, Any], layouts: tuple[str, ...], n: int) -> None:
    unknown = set(layouts) - set(ALL_LAYOUTS)
    if unknown:
        raise ValueError(f"unknown layouts {sorted(unknown)}; known: {ALL_LAYOUTS}")
    if params["thread_style"] not in THREAD_STYLES:
        raise ValueError(f"thread_style must be one of {THREAD_STYLES}")
    if params["lnc"] not in (1, 2):
        raise ValueError("lnc must be 1 or 2")
    if params["straggler_rank"] is not None and not 0 <= params["straggler_rank"] < n:
        raise ValueError("straggler_rank out of range")
    if abs(params["sync_error_ns"]) >= 1_000:
        raise ValueError("sync_error_ns must stay under 1 us (slices nest with that margin)")
    if params["pid_collision"] and params["json_fields"] == "minimal":
        raise ValueError("pid_collision with minimal JSON fields leaves ranks underivable")
    if params["process_per"] not in ("worker", "instance"):
        raise ValueError("process_per must be 'worker' or 'instance'")


def write_job(
    out_dir: str | os.PathLike,
    *,
    instances: int = 2,
    workers_per_instance: int = 2,
    executions: int = 3,
    seed: int = 0,
    layouts: tuple[str, ...] | list[str] = ("system_json", "runtime_json", "perfetto"),
    **variation: Any,
) -> dict[str, Any]:
    """Simulate the job and write the chosen layouts plus ``truth.json``; return the truth."""
    bad = set(variation) - set(DEFAULTS)
    if bad:
        raise TypeError(f"unknown variation(s) {sorted(bad)}; known: {sorted(DEFAULTS)}")
    p = dict(DEFAULTS, **variation)
    p["host_skew_ns"] = tuple(p["host_skew_ns"])
    layouts = tuple(layouts)
    n = instances * workers_per_instance
    _check(p, layouts, n)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    t0 = EPOCH_BASE_NS + seed * 1_000_003_000 + int(rng.integers(0, 1_000_000_000))
    inst_ids = sorted(_instance_id(rng) for _ in range(instances))  # rank order = sorted ids
    tmpdir = "/tmp/tmp" + "".join(chr(97 + int(c)) for c in rng.integers(0, 26, size=8))
    model_name = f"{tmpdir}/file.neff"

    # ----- workers, processes, clocks
    ranks: list[_Rank] = []
    pid_base = [int(rng.integers(200_000, 2_000_000)) for _ in range(instances)]
    if p["pid_collision"]:
        pid_base = [pid_base[0]] * instances
    lnc = p["lnc"]
    for i in range(instances):
        for w in range(workers_per_instance):
            r = i * workers_per_instance + w
            pid = pid_base[i] + (w * 37 if p["process_per"] == "worker" else 0)
            lnc_idx = 0 if p["process_per"] == "worker" else w
            cores = [w * lnc + c for c in range(lnc)]
            skew = p["host_skew_ns"][i] if i < len(p["host_skew_ns"]) else 0
            dev_base = DEVICE_CLOCK_BASE_NS + r * 7_919_000_123 + int(rng.integers(0, 10**9))
            ranks.append(
                _Rank(
                    rank=r,
                    instance_index=i,
                    local_index=w,
                    instance_id=inst_ids[i],
                    pid=pid,
                    rt_tid=pid + 3 + 2 * w,
                    aux_tid=pid + 1,
                    small_tid=3 + 2 * w,
                    fw_tid=pid if p["process_per"] == "worker" else pid + 100 + w,
                    lnc_idx=lnc_idx,
                    worker_gid=i * p["cores_per_instance"] + w,
                    device_idx=w // 2,
                    hbm_idx=w % 2,
                    device_cores=cores,
                    model_id=1 + (r % 2 if p["process_per"] == "worker" else 0),
                    model_name=model_name,
                    host_skew_ns=skew,
                    device_offset_ns=t0 - dev_base,
                )
            )
    procs: dict[tuple[str, int], list[_Rank]] = {}
    for rk in ranks:
        procs.setdefault((rk.instance_id, rk.pid), []).append(rk)
    if p["process_per"] == "instance":  # one process: one model load, one model id
        for rk in ranks:
            rk.model_id = 1

    # ----- pace
    sim = _simulate(p, instances, workers_per_instance, executions, seed, t0)
    load_s = t0 + 1_000_000
    load_e = load_s + 3_200_000
    paced = _pace(sim["compute"], sim["draws"], p, load_e + 500_000)
    for rk in ranks:
        rk.load = (load_s + 10_000 * rk.local_index, load_e + 10_000 * rk.local_index)
        for k, row in enumerate(paced[rk.rank]):
            rk.execs.append(dict(row, exec_id=k + 1))

    # median-pace re-run: the slowest rank's compute replaced by the per-exec median
    compute = sim["compute"]
    slowest = int(np.argmax(compute.sum(axis=0)))
    median = np.rint(np.median(compute, axis=1)).astype(np.int64)
    relaxed = compute.copy()
    relaxed[:, slowest] = np.minimum(relaxed[:, slowest], median)
    rerun = _pace(relaxed, sim["draws"], p, load_e + 500_000)

    # ----- events
    old_names = (p["rt_names"] or "") == "old" or (
        p["rt_names"] is None
        and (
            p["thread_style"] in ("thread", "thread_literal")
            or p["system_json_variant"] != "trace_event"
        )
    )
    events: dict[int, list[_Ev]] = {}
    next_id = 19_000
    for rk in ranks:
        evs = _rank_events(rk, p, old_names, flow_base=(rk.rank + 1) * 1_000_000)
        for ev in evs:
            next_id += 1
            ev.id = next_id
        _assign_parents(evs)
        events[rk.rank] = evs
    clocks = {rk.rank: _Clock(rk, t0, p["device_drift_ppm"], p["sync_error_ns"]) for rk in ranks}

    files: dict[str, Any] = {}
    if "system_json" in layouts:
        doc = _system_json(ranks, events, clocks, p)
        (out / "system_profile.json").write_text(json.dumps(doc, indent=1))
        files["system_json"] = "system_profile.json"
    if "runtime_json" in layouts:
        rt = _runtime_json(procs, events, clocks, p)
        (out / "runtime_trace").mkdir(exist_ok=True)
        files["runtime_json"] = {}
        for (inst, pid), doc in rt.items():
            rel = f"runtime_trace/{inst}_pid_{pid}.json"
            (out / rel).write_text(json.dumps(doc))
            files["runtime_json"][f"{inst}_pid_{pid}"] = rel
    track_names: dict[int, dict[str, Any]] = {}
    device_info = None
    if "perfetto" in layouts:
        dp_name = (
            f"device_profile_model_{ranks[0].model_id}.pftrace" if p["device_profile"] else None
        )
        blob, track_names = _perfetto_system(ranks, procs, events, clocks, p, dp_name)
        name = "system_profile.pftrace" + (".gz" if p["gzip_pftrace"] else "")
        (out / name).write_bytes(gzip.compress(blob, mtime=0) if p["gzip_pftrace"] else blob)
        files["perfetto"] = name
        if dp_name:
            x = ranks[0].execs[0]
            dblob, info = _perfetto_device(ranks[0], x, seed)
            (out / dp_name).write_bytes(dblob)
            files["device_profile"] = dp_name
            clk = clocks[0]
            device_info = dict(
                info,
                file=dp_name,
                rank=0,
                exec_id=x["exec_id"],
                time_base="profile_relative_ns",
                zero_nc_timestamp_ns=clk.device(x["dev_s"]),
                zero_host_ns=clk.host(x["dev_s"]),
                note="device-profile ts t maps to host ns zero_host_ns + t (no drift)",
            )
    if "raw" in layouts:
        files["raw"] = _raw_capture(out, procs, p, t0)

    truth = _truth(
        p,
        ranks,
        clocks,
        paced,
        rerun,
        slowest,
        median,
        compute,
        layouts,
        files,
        track_names,
        device_info,
        seed,
        instances,
        workers_per_instance,
        executions,
        old_names,
    )
    (out / "truth.json").write_text(json.dumps(truth, indent=1))
    return truth


def _truth(
    p,
    ranks,
    clocks,
    paced,
    rerun,
    slowest,
    median,
    compute,
    layouts,
    files,
    track_names,
    device_info,
    seed,
    instances,
    wpi,
    executions,
    old_names,
) -> dict[str, Any]:
    start, end = _span(paced)
    r_start, r_end = _span(rerun)
    rank_rows = []
    for rk in ranks:
        clk = clocks[rk.rank]
        execs = []
        for x in rk.execs:
            execs.append(
                {
                    "exec_id": x["exec_id"],
                    "nrt_execute_start_ns": clk.host(x["nrt_s"]),
                    "nrt_execute_end_ns": clk.host(x["nrt_e"]),
                    "device_start_ns": clk.host(x["dev_s"]),
                    "device_end_ns": clk.host(x["dev_e"]),
                    "device_start_nc_ns": clk.device(x["dev_s"]),
                    # what the runtime writes after the sync-point formula (pcore 0)
                    "device_start_adjusted_ns": clk.adjusted(x["dev_s"], x["exec_id"]),
                    "device_end_adjusted_ns": clk.adjusted(x["dev_e"], x["exec_id"]),
                    "compute_ns": x["compute"],
                    "cc_start_ns": clk.host(x["cc_s"]),
                    "cc_end_ns": clk.host(x["cc_e"]),
                    "cc_wait_ns": x["cc_wait"],
                    "sync_point": {
                        "cpu_timestamp_ns": clk.sync[x["exec_id"]][0],
                        "nc_timestamp_ns": clk.sync[x["exec_id"]][1],
                    },
                }
            )
        first = execs[0]["sync_point"]
        row = {
            "rank": rk.rank,
            "worker_gid": rk.worker_gid,
            "instance_id": rk.instance_id,
            "instance_index": rk.instance_index,
            "local_index": rk.local_index,
            "process_id": str(rk.pid),
            "thread_id": rk.rt_tid,
            "small_thread_id": rk.small_tid,
            "lnc_idx": rk.lnc_idx,
            "nc_idx": rk.lnc_idx,
            "device_idx": rk.device_idx,
            "hbm_idx": rk.hbm_idx,
            "device_core_idx": rk.device_cores,
            "model_id": rk.model_id,
            "model_name": rk.model_name,
            "host_skew_ns": rk.host_skew_ns,
            "clock": {
                "host_minus_device_ns": first["cpu_timestamp_ns"] - first["nc_timestamp_ns"],
                "host_minus_device_per_exec_ns": [
                    e["sync_point"]["cpu_timestamp_ns"] - e["sync_point"]["nc_timestamp_ns"]
                    for e in execs
                ],
                "drift_ppm": p["device_drift_ppm"],
                "sync_error_ns": p["sync_error_ns"],
            },
            "executions": execs,
        }
        if rk.rank in track_names:
            row["perfetto_tracks"] = track_names[rk.rank]
        if "runtime_json" in files:
            row["runtime_json_file"] = files["runtime_json"][f"{rk.instance_id}_pid_{rk.pid}"]
        rank_rows.append(row)
    strag = p["straggler_rank"]
    straggler = None
    if strag is not None:
        excess = [int(compute[k, strag] - median[k]) for k in range(executions)]
        straggler = {
            "rank": strag,
            "worker_gid": ranks[strag].worker_gid,
            "factor": p["straggler_factor"],
            "excess_compute_ns_per_exec": excess,
            "dram_spill_bytes": _mem_model(ranks[strag], p)["dram_spill_bytes"],
        }
    memory = []
    for rk in ranks:
        parts = _mem_model(rk, p)
        memory.append(
            {
                "instance_id": rk.instance_id,
                "device_idx": rk.device_idx,
                "hbm_idx": rk.hbm_idx,
                "rank": rk.rank,
                "peak_total_bytes": parts["total_bytes"],
                "dram_spill_bytes": parts["dram_spill_bytes"],
                "dma_rings_spill_bytes": parts["dma_rings_spill_bytes"],
                "samples": 2 + executions,
            }
        )
    derivation = _rank_derivation(p)
    return {
        "schema": TRUTH_SCHEMA,
        "seed": seed,
        "shape": {
            "instances": instances,
            "workers_per_instance": wpi,
            "ranks": instances * wpi,
            "executions": executions,
        },
        "params": {k: (list(v) if isinstance(v, tuple) else v) for k, v in p.items()},
        "layouts": list(layouts),
        "files": files,
        "runtime_slice_names": "old (dlr_infer, kbl_infer_exec_wait)" if old_names else "new",
        "time_bases": {
            "host": "Unix-epoch ns of each instance's host clock (runtime events; hw events "
            "in JSON after the sync-point adjustment)",
            "device": "nc_timestamp_ns, per-rank device clock (~1.4e11 ns)",
            "profile_relative": "device_profile_model_<id>.pftrace, ns from profile start",
            "perfetto_hw": p["hw_time_base"],
        },
        "rank_derivation": derivation,
        "ranks": rank_rows,
        "job": {
            "start_ns": clocks[0].host(start),
            "end_ns": clocks[0].host(end),
            "span_ns": end - start,
            "span_definition": "first nrt_execute start to last nrt_execute end, global time",
            "collective_end_ns_per_exec": [
                clocks[0].host(paced[0][k]["cc_e"]) for k in range(executions)
            ],
        },
        "straggler": straggler,
        "median_pace": {
            "rank_relaxed": slowest,
            "method": "slowest rank's compute capped at the per-exec median over ranks; re-run",
            "span_ns": r_end - r_start,
            "saving_ns": (end - start) - (r_end - r_start),
            "saving_fraction": ((end - start) - (r_end - r_start)) / (end - start),
        },
        "memory": memory,
        "device_profile": device_info,
        "raw_capture": (
            {
                "expect_refusal": True,
                "hint": "unprocessed capture: run neuron-explorer view -d <dir> "
                "--output-format json (or perfetto / parquet) first",
                "files": files.get("raw", []),
            }
            if "raw" in layouts
            else None
        ),
    }


def _rank_derivation(p: dict) -> dict[str, str]:
    proc = (
        "one process per worker: nc_idx/lnc_idx are 0 in every process"
        if p["process_per"] == "worker"
        else "one process per instance: nc_idx/lnc_idx = local worker index"
    )
    base = (
        "rank = instance_index * workers_per_instance + local_index; instance_index = position "
        "of instance_id in sorted order; local_index = order of device_core_idx (equally of "
        "process_id) within the instance"
    )
    sj = "system_json: (instance_id, process_id, nc_idx), device_core_idx orders workers"
    if p["json_fields"] == "minimal":
        sj = (
            "system_json (minimal, no instance_id): workers are told apart by process_id (pids "
            "distinct) and device_core_idx, but the instance order, hence rank numbering across "
            "instances, is not recoverable"
        )
    if p["system_json_variant"] == "trace_events":
        sj = "system_json legacy: (instance_id, process_id, lnc_idx) / group nrt-nc-NNN"
    pf = "perfetto: worker_gid annotation and gid<N> in track names; rank = order of worker_gid"
    if p["thread_style"] in ("nrt", "thread", "thread_literal"):
        pf = "perfetto: process name <instance>-pid<pid> plus nc_idx/device_core_idx annotations"
    return {
        "rule": base,
        "processes": proc,
        "worker_gid": f"instance_index * {p['cores_per_instance']} + local_index (not the rank)",
        "system_json": sj,
        "runtime_json": "runtime_json: file name <instance>_pid_<pid>, then nc_idx, "
        "then data.device_core_idx",
        "perfetto": pf,
    }


def write_scenario(name: str, out_dir: str | os.PathLike, seed: int = 0) -> dict[str, Any]:
    """Write one preset of ``SCENARIOS``; returns its truth."""
    if name not in SCENARIOS:
        raise KeyError(f"unknown scenario {name!r}; known: {sorted(SCENARIOS)}")
    kw = dict(SCENARIOS[name])
    return write_job(out_dir, seed=seed, **kw)
