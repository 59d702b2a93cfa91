"""Reader of the Neuron runtime's own trace JSON (``{"events": [...], "data_version": 2}``).

One file per process, as third-party readers of real runs find it (neuron-real-output.md):
each record is one phase of one runtime or hardware event, ``event_type`` (the name),
``phase`` (``start``/``stop``), ``tracking_id`` (pairs the two phases), ``timestamp_ns`` (host
epoch ns), ``nc_idx`` and ``data`` with ``nc_timestamp_ns`` (the device clock of hardware
events), ``exec_id``, ``device_core_idx``, ``model_id``/``model_name`` and, on
``timestamp_sync_point``, both clocks (``cpu_timestamp_ns``, ``nc_timestamp_ns``).

The reader takes one file or a directory of them (``runtime_trace/``); a file named
``<instance>_pid_<pid>.json`` gives the instance and the process of its events, which together
with ``nc_idx`` and ``device_core_idx`` give the ranks (:mod:`neuron_system_ranks`). A hardware
event without ``timestamp_ns`` is read on the device clock and moved to the host clock with the
worker's sync points (:mod:`perfetto_system`). Events are then mapped by :mod:`neuron_system`.
A start without its stop (or the reverse) is dropped and counted.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import orjson
import pandas as pd

from tracediag.io.files import read_bytes
from tracediag.model.assembly import RankPart
from tracediag.model.errors import TraceInputError
from tracediag.parsers.neuron_system import HARDWARE_SOURCE, system_parts
from tracediag.parsers.neuron_system_names import HARDWARE_NAMES
from tracediag.parsers.neuron_system_runtime_sniff import (  # noqa: F401 (the reader's declaration)
    DEFAULT_HARDWARE,
    FORMAT,
    _files,
    sniff,
)
from tracediag.parsers.perfetto_system import CPU_FIELD, NC_FIELD, SYNC_POINT

_FILE_NAME = re.compile(r"^(?P<instance>.+)_pid_(?P<pid>\d+)$")
_DATA_FIELDS = ("exec_id", "device_core_idx", "model_id", "model_name", CPU_FIELD, NC_FIELD)


def _records(path: Path) -> pd.DataFrame:
    """One file's records, one row per phase, ids and times kept exact (object columns)."""
    try:
        doc = orjson.loads(read_bytes(path))
    except orjson.JSONDecodeError as exc:
        raise TraceInputError(path, f"invalid JSON at byte {exc.pos}: {exc.msg}") from None
    rows = doc.get("events") if isinstance(doc, dict) else None
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise TraceInputError(path, "field 'events' is not a list of objects")
    frame = pd.DataFrame(rows, dtype=object)
    for needed in ("event_type", "phase", "tracking_id"):
        if len(frame) and needed not in frame:
            raise TraceInputError(path, f"events lack the field {needed!r}")
    data = frame.pop("data") if "data" in frame else pd.Series(None, index=frame.index)
    data = data.where(data.map(lambda d: isinstance(d, dict)), None)
    inner = pd.DataFrame(
        [d or {} for d in data.tolist()], index=frame.index, columns=list(_DATA_FIELDS)
    ).astype(object)
    frame = pd.concat([frame.drop(columns=[c for c in inner if c in frame]), inner], axis=1)
    named = _FILE_NAME.match(path.stem)
    if named:  # the instance and the process are in the file name only
        frame["instance_id"] = named["instance"]
        frame["process_id"] = named["pid"]
    else:
        frame["instance_id"] = path.stem
    frame["file"] = str(path)
    return frame


def _pair(rec: pd.DataFrame, counts: dict[str, int]) -> pd.DataFrame:
    """Start and stop records of one event (file, tracking_id) -> one row with a duration."""
    phase = rec["phase"].astype("string").str.lower()
    name = rec["event_type"].astype(str)
    hardware = name.isin(HARDWARE_NAMES).to_numpy()
    # Exact: through text, not float (ns epoch times exceed 2**53).
    host = pd.array(rec.get("timestamp_ns", pd.Series(None, index=rec.index)), dtype=object)
    device = rec[NC_FIELD].to_numpy(dtype=object)
    on_device = hardware & pd.isna(host)
    when = np.where(on_device, device, host)
    rec = rec.assign(
        _t=pd.to_numeric(pd.Series(when, dtype="string"), errors="coerce")
        .astype("Int64")
        .to_numpy()
    )
    rec = rec.assign(_name=name, _hw=hardware)
    key = ["file", "tracking_id"]
    start = rec[(phase == "start").to_numpy()].drop_duplicates(key, keep="first")
    stop = rec[(phase == "stop").to_numpy()].drop_duplicates(key, keep="last")
    both = start.merge(
        stop[key + ["_t"]], on=key, how="outer", suffixes=("", "_stop"), indicator=True
    )
    unpaired = both["_merge"] != "both"
    if unpaired.any():
        counts["runtime events without both phases: dropped"] = int(unpaired.sum())
    both = both[~unpaired.to_numpy()]
    out = pd.DataFrame(
        {
            "name": both["_name"].to_numpy(dtype=object),
            "start_ts": both["_t"].to_numpy(dtype=object),
            "duration_ns": (both["_t_stop"] - both["_t"]).to_numpy(dtype=object),
            "trace_event_source": np.where(
                both["_hw"].to_numpy(dtype=bool), HARDWARE_SOURCE, "neuron_rt"
            ),
        }
    )
    for col in (
        "instance_id",
        "process_id",
        "nc_idx",
        "device_core_idx",
        "exec_id",
        "model_id",
        CPU_FIELD,
        NC_FIELD,
    ):
        if col in both:
            out[col] = both[col].to_numpy(dtype=object)
    sync = out["name"].to_numpy(dtype=object) == SYNC_POINT
    out.loc[sync, "duration_ns"] = 0
    return out


def read(path: Path) -> list[RankPart]:
    """One part per worker of the files' processes (see the module docstring)."""
    path = Path(path)
    files = _files(path)
    if not files:
        raise TraceInputError(path, "no runtime trace JSON files")
    rec = pd.concat([_records(f) for f in files], ignore_index=True)  # a loop over files
    if not len(rec):
        raise TraceInputError(path, "the runtime trace holds no events")
    counts: dict[str, int] = {}
    events = _pair(rec, counts)
    info = {"runtime_trace_files": len(files), "runtime_trace_repairs": counts}
    parts = system_parts(events, path, FORMAT, info)
    for reason, n in counts.items():
        parts[0].meta.count(reason, n)
    return parts
