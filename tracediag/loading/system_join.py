"""Join Neuron system profiles (host side) with the device profiles of the same job.

A system profile's part of rank ``r`` (``meta.info["neuron_profile"] == "system"``: the JSON,
Parquet and Perfetto system readers) and a Neuron device profile of rank ``r`` (Parquet, legacy
JSON or Perfetto device trace) become one part on the **host clock**, as the Neuron tools show
hardware events (neuron-formats.md: ``adjusted = sync_cpu + (event_device - sync_device)``):

- the device events move by ``cpu_timestamp_ns - nc_timestamp_ns`` of the worker's
  ``timestamp_sync_point`` nearest the device profile's start (``meta.info["device_host_join"]
  = "timestamp_sync_point"``); without a sync point, by matching the execution: the start of the
  worker's ``nc_exec_running`` (its whole span, ``meta.info["execution_spans_ns"]``; else
  ``nrt_execute``) whose duration is closest to the device profile's span is taken as the profile's first event (``"execution match"``);
- the latest runtime call that ends by the device's first event (e.g. ``nrt_tensor_write``
  before the execution) gets a ``launch`` edge to it, so host delays before device work show on
  the dependency graph (rule HST401), as launch calls do in GPU traces.

Other parts are left as they are. A rank's second system part stays separate (the loader then
reports the rank as given twice).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracediag.model import schema as S
from tracediag.model.assembly import TRACK_KIND_COL, RankPart
from tracediag.parsers import BY_FORMAT
from tracediag.parsers.neuron_system_work import SPANS_INFO

SYSTEM = "system"
_EXECUTIONS = ("nc_exec_running", "nrt_execute")


def is_device_part(part: RankPart) -> bool:
    """A Neuron device profile (on a NeuronCore clock)."""
    info = part.meta.info
    reader = BY_FORMAT.get(part.meta.format)
    device_format = getattr(reader, "NEURON_DEVICE_PROFILE", False)
    return device_format or info.get("neuron_profile") == "device"


def join_system_profiles(parts: list[RankPart]) -> list[RankPart]:
    """Merge each rank's system part into its device part (see the module docstring)."""
    system = {}
    for p in parts:  # a loop over parts
        if p.meta.info.get("neuron_profile") == SYSTEM and p.meta.rank not in system:
            system[p.meta.rank] = p
    devices = {p.meta.rank: p for p in parts if is_device_part(p) and len(p.events)}
    joined = set(system) & set(devices)
    if not joined:
        return parts
    out = []
    for p in parts:  # the system part of a joined rank goes into its device part
        r = p.meta.rank
        if r not in joined or p is devices[r]:
            out.append(merge(p, system[r]) if r in joined else p)
        elif p is not system[r]:
            out.append(p)
    return out


def device_to_host_offset(device: RankPart, host: RankPart) -> tuple[int, str]:
    """What to add to the device part's times to put them on the host part's clock, and how it
    was found."""
    first = int(device.events[S.TS].min())
    points = np.array(
        [q[1:] for q in host.meta.info.get("clock_sync_points", []) if q[0] == device.meta.rank],
        dtype=np.int64,
    ).reshape(-1, 2)
    span = int((device.events[S.TS] + device.events[S.DUR]).max()) - first
    if len(points):
        nearest = np.argmin(np.abs(points[:, 0] - first))
        nc, cpu = points[nearest]
        # A device profile on profile-relative time (a Perfetto device trace starts near 0) is
        # on another time base than the sync points' NeuronCore clock: not joined by them.
        if abs(int(nc) - first) <= 10 * span + 1_000_000_000:
            return int(cpu - nc), "timestamp_sync_point"
    ev = host.events
    # Zero-based (profile-relative) times start at the execution's start, not at the first event.
    zero = 0 if 0 <= first <= span else first
    spans = np.array(host.meta.info.get(SPANS_INFO, []), dtype=np.int64).reshape(-1, 2)
    if len(spans):  # the executions' whole spans (their events are cut at the collectives)
        best = np.argmin(np.abs(spans[:, 1] - spans[:, 0] - span))
        return int(spans[best, 0]) - zero, "execution match"
    names = ev[S.NAME].astype(str).to_numpy()
    for name in _EXECUTIONS:  # the hardware's view of the execution first
        rows = np.flatnonzero(names == name)
        if len(rows):
            best = rows[np.argmin(np.abs(ev[S.DUR].to_numpy()[rows] - span))]
            return int(ev[S.TS].iat[best]) - zero, "execution match"
    return 0, "none (no sync point or execution in the system profile)"


def merge(device: RankPart, host: RankPart) -> RankPart:
    """One part: the device events on the host clock, then the host events, their edges, the
    device's collectives (times shifted), and a launch edge host -> first device event."""
    offset, how = device_to_host_offset(device, host)
    dev = device.events.copy()
    dev[S.TS] = dev[S.TS].to_numpy(dtype=np.int64) + offset
    n_dev = len(dev)
    # The device profile holds the device work and the collectives: the system part's
    # executions (nc_exec_running pieces) and cc_running stay as markers.
    host_events = host.events.copy()
    kind = host_events[S.KIND].astype(object)
    hardware = host_events[TRACK_KIND_COL].astype(str) != "cpu_thread"
    device_work = kind.isin(["collective", "compute"]) & hardware
    host_events[S.KIND] = pd.Categorical(kind.where(~device_work, "marker"))
    events = pd.concat([dev, host_events], ignore_index=True)
    for col in dev.columns:  # keep text columns categorical (concat of differing ones is object)
        if isinstance(dev[col].dtype, pd.CategoricalDtype) and events[col].dtype == object:
            events[col] = events[col].astype("category")
    host_edges = host.edges.assign(
        **{S.SRC: host.edges[S.SRC] + n_dev, S.DST: host.edges[S.DST] + n_dev}
    )
    launch = _launch_edge(dev, host.events, n_dev)
    edges = pd.concat([device.edges, host_edges, launch], ignore_index=True)
    coll = device.collectives.copy()
    for col in (S.ARRIVAL, S.START, S.END):
        if col in coll:
            coll[col] = coll[col] + offset
    meta = device.meta
    meta.sources = meta.sources + [s for s in host.meta.sources if s not in meta.sources]
    for reason, n in host.meta.repairs.items():
        meta.count(reason, n)
    meta.info.update(
        {
            "device_host_join": how,
            "device_to_host_clock_ns": offset,
            "host_profile": host.meta.format,
            "launch_edges": len(launch),
        }
    )
    return RankPart(meta=meta, events=events, edges=edges, collectives=coll)


def _launch_edge(dev: pd.DataFrame, host: pd.DataFrame, n_dev: int) -> pd.DataFrame:
    """The runtime call ending last by the device's first event -> that event."""
    first = int(np.argmin(dev[S.TS].to_numpy()))
    start = int(dev[S.TS].iat[first])
    end = host[S.TS].to_numpy(dtype=np.int64) + host[S.DUR].to_numpy(dtype=np.int64)
    calls = (host[TRACK_KIND_COL].astype(str).to_numpy() == "cpu_thread") & (end <= start)
    if not calls.any():
        return pd.DataFrame({S.SRC: [], S.DST: [], S.EDGE_KIND: []}).astype(
            {S.SRC: np.int64, S.DST: np.int64}
        )
    src = int(np.flatnonzero(calls)[np.argmax(end[calls])])
    return pd.DataFrame({S.SRC: [n_dev + src], S.DST: [first], S.EDGE_KIND: ["launch"]})
