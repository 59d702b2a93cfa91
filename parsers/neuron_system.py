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
from tracediag.parsers.neuron_events import cc_collectives
from tracediag.parsers.neuron_part import Piece, finish_part
from tracediag.parsers.neuron_system_names import COLLECTIVE, HARDWARE_NAMES
from tracediag.parsers.neuron_system_ranks import WORKER_FIELDS, worker_ranks
from tracediag.parsers.neuron_system_work import execution_work
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


_NEFF_SUFFIX = r"^(\w+)\s+(\S+\.neff)\s*$"


def _names(df: pd.DataFrame, keep: np.ndarray, info: dict) -> np.ndarray:
    """Event names; ``nc_exec_running /tmp/.../x.neff`` becomes ``nc_exec_running`` and the NEFF
    goes to ``info["neff_paths"]`` (distinct values, once per distinct name)."""
    raw = pd.Series(pd.Categorical(df["name"].astype(str).to_numpy()[keep]))
    cats = pd.Series(raw.cat.categories)
    split = cats.str.extract(_NEFF_SUFFIX)
    with_neff = split[0].notna()
    if with_neff.any():
        info["neff_paths"] = sorted(set(split[1][with_neff]))
        cats = cats.where(~with_neff, split[0])
    return cats.to_numpy(dtype=object)[raw.cat.codes.to_numpy()]


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
    all_rank, rank_source, rank_info = worker_ranks({f: df.get(f) for f in WORKER_FIELDS}, len(df))
    orphan = all_rank < 0
    if orphan.any():
        counts["events without worker_gid (nor a process with one): skipped"] = int(orphan.sum())
    keep = ~orphan
    info = info | rank_info | {"rank_source": rank_source}
    name = _names(df, keep, info)
    source = df.get("trace_event_source", pd.Series(None, index=df.index, dtype=object))
    source = source.astype(object).to_numpy()[keep]
    by_name = np.isin(name, HARDWARE_NAMES)
    source = np.where(pd.isna(source), np.where(by_name, HARDWARE_SOURCE, "neuron_rt"), source)
    source = source.astype(str).astype(object)
    nc, has_nc = ints(_int_column(df, "nc_idx", path)[keep], int(keep.sum()))
    tid, has_tid = ints(_int_column(df, "thread_id", path)[keep], int(keep.sum()))
    core, has_core = ints(_int_column(df, "device_core_idx", path)[keep], int(keep.sum()))
    rank = all_rank[keep]
    hardware = source == HARDWARE_SOURCE
    nc_text = np.where(has_nc, nc.astype(str), "?").astype(object)
    tid_text = np.where(has_tid, tid.astype(str), "?").astype(object)
    # With worker_gid the rank is the gid (neuron_system_ranks).
    worker = ("gid" if rank_info.get("worker_gid_of_rank") else "rank") + rank.astype(str).astype(
        object
    )
    label = worker + "-nc" + nc_text + "-tid" + tid_text + "-" + source
    # LNC>1: one nc_exec_running per physical core; each core keeps its own hardware track.
    core_text = np.where(has_core, "-core" + core.astype(str).astype(object), "")
    label = np.where(hardware, worker + "-nc" + nc_text + core_text + "-" + source, label)
    kind = np.where(hardware, "marker", "host").astype(object)
    kind[hardware & (name == COLLECTIVE)] = "collective"
    track_kind = np.where(hardware, "other", "cpu_thread").astype(object)
    track_kind[kind == "collective"] = "cc_core"
    events = pd.DataFrame(
        {
            S.KIND: pd.Categorical(kind),
            S.NAME: pd.Categorical(name),
            S.TS: start[keep].array,
            S.DUR: dur[keep].array,
            S.SRC_ID: np.where(*_ids(df, path, keep)),
            TRACK_LABEL: pd.Categorical(label),
            TRACK_KIND_COL: pd.Categorical(track_kind),
            TRACK_ENGINE: pd.Categorical(np.where(hardware, "nc", "cpu")),
            TRACK_DEVICE: pd.Categorical("nc" + nc_text),
        }
    )
    n = len(rank)
    sync = {f: ints(_int_column(df, f, path)[keep], n) for f in (CPU_FIELD, NC_FIELD)}
    timed = events[S.TS].notna().to_numpy()
    clock = pd.DataFrame(
        {
            S.TS: events[S.TS].fillna(0).to_numpy(dtype=np.int64),
            S.NAME: events[S.NAME],
            TRACK_KIND_COL: np.where(hardware, "other", "cpu_thread"),
        }
    )
    hardware_to_host_clock(clock, rank, sync, info)
    events[S.TS] = pd.array(clock[S.TS].to_numpy(), dtype="Int64")
    events.loc[~timed, S.TS] = pd.NA
    edges = _flow_edges(df, keep, events, rank)
    operation = _operation(df, keep)
    return _parts(path, fmt, events, edges, rank, counts, {SYNC_INFO: []} | info, operation)


def _operation(df: pd.DataFrame, keep: np.ndarray) -> np.ndarray:
    """The collective's operation: an ``operation`` field, else in ``extra_attributes_json``."""
    n = int(keep.sum())
    op = df["operation"].to_numpy(dtype=object)[keep] if "operation" in df else np.full(n, None)
    if "extra_attributes_json" in df:
        extra = df["extra_attributes_json"].astype("string").to_numpy(dtype=object)[keep]
        found = pd.Series(extra, dtype="string").str.extract(r'"operation"\s*:\s*"([^"]+)"')[0]
        op = np.where(pd.isna(op), found.to_numpy(dtype=object), op)
    return op


def _collectives(events: pd.DataFrame, operation: np.ndarray, r: int, meta) -> pd.DataFrame:
    """A rank's ``cc_running`` events as collectives: the k-th of the rank matches the k-th of
    every other rank (the runtime runs one NEFF's collectives in program order)."""
    rows = np.flatnonzero(events[S.KIND].to_numpy(dtype=object) == "collective")
    if not len(rows):
        return None
    ts = events[S.TS].to_numpy(dtype=np.float64, na_value=np.nan)[rows]
    rows = rows[np.argsort(ts, kind="stable")]
    op = pd.Series(operation[rows], dtype=object).fillna("cc_running").to_numpy()
    table = pd.DataFrame(
        {
            "start_ts": events[S.TS].to_numpy()[rows],
            "duration_ns": events[S.DUR].to_numpy()[rows],
            "operation": op,
            "op_id": np.arange(len(rows), dtype=np.int64),
        }
    )
    out = cc_collectives(table, 0, r, meta)
    out[S.EVENT] = rows
    out[S.MATCH_KEY] = "cc_running|" + out[S.SEQ].astype(str)
    return out


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


def _parts(path, fmt, events, edges, rank, counts, info, operation) -> list[RankPart]:
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
        meta.info["neuron_profile"] = "system"
        if r == rank.min():
            for reason, n in counts.items():
                meta.count(reason, n)
            meta.count("flows between workers: not kept", int(across.sum()))
        part_edges = pd.DataFrame(
            {S.SRC: local[src[mine]], S.DST: local[dst[mine]], S.EDGE_KIND: "flow"}
        )
        mine_events = events.iloc[rows].reset_index(drop=True)
        piece = Piece("system events", mine_events)
        coll = _collectives(mine_events, operation[rows], int(r), meta)
        parts.append(execution_work(finish_part(meta, [piece], [part_edges], coll)))
    return parts
