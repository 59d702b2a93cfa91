"""Finding and reading the tables of a Neuron Explorer Parquet profile directory.

One file per table (``Instruction.parquet``) or a table split in parts (``Instruction_0.parquet``,
``Instruction_1.parquet``, concatenated in part order). A table exists only when the profile has
that activity, so a missing table is normal. Only the columns a mapping uses are read. Which
files are tables is :mod:`neuron_parquet_files`'s (sniffing imports it alone).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tracediag.model.errors import TraceInputError
from tracediag.parsers.neuron_parquet_files import (  # noqa: F401 (the readers import them here)
    is_profile_dir,
    table_files,
)

#: Columns the mappings take as exact integers (ids, device-clock times, indices) and as
#: numbers; a part holding another type there is not a profile this tool can trust.
INTEGER_COLUMNS = frozenset(
    ["start_ts", "end_ts", "duration_ns", "trigger_start_ts", "timestamp", "id", "op_id",
     "stream_id", "pcore_idx", "engine_idx", "packet_aggregation_id", "in_id", "out_id",
     "error_type_id"]
)  # fmt: skip
NUMBER_COLUMNS = frozenset(
    ["evt_wait_time_ns", "raw_flops", "adjusted_flops", "flops_transpose", "hbm_read_bytes",
     "hbm_write_bytes", "transfer_bytes", "input_size", "output_size", "algorithm_bandwidth",
     "bus_bandwidth"]
)  # fmt: skip


def _open(path: Path) -> pq.ParquetFile:
    try:
        return pq.ParquetFile(path)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise TraceInputError(
            path, f"corrupt or unreadable Parquet file ({_one_line(exc)})"
        ) from None


def _read(path: Path, columns: list[str] | None, pf: pq.ParquetFile | None = None) -> pa.Table:
    try:
        return (pf or _open(path)).read(columns=columns)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise TraceInputError(path, f"corrupt Parquet file ({_one_line(exc)})") from None


def _read_texts_encoded(path: Path, pf: pq.ParquetFile, columns: list[str] | None) -> pa.Table:
    """Read ``columns`` with the text ones as Arrow dictionaries, straight from Parquet's own
    dictionary pages: no string per row is built only to be hashed back into categories."""
    wanted = columns if columns is not None else pf.schema_arrow.names
    texts = [
        c
        for c in wanted
        if pa.types.is_string(pf.schema_arrow.field(c).type)
        or pa.types.is_large_string(pf.schema_arrow.field(c).type)
    ]
    if not texts:
        return _read(path, columns, pf)
    try:
        encoded = pq.ParquetFile(path, metadata=pf.metadata, read_dictionary=texts)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise TraceInputError(path, f"corrupt Parquet file ({_one_line(exc)})") from None
    return _read(path, columns, encoded)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:200] or type(exc).__name__


def _is_text_list(kind: pa.DataType) -> bool:
    """A list of strings: how schema 12 writes ``nki_source_location`` (declared a string)."""
    return (pa.types.is_list(kind) or pa.types.is_large_list(kind)) and (
        pa.types.is_string(kind.value_type) or pa.types.is_large_string(kind.value_type)
    )


def _to_frame(table: pa.Table) -> pd.DataFrame:
    """Arrow -> pandas without a Python object per row: integers become nullable ``Int64``
    (unsigned 64-bit ids wrap to int64, as the device writes them), text becomes Categorical
    (categories in order of first appearance), and a list of strings becomes one text joined
    by "; " (in Arrow, not per row in Python). Integer and text columns are converted one by
    one (pandas' own ``Int64`` conversion and block consolidation copy every column twice);
    the others go through ``Table.to_pandas``."""
    own: dict[str, object] = {}
    for i, fld in enumerate(table.schema):
        col = table.column(i)
        if pa.types.is_dictionary(fld.type) and _is_text(fld.type.value_type):
            own[fld.name] = _first_seen_categorical(col)
            continue
        if pa.types.is_dictionary(fld.type):
            col = col.cast(fld.type.value_type)
        if _is_text_list(col.type):
            col = pc.binary_join(col, "; ")
        if pa.types.is_integer(col.type):
            own[fld.name] = _nullable_int64(col.cast(pa.int64(), safe=False))
        elif _is_text(col.type):
            own[fld.name] = col.dictionary_encode().to_pandas().array
        else:
            table = table.set_column(i, fld.name, col)
    rest = table.drop_columns(list(own))
    frame = rest.to_pandas(split_blocks=True) if rest.num_columns else None
    index = frame.index if frame is not None else pd.RangeIndex(table.num_rows)
    columns = {name: own[name] if name in own else frame[name] for name in table.schema.names}
    return pd.DataFrame(columns, index=index, copy=False)


def _is_text(kind: pa.DataType) -> bool:
    return pa.types.is_string(kind) or pa.types.is_large_string(kind)


def _nullable_int64(col: pa.ChunkedArray) -> pd.arrays.IntegerArray:
    """An int64 column as pandas ``Int64`` (one copy of the values, a mask)."""
    arr = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    if arr.null_count:
        values = pc.fill_null(arr, 0).to_numpy()
        mask = arr.is_null().to_numpy(zero_copy_only=False)
    else:
        values = arr.to_numpy()
        mask = np.zeros(len(arr), dtype=bool)
    return pd.arrays.IntegerArray(np.array(values, dtype=np.int64, copy=True), mask)


def _first_seen_categorical(col: pa.ChunkedArray) -> pd.Categorical:
    """A dictionary-encoded text column (as Parquet stores it) as the Categorical that
    ``dictionary_encode`` of its decoded text gives: the distinct values in order of first
    appearance, nulls missing. Works on the indices, not on a string per row."""
    col = col.unify_dictionaries() if col.num_chunks > 1 else col
    if col.num_chunks == 0:
        return col.cast(col.type.value_type).dictionary_encode().to_pandas().array
    dictionary = col.chunk(0).dictionary
    # The indices as they are (int32 in Parquet's dictionaries), a null as one past the end.
    indices = pc.fill_null(pa.chunked_array([c.indices for c in col.chunks]), len(dictionary))
    seen = pc.unique(indices).to_numpy().astype(np.int64)  # in order of first appearance
    seen = seen[seen < len(dictionary)]
    categories = dictionary.take(pa.array(seen, type=pa.int64()))
    if len(pc.unique(categories)) != len(categories):  # a dictionary that repeats a value
        return col.cast(col.type.value_type).dictionary_encode().to_pandas().array
    # The dtype Arrow's own conversion gives (text categories, the narrowest codes), taken
    # from an empty array: the codes are mapped in numpy, with no second Arrow array per row.
    dtype = (
        pa.DictionaryArray.from_arrays(pa.array([], pa.int32()), categories.cast(pa.string()))
        .to_pandas()
        .dtype
    )
    recode = np.full(len(dictionary) + 1, -1, dtype=_codes_dtype(len(seen)))  # last: a null
    recode[seen] = np.arange(len(seen))
    chunks = [c.to_numpy() for c in indices.chunks]
    flat = chunks[0] if len(chunks) == 1 else np.concatenate([np.zeros(0, np.int32), *chunks])
    return pd.Categorical.from_codes(recode[flat], dtype=dtype, validate=False)


def _codes_dtype(n_categories: int) -> np.dtype:
    """The narrowest signed integers holding codes 0..n-1 and -1, as pandas stores codes."""
    for kind in (np.int8, np.int16, np.int32):
        if n_categories < np.iinfo(kind).max:
            return np.dtype(kind)
    return np.dtype(np.int64)


def _check_types(path: Path, schema: pa.Schema, columns: list[str]) -> None:
    """Integer columns hold integers, number columns numbers, and no column holds bytes or
    nested values: what the mappings can read without guessing."""
    for name in columns:
        kind = schema.field(name).type
        if pa.types.is_dictionary(kind):
            kind = kind.value_type
        if pa.types.is_null(kind):
            continue
        if name in INTEGER_COLUMNS:
            ok = pa.types.is_integer(kind)
        elif name in NUMBER_COLUMNS:
            ok = pa.types.is_integer(kind) or pa.types.is_floating(kind)
        else:
            ok = _is_text_list(kind) or not (
                pa.types.is_nested(kind)
                or pa.types.is_binary(kind)
                or pa.types.is_large_binary(kind)
                or pa.types.is_fixed_size_binary(kind)
            )
        if not ok:
            expected = (
                "integers"
                if name in INTEGER_COLUMNS
                else "numbers"
                if name in NUMBER_COLUMNS
                else "text or numbers"
            )
            raise TraceInputError(path, f"column {name!r} holds {kind}, expected {expected}")


def read_table(
    files: list[Path] | None, columns: list[str] | None, required: tuple[str, ...] = ()
) -> pd.DataFrame | None:
    """Read ``columns`` (None: all) of a table's part files; None when the table is absent.

    A part without a ``required`` column, or one pyarrow cannot read, is a TraceInputError that
    names the file.
    """
    if not files:
        return None
    tables = []
    for path in files:
        pf = _open(path)
        names = pf.schema_arrow.names
        missing = [c for c in required if c not in names]
        if missing:
            raise TraceInputError(path, f"table lacks required column(s) {', '.join(missing)}")
        _check_types(path, pf.schema_arrow, [c for c in columns or names if c in names])
        tables.append(
            _read_texts_encoded(path, pf, [c for c in columns if c in names] if columns else None)
        )
    try:
        table = pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowException, ValueError) as exc:
        raise TraceInputError(
            files[0].parent, f"parts of one table disagree ({_one_line(exc)})"
        ) from None
    return _to_frame(table)


def column_names(files: list[Path]) -> list[str]:
    """The columns a table's parts hold (from the footers; no column is read)."""
    return list(dict.fromkeys(n for p in files for n in _open(p).schema_arrow.names))


def row_count(files: list[Path] | None) -> int:
    """Rows of a table from the files' footers (no column is read)."""
    return sum(_open(p).metadata.num_rows for p in files or [])


def first_row(files: list[Path] | None) -> tuple[dict, int]:
    """The first row of a one-row table (Summary, Metadata) as plain Python values, and the
    table's row count."""
    if not files:
        return {}, 0
    table = _read(files[0], None)
    rows = table.slice(0, 1).to_pylist()
    return (rows[0] if rows else {}), row_count(files)
