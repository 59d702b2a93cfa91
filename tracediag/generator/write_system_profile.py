"""Neuron system-profile writers: the host side of the simulated step.

Per rank (worker ``worker_gid`` = rank, NeuronCore ``nc_idx`` = rank, one process and launch
thread per worker on one instance) the runtime's calls around the one NEFF execution:
``nrt_tensor_write`` (inputs to the device), ``nrt_execute`` (submits the execution and waits
for it), ``nrt_tensor_read`` (outputs back); and hardware events: ``timestamp_sync_point`` (an
instant carrying ``cpu_timestamp_ns`` and ``nc_timestamp_ns``), ``nc_exec_running`` (the
execution) and ``cc_running`` per collective. Runtime events are on the host clock (Unix-epoch
ns: ``true + host_offset``, one clock for the instance); hardware events on the NeuronCore's
clock, the device profiles' clock (``true + device offset``), to be moved with the sync point.

Written as ``system_profile.json`` (neuron-formats.md section 2), as an Explorer Parquet
``SystemProfileEvents`` table, and as a Perfetto system trace (processes
``<instance_id>-pid<pid>``, threads ``gid<g>-nc<n>-tid<t>-neuron_rt|neuron_hw``; section 3).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from tracediag.generator.device_tables import RankTables
from tracediag.generator.write_parquet import to_arrow, write_table
from tracediag.parsers.protos.perfetto_trace_pb2 import Trace, TrackEvent

INSTANCE_ID = "i-0a1b2c3d4e5f60718"
HOST_EPOCH_NS = 1_766_072_156_592_459_482  # the host clock at the step's true origin
PID_BASE, TID_BASE = 41_000, 52_000
MODEL_NAME = "model.neff"
#: Host calls around the execution, as (name, start, end) relative to its true start/end:
#: offsets in ns from the start (``"s"``) or the end (``"e"``).
HOST_CALLS = (
    ("nrt_tensor_write", ("s", -60_000), ("s", -35_000)),
    ("nrt_execute", ("s", -30_000), ("e", 20_000)),
    ("nrt_tensor_read", ("e", 25_000), ("e", 45_000)),
)
SYNC_BEFORE_NS = 5_000  # the sync point is taken just before the execution starts


def host_events(tables: list[RankTables], device_offsets: np.ndarray, host_offset: int):
    """The system profile's events of every rank, with Parquet ``SystemProfileEvents`` names
    (plus ``cpu_timestamp_ns``/``nc_timestamp_ns`` on sync points: None elsewhere)."""
    frames = []
    for t in tables:  # a loop over ranks
        off = int(device_offsets[t.rank])
        starts = [t.instructions["start_ts"], t.dma_blocks["start_ts"], t.cc_ops["start_ts"]]
        ends = [t.instructions["end_ts"], t.dma_blocks["end_ts"], t.cc_ops["end_ts"]]
        s_dev = int(min(x.min() for x in starts if len(x)))
        e_dev = int(max(x.max() for x in ends if len(x)))
        s_true, e_true = s_dev - off, e_dev - off
        anchor = {"s": s_true, "e": e_true}
        host = pd.DataFrame(
            {
                "name": [c[0] for c in HOST_CALLS],
                "start_ts": [anchor[a] + d + host_offset for _, (a, d), _ in HOST_CALLS],
                "end_ts": [anchor[a] + d + host_offset for _, _, (a, d) in HOST_CALLS],
                "trace_event_source": "neuron_rt",
            }
        )
        sync_true = s_true - SYNC_BEFORE_NS
        hardware = pd.DataFrame(
            {
                "name": [
                    "timestamp_sync_point",
                    "nc_exec_running",
                    *["cc_running"] * len(t.cc_ops),
                ],
                "start_ts": [sync_true + off, s_dev, *t.cc_ops["start_ts"]],
                "end_ts": [sync_true + off, e_dev, *t.cc_ops["end_ts"]],
                "trace_event_source": "neuron_hw",
            }
        )
        rank = pd.concat([host, hardware], ignore_index=True)
        rank["cpu_timestamp_ns"] = pd.array([None] * len(rank), dtype="Int64")
        rank["nc_timestamp_ns"] = pd.array([None] * len(rank), dtype="Int64")
        sync = rank["name"] == "timestamp_sync_point"
        rank.loc[sync, "cpu_timestamp_ns"] = sync_true + host_offset
        rank.loc[sync, "nc_timestamp_ns"] = sync_true + off
        rank["worker_gid"] = t.rank
        frames.append(rank)
    out = pd.concat(frames, ignore_index=True)
    out["duration_ns"] = out["end_ts"] - out["start_ts"]
    out["nc_idx"] = out["worker_gid"]
    out["process_id"] = PID_BASE + out["worker_gid"]
    out["thread_id"] = TID_BASE + out["worker_gid"]
    out["instance_id"] = INSTANCE_ID
    out["id"] = np.arange(len(out), dtype=np.int64)
    return out


def _extra_attributes(ev: pd.DataFrame) -> pd.Series:
    """``extra_attributes_json``: the sync point's two clocks, the execution's model."""
    sync = ev["cpu_timestamp_ns"].notna()
    text = pd.Series(None, index=ev.index, dtype=object)
    text[sync] = (
        '{"cpu_timestamp_ns": "' + ev.loc[sync, "cpu_timestamp_ns"].astype(str)
        + '", "nc_timestamp_ns": "' + ev.loc[sync, "nc_timestamp_ns"].astype(str) + '"}'
    )  # fmt: skip
    execute = ev["name"] == "nrt_execute"
    text[execute] = f'{{"model_name": "{MODEL_NAME}", "timestamp_unit": "ns"}}'
    return text


def write_parquet(ev: pd.DataFrame, directory: Path) -> list[Path]:
    """An Explorer system-profile directory: ``SystemProfileEvents`` and its metadata."""
    directory.mkdir(parents=True, exist_ok=True)
    launch = ev["name"].isin(["nrt_tensor_write", "nrt_execute"]).to_numpy()
    # The input copy and the execution it feeds share a flow (a list per event: few events).
    flows = [
        [f"exec-{g}"] if hit else None for g, hit in zip(ev["worker_gid"], launch, strict=True)
    ]
    table = pd.DataFrame(
        {
            **{c: ev[c] for c in ("id", "name", "start_ts", "end_ts", "duration_ns")},
            "trace_event_source": ev["trace_event_source"],
            "instance_id": ev["instance_id"],
            "process_id": ev["process_id"],
            "thread_id": ev["thread_id"],
            "nc_idx": ev["nc_idx"],
            "pcore_idx": 0,
            "worker_gid": ev["worker_gid"],
            "extra_attributes_json": _extra_attributes(ev),
        }
    )
    arrow = to_arrow(table).append_column("flow_id", pa.array(flows, type=pa.list_(pa.string())))
    path = directory / "SystemProfileEvents.parquet"
    pq.write_table(arrow, path, compression="zstd")
    first, last = int(ev["start_ts"].min()), int(ev["end_ts"].max())
    meta = pd.DataFrame([{"first_ts_ns": str(first), "last_ts_ns": str(last), "ntff_version": 5}])
    return [path, *write_table(meta, directory, "SystemProfileMetadata")]


def write_json(ev: pd.DataFrame, path: Path) -> Path:
    """``system_profile.json``: ``trace_events``, ``mem_usage``, ``cpu_util`` (process ids as
    strings, as the tool writes some of them)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = pd.DataFrame(
        {
            "name": ev["name"],
            "timestamp": ev["start_ts"],
            "duration": ev["duration_ns"],
            "group": "nrt-nc-" + ev["nc_idx"].map("{:03d}".format),
            "instance_id": ev["instance_id"],
            "process_id": ev["process_id"].astype(str),
            "thread_id": ev["thread_id"],
            "lnc_idx": ev["nc_idx"],
            "worker_gid": ev["worker_gid"],
            "type": ev["trace_event_source"],
            "cpu_timestamp_ns": ev["cpu_timestamp_ns"],
            "nc_timestamp_ns": ev["nc_timestamp_ns"],
        }
    )
    first = int(ev["start_ts"].min())
    doc = {
        "trace_events": orjson.loads(rows.to_json(orient="records")),
        "mem_usage": [{"timestamp": first, "instance_id": INSTANCE_ID, "used_bytes": 1 << 34}],
        "cpu_util": [{"timestamp": first, "instance_id": INSTANCE_ID, "cpu_id": "average",
                      "util_percent": 12.5}],
    }  # fmt: skip
    # Sync-point fields only where they exist (to_json wrote nulls on other rows).
    for row in doc["trace_events"]:  # a loop over the few host events
        for key in ("cpu_timestamp_ns", "nc_timestamp_ns"):
            if row[key] is None:
                del row[key]
    path.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    return path


def write_perfetto(ev: pd.DataFrame, path: Path) -> Path:
    """``system_profile.pftrace``: one process per worker, one thread per (worker, source);
    slices BEGIN/END, sync points as instants (the events are few: message objects)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    out = Trace()
    out.packet.add(trusted_packet_sequence_id=1, sequence_flags=1)
    threads: dict[tuple[int, str], int] = {}
    for (gid, pid), _ in ev.groupby(["worker_gid", "process_id"]):  # a loop over workers
        td = out.packet.add(trusted_packet_sequence_id=1).track_descriptor
        td.uuid, td.process.pid = 1000 + int(gid), int(pid)
        td.process.process_name = f"{INSTANCE_ID}-pid{pid}"
        for lane, source in enumerate(("neuron_rt", "neuron_hw")):
            uuid = 10_000 + 10 * int(gid) + lane
            threads[(int(gid), source)] = uuid
            td = out.packet.add(trusted_packet_sequence_id=1).track_descriptor
            td.uuid, td.parent_uuid = uuid, 1000 + int(gid)
            td.name = f"gid{gid}-nc{gid}-tid{TID_BASE + int(gid)}-{source}"
            td.thread.pid, td.thread.tid = int(pid), TID_BASE + int(gid)
    begins = ev.assign(at=ev["start_ts"], phase=1)
    ends = ev[ev["name"] != "timestamp_sync_point"].assign(at=ev["end_ts"], phase=0)
    for e in pd.concat([begins, ends]).sort_values(["at", "phase"]).itertuples():  # few events
        packet = out.packet.add(trusted_packet_sequence_id=1, timestamp=int(e.at))
        te = packet.track_event
        te.track_uuid = threads[(int(e.worker_gid), e.trace_event_source)]
        if e.phase == 0:
            te.type = TrackEvent.TYPE_SLICE_END
            continue
        te.name = e.name
        sync = e.name == "timestamp_sync_point"
        te.type = TrackEvent.TYPE_INSTANT if sync else TrackEvent.TYPE_SLICE_BEGIN
        notes: dict = {"worker_gid": int(e.worker_gid), "nc_idx": int(e.nc_idx)}
        if sync:
            notes |= {"cpu_timestamp_ns": int(e.cpu_timestamp_ns),
                      "nc_timestamp_ns": int(e.nc_timestamp_ns)}  # fmt: skip
        if e.name == "nrt_execute":
            notes |= {"device_profile": f"rank_{e.worker_gid}.pftrace", "model_name": MODEL_NAME,
                      "timestamp_unit": "ns"}  # fmt: skip
        for key, value in notes.items():
            a = te.debug_annotations.add(name=key)
            if isinstance(value, str):
                a.string_value = value
            else:
                a.int_value = value
    path.write_bytes(out.SerializeToString())
    return path
