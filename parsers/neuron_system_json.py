"""Reader of Neuron system-profile JSON (``system_profile.json``).

The document holds ``trace_events`` (runtime and framework events: ``name``, ``timestamp``,
``duration`` in ns on the host clock, ``group`` like ``nrt-nc-000``, ``instance_id``,
``process_id``, ``thread_id``, ``lnc_idx``, ``type``, and ``worker_gid``), ``mem_usage`` and
``cpu_util`` (samples: counted in ``meta.info``, not events). Some ids are strings
(``"process_id": "1627711"``): they are coerced. Sync points carry ``cpu_timestamp_ns`` and
``nc_timestamp_ns`` on the event or in its ``args``. Events are mapped by
:mod:`neuron_system` (ranks from ``worker_gid``).
"""

from __future__ import annotations

import re
from pathlib import Path

import orjson
import pandas as pd

from tracediag.io.files import head, read_bytes
from tracediag.model.assembly import RankPart
from tracediag.model.errors import TraceInputError
from tracediag.parsers.neuron_system import HARDWARE_SOURCE, system_parts
from tracediag.parsers.perfetto_system import CPU_FIELD, NC_FIELD

FORMAT = "neuron-system-json"
_KEY = re.compile(rb'^\s*\{[^\[]{0,2000}?"trace_events"\s*:\s*\[', re.DOTALL)
_NC_OF_GROUP = r"nc-0*(\d+)"
_RENAMES = {"timestamp": "start_ts", "duration": "duration_ns", "type": "trace_event_source"}


def sniff(path: Path) -> bool:
    """A JSON object whose first keys include ``trace_events`` (a list)."""
    path = Path(path)
    if not path.is_file():
        return False
    try:
        text = head(path, 4096)
    except TraceInputError:
        return False
    return bool(_KEY.match(text.lstrip(b"\xef\xbb\xbf")))


def read(path: Path) -> list[RankPart]:
    """One part per worker (see :mod:`neuron_system`)."""
    path = Path(path)
    try:
        doc = orjson.loads(read_bytes(path))
    except orjson.JSONDecodeError as exc:
        raise TraceInputError(path, f"invalid JSON at byte {exc.pos}: {exc.msg}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("trace_events"), list):
        raise TraceInputError(path, "field 'trace_events' is not a list of events")
    rows = doc["trace_events"]
    bad = next((i for i, r in enumerate(rows) if not isinstance(r, dict)), None)
    if bad is not None:
        raise TraceInputError(path, f"trace_events[{bad}] is not an object")
    # Objects, not inferred dtypes: a column with gaps would become float64 and round ns times.
    df = pd.DataFrame(rows, dtype=object).rename(columns=_RENAMES)
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
        df["trace_event_source"] = source.where(~hardware, HARDWARE_SOURCE)
    info = {
        "cpu_util_samples": len(doc.get("cpu_util") or []),
        "mem_usage_samples": len(doc.get("mem_usage") or []),
    }
    return system_parts(df, path, FORMAT, info)
