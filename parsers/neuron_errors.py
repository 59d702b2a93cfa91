"""Errors the Neuron hardware reports (the Explorer ``Error`` table) -> ``meta.info``.

Rows (``timestamp``, ``type``, ``description``, ``error_type_id``, ``metadata``) are grouped by
kind, so that a profile with a numerical error on every instruction still gives a few entries:
``meta.info["device_errors"]`` is a list of ``{"type", "description", "count", "first_ts_ns",
"last_ts_ns", "metadata"}`` on the rank's device clock (before alignment). Rule NUM704 reports
them. The legacy JSON reader accepts an ``error`` table with the same fields (our assumption: no
public legacy file shows one).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracediag.model import schema as S
from tracediag.parsers.neuron_common import column, ints, labels

ERROR_COLUMNS = ["timestamp", "type", "description", "error_type_id", "metadata", "pcore_idx"]
INFO_KEY = "device_errors"


def _text(df: pd.DataFrame, name: str) -> np.ndarray:
    values = labels(column(df, name), len(df))
    return np.asarray(pd.Series(values).astype(object).fillna(""), dtype=object)


def record_errors(df: pd.DataFrame | None, meta: S.RankMeta, divisor: int = 1) -> None:
    """Group the Error rows by (type, description) into ``meta.info["device_errors"]``; rows
    without a timestamp are kept (their times unknown). ``divisor`` converts the file's time
    unit to ns."""
    if df is None or not len(df):
        return
    ts, valid = ints(column(df, "timestamp"), len(df))
    kind = _text(df, "type")
    type_id, has_id = ints(column(df, "error_type_id"), len(df))
    kind = np.where((kind == "") & has_id, np.char.mod("type %d", type_id).astype(object), kind)
    frame = pd.DataFrame(
        {
            "type": kind,
            "description": _text(df, "description"),
            "ts": np.where(valid, ts // divisor, np.iinfo(np.int64).min).astype(np.int64),
            "metadata": _text(df, "metadata"),
        }
    )
    frame["known"] = valid
    groups = frame.groupby(["type", "description"], sort=True)
    found = []
    for (kind_, description), g in groups:  # one entry per kind of error: a handful
        times = g["ts"].to_numpy()[g["known"].to_numpy()]
        found.append(
            {
                "type": str(kind_),
                "description": str(description),
                "count": int(len(g)),
                "first_ts_ns": int(times.min()) if len(times) else None,
                "last_ts_ns": int(times.max()) if len(times) else None,
                "metadata": str(g["metadata"].iloc[0]),
            }
        )
    meta.info[INFO_KEY] = found
