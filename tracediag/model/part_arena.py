"""The numeric event columns of many rank parts gathered into one buffer each as they arrive.

Assembling a job concatenates every part's columns (:func:`tracediag.model.assembly.assemble`),
so the parts and the job's columns are in memory together, and every page of the job's columns
is fresh memory, which the kernel must fault in and zero (on the 2-core VM of our benchmarks
about 2 ms per MiB: 3 s of the clean-room 64 ranks x 100k instructions' assembly). An arena
copies each part's numeric columns, as the part arrives, into one buffer per column, sized
from the first part for all the parts to come, and leaves the part holding views into it: the
part's own arrays are freed and their memory serves the next part read, and assembly finds
the parts' columns one after another in one buffer (:func:`joined_view`) and copies nothing.

A part that does not fit (more rows than the first one foretold) keeps its own arrays, and
assembly then concatenates that column as before: the result is the same either way.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from tracediag.model.assembly import RankPart

#: The buffers arenas made: :func:`joined_view` joins views of these alone, so that a job's
#: column never shares memory with an array a reader still holds.
#: (numpy arrays are not hashable: by id, with a reference that drops the entry with it.)
_BUFFERS: dict[int, weakref.ref] = {}

#: Room for this many times the first part's rows per part still to come: ranks of one job
#: differ little in size, and pages of the buffer never written cost no memory.
HEADROOM = 1.25


class PartArena:
    """Buffers for the numeric event columns of ``parts`` parts (see the module docstring)."""

    def __init__(self, parts: int):
        self._parts = parts
        self._buffers: dict[str, np.ndarray] = {}
        self._used: dict[str, int] = {}

    def adopt(self, part: RankPart) -> None:
        """Copy ``part``'s numeric numpy columns into the buffers; the part then holds views."""
        events = part.events
        columns = {}
        for name in events.columns:
            values = events[name]
            if not isinstance(values.dtype, np.dtype) or values.dtype.kind not in "biuf":
                columns[name] = values
                continue
            columns[name] = self._place(name, values.to_numpy())
        part.events = pd.DataFrame(columns, index=events.index, copy=False)
        part.events.attrs = events.attrs

    def _place(self, name: str, values: np.ndarray) -> np.ndarray:
        buffer = self._buffers.get(name)
        if buffer is None:
            rows = int(len(values) * HEADROOM * self._parts) + len(values)
            try:
                buffer = np.empty(rows, dtype=values.dtype)
            except MemoryError:  # address space refused (strict overcommit): copied at assembly
                buffer = np.empty(0, dtype=values.dtype)
            self._buffers[name] = buffer
            _register(buffer)
            self._used[name] = 0
        used = self._used[name]
        if buffer.dtype != values.dtype or used + len(values) > len(buffer):
            return values  # kept as it is: assembly copies this column
        view = buffer[used : used + len(values)]
        view[:] = values
        self._used[name] = used + len(values)
        return view


def _register(buffer: np.ndarray) -> None:
    key = id(buffer)
    _BUFFERS[key] = weakref.ref(buffer, lambda _ref: _BUFFERS.pop(key, None))


def joined_view(arrays: list[np.ndarray]) -> np.ndarray | None:
    """The ``arrays`` as one writable array without a copy, when they lie one after another in
    one buffer (a :class:`PartArena`'s); else None."""
    if not arrays:
        return None
    base = arrays[0].base
    known = _BUFFERS.get(id(base))
    if known is None or known() is not base or base.dtype != arrays[0].dtype:
        return None
    at = arrays[0].ctypes.data
    start, rem = divmod(at - base.ctypes.data, base.itemsize)
    for a in arrays:
        if a.base is not base or a.ctypes.data != at or not a.flags.c_contiguous:
            return None
        at += a.nbytes
    if rem or start < 0:
        return None
    return base[start : start + sum(len(a) for a in arrays)]
