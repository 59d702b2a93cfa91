"""Collectives of a Neuron device trace in Perfetto.

A collective slice (a ``CC Stream <n> - Row <k>`` track, see :mod:`perfetto_tracks`) carries the
``CcOp`` fields as debug annotations (``operation``, ``op_id``, ``stream_id``, ``replica_group``,
``trigger_start_ts``, sizes, bandwidths). They become a table with the Parquet field names, so
that collective rows are built and matched across ranks exactly as the Parquet and legacy JSON
readers do (:func:`neuron_events.cc_collectives`: ``replica_group|stream_id|op_id``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracediag.model import schema as S
from tracediag.parsers.neuron_events import cc_collectives

TEXT_FIELDS = ("operation", "algorithm", "dtype", "trigger_engine", "replica_group")
INT_FIELDS = ("op_id", "stream_id", "input_size", "output_size", "trigger_start_ts")
FLOAT_FIELDS = ("algorithm_bandwidth", "bus_bandwidth")
#: The annotation names the decoder must keep for collectives.
WANTED = frozenset(TEXT_FIELDS + INT_FIELDS + FLOAT_FIELDS)
_ROW = "_row"


def collective_table(ann: pd.DataFrame, events: pd.DataFrame) -> pd.DataFrame:
    """One row per collective event (``_row``: its event row) with its CcOp fields; sets the
    events' ``bytes`` to the larger of ``input_size`` and ``output_size`` and their ``src_id``
    to ``op_id`` (unless an ``id`` annotation gave one), as the Parquet reader does."""
    rows = np.flatnonzero(events[S.KIND].to_numpy(dtype=object) == "collective")
    sub = ann[np.isin(ann["slice"].to_numpy(), rows)]
    table = pd.DataFrame(
        {
            _ROW: rows,
            "start_ts": events[S.TS].to_numpy()[rows],
            "duration_ns": events[S.DUR].to_numpy()[rows],
        }
    )
    for name in (*TEXT_FIELDS, *INT_FIELDS, *FLOAT_FIELDS):
        values = sub[sub["name"] == name].drop_duplicates("slice", keep="last")
        per_row = pd.Series(values["value"].to_numpy(dtype=object), index=values["slice"])
        per_row = per_row.reindex(rows)
        if name in TEXT_FIELDS:
            table[name] = per_row.to_numpy(dtype=object)
        else:
            numbers = pd.to_numeric(per_row, errors="coerce")
            table[name] = (numbers.astype("Int64") if name in INT_FIELDS else numbers).array
    if len(rows):
        size = np.fmax(
            table["input_size"].to_numpy(dtype=np.float64, na_value=np.nan),
            table["output_size"].to_numpy(dtype=np.float64, na_value=np.nan),
        )
        known = ~np.isnan(size)
        bytes_ = events[S.BYTES].to_numpy(dtype=np.float64).copy()
        bytes_[rows[known]] = size[known]
        events[S.BYTES] = bytes_
        op_id = table["op_id"].to_numpy(dtype=np.float64, na_value=np.nan)
        src = events[S.SRC_ID].to_numpy(dtype=np.int64).copy()
        has = ~np.isnan(op_id) & (src[rows] < 0)
        src[rows[has]] = op_id[has].astype(np.int64)  # the op id, as the Parquet reader's
        events[S.SRC_ID] = src
    return table


def rank_collectives(
    table: pd.DataFrame, local: np.ndarray, rank: int, meta: S.RankMeta
) -> pd.DataFrame | None:
    """The collective rows of ``rank``: ``local`` maps event rows to the rank's rows (-1:
    another rank's)."""
    mine = table[local[table[_ROW].to_numpy()] >= 0].reset_index(drop=True)
    if not len(mine):
        return None
    rows = cc_collectives(mine, 0, rank, meta)
    rows[S.EVENT] = local[mine[_ROW].to_numpy()]
    return rows
