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

import numpy as np
import pandas as pd

from tracediag.model import schema as S
from tracediag.model.assembly import TRACK_KIND_COL

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
    row as (int64 values, present)."""
    (cpu, has_cpu), (nc, has_nc) = sync[CPU_FIELD], sync[NC_FIELD]
    ts = events[S.TS].to_numpy(dtype=np.int64)
    hardware = events[TRACK_KIND_COL].to_numpy(dtype=object) == "other"
    points = np.flatnonzero(
        hardware & (events[S.NAME].to_numpy(dtype=object) == SYNC_POINT) & has_cpu & has_nc
    )
    if not len(points):
        return
    # Kept for the join with the device profiles of the same job (tracediag.loading.system_join).
    info["clock_sync_points"] = (
        np.stack([rank[points], nc[points], cpu[points]], axis=1).astype(np.int64).tolist()
    )
    on_device = np.abs(ts[points] - nc[points]) < np.abs(ts[points] - cpu[points])
    if not on_device.any():
        info["hardware_clock"] = "host (already converted)"
        return
    sync_table = pd.DataFrame(
        {
            "rank": rank[points],
            "ts": ts[points],
            "offset": cpu[points] - nc[points],
        }
    ).sort_values("ts")
    rows = np.flatnonzero(hardware)
    wanted = pd.DataFrame({"rank": rank[rows], "ts": ts[rows], "row": rows}).sort_values("ts")
    # The latest sync point at or before the event, else the worker's first one.
    joined = pd.merge_asof(wanted, sync_table, on="ts", by="rank", direction="backward")
    first = sync_table.drop_duplicates("rank").set_index("rank")["offset"]
    offset = joined["offset"].fillna(joined["rank"].map(first))
    known = offset.notna().to_numpy()
    shifted = ts.copy()
    shifted[joined["row"].to_numpy()[known]] += offset.to_numpy()[known].astype(np.int64)
    events[S.TS] = shifted
    info["hardware_clock"] = "device, moved to host with timestamp_sync_point"
    info["hardware_events_without_sync_point"] = int((~known).sum())
