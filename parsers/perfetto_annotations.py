"""A name index over a Perfetto annotation table (one row per debug annotation), built once.

The readers look up some thirty annotation names per trace (fields, DMA and semaphore columns,
collectives). Filtering the ~10^5-10^6 rows by name each time (an Arrow string comparison, a
boolean take of every column, a ``drop_duplicates``) cost seconds; here the names are factorized
and grouped once, and a lookup is an index slice. A table's index is kept while the table lives
(:func:`index_of`), so the modules reading the same table share it.
"""

from __future__ import annotations

import weakref

import numpy as np
import pandas as pd

#: (id(table), key) -> (a weak reference to the table, its index): dropped when the table is.
_INDEXES: dict[tuple[int, str], tuple[weakref.ref, AnnotationIndex]] = {}


class AnnotationIndex:
    """Row positions of each annotation name of ``table`` (its ``name`` column) and the
    ``key`` column (``slice``, or ``ev`` for the decoder's table) and ``value`` as arrays."""

    def __init__(self, table: pd.DataFrame, key: str) -> None:
        codes, names = pd.factorize(table["name"])
        self.rows = len(table)
        self.key = table[key].to_numpy()
        self.kind = table["kind"].to_numpy()
        self.value = table["value"].to_numpy(dtype=object)
        self._code = {name: k for k, name in enumerate(names)}
        self._order = np.argsort(codes, kind="stable")  # each name's rows in table order
        self._bounds = np.searchsorted(codes[self._order], np.arange(len(names) + 1))

    def has(self, names) -> bool:
        """Whether any row has one of ``names``."""
        return any(name in self._code for name in names)

    def positions(self, name: str) -> np.ndarray:
        """The rows named ``name``, ascending."""
        k = self._code.get(name)
        if k is None:
            return np.zeros(0, dtype=np.int64)
        return self._order[self._bounds[k] : self._bounds[k + 1]]

    def last(self, name: str, kind: int | None = None) -> np.ndarray:
        """The rows of ``name`` (of value kind ``kind`` if given) less those whose key has a
        later one: ``table[table.name == name].drop_duplicates(key, keep="last")``'s rows."""
        pos = self.positions(name)
        if kind is not None:
            pos = pos[self.kind[pos] == kind]
        return self.last_of(pos)

    def last_of(self, pos: np.ndarray) -> np.ndarray:
        """Rows ``pos`` (ascending) less those whose key has a later one among them."""
        if not len(pos):
            return pos
        keys = self.key[pos]
        # Each key's last row: the largest position among its rows (no sort).
        last = np.full(int(keys.max()) + 1, -1, dtype=np.int64)
        np.maximum.at(last, keys, np.arange(len(pos)))
        return pos[last[keys] == np.arange(len(pos))]


def index_of(table: pd.DataFrame, key: str = "slice") -> AnnotationIndex:
    """The (shared) :class:`AnnotationIndex` of ``table``; tables are not changed in place
    after they are built, so one index serves every reader of the table."""
    cache = (id(table), key)
    entry = _INDEXES.get(cache)
    if entry is not None and entry[0]() is table and entry[1].rows == len(table):
        return entry[1]
    index = AnnotationIndex(table, key)
    _INDEXES[cache] = (weakref.ref(table, lambda _ref, c=cache: _INDEXES.pop(c, None)), index)
    return index


def last_values(table: pd.DataFrame, name: str, n: int) -> np.ndarray:
    """Per slice (``n`` of them), the last value of annotation ``name``; None where absent."""
    index = index_of(table)
    rows = index.last(name)
    out = np.full(n, None, dtype=object)
    out[index.key[rows]] = index.value[rows]
    return out


def last_numbers(table: pd.DataFrame, name: str, n: int) -> np.ndarray:
    """:func:`last_values` as float64 (NaN where absent or not a number)."""
    values = pd.Series(last_values(table, name, n), dtype=object)
    return pd.to_numeric(values, errors="coerce").to_numpy(dtype=np.float64)
