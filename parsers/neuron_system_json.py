"""Reader of Neuron system-profile JSON (``system_profile.json``).

Two layouts (neuron-real-output.md):

- ``neuron-explorer view --output-format json`` (SDK 2.22 and later): events under
  ``trace_event`` (``name``, ``timestamp``, ``duration`` in ns on the host clock,
  ``timestamp_unit``, ``exec_id``, ``model_id``, ``device_core_idx``, ``lnc_idx``, ``nc_idx``,
  ``process_id`` as a string, ``model_name``, often ``instance_id``, ``thread_id``,
  ``trace_event_source``, ``flow_id``, ``extra_attributes_json``; no ``worker_gid``) and device
  memory samples under ``device_mem_usage`` (``hbm_idx``, ``total_bytes``,
  ``dram_spill_bytes``, ...);
- times in the unit of the event's ``timestamp_unit`` (``ns``; ``us``, ``ms`` or ``s`` are
  converted to ns exactly from the numbers' decimal text: :mod:`neuron_system_units`);
- the pre-2.22 layout: ``trace_events`` (``group`` like ``nrt-nc-000``, numeric ``type``, ids
  as strings), ``mem_usage`` and ``cpu_util``.

Samples are summarised in ``meta.info`` (counts; per-rank peak device memory and DRAM spill),
not events. Ids and times may be strings: they are coerced. Sync points carry
``cpu_timestamp_ns`` and ``nc_timestamp_ns`` on the event or in its ``args``. Events are mapped
by :mod:`neuron_system`, ranks by :mod:`neuron_system_ranks` (``worker_gid`` when given, else
instance, process and NeuronCore).
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pandas as pd

from tracediag.io.files import read_bytes
from tracediag.model.assembly import RankPart
from tracediag.model.errors import TraceInputError
from tracediag.parsers.neuron_system import HARDWARE_SOURCE, system_parts
from tracediag.parsers.neuron_system_json_sniff import (  # noqa: F401 (the reader's declaration)
    DEFAULT_HARDWARE,
    FORMAT,
    sniff,
)
from tracediag.parsers.neuron_system_units import to_ns, units_of
from tracediag.parsers.perfetto_system import CPU_FIELD, NC_FIELD

#: The event list: the current name first, then the pre-2.22 one.
EVENT_KEYS = ("trace_event", "trace_events")
_NC_OF_GROUP = r"nc-0*(\d+)"
#: The pre-2.22 numeric ``type`` of framework events (Profiler 2.0 beta guide).
FRAMEWORK_TYPE = 99999
_RENAMES = {"timestamp": "start_ts", "duration": "duration_ns", "type": "trace_event_source"}


def read(path: Path) -> list[RankPart]:
    """One part per worker (see :mod:`neuron_system`)."""
    path = Path(path)
    try:
        doc = orjson.loads(read_bytes(path))
    except orjson.JSONDecodeError as exc:
        raise TraceInputError(path, f"invalid JSON at byte {exc.pos}: {exc.msg}") from None
    key = next((k for k in EVENT_KEYS if isinstance(doc, dict) and k in doc), EVENT_KEYS[1])
    if not isinstance(doc, dict) or not isinstance(doc.get(key), list):
        raise TraceInputError(path, f"field {key!r} is not a list of events")
    rows = doc[key]
    bad = next((i for i, r in enumerate(rows) if not isinstance(r, dict)), None)
    if bad is not None:
        raise TraceInputError(path, f"{key}[{bad}] is not an object")
    # Objects, not inferred dtypes: a column with gaps would become float64 and round ns times.
    df = pd.DataFrame(rows, dtype=object).rename(columns=_RENAMES)
    pow10 = units_of(df, path)
    if pow10 is not None:  # times in us (or ms, s): exact ns from their decimal text
        for col in ("start_ts", "duration_ns", "end_ts"):
            if col in df:
                df[col] = to_ns(df[col], pow10, col, path)
    if "args" in df:  # sync-point clocks inside args
        args = df["args"].where(df["args"].map(lambda a: isinstance(a, dict)), None)
        for field in (CPU_FIELD, NC_FIELD):
            inner = args.str.get(field)
            df[field] = df[field].fillna(inner) if field in df else inner
    if "nc_idx" not in df:  # the logical NeuronCore, else the one the group names
        nc = df["lnc_idx"] if "lnc_idx" in df else pd.Series(None, index=df.index, dtype=object)
        if "group" in df:
            named = df["group"].astype("string").str.extract(_NC_OF_GROUP, expand=False)
            nc = nc.where(nc.notna(), named.astype(object))
        df["nc_idx"] = nc
    if "trace_event_source" in df:
        source = df["trace_event_source"].astype(str).str.lower()
        hardware = source.str.contains("hw|hardware", regex=True)
        source = source.where(~hardware, HARDWARE_SOURCE)
        # Pre-2.22 numeric ``type`` codes: only framework's (99999) is documented; the others
        # say nothing of the source, which then comes from the event's name.
        code = pd.to_numeric(source, errors="coerce")
        source = source.where(code.isna(), None).where(code != FRAMEWORK_TYPE, "framework")
        source = source.where(df["trace_event_source"].notna(), None)  # not the text "nan"
        df["trace_event_source"] = source
    info = {
        "system_profile_layout": key,
        "timestamp_unit": _units(df),
        "cpu_util_samples": len(doc.get("cpu_util") or []),
        "mem_usage_samples": len(doc.get("mem_usage") or []),
    }
    parts = system_parts(df, path, FORMAT, info)
    _device_memory(doc.get("device_mem_usage"), parts, path)
    return parts


def _units(df: pd.DataFrame) -> str:
    """The units the events state (``ns`` when none does), for ``meta.info``."""
    if "timestamp_unit" not in df:
        return "ns"
    units = df["timestamp_unit"].astype("string").str.strip().str.lower().fillna("ns")
    return ",".join(sorted(units.unique()))


def _device_memory(rows: object, parts: list[RankPart], path: Path) -> None:
    """``device_mem_usage`` samples: their count, and per HBM of each instance the peak
    ``total_bytes`` and ``dram_spill_bytes`` (``meta.info["device_memory"]`` of the first
    part: samples name an HBM, not a worker)."""
    if rows is None:
        return
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise TraceInputError(path, "field 'device_mem_usage' is not a list of samples")
    mem = pd.DataFrame(rows)
    info = parts[0].meta.info
    info["device_mem_usage_samples"] = len(mem)
    keys = [k for k in ("instance_id", "device_idx", "hbm_idx") if k in mem]
    sizes = [k for k in ("total_bytes", "dram_spill_bytes") if k in mem]
    if not len(mem) or not sizes:
        return
    for k in sizes + [k for k in keys if k != "instance_id"]:
        mem[k] = pd.to_numeric(mem[k].astype("string"), errors="coerce")
    peak = mem.groupby(keys, dropna=False)[sizes].max() if keys else mem[sizes].max().to_frame().T
    info["device_memory"] = [
        {**dict(zip(keys, idx if isinstance(idx, tuple) else (idx,), strict=True)), **vals}
        for idx, vals in zip(peak.index, peak.astype("Int64").to_dict("records"), strict=True)
    ]
    spill = int(pd.to_numeric(mem.get("dram_spill_bytes"), errors="coerce").fillna(0).max())
    info["device_dram_spill_bytes_max"] = spill
