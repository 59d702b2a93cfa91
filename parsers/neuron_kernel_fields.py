"""Instruction fields the kernel investigations read: tensor-engine tile shapes and operand
addresses from ``operands``, the source line, and the size of each ``TensorInfo`` tensor.

A tensor-engine instruction's ``operands`` (neuron-explorer 2.22+, undocumented) ends with the
``K*M`` pair (the PE array's rows and columns the tile uses) and gives the moving tensor's free
size N as the first figure of its ``src`` access pattern (``src=bf16@0x5600[1,0,0][512,1,1]``),
as AWS's TE-inefficiency investigation reads it. The ``src`` and ``dst`` addresses tell which
tensor an instruction reads and writes (a transpose repeated on one tensor reads one address).
An elementwise instruction's source pattern gives the elements it reads (the slow-engine
what-if times them at the engine's lanes x clock).
Parsed per distinct operand text (a Categorical), never per row in Python.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracediag.model import schema as S
from tracediag.parsers.neuron_common import column, fill_missing, labels

_SHAPE = r"(?P<k>\d+)\*(?P<m>\d+)\s*$"
_MOVING = r"src=\S*?\[[\d,\-\s]+\]\[(?P<n>\d+)"
_SRC = r"src=(?:\w+@)?0x(?P<src>[0-9a-fA-F]+)"
_DST = r"dst=(?:\w+@)?0x(?P<dst>[0-9a-fA-F]+)"
_ELEMENTS = r"src=(?:\w+@)?0x[0-9a-fA-F]+\[(?P<n>\d+)\](?!\[)"
_ELEMENTWISE_ENGINES = ("vector", "scalar", "gpsimd")


def source_lines(df: pd.DataFrame, n: int) -> pd.Categorical:
    """Per instruction: ``bir_debug_info_source_location`` (the field AWS's investigations
    use), else ``nki_source_location``."""
    bir = labels(column(df, "bir_debug_info_source_location"), n)
    return fill_missing(bir, labels(column(df, "nki_source_location"), n))


def tensor_operand_fields(df: pd.DataFrame, engine: pd.Categorical) -> dict[str, np.ndarray]:
    """Per instruction: ``tile_rows`` (K), ``tile_cols`` (M), ``tile_moving`` (N) and the
    ``src_address``/``dst_address`` of the tensor engine's operands; NaN elsewhere or where
    the text does not say."""
    n = len(df)
    out = {name: np.full(n, np.nan) for name in S.TILE_FIELDS}
    text = column(df, "operands")
    if text is None or not n:
        return out
    cats = np.asarray(engine.categories, dtype=object)
    tensor = np.isin(engine.codes, np.flatnonzero(cats == "tensor"))
    if not tensor.any():
        return out
    values = labels(text, n)
    codes = np.where(tensor, values.codes, -1)
    distinct = pd.Series(np.asarray(values.categories, dtype=object), dtype=object)
    if not len(distinct):
        return out
    shape = distinct.str.extract(_SHAPE)
    parsed = {
        S.TILE_ROWS: pd.to_numeric(shape["k"], errors="coerce"),
        S.TILE_COLS: pd.to_numeric(shape["m"], errors="coerce"),
        S.TILE_MOVING: pd.to_numeric(distinct.str.extract(_MOVING)["n"], errors="coerce"),
        S.SRC_ADDRESS: _hex(distinct.str.extract(_SRC)["src"]),
        S.DST_ADDRESS: _hex(distinct.str.extract(_DST)["dst"]),
    }
    for name, per_text in parsed.items():
        table = np.append(per_text.to_numpy(dtype=np.float64, na_value=np.nan), np.nan)
        out[name] = table[codes]  # code -1 (not the tensor engine, no text) picks the NaN
    return out


def elementwise_counts(df: pd.DataFrame, engine: pd.Categorical) -> np.ndarray:
    """Per instruction of the vector, scalar and GpSimd engines: the elements its ``operands``
    say it reads, a source access pattern of one count (``src=fp32@0x2000000[16384]``); NaN
    elsewhere, and where the pattern has strides and counts per dimension (``[1,0,0][3,1,1]``:
    per partition, the partitions unstated). Parsed per distinct operand text."""
    n = len(df)
    out = np.full(n, np.nan)
    text = column(df, "operands")
    if text is None or not n:
        return out
    cats = np.asarray(engine.categories, dtype=object)
    wanted = np.isin(engine.codes, np.flatnonzero(np.isin(cats, _ELEMENTWISE_ENGINES)))
    if not wanted.any():
        return out
    values = labels(text, n)
    distinct = pd.Series(np.asarray(values.categories, dtype=object), dtype=object)
    if not len(distinct):
        return out
    counts = pd.to_numeric(distinct.str.extract(_ELEMENTS)["n"], errors="coerce")
    table = np.append(counts.to_numpy(dtype=np.float64, na_value=np.nan), np.nan)
    return table[np.where(wanted, values.codes, -1)]


def _hex(values: pd.Series) -> pd.Series:
    """Hex digits -> float addresses (exact below 2**53), NaN where missing."""
    return values.map(lambda h: float(int(h, 16)) if isinstance(h, str) else np.nan)


def tensor_sizes(tensors: pd.DataFrame | None) -> dict[str, int]:
    """``TensorInfo`` ``variable_name`` -> ``size`` in bytes (the first row of a name): what
    moving a tensor once costs, for the redundant-transfer investigation."""
    if tensors is None or not {"variable_name", "size"} <= set(tensors.columns):
        return {}
    size = pd.to_numeric(tensors["size"], errors="coerce")
    name = tensors["variable_name"].astype(object)
    keep = name.notna().to_numpy() & size.notna().to_numpy() & (size > 0).to_numpy()
    first = pd.Series(size[keep].to_numpy(), index=name[keep].astype(str).to_numpy())
    first = first[~first.index.duplicated()]
    return {str(k): int(v) for k, v in first.items()}
