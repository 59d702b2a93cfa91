"""Times of a Neuron system profile in the unit its events state (``timestamp_unit``), as ns.

``system_profile.json`` rows carry ``timestamp_unit`` beside ``timestamp`` and ``duration``
(neuron-real-output.md; the official Perfetto screenshots show ``timestamp_unit: ns``). A file
in microseconds writes fractional numbers (``1752016143399935.2``): at today's epoch a double
holds a µs time only to 0.25 µs, so multiplying the parsed float by 1000 would be off by up to
125 ns. The conversion is therefore done on the number's decimal text, exactly: the digits and
the exponent are read apart and the power of ten of the unit is added to the exponent. A JSON
number parsed as a float gives back its text as the shortest decimal that reads as the same
double (``str(float)``), which is what JSON writers emit (Python, JavaScript, orjson,
serde_json), so those files convert exactly; a file that writes more digits than a double holds
is within half a double step of the truth. Numbers stored as strings are read from their text.
Columnar: vectorised string and int64 operations, no loop over events.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from tracediag.model.errors import TraceInputError

#: Unit name -> power of ten to nanoseconds.
UNIT_POW10 = {"ns": 0, "us": 3, "µs": 3, "usec": 3, "ms": 6, "msec": 6, "s": 9, "sec": 9}
_NUMBER = r"^\s*([+-]?)(\d*)(?:\.(\d*))?(?:[eE]([+-]?\d+))?\s*$"
#: Digits an int64 holds whatever they are (10**18 < 2**63).
_MAX_DIGITS = 18


def units_of(df: pd.DataFrame, path: Path) -> pd.Series | None:
    """Per event, the power of ten from its ``timestamp_unit`` to ns (0 where the event states
    none: ns, the documented unit); None when no event states a unit other than ns."""
    if "timestamp_unit" not in df:
        return None
    unit = df["timestamp_unit"].astype("string").str.strip().str.lower().fillna("ns")
    pow10 = unit.map(UNIT_POW10)
    unknown = pow10.isna()
    if unknown.any():
        row = int(np.flatnonzero(unknown.to_numpy())[0])
        raise TraceInputError(
            path,
            f"event {row}: timestamp_unit {df['timestamp_unit'].iat[row]!r} is not one of "
            + ", ".join(sorted(UNIT_POW10)),
        )
    pow10 = pow10.astype(np.int64)
    return pow10 if (pow10 != 0).any() else None


def to_ns(values: pd.Series, pow10: pd.Series, name: str, path: Path) -> pd.Series:
    """``values`` (numbers or their text, objects) times ``10**pow10``, rounded to whole ns
    (half away from zero), as object ints with None where missing. Text that is no number is
    an error naming the event."""
    text = values.astype("string")
    parts = text.str.extract(_NUMBER)
    missing = values.isna().to_numpy()
    bad = (parts[1].fillna("").str.len() + parts[2].fillna("").str.len() == 0) | parts[1].isna()
    bad = bad.to_numpy() & ~missing
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise TraceInputError(
            path, f"event {row}: field {name!r} is not a number ({values.iat[row]!r})"
        )
    frac = parts[2].fillna("").str.rstrip("0")
    digits = (parts[1].fillna("") + frac).str.lstrip("0").replace("", "0")
    exp = (
        pd.to_numeric(parts[3], errors="coerce").fillna(0).to_numpy(dtype=np.int64)
        - frac.str.len().to_numpy(dtype=np.int64)
        + pow10.to_numpy(dtype=np.int64)
    )
    long = (digits.str.len().to_numpy() > _MAX_DIGITS) & ~missing
    if long.any():  # more digits than int64 holds: keep the leading ones, the rest is rounding
        cut = digits.str.len().to_numpy() - _MAX_DIGITS
        digits = digits.where(~long, digits.str.slice(0, _MAX_DIGITS))
        exp = np.where(long, exp + cut, exp)
    mant = pd.to_numeric(digits.where(~pd.Series(missing, index=digits.index), "0")).to_numpy(
        dtype=np.int64
    )
    limit = np.iinfo(np.int64).max // 10 ** np.clip(exp, 0, _MAX_DIGITS)
    over = ~missing & (exp > 0) & ((exp > _MAX_DIGITS) | (mant > limit))
    if over.any():
        row = int(np.flatnonzero(over)[0])
        raise TraceInputError(
            path, f"event {row}: field {name!r} is out of range ({values.iat[row]!r})"
        )
    scale = 10 ** np.minimum(np.abs(exp), _MAX_DIGITS).astype(np.int64)
    up = mant * np.where(exp >= 0, scale, 1)
    down = (mant + scale // 2) // scale  # exp < 0: round half up on the magnitude
    ns = np.where(exp >= 0, up, down)
    ns = np.where((parts[0] == "-").fillna(False).to_numpy(dtype=bool), -ns, ns)
    return pd.Series(np.where(missing, None, ns.astype(object)), index=values.index, dtype=object)
