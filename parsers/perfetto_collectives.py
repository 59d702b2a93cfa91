"""Collectives of a Neuron device trace in Perfetto.

A collective slice (a ``CC-core <n>`` or ``CC Stream <n> - Row <k>`` track, see
:mod:`perfetto_tracks`) carries the CC op's fields as debug annotations. They become a table with
the Parquet field names, so that collective rows are built and matched across ranks exactly as
the Parquet and legacy JSON readers do (:func:`neuron_events.cc_collectives`:
``replica_group|stream_id|op_id``; without an op id, the op's ordinal on its stream).

The spellings accepted, as the evidence shows them (neuron-real-output.md): the Parquet
``CcOp`` names (``operation``, ``op_id``, ``stream_id``, ``trigger_start_ts``, ``input_size``,
...); the legacy JSON ``cc_ops`` keys (``cc_trigger`` = the trigger's time,
``cc_trigger_start_delay`` = trigger to start, so the trigger is ``start - delay`` where its time
is not given); the CC-op box of the profiler UI (``size``, ``trigger_timestamp``; the box is
titled ``CC Op <i> - AllReduce``, so a slice named so is the operation after the dash).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracediag.model import schema as S
from tracediag.parsers.neuron_events import cc_collectives
from tracediag.parsers.perfetto_annotations import AnnotationIndex, index_of

TEXT_FIELDS = ("operation", "algorithm", "dtype", "trigger_engine", "replica_group")
INT_FIELDS = ("op_id", "stream_id", "input_size", "output_size", "trigger_start_ts")
FLOAT_FIELDS = ("algorithm_bandwidth", "bus_bandwidth")
#: Other spellings of a field -> its Parquet name: the legacy ``cc_ops`` keys, the UI box's.
ALIASES = {"cc_trigger": "trigger_start_ts", "trigger_timestamp": "trigger_start_ts"}
SIZE, DELAY = "size", "cc_trigger_start_delay"  # the box's bytes; the legacy trigger -> start
#: The annotation names the decoder must keep for collectives.
WANTED = frozenset(TEXT_FIELDS + INT_FIELDS + FLOAT_FIELDS + tuple(ALIASES) + (SIZE, DELAY))
_ROW = "_row"
#: ``CC Op 0 - AllReduce``: the UI box's title of an op.
_BOX_TITLE = r"^\s*CC\s+Op\s+\d+\s*-\s*"


def collective_table(ann: pd.DataFrame, events: pd.DataFrame) -> pd.DataFrame:
    """One row per collective event (``_row``: its event row) with its CcOp fields; sets the
    events' ``bytes`` to the larger of ``input_size`` and ``output_size`` and their ``src_id``
    to ``op_id`` (unless an ``id`` annotation gave one), as the Parquet reader does."""
    rows = np.flatnonzero(events[S.KIND].to_numpy(dtype=object) == "collective")
    index = index_of(ann)
    mine = np.zeros(max(len(events), 1), dtype=bool)
    mine[rows] = True  # the collective slices: only their annotations are read
    table = pd.DataFrame(
        {
            _ROW: rows,
            "start_ts": events[S.TS].to_numpy()[rows],
            "duration_ns": events[S.DUR].to_numpy()[rows],
        }
    )
    for name in (*TEXT_FIELDS, *INT_FIELDS, *FLOAT_FIELDS, SIZE, DELAY):
        spellings = [name, *(a for a, to in ALIASES.items() if to == name)]
        per_row = _first_spelling(index, mine, spellings, rows)
        if name in TEXT_FIELDS:
            table[name] = per_row.to_numpy(dtype=object)
        else:
            numbers = pd.to_numeric(per_row, errors="coerce")
            table[name] = (numbers if name in FLOAT_FIELDS else numbers.astype("Int64")).array
    if len(rows):
        # The box's ``size`` where no input/output size is given: the op's bytes.
        no_size = table["input_size"].isna() & table["output_size"].isna()
        table["input_size"] = table["input_size"].where(~no_size, table[SIZE])
        _trigger_from_delay(table)
        _operation_from_name(table, events, rows)
        size = np.fmax.reduce(
            [table[c].to_numpy(dtype=np.float64, na_value=np.nan) for c in (
                "input_size", "output_size", SIZE)]
        )  # fmt: skip
        known = ~np.isnan(size)
        bytes_ = events[S.BYTES].to_numpy(dtype=np.float64).copy()
        bytes_[rows[known]] = size[known]
        events[S.BYTES] = bytes_
        op_id = table["op_id"].to_numpy(dtype=np.float64, na_value=np.nan)
        src = events[S.SRC_ID].to_numpy(dtype=np.int64).copy()
        has = ~np.isnan(op_id) & (src[rows] < 0)
        src[rows[has]] = op_id[has].astype(np.int64)  # the op id, as the Parquet reader's
        events[S.SRC_ID] = src
    return table.drop(columns=[SIZE, DELAY])


def _first_spelling(
    index: AnnotationIndex, mine: np.ndarray, spellings: list[str], rows: np.ndarray
) -> pd.Series:
    """Per row, the value of the first of ``spellings`` the slice has (NaN: none); ``mine``:
    per slice, whether it is one of ``rows``."""
    out = pd.Series(np.full(len(rows), np.nan, dtype=object), index=rows)
    for name in reversed(spellings):  # earlier spellings win
        at = index.positions(name)
        at = index.last_of(at[mine[index.key[at]]])
        got = pd.Series(index.value[at], index=index.key[at])
        got = got.reindex(rows)
        out = got.where(got.notna(), out)
    return out


def _trigger_from_delay(table: pd.DataFrame) -> None:
    """The trigger's time where only the trigger-to-start delay is given (legacy ``cc_ops``)."""
    trigger, delay = table["trigger_start_ts"], table[DELAY]
    derived = table["start_ts"].astype("Int64") - delay
    table["trigger_start_ts"] = trigger.where(trigger.notna(), derived).astype("Int64")


def _operation_from_name(table: pd.DataFrame, events: pd.DataFrame, rows: np.ndarray) -> None:
    """The operation of an op without an ``operation`` annotation from its slice name (the UI
    box's ``CC Op <i> - AllReduce`` title, else the name itself); a slice titled so is named by
    its operation, as the Parquet reader names its CcOp events."""
    names = pd.Series(events[S.NAME].to_numpy(dtype=object)[rows], dtype=object).astype(str)
    titled = names.str.contains(_BOX_TITLE, regex=True).to_numpy()
    from_name = names.str.replace(_BOX_TITLE, "", regex=True).str.strip()
    op = pd.Series(table["operation"].to_numpy(dtype=object), dtype=object)
    op = op.where(op.notna() & (op.astype(str) != ""), from_name)
    table["operation"] = op.to_numpy(dtype=object)
    if titled.any():
        new = events[S.NAME].to_numpy(dtype=object).copy()
        new[rows[titled]] = op.to_numpy(dtype=object)[titled]
        events[S.NAME] = pd.Categorical(new)


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
