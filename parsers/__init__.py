"""Readers of profiler formats. Each module exposes ``FORMAT``, ``sniff`` and ``read``.

- ``sniff(path: Path) -> bool``: does this path hold this format? Decided by content (magic
  bytes, JSON keys, table files), never by extension alone; cheap (reads a head only).
- ``read(path: Path) -> list[RankPart]``: the path's ranks as canonical parts
  (:class:`tracediag.model.assembly.RankPart`). Raises :class:`tracediag.model.errors.TraceInputError` naming
  the file and the problem for unusable input; counts repaired rows in ``RankPart.meta``.

A reader is declared here and nowhere else: its module, its import function below and its
line in :data:`READERS`. A reader is imported when a path is first offered to it (or its format
is looked up), so sniffing a Chrome trace, which the Neuron readers see first and the Perfetto
and XPlane readers never, imports no Perfetto, XPlane or protobuf code. A reader whose parse
path is heavy keeps ``FORMAT``, ``sniff`` and the attributes below in a light ``<reader>_sniff``
module, which the reader module re-exports; its parse path is imported on the first ``read``. What the loader and the analysis need to know of a format are optional module
attributes:

- ``NEURON_DEVICE_PROFILE = True``: a Neuron device profile, on a NeuronCore clock, that
  system profiles of the same job are joined onto (``tracediag.loading.system_join``);
- ``DEFAULT_HARDWARE``: the built-in hardware profile (``tracediag.analysis.hardware``) of a
  trace that names none;
- ``rank_units(path) -> list[Path] | None``: the parts of ``path`` that can be read and cached
  one rank at a time, giving together what reading ``path`` gives (``tracediag.loading.read_units``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from types import ModuleType


class Reader:
    """A reader module imported on first use, standing in for it (``reader.sniff``,
    ``reader.read``, ``getattr(reader, "rank_units", None)``, ``reader.__name__``).

    ``load(light)`` imports the reader: its declaration module when ``light`` (the reader module
    itself for a reader without one), else the reader module; it is named after the reader
    module. Attributes are looked up in the declaration first, then in the reader module.
    """

    __slots__ = ("__name__", "_load", "_light", "_module")

    def __init__(self, load: Callable[[bool], ModuleType]) -> None:
        self.__name__ = f"{__name__}.{load.__name__.lstrip('_')}"
        self._load = load
        self._light: ModuleType | None = None
        self._module: ModuleType | None = None

    def module(self) -> ModuleType:
        """The reader module (imported now if not yet)."""
        if self._module is None:
            self._module = self._load(False)
        return self._module

    def __getattr__(self, attr: str):
        if self._light is None:
            self._light = self._load(True)
        found = getattr(self._light, attr, _MISSING)
        if found is not _MISSING:
            return found
        return getattr(self.module(), attr)

    def __repr__(self) -> str:
        return f"<reader {self.__name__}>"


_MISSING = object()

# Each reader's import, as literal import statements (no module is ever imported by a name read
# from input); ``light``: the declaration module where the reader has one.


def _neuron_system_capture(light: bool) -> ModuleType:
    from tracediag.parsers import neuron_system_capture  # light: sniffs by file names

    return neuron_system_capture


def _neuron_system_parquet(light: bool) -> ModuleType:
    if light:
        from tracediag.parsers import neuron_system_parquet_sniff as module
    else:
        from tracediag.parsers import neuron_system_parquet as module
    return module


def _neuron_system_json(light: bool) -> ModuleType:
    if light:
        from tracediag.parsers import neuron_system_json_sniff as module
    else:
        from tracediag.parsers import neuron_system_json as module
    return module


def _neuron_system_runtime(light: bool) -> ModuleType:
    if light:
        from tracediag.parsers import neuron_system_runtime_sniff as module
    else:
        from tracediag.parsers import neuron_system_runtime as module
    return module


def _neuron_parquet(light: bool) -> ModuleType:
    if light:
        from tracediag.parsers import neuron_parquet_sniff as module
    else:
        from tracediag.parsers import neuron_parquet as module
    return module


def _neuron_csv(light: bool) -> ModuleType:
    if light:
        from tracediag.parsers import neuron_csv_sniff as module
    else:
        from tracediag.parsers import neuron_csv as module
    return module


def _neuron_json(light: bool) -> ModuleType:
    if light:
        from tracediag.parsers import neuron_json_sniff as module
    else:
        from tracediag.parsers import neuron_json as module
    return module


def _chrome_json(light: bool) -> ModuleType:
    if light:
        from tracediag.parsers import chrome_json_sniff as module
    else:
        from tracediag.parsers import chrome_json as module
    return module


def _perfetto(light: bool) -> ModuleType:
    if light:
        from tracediag.parsers import perfetto_sniff as module
    else:
        from tracediag.parsers import perfetto as module
    return module


def _xplane(light: bool) -> ModuleType:
    from tracediag.parsers import xplane

    return xplane


def _collective_timeline(light: bool) -> ModuleType:
    from tracediag.parsers import collective_timeline

    return collective_timeline


#: Readers in the order they are tried; the first whose ``sniff`` accepts a path reads it.
#: System profiles go first: a directory of ``SystemProfileEvents`` is also a Parquet profile;
#: raw captures before Perfetto, which would take ``ntrace.pb`` for a (n empty) trace.
READERS = (
    Reader(_neuron_system_capture),
    Reader(_neuron_system_parquet),
    Reader(_neuron_system_json),
    Reader(_neuron_system_runtime),
    Reader(_neuron_parquet),
    Reader(_neuron_csv),
    Reader(_neuron_json),
    Reader(_chrome_json),
    Reader(_perfetto),
    Reader(_xplane),
    Reader(_collective_timeline),
)


class _ByFormat(Mapping):
    """Readers by their ``FORMAT``, found in :data:`READERS` order: looking a format up imports
    only the declarations of the readers tried before it (those sniffing its file imported)."""

    def __getitem__(self, fmt: str) -> Reader:
        for reader in READERS:
            if fmt == reader.FORMAT:
                return reader
        raise KeyError(fmt)

    def __iter__(self) -> Iterator[str]:
        return (reader.FORMAT for reader in READERS)

    def __len__(self) -> int:
        return len(READERS)


#: Readers by their ``FORMAT``.
BY_FORMAT: Mapping[str, Reader] = _ByFormat()
