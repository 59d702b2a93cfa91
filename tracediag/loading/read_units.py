"""Reading the discovered inputs: per read unit, from the cache, in a process pool or on Dask.

A *read unit* is one reader call: an input file, or one rank's directory of a Neuron Parquet
job directory (split so that ranks are read, and cached, separately). The caller hashes the
units and takes cache hits itself (hashing runs in threads, hashlib releases the GIL), so hits
never pay for a worker process or for shipping frames back; only misses are dispatched:

- serially when there is one miss, ``jobs == 1``, or (``jobs`` unset) less input than
  :data:`POOL_MIN_BYTES`, where starting processes costs more than it saves, or a machine of
  :data:`SERIAL_AT_CORES` cores or fewer, unless its readers declare ``POOL_ON_FEW_CORES``
  (Neuron Parquet, whose ranks pay for their workers even there);
- to a process pool of ``min(misses, jobs or cpu_count)`` workers, which write their cache
  entries themselves (same machine, in parallel);
- to a Dask cluster (``scheduler``), whose results the caller caches, as its workers need not
  share this machine's cache directory (the inputs must be on a filesystem they share).

The assembled job is cached as well (see :mod:`tracediag.loading.cache`): a reopen reads one entry.
Errors keep the serial path's form: the first failing unit in input order raises its
:class:`TraceInputError` naming the file as given.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path

from tracediag.io import worker_pool
from tracediag.io.release_memory import inputs_are_big
from tracediag.loading import cache
from tracediag.model import schema as S
from tracediag.model.assembly import RankPart
from tracediag.model.errors import TraceInputError, UsageError
from tracediag.model.part_arena import PartArena

#: Below this much input (bytes, all units together) an unset ``jobs`` reads serially.
POOL_MIN_BYTES = 16 << 20
#: On this few cores an unset ``jobs`` reads serially, unless the readers declare
#: ``POOL_ON_FEW_CORES``: the workers' fresh heaps, pickling the parts and unpickling them in the
#: main process cost about what the parallel reads gain. Neuron Parquet pays: the clean-room
#: writer's jobs on 2 cores, `report --no-cache` alternating, reading in 2 worker processes
#: against 2 threads: 64 ranks x 100k instructions 37.8-38.7 s against 45.1-46.1 s, 4 x 1M
#: 18.0-19.7 s (median 18.35) against 18.4-21.5 s (median 18.78) with a peak of 3.33-3.44 GB
#: against 3.74-3.83 GB (the reads' garbage stays in the workers' heaps). Threads had read 4 x 1M
#: in 4.7 s against 7.75 s serially, but the per-rank parsing holds the GIL for much of it.
SERIAL_AT_CORES = 2
#: Seconds to wait for a Dask scheduler before saying it is unreachable.
CONNECT_TIMEOUT_S = 5


@dataclass
class Unit:
    """One reader call: ``path`` as the user gave it (or a rank directory under it)."""

    entry: int  # index of the discovered (path, reader) pair it belongs to
    path: Path
    reader: object  # a reader module (see tracediag.parsers)
    key: str | None = None  # cache entry name; None when the cache is off


def split_units(found: Sequence[tuple[Path, object]]) -> list[Unit]:
    """One unit per discovered pair, except where the reader splits a path into ranks that
    read alone give what the whole gives (its ``rank_units``: a Neuron Parquet job directory
    whose profiles state their ranks): one unit per rank, each read and cached separately."""
    units = []
    for i, (path, reader) in enumerate(found):
        split = getattr(reader, "rank_units", None)
        ranks = split(path) if split is not None else None
        units += [Unit(i, p, reader) for p in ranks] if ranks else [Unit(i, path, reader)]
    return units


def read_unit(
    given: str, absolute: str, reader_name: str, cache_dir: str | None, key: str | None
) -> tuple[str, object]:
    """Read one unit in a worker: ``("ok", parts)`` or ``("error", (path, problem))``.

    Workers get absolute paths (their working directory may differ) and put the path as given
    back into what they return. Errors travel as plain tuples: an exception whose constructor
    takes other arguments than its message does not survive pickling.
    """
    # Looked up among the readers, not imported by name: no read path imports code by name.
    from tracediag.parsers import READERS

    (reader,) = (r for r in READERS if r.__name__ == reader_name)
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
        trace = cache.load_trace(job_key, root, note=say)
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
            results[i] = cache.load_parts(unit.key, root, note=say)
    misses = [i for i, got in enumerate(results) if got is None]
    client = _dask_client(scheduler) if scheduler is not None and misses else None
    pending = _dispatch(units, misses, root, jobs, client)
    per_entry: list[list[RankPart]] = [[] for _ in found]
    # Several units' numeric columns gathered as they arrive: assembly then copies none.
    arena = PartArena(len(units)) if len(units) > 1 else None
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
            if arena is not None:
                for part in results[i]:
                    arena.adopt(part)
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
    if workers < 2 or not _pooled(units, misses, jobs):
        return {}
    pool = ProcessPoolExecutor(workers, mp_context=worker_pool.start_context())
    futures = {i: pool.submit(read_unit, *_worker_args(units[i], root)) for i in misses}
    pool.shutdown(wait=False)  # workers exit once the submitted reads are done
    return futures


def _pooled(units: list[Unit], misses: list[int], jobs: int | None) -> bool:
    """Whether the misses are read in a process pool (module docstring), else serially."""
    if jobs is not None:
        return True
    if not inputs_are_big([str(units[i].path) for i in misses], POOL_MIN_BYTES):
        return False
    if (os.cpu_count() or 1) > SERIAL_AT_CORES:
        return True
    return all(getattr(units[i].reader, "POOL_ON_FEW_CORES", False) for i in misses)


def _worker_args(unit: Unit, root: Path | None) -> tuple:
    absolute = unit.path if unit.path.is_absolute() else Path.cwd() / unit.path
    return (
        str(unit.path),
        str(absolute),
        unit.reader.__name__,
        str(root) if root is not None else None,
        unit.key if root is not None else None,
    )


def _outcome(
    fut: Future | None, unit: Unit, *, remote: bool, root: Path | None, jobs: int | None
) -> list:
    """A unit's parts: awaited from its future, or read here when it has none."""
    if fut is None:
        with worker_pool.reader_helpers(jobs or os.cpu_count() or 1):
            parts = unit.reader.read(unit.path)
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
