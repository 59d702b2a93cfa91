"""The Arrow half of a cache entry: one DataFrame <-> one Arrow IPC file and a JSON spec.

Each column is stored by what restores it exactly, and its spec (a small JSON object in the
manifest) says which:

- ``{"kind": "num", "dtype": NAME}``: numpy bool and numeric columns, as Arrow primitives;
- ``{"kind": "str"}``: object columns holding only str, as Arrow large strings;
- ``{"kind": "string", "storage": ..., "na": "nan" | "NA"}``: pandas ``StringDtype`` columns;
- ``{"kind": "masked", "dtype": NAME}``: pandas nullable numbers (``Int64``, ``boolean``...);
- ``{"kind": "cat", "ordered": bool, "categories": LABELS}``: categoricals, as their integer
  codes (-1: missing) in Arrow and their categories in the manifest (dtype spec and values, as
  column labels are written);
- ``{"kind": "values", "values": [...]}``: other object columns (rare and small), their values
  in the manifest (:mod:`tracediag.loading.cache_manifest`), no Arrow column.

Reading checks the file against its spec before anything is built: one record batch of the
spec's row count, exactly the Arrow types the specs imply, no nulls where a column has none,
category codes within the categories (unique, none missing). A mismatch is a :class:`ManifestError`. Dtype names are
looked up in fixed tables, never parsed or imported.
"""

from __future__ import annotations

import mmap
import os
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.ipc as ipc

from tracediag.loading.cache_manifest import ManifestError, decode_value, encode_value

#: zstd buffers: about 20x smaller than raw on events (a cache of multi-GB traces must fit a
#: disk) and still read back at several hundred MB/s.
WRITE_OPTIONS = ipc.IpcWriteOptions(compression="zstd" if pa.Codec.is_available("zstd") else None)

NUMERIC = {
    name: np.dtype(name)
    for name in (
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float16",
        "float32",
        "float64",
    )
}
MASKED = {
    str(d): d
    for d in (
        pd.Int8Dtype(),
        pd.Int16Dtype(),
        pd.Int32Dtype(),
        pd.Int64Dtype(),
        pd.UInt8Dtype(),
        pd.UInt16Dtype(),
        pd.UInt32Dtype(),
        pd.UInt64Dtype(),
        pd.Float32Dtype(),
        pd.Float64Dtype(),
        pd.BooleanDtype(),
    )
}
_STRING_STORAGE = ("python", "pyarrow")
_NA = {"nan": np.nan, "NA": pd.NA}
_KINDS = ("num", "str", "string", "masked", "cat", "values")


# ---- writing ------------------------------------------------------------------------------


def write_frame(df: pd.DataFrame, path: str) -> dict:
    """Write ``df``'s columns (and a non-default index) to a new Arrow file at ``path``; its spec.

    TypeError for a column, index or label this format cannot hold exactly (the entry is then
    not written: the cache only costs a parse)."""
    arrays, columns = [], []
    for _, col in df.items():
        spec, arr = _encode_array(col)
        columns.append(spec)
        if arr is not None:
            arrays.append(arr)
    index = _encode_index(df.index, arrays)
    # Positional Arrow names: pandas allows duplicate and non-str column labels.
    # Arrow-backed pandas columns convert to chunked arrays: one batch holds one chunk each.
    arrays = [a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a for a in arrays]
    batch = pa.RecordBatch.from_arrays(arrays, names=[f"c{j}" for j in range(len(arrays))])
    # Created private before Arrow opens it: at no moment may another user write it.
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    with ipc.new_file(path, batch.schema, options=WRITE_OPTIONS) as writer:
        # One batch even for no rows: an empty table writes none, losing its dictionaries.
        writer.write_batch(batch)
    return {
        "rows": len(df),
        "labels": encode_labels(df.columns),
        "columns": columns,
        "index": index,
        "attrs": encode_value(dict(df.attrs)),
    }


def _encode_array(x: pd.Series | pd.Index) -> tuple[dict, pa.Array | None]:
    """A column's (or an index's) spec and Arrow array (None for a ``values`` column)."""
    dtype = x.dtype
    if isinstance(dtype, pd.CategoricalDtype):
        if not isinstance(x, pd.Series):
            raise TypeError("a categorical index cannot be cached")
        categories = encode_labels(dtype.categories)
        spec = {"kind": "cat", "ordered": bool(dtype.ordered), "categories": categories}
        return spec, pa.array(x.cat.codes.to_numpy())
    if isinstance(dtype, np.dtype) and dtype.name in NUMERIC:
        return {"kind": "num", "dtype": dtype.name}, pa.array(x.to_numpy())
    if isinstance(dtype, pd.StringDtype):
        na = "nan" if dtype.na_value is np.nan else "NA"
        spec = {"kind": "string", "storage": dtype.storage, "na": na}
        return spec, pa.array(x.array, type=pa.large_string())
    if str(dtype) in MASKED and MASKED[str(dtype)] == dtype:
        return {"kind": "masked", "dtype": str(dtype)}, pa.array(x.array)
    if isinstance(dtype, np.dtype) and dtype.kind == "O":
        values = x.to_numpy()
        if pd.api.types.infer_dtype(values, skipna=False) in ("string", "empty"):
            return {"kind": "str"}, pa.array(values, type=pa.large_string())
        # Rare (no reader writes such a column): the values themselves, each as data.
        return {"kind": "values", "values": [encode_value(v) for v in values]}, None
    raise TypeError(f"a {dtype} column cannot be cached")


def _encode_index(index: pd.Index, arrays: list) -> dict | None:
    name = encode_value(index.name)
    if type(index) is pd.RangeIndex:
        if index.start == 0 and index.step == 1 and index.name is None:
            return None
        return {"range": [index.start, index.stop, index.step], "name": name}
    if type(index) is not pd.Index:
        raise TypeError(f"a {type(index).__name__} cannot be cached")
    spec, arr = _encode_array(index)
    if arr is not None:
        arrays.append(arr)
    return {"column": spec, "name": name}


def encode_labels(labels: pd.Index) -> dict:
    """Column labels or categories as manifest data: their dtype's spec and their values."""
    name = encode_value(labels.name)
    if type(labels) is pd.RangeIndex:
        return {"range": [labels.start, labels.stop, labels.step], "name": name}
    if type(labels) is not pd.Index or isinstance(labels.dtype, pd.CategoricalDtype):
        raise TypeError(f"a {type(labels).__name__} cannot be cached")
    spec, _ = _encode_array(labels)
    spec.pop("values", None)
    return {"dtype": spec, "values": [encode_value(v) for v in labels.tolist()], "name": name}


# ---- reading ------------------------------------------------------------------------------


def read_frame(fd: int, spec: Any) -> pd.DataFrame:
    """The frame ``spec`` describes, from the Arrow file open as ``fd`` (memory-mapped);
    ManifestError (or an Arrow error) when the file and the spec disagree."""
    if type(spec) is not dict or set(spec) != {"rows", "labels", "columns", "index", "attrs"}:
        raise ManifestError("a frame spec without the fields this version writes")
    rows, columns = spec["rows"], spec["columns"]
    if type(rows) is not int or rows < 0 or type(columns) is not list:
        raise ManifestError("a frame spec's rows or columns are not of their types")
    batch = _read_batch(fd)
    if batch.num_columns and batch.num_rows != rows:
        raise ManifestError(f"{batch.num_rows} rows in the Arrow file, the spec says {rows}")
    arrays = iter(batch.columns)
    data = [_decode_array(c, arrays, rows) for c in columns]
    index = _decode_index(spec["index"], arrays, rows)
    if next(arrays, None) is not None:
        raise ManifestError("the Arrow file holds more columns than the spec")
    labels = decode_labels(spec["labels"])
    if len(labels) != len(data):
        raise ManifestError("not as many column labels as columns")
    attrs = decode_value(spec["attrs"])
    if type(attrs) is not dict:
        raise ManifestError("frame attrs are not a dict")
    # Series with explicit dtypes: the frame constructor alone would turn object str into str.
    series = {
        j: pd.Series(values, index=index, dtype=values.dtype, copy=False)
        for j, values in enumerate(data)
    }
    frame = pd.DataFrame(series, index=index, copy=False)
    frame.columns = labels
    frame.attrs = attrs
    return frame


def _read_batch(fd: int) -> pa.RecordBatch:
    size = os.fstat(fd).st_size
    if size == 0:
        raise ManifestError("an empty Arrow file")
    # Mapped from the descriptor the caller checked (owner, mode): never reopened by name.
    mapped = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
    reader = ipc.open_file(pa.py_buffer(mapped))
    if reader.num_record_batches != 1:
        raise ManifestError(f"{reader.num_record_batches} record batches, one expected")
    return reader.get_batch(0)


def _decode_array(spec: Any, arrays, rows: int):
    """The column ``spec`` describes, from the next of ``arrays``: a numpy array or a pandas
    extension array."""
    if type(spec) is not dict or spec.get("kind") not in _KINDS:
        raise ManifestError("a column spec of no known kind")
    kind = spec["kind"]
    if kind == "values":
        values = spec.get("values")
        if set(spec) != {"kind", "values"} or type(values) is not list:
            raise ManifestError("a values column without its values")
        if len(values) != rows:
            raise ManifestError("a values column of another length than its frame")
        return np.fromiter((decode_value(v) for v in values), dtype=object, count=rows)
    arr = next(arrays, None)
    if arr is None:
        raise ManifestError("the spec names more columns than the Arrow file holds")
    if len(arr) != rows:
        raise ManifestError("an Arrow column of another length than its frame")
    if kind == "cat":
        if set(spec) != {"kind", "ordered", "categories"} or type(spec["ordered"]) is not bool:
            raise ManifestError("a categorical spec without its fields")
        if not pa.types.is_signed_integer(arr.type) or arr.null_count:
            raise ManifestError("category codes that are not integers")
        # CategoricalDtype refuses repeated or missing categories.
        dtype = pd.CategoricalDtype(decode_labels(spec["categories"]), spec["ordered"])
        # A copy off the Arrow buffers: the caller owns (and may write) its arrays.
        codes = arr.to_numpy().copy()
        if len(codes) and (codes.min() < -1 or codes.max() >= len(dtype.categories)):
            raise ManifestError("category codes out of range")
        return pd.Categorical.from_codes(codes, dtype=dtype, validate=False)
    if arr.null_count and kind in ("num", "str"):
        raise ManifestError("missing values in a column that has none")
    if kind == "num":
        dtype = NUMERIC.get(spec.get("dtype"))
        if (
            set(spec) != {"kind", "dtype"}
            or dtype is None
            or arr.type != pa.from_numpy_dtype(dtype)
        ):
            raise ManifestError("a numeric column whose type does not match its spec")
        return np.array(arr.to_numpy(zero_copy_only=False), dtype=dtype, copy=True)
    if kind == "str":
        if set(spec) != {"kind"} or arr.type != pa.large_string():
            raise ManifestError("a str column that is not Arrow large strings")
        return arr.to_numpy(zero_copy_only=False).astype(object, copy=False)
    if kind == "string":
        dtype = _label_dtype(spec)
        if arr.type != pa.large_string():
            raise ManifestError("a string column that is not Arrow large strings")
        return dtype.__from_arrow__(arr)
    dtype = MASKED.get(spec.get("dtype"))  # kind == "masked"
    if set(spec) != {"kind", "dtype"} or dtype is None:
        raise ManifestError("a nullable column of unknown dtype")
    if arr.type != pa.from_numpy_dtype(dtype.numpy_dtype):
        raise ManifestError("a nullable column whose type does not match its spec")
    return dtype.__from_arrow__(arr)


def _decode_index(spec: Any, arrays, rows: int) -> pd.Index:
    if spec is None:
        return pd.RangeIndex(rows)
    if type(spec) is not dict:
        raise ManifestError("an index spec that is not an object")
    name = decode_value(spec.get("name"))
    if set(spec) == {"range", "name"}:
        index = _range(spec["range"], name)
    elif set(spec) == {"column", "name"}:
        values = _decode_array(spec["column"], arrays, rows)
        index = pd.Index(values, dtype=values.dtype, name=name, copy=False, tupleize_cols=False)
    else:
        raise ManifestError("an index spec without its fields")
    if len(index) != rows:
        raise ManifestError("an index of another length than its frame")
    return index


def decode_labels(spec: Any) -> pd.Index:
    """The column labels or categories :func:`encode_labels` wrote as ``spec``."""
    if type(spec) is not dict:
        raise ManifestError("labels that are not an object")
    name = decode_value(spec.get("name"))
    if set(spec) == {"range", "name"}:
        return _range(spec["range"], name)
    if set(spec) != {"dtype", "values", "name"} or type(spec["values"]) is not list:
        raise ManifestError("labels without their fields")
    dtype, raw = _label_dtype(spec["dtype"]), spec["values"]
    values = np.fromiter(raw, dtype=object, count=len(raw))
    # Strings stand for themselves; only other values (rare: numbers, tags) need decoding.
    if pd.api.types.infer_dtype(values, skipna=False) not in ("string", "empty"):
        if spec["dtype"]["kind"] in ("str", "string"):
            raise ManifestError("string labels that are not all str")
        values = np.fromiter((decode_value(v) for v in raw), dtype=object, count=len(raw))
    if isinstance(dtype, np.dtype) and dtype.kind == "O":
        return pd.Index(values, dtype=object, name=name, tupleize_cols=False)
    if isinstance(dtype, np.dtype) and not all(type(v) in (int, float, bool) for v in values):
        raise ManifestError("numeric labels that are not all numbers")
    return pd.Index(pd.array(values, dtype=dtype), dtype=dtype, name=name)


def _label_dtype(spec: Any):
    """The dtype of a column spec's values, looked up in the fixed tables."""
    kind = spec.get("kind") if type(spec) is dict else None
    if kind in ("str", "values") and set(spec) == {"kind"}:
        return np.dtype(object)
    if (
        kind == "string"
        and set(spec) == {"kind", "storage", "na"}
        and spec["storage"] in _STRING_STORAGE
        and spec["na"] in _NA
    ):
        return pd.StringDtype(spec["storage"], na_value=_NA[spec["na"]])
    if kind == "num" and set(spec) == {"kind", "dtype"} and spec["dtype"] in NUMERIC:
        return NUMERIC[spec["dtype"]]
    if kind == "masked" and set(spec) == {"kind", "dtype"} and spec["dtype"] in MASKED:
        return MASKED[spec["dtype"]]
    raise ManifestError("a column of no known dtype")


def _range(bounds: Any, name: Any) -> pd.RangeIndex:
    if type(bounds) is not list or len(bounds) != 3 or any(type(b) is not int for b in bounds):
        raise ManifestError("a range that is not three integers")
    if bounds[2] == 0:
        raise ManifestError("a range of step 0")
    return pd.RangeIndex(*bounds, name=name)
