"""The Python API: load traces into a :class:`Job`, diagnose it, open the TUI on it.

For notebooks and scripts; the CLI and the TUI run on the same functions underneath, so a
:class:`Diagnosis` here says exactly what ``tracediag report`` says::

    >>> import tracediag
    >>> job = tracediag.load("profiles/")                 # doctest: +SKIP
    >>> job.events.groupby("rank").size()                 # doctest: +SKIP
    >>> d = tracediag.diagnose(job, {"ignore": ["TRC"]})  # doctest: +SKIP
    >>> d.findings_df[["code", "ranks", "saving_ns"]]     # doctest: +SKIP
    >>> d.to_json() == open("report.json").read()         # doctest: +SKIP

What-if questions of your own are in :mod:`tracediag.whatif.user_changes` (``tracediag.what_if``).
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Iterable, Mapping
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np
import pandas as pd

from tracediag.analysis.context import Analysis, analyse
from tracediag.engine.config import Config, from_mapping, load_config
from tracediag.engine.diagnose import diagnose as engine_diagnose
from tracediag.engine.diagnosis import Diagnosis
from tracediag.loading.loader import load as load_trace
from tracediag.loading.loader import stderr_progress
from tracediag.model import schema as S

if TYPE_CHECKING:
    from tracediag.tui.app import TracediagApp
    from tracediag.whatif.user_changes import Change, WhatIfResult

PathLike: TypeAlias = str | os.PathLike[str]
#: What ``config=`` accepts: nothing (defaults), a Config, a ``[tool.tracediag]``-like mapping,
#: or the path of a tracediag.toml / pyproject.toml.
ConfigLike: TypeAlias = Config | Mapping[str, Any] | PathLike | None


def _paths(paths: PathLike | Iterable[PathLike]) -> list[str]:
    if isinstance(paths, str | os.PathLike):
        return [os.fspath(paths)]
    out = [os.fspath(p) for p in paths]
    if not out:
        raise ValueError("no trace path given")
    return out


def _strings_as_categories(df: pd.DataFrame) -> pd.DataFrame:
    """A shallow copy (no data copied) whose object columns of strings are categorical."""
    out = df.copy(deep=False)
    for col in out.columns:
        if out[col].dtype == object:
            out[col] = out[col].astype("category")
    return out


class Job:
    """An aligned multi-rank trace, as loaded by :func:`load`.

    The tables are the canonical trace's own data (see ``tracediag/model/schema.py``), not copies:
    times are int64 ns on rank 0's aligned clock, strings are categorical, event ids are row
    positions of :attr:`events` (``edges.src``, ``collectives.event`` refer to them).

    >>> job = tracediag.load(["rank0.json.gz", "rank1.json.gz"])           # doctest: +SKIP
    >>> job.events.query("kind == 'compute'").groupby("rank").dur_ns.sum()  # doctest: +SKIP
    >>> job.ranks_info[["format", "clock_offset_ns"]]                       # doctest: +SKIP
    """

    def __init__(self, trace: S.Trace) -> None:
        self.trace = trace  #: the canonical :class:`tracediag.model.schema.Trace` underneath

    def __repr__(self) -> str:
        formats = sorted({m.format for m in self.trace.meta.values()})
        return (
            f"<Job {len(self.ranks)} ranks, {len(self.trace.events)} events, "
            f"{len(self.trace.tracks)} tracks, {', '.join(formats)}>"
        )

    def __len__(self) -> int:
        return len(self.trace.events)

    @property
    def ranks(self) -> list[int]:
        """The ranks present, sorted."""
        return self.trace.ranks

    @cached_property
    def events(self) -> pd.DataFrame:
        """One row per event: rank, track, kind, name, ts_ns, dur_ns and optional columns
        (bytes, flops, wait_ns, layer, op, ...). A view of the trace's table: the columns share
        its memory, and writing to this frame does not change the trace (copy-on-write)."""
        return self.trace.events.copy(deep=False)

    @cached_property
    def tracks(self) -> pd.DataFrame:
        """One row per serial resource (row position = ``events.track``): rank, name, kind,
        engine, device, clock."""
        return _strings_as_categories(self.trace.tracks)

    @cached_property
    def edges(self) -> pd.DataFrame:
        """Dependencies the formats record: src, dst (event ids), kind, and the ranks of both
        ends (``src_rank``, ``dst_rank``)."""
        rank = self.trace.events[S.RANK].to_numpy()
        ed = self.trace.edges.copy(deep=False)
        ed["src_rank"] = rank[ed[S.SRC].to_numpy()]
        ed["dst_rank"] = rank[ed[S.DST].to_numpy()]
        return ed

    @cached_property
    def collectives(self) -> pd.DataFrame:
        """One row per (collective instance, rank): coll_key, rank, event, op, group, seq,
        bytes, arrival_ns, start_ns, end_ns, algorithm, ..."""
        return _strings_as_categories(self.trace.collectives)

    @property
    def meta(self) -> dict[int, S.RankMeta]:
        """Per rank: its :class:`tracediag.model.schema.RankMeta` (format, hardware, offset, repairs)."""
        return self.trace.meta

    @cached_property
    def ranks_info(self) -> pd.DataFrame:
        """Per rank (index ``rank``): format, hardware, clock, clock_offset_ns (added by
        alignment), events, repaired_rows, repairs (rows repaired or dropped, by reason) and the
        source files."""
        counts = np.bincount(
            self.trace.events[S.RANK].to_numpy(), minlength=max(self.ranks, default=-1) + 1
        )
        rows = [
            {
                "rank": r,
                "format": m.format,
                "hardware": m.hardware,
                "clock": str(m.info.get("clock", "")),
                "clock_offset_ns": int(m.clock_offset_ns),
                "events": int(counts[r]) if r < len(counts) else 0,
                "repaired_rows": int(sum(m.repairs.values())),
                "repairs": dict(m.repairs),
                "sources": list(m.sources),
            }
            for r, m in sorted(self.trace.meta.items())
        ]
        columns = ["rank", "format", "hardware", "clock", "clock_offset_ns", "events"]
        columns += ["repaired_rows", "repairs", "sources"]
        return pd.DataFrame(rows, columns=columns).set_index("rank")

    @cached_property
    def files(self) -> pd.DataFrame:
        """The inputs as given: path, format it was read as, ranks it holds."""
        return pd.DataFrame(
            [(i.path, i.format, list(i.ranks)) for i in self.trace.inputs],
            columns=["path", "format", "ranks"],
        )

    @property
    def skipped(self) -> list[str]:
        """Files found in input directories that no reader accepts."""
        return list(self.trace.skipped)

    @cached_property
    def analysis(self) -> Analysis:
        """The dependency graph, critical path and breakdowns (built on first use, then kept)."""
        return analyse(self.trace)

    def diagnose(self, config: ConfigLike = None) -> Diagnosis:
        """``tracediag.diagnose(self, config)``."""
        return diagnose(self, config)

    def what_if(self, change: Change) -> WhatIfResult:
        """``tracediag.what_if(self, change)``."""
        from tracediag.whatif.user_changes import what_if

        return what_if(self, change)

    def tui(self, config: ConfigLike = None) -> None:
        """Diagnose the job and open the terminal UI on it (returns when you quit it)."""
        open_tui(self, config)


def load(paths: PathLike | Iterable[PathLike], **options: Any) -> Job:
    """Read trace files or directories into one aligned :class:`Job`.

    ``paths``: a path or a list of them (a Neuron profile directory, per-rank files, a folder
    of them, in any format ``tracediag`` reads). ``options`` go to the loader
    (:func:`tracediag.loading.loader.load`), e.g. ``align=False`` to keep each rank's clock as recorded,
    ``progress=True`` for progress lines on stderr (or a callable taking each line).
    Raises :class:`tracediag.TraceInputError` naming the file for unreadable input, and
    TypeError for an option the loader does not take.

    >>> job = tracediag.load("profiles/", progress=True)  # doctest: +SKIP
    """
    accepted = inspect.signature(load_trace).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted.values())
    unknown = sorted(k for k in options if k not in accepted or k == "paths")
    if unknown and not takes_any:
        known = [k for k, p in accepted.items() if p.kind is inspect.Parameter.KEYWORD_ONLY]
        raise TypeError(f"load() got unknown options {unknown}; it takes {', '.join(known)}")
    if options.get("progress") is True:
        options["progress"] = stderr_progress
    elif options.get("progress") is False:
        options["progress"] = None
    return Job(load_trace(_paths(paths), **options))


def resolve_config(config: ConfigLike) -> Config:
    """A :class:`Config` from what ``config=`` accepts (see :data:`ConfigLike`).

    A mapping uses the keys of ``[tool.tracediag]`` (``select``, ``ignore``, ``rules``,
    ``hardware``, ...; ``extend_select`` is read as ``extend-select``). None means the
    defaults: no configuration file is looked up, unlike the CLI.
    """
    if config is None:
        return Config()
    if isinstance(config, Config):
        return config
    if isinstance(config, Mapping):
        return from_mapping({str(k).replace("_", "-"): v for k, v in config.items()})
    if isinstance(config, str | os.PathLike):
        return load_config(Path(config))
    raise TypeError(
        f"config must be None, a Config, a mapping or a path, not {type(config).__name__}"
    )


def diagnose(job: Job | S.Trace, config: ConfigLike = None) -> Diagnosis:
    """Analyse ``job`` and run the selected rules: a :class:`Diagnosis`.

    ``config``: None (defaults), a :class:`tracediag.Config`, a mapping with the keys of
    ``[tool.tracediag]`` or the path of a tracediag.toml or pyproject.toml. Per-trace ignores
    apply as in the CLI. Raises :class:`tracediag.UsageError` for a bad configuration.

    >>> d = tracediag.diagnose(job, {"select": ["DMA", "COL"], "rules": {"COL201": {"min_impact_pct": 1}}})  # doctest: +SKIP
    >>> d.findings_df.query("severity >= 'warning'")  # doctest: +SKIP
    """
    trace = job.trace if isinstance(job, Job) else job
    if not isinstance(trace, S.Trace):
        raise TypeError(f"diagnose() needs a Job from tracediag.load, not {type(job).__name__}")
    cfg = resolve_config(config)
    result = engine_diagnose(trace, cfg)
    if isinstance(job, Job) and "analysis" not in job.__dict__ and not cfg.hardware:
        job.analysis = result.analysis  # what-ifs on the job reuse the graph just built
    return result


def tui_app(target: Job | Diagnosis | S.Trace, config: ConfigLike = None) -> TracediagApp:
    """The Textual app on a loaded job (diagnosed with ``config``) or a diagnosis, not started:
    ``tui_app(job).run()``, or drive it in tests with ``run_test()``."""
    from tracediag.tui.app import make_app

    if not isinstance(target, Diagnosis):
        target = diagnose(target, config)
    elif config is not None:
        raise ValueError("a Diagnosis is already configured: pass config with a Job instead")
    return make_app(diagnosis=target)


def open_tui(
    target: Job | Diagnosis | PathLike | Iterable[PathLike], config: ConfigLike = None
) -> None:
    """Open the terminal UI (in a terminal: not in a notebook cell) and return when it quits.

    ``target``: a :class:`Job`, a :class:`Diagnosis`, or trace paths (loaded first, so input
    errors raise here as exceptions).

    >>> tracediag.open_tui(job)  # doctest: +SKIP
    """
    if not isinstance(target, Job | Diagnosis | S.Trace):
        config = resolve_config(config)
        target = load(target, align=config.align)
    tui_app(target, config).run()
