"""Neuron system profiles (host side) -> canonical parts, shared by the JSON and Parquet readers.

Both readers bring their events to the Explorer ``SystemProfileEvents`` field names (``name``,
``start_ts``, ``duration_ns``/``end_ts``, ``trace_event_source``, ``instance_id``, ``process_id``,
``thread_id``, ``nc_idx``, ``worker_gid``, ``id``, ``flow_id``) plus the sync points' two clocks
(``cpu_timestamp_ns``, ``nc_timestamp_ns``), and :func:`system_parts` maps them the way the
Perfetto reader maps a Neuron system trace (:mod:`perfetto_tracks`):

- the rank is ``worker_gid`` (an event without one takes its process's, else it is skipped and
  counted);
- runtime (``neuron_rt``) and framework events are ``host`` events on ``cpu_thread`` tracks
  labelled ``gid<g>-nc<n>-tid<t>-<source>``; hardware events (``neuron_hw``: ``nc_exec_running``,
  ``cc_running``, ``timestamp_sync_point``, ...) are markers on an ``other`` track;
- hardware events on the NeuronCore clock are moved to the host clock with the worker's
  ``timestamp_sync_point`` (:func:`perfetto_system.hardware_to_host_clock`); the sync points are
  kept in ``meta.info["clock_sync_points"]`` (``[rank, nc_ns, cpu_ns]``) for the join with the
  device profiles of the same job (:mod:`tracediag.loading.system_join`);
- events sharing a ``flow_id`` are chained by ``flow`` edges in time order.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from tracediag.model import schema as S
from tracediag.model.assembly import (
    TRACK_DEVICE,
    TRACK_ENGINE,
    TRACK_KIND_COL,
    TRACK_LABEL,
    RankPart,
)
from tracediag.model.errors import TraceInputError
from tracediag.parsers.neuron_common import ints
from tracediag.parsers.neuron_part import Piece, finish_part
from tracediag.parsers.perfetto_system import (
    CPU_FIELD,
    NC_FIELD,
    hardware_to_host_clock,
)

HARDWARE_SOURCE = "neuron_hw"
#: Where the join finds each worker's sync points.
SYNC_INFO = "clock_sync_points"


def _int_column(df: pd.DataFrame, name: str, path: Path) -> pd.Series:
    """An integer column (ids may be strings: coerced); text that is no number is an error."""
    if name not in df:
        return pd.Series(pd.NA, index=df.index, dtype="Int64")
    col = df[name]
    if pd.api.types.is_integer_dtype(col.dtype):
        return col.astype("Int64")
    # Through text: ids may be strings, and float64 would round ns timestamps above 2**53.
    number = pd.to_numeric(col.astype("string"), errors="coerce")
    bad = number.isna() & col.notna()
    if bad.any():
        row = int(np.flatnonzero(bad.to_numpy())[0])
        raise TraceInputError(
            path, f"event {row}: field {name!r} is not an integer ({col.iat[row]!r})"
        )
    if number.dtype.kind == "f":
        whole = (number.fillna(0) % 1 == 0).all()
        if not whole:
            row = int(np.flatnonzero((number.fillna(0) % 1 != 0).to_numpy())[0])
            raise TraceInputError(
                path, f"event {row}: field {name!r} is not an integer ({col.iat[row]!r})"
            )
    return number.astype("Int64")


def system_parts(df: pd.DataFrame, path: Path, fmt: str, info: dict) -> list[RankPart]:
    """One part per worker of a system profile (``df``: see the module docstring)."""
    if not len(df):
        raise TraceInputError(path, "the system profile holds no events")
    for required in ("name", "start_ts"):
        if required not in df:
            raise TraceInputError(path, f"events lack the field {required!r}")
    counts: dict[str, int] = {}
    start = _int_column(df, "start_ts", path)
    dur = _int_column(df, "duration_ns", path)
    if dur.isna().all() and "end_ts" in df:
        dur = _int_column(df, "end_ts", path) - start
    gid = _int_column(df, "worker_gid", path)
    process = _int_column(df, "process_id", path)
    # A framework event without worker_gid belongs to its process's worker.
    by_process = gid.groupby(process.fillna(-1).to_numpy()).transform("first")
    gid = gid.fillna(by_process)
    orphan = gid.isna().to_numpy()
    if orphan.any():
        counts["events without worker_gid (nor a process with one): skipped"] = int(orphan.sum())
    keep = ~orphan
    source = df.get("trace_event_source", pd.Series("neuron_rt", index=df.index))
    source = source.fillna("neuron_rt").astype(str).to_numpy(dtype=object)[keep]
    nc, has_nc = ints(_int_column(df, "nc_idx", path)[keep], int(keep.sum()))
    tid, has_tid = ints(_int_column(df, "thread_id", path)[keep], int(keep.sum()))
    rank = gid[keep].to_numpy(dtype=np.int64)
    hardware = source == HARDWARE_SOURCE
    nc_text = np.where(has_nc, nc.astype(str), "?").astype(object)
    tid_text = np.where(has_tid, tid.astype(str), "?").astype(object)
    label = "gid" + rank.astype(str).astype(object) + "-nc" + nc_text + "-tid" + tid_text
    label = label + "-" + source
    n = len(rank)
    events = pd.DataFrame(
        {
            S.KIND: pd.Categorical(np.where(hardware, "marker", "host")),
            S.NAME: pd.Categorical(df["name"].astype(str).to_numpy()[keep]),
            S.TS: start[keep].array,
            S.DUR: dur[keep].array,
            S.SRC_ID: np.where(*_ids(df, path, keep)),
            TRACK_LABEL: pd.Categorical(label),
            TRACK_KIND_COL: pd.Categorical(np.where(hardware, "other", "cpu_thread")),
            TRACK_ENGINE: pd.Categorical(np.where(hardware, "nc", "cpu")),
            TRACK_DEVICE: pd.Categorical("nc" + nc_text),
        }
    )
    sync = {f: ints(_int_column(df, f, path)[keep], n) for f in (CPU_FIELD, NC_FIELD)}
    timed = events[S.TS].notna().to_numpy()
    clock = pd.DataFrame(
        {
            S.TS: events[S.TS].fillna(0).to_numpy(dtype=np.int64),
            S.NAME: events[S.NAME],
            TRACK_KIND_COL: events[TRACK_KIND_COL],
        }
    )
    hardware_to_host_clock(clock, rank, sync, info)
    events[S.TS] = pd.array(clock[S.TS].to_numpy(), dtype="Int64")
    events.loc[~timed, S.TS] = pd.NA
    edges = _flow_edges(df, keep, events, rank)
    return _parts(path, fmt, events, edges, rank, counts, {SYNC_INFO: []} | info)


def _ids(df: pd.DataFrame, path: Path, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    ids, valid = ints(_int_column(df, "id", path)[keep], int(keep.sum()))
    return valid, ids, -1


def _flow_edges(df: pd.DataFrame, keep: np.ndarray, events: pd.DataFrame, rank) -> pd.DataFrame:
    """Events sharing a flow id, chained in time order (``flow_id``: a list, or one id)."""
    empty = pd.DataFrame({S.SRC: np.zeros(0, np.int64), S.DST: np.zeros(0, np.int64)})
    if "flow_id" not in df:
        return empty
    flows = df["flow_id"][keep].reset_index(drop=True).explode().dropna()
    if not len(flows):
        return empty
    rows = flows.index.to_numpy()
    ts = events[S.TS].to_numpy(dtype=np.float64, na_value=np.nan)[rows]
    table = pd.DataFrame({"f": flows.astype(str).to_numpy(), "t": ts, "row": rows})
    table = table.dropna().sort_values(["f", "t", "row"], kind="stable")
    f, row = table["f"].to_numpy(), table["row"].to_numpy()
    link = (f[:-1] == f[1:]) & (row[:-1] != row[1:])
    return pd.DataFrame({S.SRC: row[:-1][link], S.DST: row[1:][link]})


def _parts(path, fmt, events, edges, rank, counts, info) -> list[RankPart]:
    """One part per worker; flows between workers cannot be kept and are counted."""
    src, dst = edges[S.SRC].to_numpy(np.int64), edges[S.DST].to_numpy(np.int64)
    across = rank[src] != rank[dst]
    parts = []
    for r in np.unique(rank):  # a loop over workers
        rows = np.flatnonzero(rank == r)
        local = np.full(len(rank), -1, dtype=np.int64)
        local[rows] = np.arange(len(rows))
        mine = ~across & (rank[src] == r)
        meta = S.RankMeta(rank=int(r), sources=[str(path)], format=fmt)
        meta.info.update(info)
        meta.info[SYNC_INFO] = [p for p in info[SYNC_INFO] if p[0] == r]
        meta.info.update({"rank_source": "worker_gid", "neuron_profile": "system"})
        if r == rank.min():
            for reason, n in counts.items():
                meta.count(reason, n)
            meta.count("flows between workers: not kept", int(across.sum()))
        part_edges = pd.DataFrame(
            {S.SRC: local[src[mine]], S.DST: local[dst[mine]], S.EDGE_KIND: "flow"}
        )
        piece = Piece("system events", events.iloc[rows].reset_index(drop=True))
        parts.append(finish_part(meta, [piece], [part_edges], None))
    return parts
