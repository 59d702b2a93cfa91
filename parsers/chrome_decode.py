"""Decode Chrome trace-event JSON bytes into metadata and an event list, with exact timestamps.

Chrome traces give ``ts``/``dur`` in microseconds as JSON numbers; Kineto writes sub-µs fractions
(``1695835542514261.123``) that float64 cannot hold to the nanosecond. :meth:`Decoded.times`
therefore reads the decimal text of those literals straight from the document (a regex over the
bytes, in document order) and turns it into int64 ns with integer arithmetic
(:func:`us_text_to_ns`). It checks that the texts line up one to one with the decoded values
(same count, same float value); when they do not (a ``ts`` key elsewhere in the document, string
times), it decodes a copy whose time literals were quoted, which is exact but slower. Times small
enough that the decoded double pins the ns down (relative to ``baseTimeNanoseconds``) skip the
text altogether (:func:`_small_exact_ns`).

orjson refuses the non-standard ``NaN``/``Infinity`` literals some writers emit, and (depending on
its version) integers beyond 64 bits: on such an error the document is sanitised (those literals
nulled or quoted) and decoded again. Literals rewritten and integers beyond 64 bits (which newer
orjson reads as floats) are reported so the caller can count them.
Cyclic garbage collection is paused while decoding: millions of fresh containers would otherwise
trigger it over and over (several times the decoding time) although none can form a cycle.
"""

from __future__ import annotations

import gc
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import orjson
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from tracediag.model.errors import TraceInputError

# A ts/dur key followed by a JSON number; the number is captured (to be read or quoted).
_NUMBER = rb"(-?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)"
_TIME_NUMBER = {
    key: re.compile(rb'"' + key.encode() + rb'"\s*:\s*' + _NUMBER) for key in ("ts", "dur")
}
_ANY_TIME_LITERAL = re.compile(rb'("(?:ts|dur)"\s*:\s*)' + _NUMBER)
# Integers of 20+ digits (orjson takes up to 2**64 - 1) in value position.
_HUGE_INT = re.compile(rb"(?<=[:\[,])(\s*)(-?\d{20,})(?=\s*[,\]}])")
# Non-standard float literals in value position.
_NON_FINITE = re.compile(rb"(?<=[:\[,])(\s*)(-?Infinity|NaN)(?=\s*[,\]}])")
# The decimal text of a time value: sign, integer digits, optional fraction.
_DECIMAL = r"^(?P<sign>-?)(?P<int>\d{1,16})(?:\.(?P<frac>\d*))?$"
_FLOAT = r"^-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?$"
_MAX_US = (2**62) // 1000  # larger µs values would overflow int64 ns
HUGE_INTS = "integers beyond 64 bits (not read as exact integers)"
_DIGITS_AS_ZERO = bytes(48 if 48 <= i <= 57 else 32 for i in range(256))


@contextmanager
def paused_gc() -> Iterator[None]:
    """Pause cyclic garbage collection (restored on exit)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@dataclass
class Decoded:
    """A decoded trace: top-level metadata, the raw event objects and literals we rewrote."""

    path: Path
    data: bytes
    metadata: dict
    events: list
    rewritten: dict[str, int] = field(default_factory=dict)

    def times(self, key: str, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Exact ns of ``values``: ``event[key]`` of every event object of this document, in order.

        Returns ``(ns, valid)`` as :func:`us_text_to_ns` does.
        """
        numeric = _numeric_mask(values)
        return self._exact_ns(key, numeric, values[numeric], values[~numeric])

    def float_times(self, key: str, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """As :meth:`times`, for values decoded as float64 (NaN where the key is absent or null:
        JSON has no NaN literal)."""
        numeric = ~np.isnan(values)
        return self._exact_ns(key, numeric, values[numeric], None)

    def number_times(self, key: str, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """As :meth:`float_times`, for an object array of ints, floats and None (typed
        records). Integers are exact as decoded: when every value is one, the ns need no text
        (what :func:`us_text_to_ns` gives their literals, without reading them)."""
        if pd.api.types.infer_dtype(values, skipna=True) == "integer":
            numeric = pd.notna(values)
            try:
                whole = values[numeric].astype(np.int64)
            except OverflowError:  # beyond int64 (never a time in range): the float path
                pass
            else:
                in_range = (whole <= _MAX_US) & (whole >= -_MAX_US)
                ns, valid = np.zeros(len(values), np.int64), np.zeros(len(values), bool)
                ns[numeric] = np.where(in_range, whole, 0) * 1000
                valid[numeric] = in_range
                return ns, valid
        return self.float_times(key, values.astype(np.float64))

    def _exact_ns(
        self, key: str, numeric: np.ndarray, numbers: np.ndarray, others: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Exact ns of the ``numbers`` (the values where ``numeric``) and of the ``others``
        (text or missing values where not; None: all missing)."""
        n = len(numeric)
        fast = _small_exact_ns(numbers)
        if fast is not None:
            ns, valid = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool)
            ns[numeric], valid[numeric] = fast, True
            if others is not None and len(others):
                ns[~numeric], valid[~numeric] = us_text_to_ns(others)
            return ns, valid
        texts = _TIME_NUMBER[key].findall(self.data)
        if len(texts) == len(numbers):
            text = pa.array(texts, type=pa.binary()).cast(pa.string())
            if np.array_equal(_text_floats(text), _as_floats(numbers)):
                ns, valid = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool)
                ns[numeric], valid[numeric] = us_text_to_ns(text)
                if others is not None:
                    ns[~numeric], valid[~numeric] = us_text_to_ns(others)  # text or missing
                return ns, valid
        return us_text_to_ns(self._quoted_values(key, n))

    def _quoted_values(self, key: str, n: int) -> np.ndarray:
        """``key`` of every event object, from a copy whose time literals are quoted."""
        doc = orjson.loads(_ANY_TIME_LITERAL.sub(rb'\1"\2"', self._sanitised_data()))
        events = doc["traceEvents"] if isinstance(doc, dict) else doc
        values = np.empty(n, dtype=object)
        values[:] = [e.get(key) for e in events if isinstance(e, dict)]
        return values

    def _sanitised_data(self) -> bytes:
        if not self.rewritten:
            return self.data
        return _NON_FINITE.sub(rb"\1null", _HUGE_INT.sub(rb'\1"\2"', self.data))


def decode(path: Path, data: bytes) -> Decoded:
    """Parse the JSON document ``data`` read from ``path`` into metadata and its event list.

    Raises :class:`TraceInputError` for text that is not JSON (with the error position), and for
    a top level that is neither ``{"traceEvents": [...]}`` nor a list.
    """
    rewritten: dict[str, int] = {}
    with paused_gc():
        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            doc = _decode_sanitised(path, data, exc, rewritten)
    huge = count_huge_ints(data)
    if huge:
        rewritten[HUGE_INTS] = huge
    if isinstance(doc, dict):
        if "traceEvents" not in doc:
            raise TraceInputError(
                path, "JSON object without a 'traceEvents' list (not a Chrome trace)"
            )
        events = doc["traceEvents"]
        if not isinstance(events, list):
            raise TraceInputError(path, f"'traceEvents' is a JSON {_json_type(events)}, not a list")
        metadata = {k: v for k, v in doc.items() if k != "traceEvents"}
    elif isinstance(doc, list):
        events, metadata = doc, {}
    else:
        raise TraceInputError(
            path, f"top level is a JSON {_json_type(doc)}, not a trace object or event list"
        )
    return Decoded(path, data, metadata, events, rewritten)


def _decode_sanitised(
    path: Path, data: bytes, error: orjson.JSONDecodeError, rewritten: dict[str, int]
):
    """Retry after quoting huge integers and nulling NaN/Infinity; else report the first error."""
    fixed, n_huge = _HUGE_INT.subn(rb'\1"\2"', data)
    fixed, n_nonfinite = _NON_FINITE.subn(rb"\1null", fixed)
    if n_huge or n_nonfinite:
        try:
            doc = orjson.loads(fixed)
        except orjson.JSONDecodeError:
            pass
        else:
            if n_nonfinite:
                rewritten["NaN/Infinity literals read as null"] = n_nonfinite
            return doc
    raise TraceInputError(
        path, f"not valid JSON: {error.msg} at line {error.lineno} column {error.colno}"
    ) from None


def count_huge_ints(data: bytes) -> int:
    """Integers outside int64/uint64: depending on its version orjson refuses them (we quote them)
    or reads them as floats; either way they are not exact integers any more."""
    if not _may_hold_20_digits(data):
        return 0
    values = (int(literal) for literal in huge_int_literals(data))
    return sum(1 for v in values if v > 2**64 - 1 or v < -(2**63))


def huge_int_literals(data: bytes) -> list[bytes]:
    """The integer literals of 20+ digits in value position, as ``_HUGE_INT`` finds them, but
    found as runs of digits (numpy) and only those few checked for their neighbours: a regex
    scan of the whole text costs ~10 ms per MB."""
    digit = (np.frombuffer(data, dtype=np.uint8) - np.uint8(48)) < 10
    edges = np.flatnonzero(np.diff(digit.view(np.int8), prepend=np.int8(0), append=np.int8(0)))
    starts, ends = edges[::2], edges[1::2]
    long = ends - starts >= 20
    literals = []
    for digits, end in zip(starts[long].tolist(), ends[long].tolist(), strict=True):
        start = _value_start(data, digits)
        if start >= 0 and _value_ends(data, end):
            literals.append(data[start:end])
    return literals


_SPACE = frozenset(b" \t\n\r\f\v")  # what \s matches in a bytes pattern


def _value_start(data: bytes, digits: int) -> int:
    """Where the number whose digits start at ``digits`` starts (its '-' included) when what
    precedes it is ``[:\\[,]`` and spaces, as ``_HUGE_INT``'s look-behind wants; else -1."""
    start = digits - 1 if digits and data[digits - 1] == ord("-") else digits
    before = start
    while before and data[before - 1] in _SPACE:
        before -= 1
    return start if before and data[before - 1] in b":[," else -1


def _value_ends(data: bytes, end: int) -> bool:
    """Whether spaces then one of ``,]}`` follow the digits ending at ``end``."""
    while end < len(data) and data[end] in _SPACE:
        end += 1
    return end < len(data) and data[end] in b",]}"


def _may_hold_20_digits(data: bytes) -> bool:
    """Whether ``data`` has 20 digits in a row (a regex scan is 10x slower)."""
    # Such a run holds five consecutive multiples of 4: test those bytes first (a strided view,
    # 4x smaller; four multiples of 5 would do, but the 16 digits of Kineto's epoch-µs times
    # hold four of those), then only the few windows around five digits in a row (17-digit
    # float fractions, e.g. a bandwidth of 0.08888888888888889, pass the first test).
    text = np.frombuffer(data, dtype=np.uint8)
    d = (text[::4] - np.uint8(48)) < 10
    hits = np.flatnonzero(d[:-4] & d[1:-3] & d[2:-2] & d[3:-1] & d[4:])
    if not len(hits):
        return False
    # A run through bytes 4h .. 4h+16 starts at most 3 bytes before and ends 3 after them.
    at = 4 * hits[:, None] + np.arange(-3, 20)
    inside = (at >= 0) & (at < len(text))
    digits = inside & ((text[np.clip(at, 0, len(text) - 1)] - np.uint8(48)) < 10)
    return bool(any(digits[:, k : k + 20].all(axis=1).any() for k in range(4)))


def _json_type(value) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}
    return names.get(type(value), "number")


def _numeric_mask(values: np.ndarray) -> np.ndarray:
    """True where the decoded value is a JSON number (int or float, not bool)."""
    kind = pd.api.types.infer_dtype(values, skipna=True)
    if kind in ("integer", "floating", "mixed-integer-float", "empty"):
        return pd.notna(values)
    return np.array([type(v) in (int, float) for v in values], dtype=bool)


def _small_exact_ns(values: np.ndarray) -> np.ndarray | None:
    """Exact ns of decoded µs numbers without their text, or None when that cannot be proven.

    For |v| < 2**40 µs (12 days: traces relative to ``baseTimeNanoseconds``) a double's spacing
    is under 2**-12 µs, so if ``round(v * 1000) / 1000`` gives ``v`` back, the literal was within
    0.25 ns of that integer and rounds to it (as :func:`us_text_to_ns` would). Absolute epoch
    times (~2**50 µs) fail the test: their sub-µs digits are read from the text.
    """
    try:
        v = values.astype(np.float64)
    except (TypeError, ValueError, OverflowError):
        return None
    if not (np.abs(v) < 2.0**40).all():  # also False for NaN and inf
        return None
    ns = np.rint(v * 1000.0)
    if not np.array_equal(ns / 1000.0, v):
        return None
    return ns.astype(np.int64)


def _as_floats(numbers: np.ndarray) -> np.ndarray:
    """Decoded JSON numbers (objects or float64) as float64, as pandas converts them."""
    if numbers.dtype == np.float64:
        return numbers
    return pd.to_numeric(pd.Series(numbers, dtype=object)).to_numpy(np.float64)


def _text_floats(text: pa.StringArray) -> np.ndarray:
    """The texts as float64 (NaN throughout when one does not convert: the caller falls back)."""
    try:
        return pc.cast(text, pa.float64()).to_numpy(zero_copy_only=False)
    except pa.ArrowInvalid:
        return np.full(len(text), np.nan)


def us_text_to_ns(values) -> tuple[np.ndarray, np.ndarray]:
    """Exact int64 ns from microsecond values given as decimal text (or numbers).

    Returns ``(ns, valid)``; ``valid`` is False where the value is missing, not a number, or out
    of the int64 ns range. Fractions beyond 1 ns are rounded half up (away from zero).
    """
    n = len(values)
    ns = np.zeros(n, dtype=np.int64)
    valid = np.zeros(n, dtype=bool)
    if not n:
        return ns, valid
    text = _as_text(values)
    parts = pc.extract_regex(text, _DECIMAL)
    decimal_ok = parts.is_valid().to_numpy(zero_copy_only=False)
    if decimal_ok.any():
        ok = pa.array(decimal_ok)
        parts = parts.filter(ok)
        whole = pc.cast(parts.field("int"), pa.int64()).to_numpy()
        frac = pc.fill_null(parts.field("frac"), "")
        frac4 = pc.utf8_slice_codeunits(pc.utf8_rpad(frac, 4, "0"), 0, 4)
        tenths_of_ns = pc.cast(frac4, pa.int64()).to_numpy()
        sign = np.where(pc.equal(parts.field("sign"), "-").to_numpy(zero_copy_only=False), -1, 1)
        in_range = whole <= _MAX_US
        exact = sign * (np.where(in_range, whole, 0) * 1000 + (tenths_of_ns + 5) // 10)
        idx = np.flatnonzero(decimal_ok)
        ns[idx] = exact
        valid[idx] = in_range
    # Exponent notation: float precision is the best such text offers.
    rest = np.flatnonzero(~decimal_ok)
    if len(rest):
        rest_text = text.take(pa.array(rest))
        is_float = pc.fill_null(pc.match_substring_regex(rest_text, _FLOAT), False)
        floats = np.full(len(rest), np.nan)
        if pc.any(is_float).as_py():
            sel = is_float.to_numpy(zero_copy_only=False)
            floats[sel] = pc.cast(rest_text.filter(is_float), pa.float64()).to_numpy()
        good = np.isfinite(floats) & (np.abs(floats) <= _MAX_US)
        ns[rest[good]] = np.round(floats[good] * 1000.0).astype(np.int64)
        valid[rest[good]] = True
    return ns, valid


def _as_text(values) -> pa.StringArray:
    """The values as a pyarrow string array; numbers as their repr, anything else null."""
    if isinstance(values, pa.Array):
        return values
    try:
        return pa.array(values, type=pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array(
            [
                v
                if isinstance(v, str)
                else repr(v)
                if isinstance(v, int | float) and not isinstance(v, bool)
                else None
                for v in values
            ],
            type=pa.string(),
        )
