"""The JSON half of a cache entry: plain values and the dataclasses beside the frames, as data.

A cache directory may be shared or restored from another job's artifacts, so nothing read from
it may name code to run (as a pickle does). Everything that is not a DataFrame is written as
JSON with a closed set of tagged forms, and read back by a decoder that accepts only those:

- JSON's own ``null``, booleans, strings, integers, finite floats and lists, as themselves;
- ``{"$float": "nan" | "inf" | "-inf"}``; ``{"$tuple": [...]}``;
  ``{"$dict": [[key, value], ...]}`` (every dict: keys need not be str);
- ``{"$np": [name, value]}``: a numpy scalar of one of :data:`NUMPY_SCALARS`.

The dataclasses (:class:`~tracediag.model.schema.RankMeta`, ``InputFile``, the fields of a
``RankPart`` or ``Trace`` that are not frames) have an explicit :class:`Record` schema: a JSON
object with exactly the schema's fields, each decoded and type-checked. Anything else is a
:class:`ManifestError`, which the cache takes as a miss.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from tracediag.model import schema as S

#: The numpy scalar types a value may hold, by the name written for them.
NUMPY_SCALARS: dict[str, type] = {
    t.__name__: t
    for t in (
        np.bool_,
        np.int8,
        np.int16,
        np.int32,
        np.int64,
        np.uint8,
        np.uint16,
        np.uint32,
        np.uint64,
        np.float16,
        np.float32,
        np.float64,
    )
}
_NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


class ManifestError(ValueError):
    """A manifest (or a value in it) that is not one this version writes."""


# ---- free-form values ---------------------------------------------------------------------


def encode_value(value: Any) -> Any:
    """``value`` as JSON-ready data (see the module docstring); TypeError when it has none."""
    kind = type(value)
    if value is None or kind in (bool, str, int):
        return value
    if kind is float:
        return value if math.isfinite(value) else {"$float": repr(value)}
    if kind is list:
        return [encode_value(v) for v in value]
    if kind is tuple:
        return {"$tuple": [encode_value(v) for v in value]}
    if kind is dict:
        return {"$dict": [[encode_value(k), encode_value(v)] for k, v in value.items()]}
    if kind.__name__ in NUMPY_SCALARS and NUMPY_SCALARS[kind.__name__] is kind:
        return {"$np": [kind.__name__, encode_value(value.item())]}
    raise TypeError(f"a {kind.__name__} cannot be cached")


def decode_value(data: Any) -> Any:
    """The value :func:`encode_value` wrote as ``data``; ManifestError for any other form."""
    kind = type(data)
    if data is None or kind in (bool, str, int, float):
        return data
    if kind is list:
        return [decode_value(v) for v in data]
    if kind is not dict or len(data) != 1:
        raise ManifestError(f"unexpected {kind.__name__} in the manifest")
    ((tag, payload),) = data.items()
    if tag == "$float" and payload in _NON_FINITE:
        return _NON_FINITE[payload]
    if tag == "$tuple" and type(payload) is list:
        return tuple(decode_value(v) for v in payload)
    if tag == "$dict" and type(payload) is list:
        out = {}
        for pair in payload:
            if type(pair) is not list or len(pair) != 2:
                raise ManifestError("a dict item is not a [key, value] pair")
            key = decode_value(pair[0])
            if type(key) is list:
                raise ManifestError("a list as a dict key")
            out[key] = decode_value(pair[1])
        return out
    if tag == "$np" and type(payload) is list and len(payload) == 2:
        name, raw = payload[0], decode_value(payload[1])
        if name in NUMPY_SCALARS and type(raw) in (bool, int, float):
            return NUMPY_SCALARS[name](raw)
    raise ManifestError(f"unknown form {tag!r} in the manifest")


# ---- typed fields and records ---------------------------------------------------------------

#: A field's schema: checks a decoded value (free-form fields) or is a nested Record/ListOf/...
Check = Callable[[Any], bool]


def is_int(v: Any) -> bool:
    """An integer (Python or numpy), not a bool."""
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def is_str(v: Any) -> bool:
    """A str."""
    return type(v) is str


def is_dict(v: Any) -> bool:
    """A dict of any decodable keys and values."""
    return type(v) is dict


@dataclass(frozen=True)
class ListOf:
    """A list whose items follow ``item``."""

    item: Any


@dataclass(frozen=True)
class DictOf:
    """A dict (written as ``[[key, value], ...]``) whose keys and values follow the schemas."""

    key: Any
    value: Any


@dataclass(frozen=True)
class Record:
    """A dataclass written as a JSON object of exactly ``schema``'s fields."""

    cls: type
    schema: dict[str, Any]

    def check_covers(self) -> None:
        """Raise when the dataclass gained or lost a field the schema does not describe: writing
        it would lose the field silently."""
        names = {f.name for f in fields(self.cls)}
        if names != set(self.schema):
            raise TypeError(f"{self.cls.__name__}: fields {sorted(names ^ set(self.schema))}")


def encode_typed(spec: Any, value: Any) -> Any:
    """``value`` as JSON-ready data under ``spec``; TypeError when it does not fit."""
    if isinstance(spec, Record):
        if type(value) is not spec.cls:
            raise TypeError(f"expected a {spec.cls.__name__}")
        spec.check_covers()
        return {name: encode_typed(sub, getattr(value, name)) for name, sub in spec.schema.items()}
    if isinstance(spec, ListOf):
        if type(value) is not list:
            raise TypeError("expected a list")
        return [encode_typed(spec.item, v) for v in value]
    if isinstance(spec, DictOf):
        if type(value) is not dict:
            raise TypeError("expected a dict")
        return [[encode_typed(spec.key, k), encode_typed(spec.value, v)] for k, v in value.items()]
    if not spec(value):
        raise TypeError(f"{value!r} fails {spec.__name__}")
    return encode_value(value)


def decode_typed(spec: Any, data: Any) -> Any:
    """The value :func:`encode_typed` wrote under ``spec``; ManifestError when ``data`` is not
    of that shape or a field's value fails its check."""
    if isinstance(spec, Record):
        if type(data) is not dict or set(data) != set(spec.schema):
            raise ManifestError(f"{spec.cls.__name__}: not the fields this version writes")
        return spec.cls(
            **{name: decode_typed(sub, data[name]) for name, sub in spec.schema.items()}
        )
    if isinstance(spec, ListOf):
        if type(data) is not list:
            raise ManifestError("expected a list")
        return [decode_typed(spec.item, v) for v in data]
    if isinstance(spec, DictOf):
        if type(data) is not list:
            raise ManifestError("expected a list of pairs")
        out = {}
        for pair in data:
            if type(pair) is not list or len(pair) != 2:
                raise ManifestError("a dict item is not a [key, value] pair")
            out[decode_typed(spec.key, pair[0])] = decode_typed(spec.value, pair[1])
        return out
    value = decode_value(data)
    if not spec(value):
        raise ManifestError(f"a field fails {spec.__name__}")
    return value


def list_of_str(v: Any) -> bool:
    """A list of str."""
    return type(v) is list and all(type(s) is str for s in v)


def str_to_int(v: Any) -> bool:
    """A dict of str to int (row counts by reason)."""
    return type(v) is dict and all(type(k) is str and is_int(n) for k, n in v.items())


RANK_META = Record(
    S.RankMeta,
    {
        "rank": is_int,
        "sources": list_of_str,
        "format": is_str,
        "hardware": is_str,
        "clock_offset_ns": is_int,
        "summary": is_dict,
        "repairs": str_to_int,
        "info": is_dict,
    },
)
INPUT_FILE = Record(S.InputFile, {"path": is_str, "format": is_str, "ranks": ListOf(is_int)})
#: The fields beside the frames of each cached class, by class name.
OBJECTS = {
    "RankPart": {"meta": RANK_META},
    "Trace": {
        "meta": DictOf(is_int, RANK_META),
        "inputs": ListOf(INPUT_FILE),
        "skipped": list_of_str,
    },
}
