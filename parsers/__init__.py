"""Readers of profiler formats. Each module exposes ``FORMAT``, ``sniff`` and ``read``.

- ``sniff(path: Path) -> bool``: does this path hold this format? Decided by content (magic
  bytes, JSON keys, table files), never by extension alone; cheap (reads a head only).
- ``read(path: Path) -> list[RankPart]``: the path's ranks as canonical parts
  (:class:`tracediag.model.assembly.RankPart`). Raises :class:`tracediag.model.errors.TraceInputError` naming
  the file and the problem for unusable input; counts repaired rows in ``RankPart.meta``.

A reader is declared here and nowhere else: its module, and its line in :data:`READERS`. What
the loader and the analysis need to know of a format are optional module attributes:

- ``NEURON_DEVICE_PROFILE = True``: a Neuron device profile, on a NeuronCore clock, that
  system profiles of the same job are joined onto (``tracediag.loading.system_join``);
- ``DEFAULT_HARDWARE``: the built-in hardware profile (``tracediag.analysis.hardware``) of a
  trace that names none;
- ``rank_units(path) -> list[Path] | None``: the parts of ``path`` that can be read and cached
  one rank at a time, giving together what reading ``path`` gives (``tracediag.loading.read_units``).
"""

from __future__ import annotations

from tracediag.parsers import (
    chrome_json,
    collective_timeline,
    neuron_csv,
    neuron_json,
    neuron_parquet,
    neuron_system_capture,
    neuron_system_json,
    neuron_system_parquet,
    neuron_system_runtime,
    perfetto,
    xplane,
)

#: Readers in the order they are tried; the first whose ``sniff`` accepts a path reads it.
#: System profiles go first: a directory of ``SystemProfileEvents`` is also a Parquet profile;
#: raw captures before Perfetto, which would take ``ntrace.pb`` for a (n empty) trace.
READERS = (
    neuron_system_capture,
    neuron_system_parquet,
    neuron_system_json,
    neuron_system_runtime,
    neuron_parquet,
    neuron_csv,
    neuron_json,
    chrome_json,
    perfetto,
    xplane,
    collective_timeline,
)
#: Readers by their ``FORMAT``.
BY_FORMAT = {reader.FORMAT: reader for reader in READERS}
