"""The declaration of :mod:`tracediag.parsers.neuron_parquet`: its ``FORMAT``, attributes and ``sniff``,
importable without its parse path (the registry sniffs with this module; the reader module is
imported on the first read).
"""

from __future__ import annotations

from pathlib import Path

from tracediag.io.files import head
from tracediag.model.errors import TraceInputError
from tracediag.parsers.neuron_common import natural_key
from tracediag.parsers.neuron_parquet_files import is_profile_dir
from tracediag.parsers.neuron_parquet_profiles import data_path_profiles_dir

FORMAT = "neuron-parquet"
#: A device profile on a NeuronCore clock: the loader joins system profiles onto it.
NEURON_DEVICE_PROFILE = True
#: The hardware a profile that names none ran on (the documented default target).
DEFAULT_HARDWARE = "trn1"
#: Ranks are read in worker processes even on 2 cores (tracediag.loading.read_units): the
#: per-rank parsing holds the GIL for much of its time, and a part pickles back cheaply.
POOL_ON_FEW_CORES = True
#: File suffixes of other trace formats: a parent directory holding one beside its profiles is
#: left to the loader's one-level expansion, so that those files are read too.
_OTHER_TRACE_SUFFIXES = (".json", ".json.gz", ".pftrace", ".perfetto-trace", ".pb", ".pb.gz")


def sniff(path: Path) -> bool:
    """A profile directory, a directory of profile directories and no other trace file, or an
    Explorer data path (``profiles/global/<name>@latest/``)."""
    path = Path(path)
    return is_profile_dir(path) or bool(_profile_children(_profiles_root(path)))


def _profiles_root(path: Path) -> Path:
    """``path/profiles/global`` for a data path, else ``path``."""
    if not path.is_dir() or is_profile_dir(path):
        return path
    return data_path_profiles_dir(path) or path


def _profile_children(path: Path) -> list[Path]:
    if not path.is_dir():
        return []
    children = sorted(
        (c for c in path.iterdir() if not c.name.startswith(".")), key=lambda c: natural_key(c.name)
    )
    profiles = [c for c in children if is_profile_dir(c)]
    if any(c.is_file() and _is_other_trace(c) for c in children):
        return []
    return profiles


def _is_other_trace(path: Path) -> bool:
    if path.name.lower().endswith(_OTHER_TRACE_SUFFIXES):
        return True
    try:
        return head(path, 64).lstrip()[:1] in (b"{", b"[")
    except TraceInputError:
        return False
