"""Raw Neuron profiler captures: recognised, and refused with the command that processes them.

A capture directory (``NEURON_RT_INSPECT_OUTPUT_DIR``, profile-artifacts in the Neuron docs)
holds ``ntrace.pb``, ``trace_info.pb``, ``cpu_util.pb``, ``host_mem.pb``, ``.neff`` and
``.ntff`` files, often one level down per process (``<instance>_pid_<pid>/<session>/``). These
are inputs of ``neuron-explorer``, not profiles: ``ntrace.pb`` is protobuf but no Perfetto
trace, so reading it as one would find nothing. This reader accepts such a file or directory
so that no other reader misreads it, and :func:`read` says in one line what to run first.
"""

from __future__ import annotations

from pathlib import Path

from tracediag.model.assembly import RankPart
from tracediag.model.errors import TraceInputError

FORMAT = "neuron-raw-capture"
#: File names only a raw capture holds.
CAPTURE_FILES = ("ntrace.pb", "trace_info.pb", "cpu_util.pb", "host_mem.pb")
CAPTURE_SUFFIXES = (".ntff", ".neff")
#: What to run instead (the official tool's command; json, perfetto or parquet output).
HINT = (
    "a raw Neuron profiler capture (ntrace.pb/.ntff/.neff), not a profile: process it first "
    "with `neuron-explorer view -d {dir} --output-format json` (or perfetto, or parquet) and "
    "give tracediag the output"
)
_DEPTH = 2  # capture files sit up to two levels below the folder given


def is_capture_file(path: Path) -> bool:
    """A file of a raw capture, by its name."""
    name = path.name.lower()
    return name in CAPTURE_FILES or name.endswith(CAPTURE_SUFFIXES)


def _capture_files(path: Path, depth: int) -> list[Path]:
    found = [p for p in path.iterdir() if p.is_file() and is_capture_file(p)]
    if found or depth == 0:
        return found
    for sub in sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith(".")):
        found += _capture_files(sub, depth - 1)
        if found:
            break
    return found


def sniff(path: Path) -> bool:
    """A raw capture file, or a directory with one within two levels and no processed
    output (a ``.json``, ``.pftrace`` or ``.parquet`` beside it)."""
    path = Path(path)
    if path.is_file():
        return is_capture_file(path)
    if not path.is_dir():
        return False
    try:
        processed = any(
            p.suffix.lower() in (".json", ".pftrace", ".parquet", ".gz") for p in path.iterdir()
        )
        return not processed and bool(_capture_files(path, _DEPTH))
    except OSError:
        return False


def read(path: Path) -> list[RankPart]:
    """Never a profile: one line naming the capture and the command to process it."""
    path = Path(path)
    folder = path.parent if path.is_file() else path
    raise TraceInputError(path, HINT.format(dir=folder))
