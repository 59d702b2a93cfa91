"""Legacy Neuron device JSON: parsing (NaN literals), tables as frames with Parquet field names,
exact 64-bit ids and the timestamp unit.

The legacy keys are renamed to the Explorer Parquet field names so that both readers share one
mapping (:mod:`neuron_events`).
"""

from __future__ import annotations

import math
import re
from itertools import chain
from pathlib import Path

import numpy as np
import orjson
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pandas.api.types import infer_dtype

from tracediag.io.files import read_bytes
from tracediag.model import schema as S
from tracediag.model.errors import TraceInputError
from tracediag.parsers.neuron_common import column, floats

#: Legacy key -> Parquet field name, per table (keys not listed keep their name).
RENAMES = {
    "instruction": {
        "timestamp": "start_ts",
        "duration": "duration_ns",
        "evt_wait_time": "evt_wait_time_ns",
    },
    "dma": {
        "timestamp": "start_ts",
        "duration": "duration_ns",
        "subgroup": "queue_name",
        "dma_queue": "queue_name",
        "transfer_size": "transfer_bytes",
    },
    "cc_op": {},
    # neuron-profile's own collectives table (real multi-rank files): ``cc_trigger`` is the
    # trigger's time (absent for back-to-back collectives).
    "cc_ops": {
        "timestamp": "start_ts",
        "duration": "duration_ns",
        "cc_trigger": "trigger_start_ts",
        "cc_trigger_start_delay": "trigger_delay_ns",
    },
}
#: Legacy keys read per table.
KEYS = {
    "instruction": [
        "timestamp", "duration", "subgroup", "label", "opcode", "hlo_name", "id", "pc", "layer", "pcore_idx",
        "nki_source_location", "evt_wait_time", "hbm_read_bytes", "hbm_write_bytes", "raw_flops", "inst_dep_ids",
        "adjusted_flops", "flops_transpose", "operands", "instruction_chain",
        "bir_debug_info_source_location",
    ],
    "dma": ["timestamp", "duration", "subgroup", "dma_queue", "transfer_size", "id", "variable", "engine_idx", "trigger_id", "inst_dep_ids", "queue_type", "block_id", "pcore_idx"],
    "cc_op": [
        "start_ts", "end_ts", "duration_ns", "operation", "algorithm", "dtype", "op_id", "stream_id",
        "trigger_engine", "trigger_start_ts", "input_size", "output_size", "algorithm_bandwidth",
        "bus_bandwidth", "replica_group",
    ],
    "cc_ops": [
        "timestamp", "duration", "operation", "algorithm", "dtype", "input_size", "output_size",
        "replica_group", "trigger_engine", "cc_trigger", "cc_trigger_start_delay", "op_id", "stream_id",
    ],
}  # fmt: skip
#: Integer fields kept exact (ids, device-clock times); other numbers may go through float.
EXACT = (
    "trigger_delay_ns",
    "start_ts",
    "end_ts",
    "duration_ns",
    "trigger_start_ts",
    "id",
    "pc",
    "op_id",
    "stream_id",
    "trigger_id",
    "pcore_idx",
    "engine_idx",
    "block_id",
)
#: Fields in the file's time unit (converted to ns when the file is in picoseconds).
TIME_FIELDS = (
    "start_ts", "end_ts", "duration_ns", "trigger_start_ts", "trigger_delay_ns", "evt_wait_time_ns"
)  # fmt: skip

_NAN_LITERAL = re.compile(rb"(?<=[\[:,])(\s*)-?(?:NaN|Infinity)(?=\s*[,\]}])")


def load_json(path: Path, meta: S.RankMeta) -> object:
    """The parsed document; bare NaN/Infinity literals (older files) are read as null and counted."""
    data = read_bytes(path).removeprefix(b"\xef\xbb\xbf")  # a UTF-8 BOM orjson would reject
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        error = exc
    fixed, replaced = _NAN_LITERAL.subn(rb"\1null", data)
    if replaced:
        try:
            doc = orjson.loads(fixed)
        except orjson.JSONDecodeError as exc:
            error = exc
        else:
            meta.count("NaN/Infinity literals read as null", replaced)
            return doc
    if error.pos >= len(data.rstrip()):
        raise TraceInputError(
            path, "truncated JSON (the file ends before the document does)"
        ) from None
    raise TraceInputError(path, f"invalid JSON ({error})") from None


def table_frame(doc: dict, table: str, path: Path) -> pd.DataFrame | None:
    """A legacy table as a frame with Parquet field names and exact integer columns."""
    rows = doc.get(table)
    if rows is None:
        return None
    if not isinstance(rows, list):
        raise TraceInputError(path, f"table {table!r} is not a list of objects")
    try:
        frame = pd.DataFrame(rows, columns=KEYS[table])
    except (TypeError, ValueError, AttributeError):
        raise TraceInputError(path, f"table {table!r} is not a list of objects") from None
    frame = frame.dropna(axis=1, how="all")  # keys the file does not have
    if table == "instruction" and "subgroup" in frame:
        engine = frame["subgroup"]
        if "label" in frame:
            if engine.dtype != frame["label"].dtype:  # e.g. numbers in one: fill as objects
                engine = engine.astype(object)
            engine = engine.fillna(frame["label"])
        frame["engine"] = engine
    elif table == "instruction" and "label" in frame:
        frame["engine"] = frame["label"]
    if table == "dma" and "dma_queue" in frame and "subgroup" in frame:
        # Files name the queue ``dma_queue`` or ``subgroup``: one column, either key.
        frame["dma_queue"] = frame["dma_queue"].astype(object).fillna(frame.pop("subgroup"))
    for key in TEXT_LISTS.intersection(frame.columns):
        frame[key] = _joined_text_lists(frame[key], path, f"{table}.{key}")
    for key in frame.columns:
        if RENAMES[table].get(key, key) in EXACT:
            frame[key] = exact_ints(frame[key], rows, key, path, table)
        elif key != "inst_dep_ids":
            _check_values(frame[key], path, f"{table}.{key}", numbers=key in NUMBERS)
    return frame.rename(columns=RENAMES[table])


#: Text fields that may hold a list of strings (``nki_source_location`` is described as one):
#: joined by "; " as the Parquet reader joins them.
TEXT_LISTS = frozenset(["nki_source_location", "bir_debug_info_source_location"])


def _joined_text_lists(col: pd.Series, path: Path, what: str) -> pd.Series:
    """A text column whose values may be lists of strings, as text (lists joined in Arrow)."""
    if infer_dtype(col.dropna(), skipna=True) not in ("mixed", "mixed-integer"):
        return col  # no lists: text as it is (other values are checked by the caller)
    values = col.to_numpy(dtype=object)
    lists = np.fromiter((isinstance(v, list) for v in values), dtype=bool, count=len(values))
    try:
        joined = pc.binary_join(pa.array(values[lists], type=pa.list_(pa.string())), "; ")
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        raise TraceInputError(path, f"{what} holds lists of values that are not text") from None
    out = col.astype(object).copy()
    out[lists] = joined.to_numpy(zero_copy_only=False)
    return out.replace("", None)  # an empty list names no line


#: Legacy keys read as numbers (any JSON number or numeric text); other keys are text.
NUMBERS = frozenset(
    ["evt_wait_time", "hbm_read_bytes", "hbm_write_bytes", "raw_flops", "adjusted_flops",
     "flops_transpose", "transfer_size", "input_size", "output_size", "algorithm_bandwidth",
     "bus_bandwidth"]
)  # fmt: skip


def _check_values(col: pd.Series, path: Path, what: str, numbers: bool) -> None:
    """A number field holds numbers, a text field no lists or objects: the mappings would
    otherwise drop such values silently or fail on them. One C-level scan when all is well."""
    values = col.dropna()
    kind = infer_dtype(values, skipna=True)
    if numbers and kind not in _NUMERIC_KINDS:
        bad = pd.to_numeric(values, errors="coerce").isna().to_numpy()
        if bad.any():
            raise TraceInputError(
                path, f"{what} holds {_shown(values.iloc[np.argmax(bad)])}, expected a number"
            )
    elif not numbers and kind in ("mixed", "mixed-integer"):  # where lists and objects go
        nested = np.fromiter(
            (isinstance(v, list | dict) for v in values), dtype=bool, count=len(values)
        )
        if nested.any():
            shown = _shown(values.iloc[np.argmax(nested)])
            raise TraceInputError(path, f"{what} holds {shown}, expected text")


_NUMERIC_KINDS = ("integer", "floating", "mixed-integer-float", "boolean", "decimal", "empty")


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def exact_ints(col: pd.Series, rows: list, key: str, path: Path, table: str) -> pd.Series:
    """A JSON integer field as exact ``Int64``; unsigned 64-bit values wrap to int64.

    pandas turns integers with gaps into float64, which is exact only below 2**53; beyond that
    the values are taken again from the parsed rows.
    """
    if col.dtype == np.uint64:
        return pd.Series(col.to_numpy().view(np.int64), index=col.index, dtype="Int64")
    if pd.api.types.is_integer_dtype(col.dtype):
        return col.astype("Int64")
    if pd.api.types.is_float_dtype(col.dtype):
        values = col.to_numpy(dtype=np.float64)
        if np.nanmax(np.abs(values), initial=0.0) < 2.0**53:
            return pd.Series(np.round(values), index=col.index).astype("Int64")
        col = pd.Series(
            [r.get(key) if isinstance(r, dict) else None for r in rows],
            index=col.index,
            dtype=object,
        )
    return _wrap_objects(col, path, f"{table}.{key}")


def _wrap_objects(col: pd.Series, path: Path, what: str) -> pd.Series:
    values = col.to_numpy(dtype=object)
    valid = pd.notna(values)
    try:
        picked = values[valid]
        beyond = ((picked >= 2**64) | (picked < -(2**63))).astype(bool)
        wrapped = np.mod(picked, 2**64).astype(np.uint64)  # Python ints: exact modulo
    except (TypeError, ValueError, OverflowError):
        raise TraceInputError(path, f"{what} holds values that are not integers") from None
    if beyond.any():  # no 64-bit field holds these: wrapping them would invent a value
        first = picked[np.argmax(beyond)]
        raise TraceInputError(path, f"{what} holds {first:.6g}, beyond 64 bits")
    out = np.zeros(len(values), dtype=np.int64)
    out[valid] = wrapped.view(np.int64)
    return pd.Series(pd.arrays.IntegerArray(out, ~valid), index=col.index)


def summary_row(doc: dict, path: Path) -> tuple[dict, int]:
    """The legacy ``summary`` table's first object and the number of objects."""
    rows = doc.get("summary")
    if rows is None:
        return {}, 0
    if isinstance(rows, dict):
        return rows, 1
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise TraceInputError(path, "table 'summary' is not a list of objects")
    return (rows[0] if rows else {}), len(rows)


def detect_unit(instr: pd.DataFrame | None, total_time_s: float | None, meta: S.RankMeta) -> int:
    """Divisor from the file's time unit to ns: 1 (ns) or 1000 (ps), recorded in ``meta.info``.

    The documentation says ns; a third-party note says ps. The instruction span (first start to
    last end) is compared with ``summary.total_time`` (seconds): ns gives a ratio near 1e9, ps
    near 1e12; the threshold is the geometric middle.
    """
    span = np.nan
    if instr is not None and len(instr):
        start = floats(column(instr, "start_ts"), len(instr))
        end = start + floats(column(instr, "duration_ns"), len(instr))
        span = (
            np.nanmax(end) - np.nanmin(start)
            if np.isfinite(start).any() and np.isfinite(end).any()
            else np.nan
        )
    if not (total_time_s and total_time_s > 0 and np.isfinite(span) and span > 0):
        meta.info["timestamp_unit"] = "ns"
        meta.info["timestamp_unit_basis"] = (
            "assumed (no instruction span or summary.total_time to compare)"
        )
        return 1
    per_second = span / total_time_s
    picoseconds = math.log10(per_second) > 10.5
    meta.info["timestamp_unit"] = "ps" if picoseconds else "ns"
    meta.info["timestamp_unit_basis"] = (
        f"instruction span / summary.total_time = {per_second:.3g} per second"
    )
    return 1000 if picoseconds else 1


def to_ns(frame: pd.DataFrame | None, divisor: int) -> None:
    """Convert a table's time fields to ns in place; a duration keeps start + duration exact."""
    if frame is None or divisor == 1:
        return
    if "duration_ns" in frame and "start_ts" in frame:
        end = (frame["start_ts"] + frame["duration_ns"]) // divisor
        frame["duration_ns"] = end - frame["start_ts"] // divisor
    for name in TIME_FIELDS:
        if name in frame and name != "duration_ns":
            frame[name] = (
                frame[name] // divisor if frame[name].dtype == "Int64" else frame[name] / divisor
            )


def id_lists(col: pd.Series | None, path: Path, what: str) -> tuple[np.ndarray, np.ndarray]:
    """Explode a column of id lists: (row of each id, the ids as int64). None/empty: no ids."""
    if col is None or not len(col):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    values = col.to_numpy(dtype=object)
    try:
        lists = _id_list_array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        raise TraceInputError(path, f"{what} holds values that are not lists of ids") from None
    if lists is None:  # signed and unsigned 64-bit ids mixed: wrap each id exactly
        lengths = pd.Series(values).str.len().fillna(0).to_numpy(dtype=np.int64)
        flat = pd.Series(
            list(chain.from_iterable(v for v in values if isinstance(v, list))), dtype=object
        )
        ids = _wrap_objects(flat, path, what)
    else:
        lengths = lists.value_lengths().fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        flat = lists.flatten()
        if pa.types.is_unsigned_integer(flat.type) or pa.types.is_floating(flat.type):
            flat = flat.cast(pa.int64(), safe=False)
        ids = (
            flat.to_pandas(types_mapper={pa.int64(): pd.Int64Dtype()}.get)
            if len(flat)
            else pd.Series([], dtype="Int64")
        )
    rows = np.repeat(np.arange(len(values), dtype=np.int64), lengths)
    known = ids.notna().to_numpy()
    return rows[known], ids[known].to_numpy(dtype=np.int64)


def _id_list_array(values: np.ndarray) -> pa.ListArray | None:
    """Lists of ids as an Arrow list array (int64 or wrapped uint64); None when they mix both."""
    try:
        lists = pa.array(values, from_pandas=True)
    except OverflowError:
        try:
            lists = pa.array(values, type=pa.list_(pa.uint64()), from_pandas=True)
        except OverflowError:
            return None
    if pa.types.is_null(lists.type):
        lists = pa.array(values, type=pa.list_(pa.int64()), from_pandas=True)
    if not pa.types.is_list(lists.type):
        raise TypeError("not lists")
    item = lists.type.value_type
    if not (pa.types.is_integer(item) or pa.types.is_floating(item) or pa.types.is_null(item)):
        raise TypeError("ids are not numbers")
    return lists


def metadata_row(doc: dict) -> dict:
    """The legacy ``metadata`` table's first object (empty when absent)."""
    rows = doc.get("metadata")
    if isinstance(rows, list) and rows and isinstance(rows[0], dict):
        return rows[0]
    return rows if isinstance(rows, dict) else {}
