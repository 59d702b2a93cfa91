"""Neuron system profiles in Perfetto: hardware events moved onto the host clock.

The runtime's ``neuron_hw`` events (``nc_exec_running``, ``cc_running``, ...) are timed by the
NeuronCore; ``timestamp_sync_point`` events carry both clocks (``cpu_timestamp_ns``,
``nc_timestamp_ns``). Each hardware event of a worker is moved with the latest sync point of
that worker at or before it: ``host = cpu + (event - nc)`` (as the Neuron documentation
describes; the tool admits the two clocks are not exactly aligned). A file whose hardware events
already sit on the host clock (its sync points' own times equal their ``cpu_timestamp_ns``) is
left as it is. Which convention Neuron's Perfetto output follows is not documented: both are read.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracediag.model import schema as S
from tracediag.model.assembly import TRACK_ENGINE, TRACK_KIND_COL, TRACK_LABEL
from tracediag.parsers.neuron_system_names import COLLECTIVE, HARDWARE_NAMES

SYNC_POINT = "timestamp_sync_point"
CPU_FIELD, NC_FIELD = "cpu_timestamp_ns", "nc_timestamp_ns"


def hardware_to_host_clock(
    events: pd.DataFrame,
    rank: np.ndarray,
    sync: dict[str, tuple[np.ndarray, np.ndarray]],
    info: dict,
) -> None:
    """Shift the hardware events of ``events`` (rows of ``other`` tracks of a system profile)
    in place; ``sync`` holds the exact ``cpu_timestamp_ns``/``nc_timestamp_ns`` annotations per
    row as (int64 values, present).

    Sync points may sit on any track (real traces put them on ``neuron_rt`` tracks, at host
    time). Whether a worker's hardware events are on the device clock is decided per worker:
    their median time is nearer the sync points' ``nc_timestamp_ns`` than their
    ``cpu_timestamp_ns``. Each such event moves by the offset of the worker's latest sync point
    at or before it on the device clock (else its first one)."""
    (cpu, has_cpu), (nc, has_nc) = sync[CPU_FIELD], sync[NC_FIELD]
    ts = events[S.TS].to_numpy(dtype=np.int64)
    is_sync = events[S.NAME].to_numpy(dtype=object) == SYNC_POINT
    # Hardware: markers on ``other`` tracks and collectives (``cc_running``) on ``cc_core`` ones.
    kinds = events[TRACK_KIND_COL].to_numpy(dtype=object)
    hardware = ((kinds == "other") | (kinds == "cc_core")) & ~is_sync
    points = np.flatnonzero(is_sync & has_cpu & has_nc)
    if not len(points):
        return
    # Kept for the join with the device profiles of the same job (tracediag.loading.system_join).
    info["clock_sync_points"] = (
        np.stack([rank[points], nc[points], cpu[points]], axis=1).astype(np.int64).tolist()
    )
    rows = np.flatnonzero(hardware)
    per_rank = pd.DataFrame({"rank": rank[points], "nc": nc[points], "cpu": cpu[points]})
    clocks = per_rank.groupby("rank")[["nc", "cpu"]].median()
    hw_median = pd.Series(ts[rows].astype(np.float64)).groupby(rank[rows]).median()
    near = clocks.reindex(hw_median.index)
    on_device_rank = (hw_median - near["nc"]).abs() < (hw_median - near["cpu"]).abs()
    device_ranks = on_device_rank[on_device_rank].index.to_numpy()
    if not len(device_ranks):
        info["hardware_clock"] = "host (already converted)"
        return
    rows = rows[np.isin(rank[rows], device_ranks)]
    sync_table = per_rank.assign(offset=per_rank["cpu"] - per_rank["nc"], ts=per_rank["nc"])
    sync_table = sync_table[["rank", "ts", "offset"]].sort_values("ts")
    wanted = pd.DataFrame({"rank": rank[rows], "ts": ts[rows], "row": rows}).sort_values("ts")
    # The latest sync point at or before the event (device clock), else the worker's first one.
    joined = pd.merge_asof(wanted, sync_table, on="ts", by="rank", direction="backward")
    first = sync_table.drop_duplicates("rank").set_index("rank")["offset"]
    offset = joined["offset"].fillna(joined["rank"].map(first))
    known = offset.notna().to_numpy()
    shifted = ts.copy()
    shifted[joined["row"].to_numpy()[known]] += offset.to_numpy()[known].astype(np.int64)
    events[S.TS] = shifted
    info["hardware_clock"] = "device, moved to host with timestamp_sync_point"
    info["hardware_events_without_sync_point"] = int((~known).sum())


# ---- Neuron system traces in Perfetto: which slices are hardware, and whose they are ----------

#: Annotations the decoder must keep for system traces (ranks, sources).
SYSTEM_WANTED = frozenset(
    {"worker_gid", "instance_id", "process_id", "nc_idx", "device_core_idx", "trace_event_source"}
)
#: Runtime slice names: a trace holding them (and no ``gid...`` track) is a system trace whose
#: threads are named ``Thread <tid>`` (the older screenshots).
RUNTIME_NAMES = ("nrt_execute", "nrt_load", "timestamp_sync_point", "nc_exec_running")
_PROCESS = re.compile(r"^(?P<instance>i-[0-9a-fA-F]+)-pid(?P<pid>\d+)$")
_NEFF_NAME = re.compile(r"^(\w+)\s+(\S+\.neff)\s*$")


def is_system_trace(names: pd.Series) -> bool:
    """Slices named like the Neuron runtime's (see :data:`RUNTIME_NAMES`)."""
    return bool(pd.Series(names.astype(str).unique()).isin(RUNTIME_NAMES).any())


def _ancestor_process(tracks: pd.DataFrame) -> pd.Series:
    """Per track uuid, the name of the nearest process at or above it ("" if none)."""
    parent = dict(zip(tracks["uuid"].tolist(), tracks["parent"].tolist(), strict=True))
    process = dict(zip(tracks["uuid"].tolist(), tracks["process"].tolist(), strict=True))
    out = {}
    for uuid in parent:  # a loop over tracks
        seen, u = set(), uuid
        while u in parent and u not in seen and not process[u]:
            seen.add(u)
            u = parent[u]
        out[uuid] = process.get(u, "")
    return pd.Series(out, dtype=object)


def system_slices(
    events: pd.DataFrame,
    ann: pd.DataFrame,
    slice_track: np.ndarray,
    tracks: pd.DataFrame,
    track_table: pd.DataFrame,
    values,
) -> tuple[np.ndarray, str, dict]:
    """Ranks of a system trace's slices, and their hardware slices relabelled in place.

    Ranks come from ``worker_gid`` (annotation, else ``gid<g>`` in the track name), else from
    instance, process and NeuronCore (annotations, else the process name
    ``<instance>-pid<pid>`` and ``nc<n>`` of the track name; :mod:`neuron_system_ranks`).
    Hardware slices (``trace_event_source`` ``neuron_hw``, a ``neuron_hw`` track, or a hardware
    name) become markers on a ``<worker>-nc<n>[-core<c>]-neuron_hw`` track, ``cc_running`` a
    collective on a ``cc_core`` track; ``nc_exec_running <path>.neff`` is named
    ``nc_exec_running`` (the NEFFs go to ``info["neff_paths"]``). ``values(name, n)`` gives
    an annotation per slice (objects, None where absent)."""
    from tracediag.parsers.neuron_system_ranks import worker_ranks

    n = len(events)
    info: dict = {}
    name = events[S.NAME].astype(str)
    split = name.str.extract(_NEFF_NAME.pattern)
    if split[0].notna().any():
        info["neff_paths"] = sorted(set(split[1].dropna()))
        name = name.where(split[0].isna(), split[0])
        events[S.NAME] = pd.Categorical(name.to_numpy())
    per_track = track_table.reindex(slice_track)
    label = per_track["label"].astype(str).reset_index(drop=True)
    from_label = label.str.extract(r"^(?:gid(\d+)-)?(?:nrt-)?nc(\d+)-tid\d+-(\w+)$")
    process = _ancestor_process(tracks).reindex(slice_track).fillna("").reset_index(drop=True)
    from_process = process.str.extract(_PROCESS.pattern)
    fields = {
        "worker_gid": values("worker_gid", n),
        "instance_id": values("instance_id", n),
        "process_id": values("process_id", n),
        "nc_idx": values("nc_idx", n),
        "device_core_idx": values("device_core_idx", n),
    }
    fallback = {
        "worker_gid": from_label[0],
        "instance_id": from_process["instance"],
        "process_id": from_process["pid"],
        "nc_idx": from_label[1],
    }
    for key, other in fallback.items():
        fields[key] = pd.Series(fields[key], dtype=object).fillna(
            pd.Series(other.to_numpy(dtype=object), dtype=object)
        )
    if not fields["instance_id"].notna().any():
        fields["instance_id"] = None
    rank, how, rank_info = worker_ranks(fields, n)
    info.update(rank_info)
    source = pd.Series(values("trace_event_source", n), dtype=object)
    hardware = (
        (source.astype(str) == "neuron_hw").to_numpy()
        | (from_label[2] == "neuron_hw").to_numpy()
        | name.isin(HARDWARE_NAMES).to_numpy()
    )
    nc_text = pd.Series(fields["nc_idx"], dtype=object).fillna("?").astype(str)
    core = pd.to_numeric(pd.Series(fields["device_core_idx"], dtype="string"), errors="coerce")
    core_text = ("-core" + core.astype("Int64").astype(str)).where(core.notna(), "")
    # With worker_gid the rank is the gid (neuron_system_ranks).
    prefix = "gid" if rank_info.get("worker_gid_of_rank") else "rank"
    worker = pd.Series(np.clip(rank, 0, None)).astype(str).radd(prefix)
    hw_label = (worker + "-nc" + nc_text + core_text + "-neuron_hw").to_numpy(dtype=object)
    collective = hardware & (name.to_numpy() == COLLECTIVE)
    for col, value, where in (
        (TRACK_LABEL, hw_label, hardware),
        (TRACK_KIND_COL, np.where(collective, "cc_core", "other"), hardware),
        (S.KIND, np.where(collective, "collective", "marker"), hardware),
        (TRACK_ENGINE, np.full(n, "nc", dtype=object), hardware),
        (TRACK_ENGINE, np.full(n, "cpu", dtype=object), ~hardware),
        (TRACK_KIND_COL, np.full(n, "cpu_thread", dtype=object), ~hardware),
        (S.KIND, np.where(events[S.KIND].astype(str) == "marker", "marker", "host"), ~hardware),
    ):
        current = events[col].astype(object).to_numpy()
        events[col] = pd.Categorical(np.where(where, value, current))
    return rank, how, info
