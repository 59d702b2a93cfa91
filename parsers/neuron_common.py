"""Helpers both Neuron readers share: engine names, ranks from names, exact 64-bit ids, lookups.

Neuron tables hold 64-bit ids and device-clock timestamps that float64 cannot represent exactly,
so integer fields travel as pandas nullable ``Int64`` columns and are looked up with sorted numpy
arrays (:class:`IdIndex`), never through float.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals

from tracediag.model import schema as S

#: Engine spellings seen across Neuron tables and tools -> the canonical engine name.
#: ``Pool`` is how CcOp/CcInstruction name the GpSimd engine as a trigger engine (inferred);
#: ``TensorMatrix`` is the timeline row of the tensor engine's matmuls.
ENGINE_ALIASES = {
    "tensor": "tensor",
    "tensormatrix": "tensor",
    "pe": "tensor",
    "vector": "vector",
    "dve": "vector",  # the hardware name of the vector engine (legacy JSON ``subgroup``)
    "scalar": "scalar",
    "act": "scalar",
    "activation": "scalar",
    "gpsimd": "gpsimd",
    "pool": "gpsimd",
    "sync": "sync",
    "sp": "sync",
}

#: The schema major versions seen in real output: 7 (SDK 2.31, the field reference) and 12
#: (SDK 2.33). Another major may have renamed fields: the reader names the ones it missed.
KNOWN_SCHEMA_MAJORS = (7, 12)
KNOWN_SCHEMA_MAJOR = max(KNOWN_SCHEMA_MAJORS)

_RANK_IN_NAME = re.compile(r"(?:^|[^a-z0-9])rank[_-]?(\d+)(?![0-9])")
#: What the profiler's file and folder names state: the logical NeuronCore (``..._vnc_3``), the
#: process (``i-0ab..._pid_98399``, ``pid4100``), the process-local core (``profile_nc_0``) and
#: the compiled model (``device_profile_model_2``).
_NAME_TOKENS = {
    key: re.compile(rf"(?:^|[^a-z0-9]){key}[_-]?(\d+)(?![0-9])")
    for key in ("vnc", "pid", "nc", "model")
}


def normalise_engines(values: pd.Series) -> pd.Categorical:
    """Canonical engine names (tensor, vector, scalar, gpsimd, sync) for raw engine labels.

    Matching is case-insensitive; unknown labels are kept lower-cased; missing ones become
    "unknown".
    Works on the distinct values only, so its cost does not grow with the number of rows.
    """
    codes, uniques = pd.factorize(values, use_na_sentinel=True)
    lowered = [str(u).strip().lower() for u in uniques]
    names, inverse = np.unique(
        [ENGINE_ALIASES.get(u, u) for u in lowered] + ["unknown"], return_inverse=True
    )
    # A missing label has code -1, which picks the trailing "unknown".
    return pd.Categorical.from_codes(inverse[codes], pd.Index(names, dtype="str"))


def rank_from_name(name: str) -> int | None:
    """The rank a file or directory name states (rank_3, profile_rank_3.json, rank3), if any."""
    match = _RANK_IN_NAME.search(name.lower())
    return int(match.group(1)) if match else None


def name_tokens(name: str) -> dict[str, int]:
    """The numbers a profile's name states: ``rank``, ``vnc``, ``pid``, ``nc``, ``model``."""
    lowered = name.lower()
    found = {k: int(m.group(1)) for k, rx in _NAME_TOKENS.items() if (m := rx.search(lowered))}
    rank = rank_from_name(name)
    return found | ({"rank": rank} if rank is not None else {})


def natural_key(name: str) -> list:
    """Sort key that orders rank_2 before rank_10."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def ints(col: pd.Series | None, n: int) -> tuple[np.ndarray, np.ndarray]:
    """An integer column as (int64 values with 0 where missing, valid mask); absent -> all invalid."""
    if col is None:
        return np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool)
    valid = col.notna().to_numpy()
    return col.to_numpy(dtype=np.int64, na_value=0), valid


def floats(col: pd.Series | None, n: int) -> np.ndarray:
    """A numeric column as float64 with NaN for missing; absent -> all NaN."""
    if col is None:
        return np.full(n, np.nan)
    if pd.api.types.is_numeric_dtype(col.dtype) and not pd.api.types.is_bool_dtype(col.dtype):
        # Already numbers (Int64, float64): what to_numeric gives, without its copy and scan.
        return col.to_numpy(dtype=np.float64, na_value=np.nan)
    return pd.to_numeric(col, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)


def several(values: np.ndarray) -> bool:
    """Whether ``values`` hold more than one distinct value (``len(np.unique(values)) > 1``
    without hashing or sorting them)."""
    return bool(len(values)) and bool((values != values[0]).any())


def labels(col: pd.Series | None, n: int) -> pd.Categorical:
    """A text column as a Categorical with text categories (NaN for missing); absent -> all NaN.

    Categoricals hold one string per distinct value, not one Python object per row.
    """
    if col is None:
        return pd.Categorical.from_codes(np.full(n, -1), pd.Index([], dtype="str"))
    cat = col.array if isinstance(col.dtype, pd.CategoricalDtype) else pd.Categorical(col)
    if cat.categories.dtype != "str":
        cat = pd.Categorical(pd.Series(cat).astype("str"))
    return cat


def constant(value: str, n: int) -> pd.Categorical:
    """``value`` on every one of ``n`` rows."""
    return pd.Categorical.from_codes(np.zeros(n, dtype=np.int8), pd.Index([value], dtype="str"))


def fill_missing(values: pd.Categorical, fallback: pd.Categorical | str) -> pd.Categorical:
    """``values`` with missing rows taken from ``fallback`` (a label or a Categorical)."""
    missing = values.isna()
    if not missing.any():
        return values
    if isinstance(fallback, str):
        if fallback not in values.categories:
            values = values.add_categories([fallback])
        return values.fillna(fallback)
    both = union_categoricals([values, fallback])
    codes = np.where(missing, both.codes[len(values) :], both.codes[: len(values)])
    return pd.Categorical.from_codes(codes, both.categories)


def numbered(prefix: str, values: np.ndarray, valid: np.ndarray) -> pd.Categorical:
    """Labels ``f"{prefix}{value}"`` (NaN where not valid), formatted once per distinct value."""
    codes = np.full(len(values), -1, dtype=np.int64)
    uniq, inverse = np.unique(values[valid], return_inverse=True)
    codes[valid] = inverse
    return pd.Categorical.from_codes(codes, pd.Index([f"{prefix}{u}" for u in uniq], dtype="str"))


def column(df: pd.DataFrame | None, name: str) -> pd.Series | None:
    """``df[name]`` or None when the table or the column is absent."""
    if df is None or name not in df.columns:
        return None
    return df[name]


def device_of(info: dict) -> str:
    """``nd<device>/nc<core>`` from Metadata indices, as far as they are known."""
    nd, nc = info.get("neuron_device_idx"), info.get("neuroncore_idx")
    if nc is None:
        return ""
    return f"nc{nc}" if nd is None else f"nd{nd}/nc{nc}"


def schema_warning(version: object, meta: S.RankMeta) -> None:
    """Warn (in ``meta``) when the profile's schema major version is newer than documented."""
    text = "" if version is None else str(version).strip()
    if schema_known(version):
        return
    known = " or ".join(f"{m}.x" for m in KNOWN_SCHEMA_MAJORS)
    meta.info["schema_warning"] = (
        f"profile schema version {text or '(missing)'} is not a known {known} "
        "version: fields may have been renamed or removed; results may be incomplete"
    )
    meta.count("unknown schema major version", 1)


def schema_known(version: object) -> bool:
    """True for a schema version whose major this reader was written against."""
    match = re.match(r"v?(\d+)", "" if version is None else str(version).strip())
    return bool(match) and int(match.group(1)) in KNOWN_SCHEMA_MAJORS


def numeric_summary(row: dict) -> dict[str, float]:
    """The numeric fields of one summary row as floats (text and missing values left out)."""
    values = pd.to_numeric(pd.Series(row, dtype=object), errors="coerce").astype("float64")
    return {str(k): float(v) for k, v in values.dropna().items()}


class IdIndex:
    """Maps source ids (64-bit) to event rows; the first row wins when an id repeats."""

    def __init__(self, ids: np.ndarray, valid: np.ndarray, rows: np.ndarray):
        keys, rws = ids[valid], rows[valid]
        self.keys, first = np.unique(keys, return_index=True)
        self.rows = rws[first]
        self.duplicates = int(len(keys) - len(self.keys))

    @classmethod
    def empty(cls) -> IdIndex:
        """An index that resolves nothing."""
        none = np.zeros(0, dtype=np.int64)
        return cls(none, np.zeros(0, dtype=bool), none)

    def lookup(self, ids: np.ndarray, valid: np.ndarray | None = None) -> np.ndarray:
        """Rows of ``ids`` (-1 where the id is unknown or not valid)."""
        out = np.full(len(ids), -1, dtype=np.int64)
        if not len(self.keys) or not len(ids):
            return out
        pos = np.clip(np.searchsorted(self.keys, ids), 0, len(self.keys) - 1)
        hit = self.keys[pos] == ids
        if valid is not None:
            hit &= valid
        out[hit] = self.rows[pos[hit]]
        return out
