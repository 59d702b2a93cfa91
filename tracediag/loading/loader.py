"""From user paths to one aligned canonical trace: detect, read, assemble, align."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

from tracediag.loading.system_join import join_system_profiles
from tracediag.model import schema as S
from tracediag.model.assembly import RankPart, assemble
from tracediag.model.errors import TraceInputError
from tracediag.model.wording import plural

Progress = Callable[[str], None]


def _natural_key(p: Path) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", p.name)]


def _reader_for(path: Path):
    from tracediag.parsers import READERS

    for reader in READERS:
        if reader.sniff(path):
            return reader.module()  # the reader module itself, imported now
    return None


def discover(paths: Iterable[str | Path]) -> tuple[list[tuple[Path, object]], list[Path]]:
    """Map user paths to (path, reader) pairs.

    A path a reader accepts is read as is (a Neuron profile directory, a trace file). Another
    directory is expanded one level (``rank_0/``, ``profile_rank_1/``, per-rank files) and its
    children are sniffed; a child folder holding exactly one legacy Neuron JSON
    (``profile_rank_3/ntff.json``) stands for that file; children nobody reads are returned as
    skipped, so the caller can say so.
    A file the user named that no reader accepts is an error.
    """
    found: list[tuple[Path, object]] = []
    skipped: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise TraceInputError(path, "no such file or directory")
        if path.is_file() and path.stat().st_size == 0:
            raise TraceInputError(path, "empty file")
        reader = _reader_for(path)
        if reader is not None:
            found.append((path, reader))
            continue
        if path.is_dir():
            children = sorted(
                (c for c in path.iterdir() if not c.name.startswith(".")), key=_natural_key
            )
            for child in children:
                child_reader = _reader_for(child)
                if child_reader is None and child.is_dir():
                    child, child_reader = _per_rank_file(child) or (child, None)
                if child_reader is None:
                    skipped.append(child)
                else:
                    found.append((child, child_reader))
            if not any(p.is_relative_to(path) for p, _ in found):
                raise TraceInputError(
                    path,
                    "directory holds no trace this tool can read"
                    + (f"; {skipped_text(children)}" if children else " (it is empty)"),
                )
            continue
        raise TraceInputError(
            path,
            "unknown format (expected a Neuron Explorer Parquet profile directory, Neuron JSON, "
            "Chrome/Kineto trace JSON, Perfetto, XPlane or a collective timeline)",
        )
    return found, skipped


#: Formats written one file per rank folder (``profile_rank_3/ntff.json``: the legacy JSON's
#: default name inside a folder per worker), read from a parent folder one level further down.
_PER_RANK_FOLDER_FORMATS = ("neuron-json",)


def _per_rank_file(folder: Path) -> tuple[Path, object] | None:
    """The one trace of ``folder`` when it holds exactly one, in a per-rank-folder format."""
    readable = [
        (c, r)
        for c in folder.iterdir()
        if c.is_file() and not c.name.startswith(".") and (r := _reader_for(c)) is not None
    ]
    if len(readable) == 1 and readable[0][1].FORMAT in _PER_RANK_FOLDER_FORMATS:
        return readable[0]
    return None


#: How many skipped names a message lists before "and N more".
_MAX_NAMED = 5


def _names(paths: list[Path]) -> str:
    shown = ", ".join(p.name + ("/" if p.is_dir() else "") for p in paths[:_MAX_NAMED])
    return shown + (f" and {len(paths) - _MAX_NAMED} more" if len(paths) > _MAX_NAMED else "")


def skipped_text(paths: Iterable[str | Path]) -> str:
    """What discovery did not read, and why, in one phrase: directories that hold traces of their
    own (read one level down only: name such a directory to read it), other directories, and
    files no reader accepts, each with up to five names."""
    paths = [Path(p) for p in paths]
    dirs = [p for p in paths if p.is_dir()]
    traces = [
        d for d in dirs if any(_reader_for(c) for c in d.iterdir() if not c.name.startswith("."))
    ]
    parts = []
    if traces:
        parts.append(
            f"{plural(len(traces), 'directory', 'directories')} of traces ({_names(traces)}), read only when "
            "named: a job is one directory"
        )
    others = [d for d in dirs if d not in traces]
    if others:
        parts.append(
            f"{plural(len(others), 'directory', 'directories')} with no trace ({_names(others)})"
        )
    files = [p for p in paths if not p.is_dir()]
    if files:
        parts.append(f"{plural(len(files), 'file')} no reader accepts ({_names(files)})")
    return "not read: " + "; ".join(parts)


def _resolve_rank_collisions(parts: list[RankPart]) -> None:
    """Ranks a file did not state (``rank_source == 'default'``) take the next free numbers."""
    taken: dict[int, str] = {}
    defaulted = []
    for part in parts:
        if part.meta.info.get("rank_source") in ("default", "directory order"):
            defaulted.append(part)
            continue
        if part.meta.rank in taken:
            raise TraceInputError(
                part.meta.sources[0] if part.meta.sources else "?",
                f"rank {part.meta.rank} is also given by {taken[part.meta.rank]}",
            )
        taken[part.meta.rank] = part.meta.sources[0] if part.meta.sources else "?"
    nxt = 0
    for part in defaulted:
        if part.meta.rank in taken:
            while nxt in taken:
                nxt += 1
            part.meta.rank = nxt
            part.meta.info["rank_source"] = "input order"
        taken[part.meta.rank] = part.meta.sources[0] if part.meta.sources else "?"


#: Ranks are stored as int32; a larger number is a damaged name or field, not a job's rank.
MAX_RANK = 2**31 - 1


def _check_rank_range(parts: list[RankPart]) -> None:
    for part in parts:
        if not 0 <= part.meta.rank <= MAX_RANK:
            raise TraceInputError(
                part.meta.sources[0] if part.meta.sources else "?",
                f"rank {part.meta.rank} is out of range (0 to {MAX_RANK}; from "
                f"{part.meta.info.get('rank_source', 'the file')})",
            )


def _merge_summaries(parts: list[RankPart]) -> list[RankPart]:
    """Fold summary-only parts (summary-json) into the device part of the same rank, if given."""
    summaries = [p for p in parts if p.meta.info.get("summary_only")]
    devices = {p.meta.rank: p for p in parts if not p.meta.info.get("summary_only")}
    kept = [p for p in parts if not p.meta.info.get("summary_only")]
    for s in summaries:
        target = devices.get(s.meta.rank)
        if target is None:
            kept.append(s)  # a rank with metrics but no events: reported, not analysed
            continue
        target.meta.info["subgraph_summaries"] = s.meta.summary
        target.meta.sources += s.meta.sources
    return kept


def assemble_job(found: list[tuple[Path, object]], read: list[list[RankPart]]) -> S.Trace:
    """One trace from the parts ``read`` from each discovered ``(path, reader)`` pair."""
    parts: list[RankPart] = []
    inputs: list[S.InputFile] = []
    for (path, reader), got in zip(found, read, strict=True):
        parts.extend(got)
        inputs.append(S.InputFile(str(path), reader.FORMAT, [p.meta.rank for p in got]))
    parts = _merge_summaries(parts)
    parts = join_system_profiles(parts)  # host-side system profiles onto their device parts
    _check_rank_range(parts)
    _resolve_rank_collisions(parts)
    for inp, _ in zip(inputs, found, strict=True):
        inp.ranks = [
            p.meta.rank for p in parts if p.meta.sources and p.meta.sources[0] == inp.path
        ] or inp.ranks
    try:
        trace = assemble(parts, inputs)
    except S.SchemaError as exc:
        raise TraceInputError(", ".join(i.path for i in inputs), f"invalid trace: {exc}") from None
    return trace


def load(
    paths: Iterable[str | Path],
    *,
    align: bool = True,
    progress: Progress | None = None,
    cache: bool = True,
    jobs: int | None = None,
    scheduler: str | None = None,
) -> S.Trace:
    """Read every path, assemble one canonical trace and align its ranks' clocks.

    ``cache``: reuse and fill the columnar cache of reader output (:mod:`tracediag.loading.cache`).
    ``jobs``: reader processes (None: one per input up to the CPU count, serial for small
    inputs; 1: serial). ``scheduler``: a Dask scheduler address to read on instead.
    """
    from tracediag.loading.read_units import read_trace

    say = progress or (lambda _msg: None)
    found, skipped = discover(paths)
    trace = read_trace(
        found, assemble_job, cache_enabled=cache, jobs=jobs, scheduler=scheduler, progress=say
    )
    trace.skipped = [str(p) for p in skipped]
    if align:
        from tracediag.loading.clock_alignment import align_clocks
        from tracediag.loading.collective_matching import (
            separate_early_finishers,
            split_mismatched,
        )

        say("aligning clocks")
        align_clocks(trace)
        split_mismatched(trace)
        separate_early_finishers(trace)
    return trace


def stderr_progress(msg: str) -> None:
    """Progress lines on stderr (the CLI's default for long loads)."""
    print(f"tracediag: {msg}", file=sys.stderr, flush=True)
