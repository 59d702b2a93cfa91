"""Reader of Neuron Explorer system-profile Parquet: a profile directory whose
``SystemProfileEvents`` table holds the host side (no device tables beside it).

Fields as schema 7.4.0 names them (``id``, ``name``, ``start_ts``, ``end_ts``, ``duration_ns``,
``trace_event_source``, ``instance_id``, ``process_id``, ``thread_id``, ``nc_idx``,
``pcore_idx``, ``worker_gid``, ``flow_id``, ``framework_stream_id``,
``extra_attributes_json``); the sync points' ``cpu_timestamp_ns``/``nc_timestamp_ns`` are read
from ``extra_attributes_json``. ``SystemProfileMetadata`` goes to ``meta.info``. Events are
mapped by :mod:`neuron_system` (ranks from ``worker_gid``).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from tracediag.model.assembly import RankPart
from tracediag.model.errors import TraceInputError
from tracediag.parsers.neuron_parquet_tables import (
    first_row,
    read_table,
    table_files,
)
from tracediag.parsers.neuron_system import system_parts
from tracediag.parsers.neuron_system_parquet_sniff import (  # noqa: F401 (the reader's declaration)
    DEFAULT_HARDWARE,
    FORMAT,
    TABLE,
    sniff,
)
from tracediag.parsers.perfetto_system import CPU_FIELD, NC_FIELD

#: The table's scalar fields (``flow_id``, a list, is read on its own).
FIELDS = [
    "id", "name", "start_ts", "end_ts", "duration_ns", "trace_event_source", "instance_id",
    "process_id", "thread_id", "nc_idx", "pcore_idx", "worker_gid", "framework_stream_id",
    "extra_attributes_json",
]  # fmt: skip


def read(path: Path) -> list[RankPart]:
    """One part per worker (see :mod:`neuron_system`)."""
    path = Path(path)
    files = table_files(path)
    df = read_table(files[TABLE], FIELDS, required=("name", "start_ts"))
    df["flow_id"] = _flow_ids(files[TABLE])
    if "extra_attributes_json" in df:
        extra = df["extra_attributes_json"].astype("string")
        for field in (CPU_FIELD, NC_FIELD):
            if field not in df:
                pattern = rf'"{field}"\s*:\s*"?(-?\d+)'
                df[field] = extra.str.extract(pattern, expand=False)
    metadata, _ = first_row(files.get("SystemProfileMetadata"))
    info = {f"system_{k}": v for k, v in metadata.items() if isinstance(v, str | int | float)}
    return system_parts(df, path, FORMAT, info)


def _flow_ids(files: list[Path]) -> pd.Series:
    """``flow_id`` of every part (a list of strings per event; None where absent)."""
    pieces = []
    for path in files:  # a loop over part files
        try:
            pf = pq.ParquetFile(path)
            if "flow_id" not in pf.schema_arrow.names:
                pieces.append(pd.Series([None] * pf.metadata.num_rows, dtype=object))
                continue
            column = pf.read(columns=["flow_id"]).column(0)
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise TraceInputError(path, f"column 'flow_id' unreadable ({exc})") from None
        if not (pa.types.is_list(column.type) or pa.types.is_large_list(column.type)):
            raise TraceInputError(path, f"column 'flow_id' holds {column.type}, expected a list")
        pieces.append(column.to_pandas())
    return pd.concat(pieces, ignore_index=True)
