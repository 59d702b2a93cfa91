"""Readers of profiler formats. Each module exposes ``FORMAT``, ``sniff`` and ``read``.

- ``sniff(path: Path) -> bool``: does this path hold this format? Decided by content (magic
  bytes, JSON keys, table files), never by extension alone; cheap (reads a head only).
- ``read(path: Path) -> list[RankPart]``: the path's ranks as canonical parts
  (:class:`tracediag.model.assembly.RankPart`). Raises :class:`tracediag.model.errors.TraceInputError` naming
  the file and the problem for unusable input; counts repaired rows in ``RankPart.meta``.
"""

from __future__ import annotations

from tracediag.parsers import (
    chrome_json,
    collective_timeline,
    neuron_json,
    neuron_parquet,
    neuron_system_json,
    neuron_system_parquet,
    perfetto,
    xplane,
)

#: Readers in the order they are tried; the first whose ``sniff`` accepts a path reads it.
#: System profiles go first: a directory of ``SystemProfileEvents`` is also a Parquet profile.
READERS = (
    neuron_system_parquet,
    neuron_system_json,
    neuron_parquet,
    neuron_json,
    chrome_json,
    perfetto,
    xplane,
    collective_timeline,
)
