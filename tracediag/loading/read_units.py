"""Reading the discovered inputs: per read unit, from the cache, in a process pool or on Dask.

A *read unit* is one reader call: an input file, or one rank's directory of a Neuron Parquet
job directory (split so that ranks are read, and cached, separately). The caller hashes the
units and takes cache hits itself (hashing runs in threads, hashlib releases the GIL), so hits
never pay for a worker process or for shipping frames back; only misses are dispatched:

- serially when there is one miss, ``jobs == 1``, or (``jobs`` unset) less input than
  :data:`POOL_MIN_BYTES`, where starting processes costs more than it saves;
- to a process pool of ``min(misses, jobs or cpu_count)`` workers, which write their cache
  entries themselves (same machine, in parallel);
- to a Dask cluster (``scheduler``), whose results the caller caches, as its workers need not
  share this machine's cache directory (the inputs must be on a filesystem they share).

The assembled job is cached as well (see :mod:`tracediag.loading.cache`): a reopen reads one entry.
Errors keep the serial path's form: the first failing unit in input order raises its
:class:`TraceInputError` naming the file as given.
"""

from __future__ import annotations

import contextvars
import importlib
import multiprocessing
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path

from tracediag.loading import cache
from tracediag.model import schema as S
from tracediag.model.assembly import RankPart
from tracediag.model.errors import TraceInputError, UsageError

#: Below this much input (bytes, all units together) an unset ``jobs`` reads serially.
POOL_MIN_BYTES = 16 << 20
#: Seconds to wait for a Dask scheduler before saying it is unreachable.
CONNECT_TIMEOUT_S = 5
# Processes the reader of the file being read in this process may start (helper_processes).
_HELPERS: contextvars.ContextVar[int] = contextvars.ContextVar("reader_helpers", default=0)


@dataclass
class Unit:
    """One reader call: ``path`` as the user gave it (or a rank directory under it)."""

    entry: int  # index of the discovered (path, reader) pair it belongs to
    path: Path
    reader: object  # a reader module (see tracediag.parsers)
    key: str | None = None  # cache entry name; None when the cache is off


def split_units(found: Sequence[tuple[Path, object]]) -> list[Unit]:
    """One unit per discovered pair, except a Neuron Parquet job directory: one per rank.

    A job directory is split only when every profile's name states its rank (``rank_3``), as
    then reading each profile alone gives exactly what reading the parent gives; a profile
    numbered by directory order or Metadata needs its siblings, so that parent is read whole.
    """
    from tracediag.parsers import neuron_parquet
    from tracediag.parsers.neuron_common import natural_key, rank_from_name
    from tracediag.parsers.neuron_parquet_tables import is_profile_dir

    units = []
    for i, (path, reader) in enumerate(found):
        if reader is neuron_parquet and not is_profile_dir(path):
            children = sorted(
                (c for c in path.iterdir() if not c.name.startswith(".")),
                key=lambda c: natural_key(c.name),
            )
            profiles = [c for c in children if is_profile_dir(c)]
            if profiles and all(rank_from_name(c.name) is not None for c in profiles):
                units += [Unit(i, c, reader) for c in profiles]
                continue
        units.append(Unit(i, path, reader))
    return units


def read_unit(
    given: str, absolute: str, reader_name: str, cache_dir: str | None, key: str | None
) -> tuple[str, object]:
    """Read one unit in a worker: ``("ok", parts)`` or ``("error", (path, problem))``.

    Workers get absolute paths (their working directory may differ) and put the path as given
    back into what they return. Errors travel as plain tuples: an exception whose constructor
    takes other arguments than its message does not survive pickling.
    """
    reader = importlib.import_module(reader_name)
    try:
        parts = reader.read(Path(absolute))
    except TraceInputError as exc:
        return "error", (_as_given(exc.path, absolute, given), exc.problem)
    for part in parts:
        part.meta.sources = [_as_given(s, absolute, given) for s in part.meta.sources]
    if key is not None and cache_dir is not None:
        cache.store_parts(key, parts, Path(cache_dir))
    return "ok", parts


def _as_given(text: str, absolute: str, given: str) -> str:
    return given + text[len(absolute) :] if text.startswith(absolute) else text


def read_trace(
    found: Sequence[tuple[Path, object]],
    assemble_job: Callable[[Sequence[tuple[Path, object]], list[list[RankPart]]], S.Trace],
    *,
    cache_enabled: bool = True,
    jobs: int | None = None,
    scheduler: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> S.Trace:
    """The trace ``assemble_job`` makes of the parts of every discovered ``(path, reader)``.

    With the cache, the assembled trace is cached too (under the keys of all its units), as
    assembling costs more than reading it back; a changed file re-reads only its own unit.
    ``progress`` hears ``reading PATH (FORMAT)`` once per pair, when its parts are awaited.
    """
    say = progress or (lambda _msg: None)
    if jobs is not None and jobs < 1:
        raise UsageError("--jobs must be at least 1")
    units = split_units(found)
    root = cache.cache_root() if cache_enabled else None
    job_key = None
    if root is not None:
        _assign_keys(units, jobs)
        inputs = [f"{path}\0{reader.FORMAT}" for path, reader in found]
        job_key = cache.combined_key(["job", *inputs, *(u.key for u in units)])
        trace = cache.load_trace(job_key, root)
        if trace is not None:
            for path, reader in found:
                say(f"reading {path} ({reader.FORMAT})")
            return trace
    trace = assemble_job(found, _read_units(found, units, root, jobs, scheduler, say))
    if job_key is not None:
        cache.store_trace(job_key, trace, root)
    return trace


def _read_units(
    found: Sequence[tuple[Path, object]],
    units: list[Unit],
    root: Path | None,
    jobs: int | None,
    scheduler: str | None,
    say: Callable[[str], None],
) -> list[list[RankPart]]:
    """The parts of every pair, in order (a pair without any is an error, as is the first
    failing read in input order)."""
    results: list[list[RankPart] | None] = [None] * len(units)
    for i, unit in enumerate(units):
        if unit.key is not None:
            results[i] = cache.load_parts(unit.key, root)
    misses = [i for i, got in enumerate(results) if got is None]
    client = _dask_client(scheduler) if scheduler is not None and misses else None
    pending = _dispatch(units, misses, root, jobs, client)
    per_entry: list[list[RankPart]] = [[] for _ in found]
    announced = set()
    last_unit = {unit.entry: i for i, unit in enumerate(units)}
    try:
        for i, unit in enumerate(units):
            if unit.entry not in announced:
                path, reader = found[unit.entry]
                say(f"reading {path} ({reader.FORMAT})")
                announced.add(unit.entry)
            if results[i] is None:
                results[i] = _outcome(
                    pending.get(i), unit, remote=scheduler is not None, root=root, jobs=jobs
                )
            per_entry[unit.entry] += results[i]
            if i == last_unit[unit.entry] and not per_entry[unit.entry]:
                raise TraceInputError(found[unit.entry][0], "no events")
    finally:
        for fut in pending.values():
            fut.cancel()
        if client is not None:
            client.close()
    return per_entry


def _assign_keys(units: list[Unit], jobs: int | None) -> None:
    """Hash every unit (threads when several: hashing is I/O and GIL-free)."""
    workers = min(len(units), jobs or os.cpu_count() or 1)
    if workers > 1:
        with ThreadPoolExecutor(workers) as pool:
            digests = list(pool.map(lambda u: cache.content_hash(u.path), units))
    else:
        digests = [cache.content_hash(u.path) for u in units]
    for unit, digest in zip(units, digests, strict=True):
        unit.key = cache.cache_key(unit.path, unit.reader.FORMAT, digest)


def _dispatch(
    units: list[Unit], misses: list[int], root: Path | None, jobs: int | None, client
) -> dict[int, Future]:
    """Futures of the misses' outcomes by unit index (empty: read serially, on demand)."""
    if client is not None:
        # pure=False: a file rewritten in place must be read again, never deduplicated.
        return {
            i: client.submit(read_unit, *_worker_args(units[i], None), pure=False) for i in misses
        }
    workers = min(len(misses), jobs or os.cpu_count() or 1)
    if workers < 2 or (jobs is None and _input_bytes(units, misses) < POOL_MIN_BYTES):
        return {}
    pool = ProcessPoolExecutor(workers, mp_context=start_context())
    futures = {i: pool.submit(read_unit, *_worker_args(units[i], root)) for i in misses}
    pool.shutdown(wait=False)  # workers exit once the submitted reads are done
    return futures


def _worker_args(unit: Unit, root: Path | None) -> tuple:
    absolute = unit.path if unit.path.is_absolute() else Path.cwd() / unit.path
    return (
        str(unit.path),
        str(absolute),
        unit.reader.__name__,
        str(root) if root is not None else None,
        unit.key if root is not None else None,
    )


def helper_processes() -> int:
    """How many processes a reader may start to share the work of one file: ``jobs`` (or the
    CPU count) while files are read one at a time in this process; 0 elsewhere (in pool
    workers, and for readers called directly). Below 2 a reader works alone."""
    return _HELPERS.get()


def _outcome(
    fut: Future | None, unit: Unit, *, remote: bool, root: Path | None, jobs: int | None
) -> list:
    """A unit's parts: awaited from its future, or read here when it has none."""
    if fut is None:
        token = _HELPERS.set(jobs or os.cpu_count() or 1)
        try:
            parts = unit.reader.read(unit.path)
        finally:
            _HELPERS.reset(token)
        if unit.key is not None:
            cache.store_parts(unit.key, parts, root)
        return parts
    try:
        status, value = fut.result()
    except BrokenProcessPool:
        raise TraceInputError(unit.path, "the reading process died (out of memory?)") from None
    if status == "error":
        raise TraceInputError(*value)
    if remote and unit.key is not None:
        cache.store_parts(unit.key, value, root)
    return value


def _input_bytes(units: list[Unit], which: list[int]) -> int:
    total = 0
    for i in which:
        path = units[i].path
        files = [path] if path.is_file() else (p for p in path.rglob("*") if p.is_file())
        total += sum(f.stat().st_size for f in files)
    return total


def _dask_client(address: str):
    """A Dask distributed client of ``address``; a one-line usage error when it cannot be."""
    try:
        from distributed import Client
    except ImportError:
        raise UsageError(
            "--scheduler needs Dask distributed: pip install 'tracediag[dask]'"
        ) from None
    try:
        return Client(address, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
    except (OSError, TimeoutError, ValueError, TypeError) as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise UsageError(f"--scheduler {address}: cannot connect: {reason}") from None


def start_context():
    """``fork`` (workers start in milliseconds) unless other threads run, as in the TUI, where
    a forked child could inherit a lock another thread holds; then a preloaded forkserver."""
    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    if "forkserver" in methods:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["tracediag.parsers"])
        return ctx
    return multiprocessing.get_context("spawn")
