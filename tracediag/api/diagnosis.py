"""The public :class:`Diagnosis`: the engine's diagnosis with tables for notebooks.

Made by :func:`tracediag.diagnose`; see :mod:`tracediag.api.job`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import cached_property
from typing import TYPE_CHECKING

import pandas as pd

from tracediag.engine import diagnose as engine
from tracediag.graph.critical_path import CATEGORIES
from tracediag.model.findings import Finding, Severity

if TYPE_CHECKING:
    from tracediag.api.whatif import Change, WhatIfResult


_SEVERITIES = pd.CategoricalDtype([str(s) for s in Severity], ordered=True)
_FINDING_COLUMNS = {
    "code": "category",
    "family": "category",
    "severity": _SEVERITIES,
    "title": object,
    "message": object,
    "ranks": object,
    "engine": "category",
    "track": "category",
    "layer": "category",
    "op": "category",
    "start_ns": "int64",
    "end_ns": "int64",
    "impact_ns": "int64",
    "impact_pct": "float64",
    "saving_ns": "int64",
    "saving_pct": "float64",
    "suggestion": object,
}
_PATH_COLUMNS = ["start_ns", "end_ns", "dur_ns", "category", "rank", "track", "engine", "kind"]
_PATH_COLUMNS += ["name", "layer", "op", "bytes", "wait_ns", "event", "track_id"]


@dataclass(repr=False)
class Diagnosis(engine.Diagnosis):
    """A diagnosis: the findings, the critical path and the breakdowns, as objects and frames.

    The same object the CLI renders (:class:`tracediag.engine.diagnose.Diagnosis`), with tables for
    notebooks. Times are aligned ns.

    >>> d = tracediag.diagnose(job)                                   # doctest: +SKIP
    >>> d.findings[0].code, d.findings[0].saving_ns                   # doctest: +SKIP
    >>> d.critical_path.groupby("category", observed=True).dur_ns.sum()  # doctest: +SKIP
    """

    @classmethod
    def of(cls, diagnosis: engine.Diagnosis) -> Diagnosis:
        """The public Diagnosis of an engine Diagnosis (the same objects, not copies)."""
        if isinstance(diagnosis, cls):
            return diagnosis
        return cls(**{f.name: getattr(diagnosis, f.name) for f in fields(diagnosis)})

    def __repr__(self) -> str:
        worst = max((f.severity for f in self.findings), default=None)
        return (
            f"<Diagnosis step {self.step_time_ns} ns, {len(self.findings)} findings"
            f"{f' (worst: {worst})' if worst is not None else ''}, "
            f"{len(self.trace.ranks)} ranks>"
        )

    @property
    def step_time_ns(self) -> int:
        """The analysed window: first start to last end of the job's device work (ns)."""
        return int(self.analysis.length_ns)

    @property
    def step_time_by_rank(self) -> dict[int, int]:
        """Per rank: first start to last end of its own device work (ns)."""
        return dict(self.analysis.step_ns)

    @cached_property
    def findings_df(self) -> pd.DataFrame:
        """One row per finding, in the order of :attr:`findings` (largest saving first):
        code, family, severity (ordered: info < warning < error), title, message, ranks (a
        tuple), engine, track, layer, op, start_ns, end_ns, impact_ns, impact_pct, saving_ns,
        saving_pct, suggestion. The evidence stays on the Finding objects."""
        rows = [
            {
                **{k: getattr(f, k) for k in _FINDING_COLUMNS if k != "saving_pct"},
                "severity": str(f.severity),
                "saving_pct": self.analysis.pct(f.saving_ns),
            }
            for f in self.findings
        ]
        df = pd.DataFrame(rows, columns=list(_FINDING_COLUMNS))
        return df.astype(_FINDING_COLUMNS)

    @cached_property
    def critical_path(self) -> pd.DataFrame:
        """The critical path as segments in time order; their durations sum to the step.

        Columns: start_ns, end_ns, dur_ns, category (compute, dma_transfer, dma_wait,
        collective_transfer, collective_skew, host, gap), rank, track (its name), engine, and
        the event behind the segment (kind, name, layer, op, bytes, wait_ns, event id;
        event -1, rank -1 and track_id -1 where no event is, e.g. the window's leading gap).
        """
        seg = self.analysis.segments
        out = seg.rename(columns={"track": "track_id", "track_name": "track"})
        out = out[[c for c in _PATH_COLUMNS if c in out.columns]]
        out = out.iloc[::-1].reset_index(drop=True)  # the walk goes backwards in time
        for col in ("track", "engine", "kind", "name", "layer", "op"):
            if col in out:
                out[col] = out[col].astype("category")
        return out

    @property
    def path_by_category(self) -> pd.Series:
        """ns of the critical path per category (all categories; they sum to the step)."""
        return pd.Series(self.analysis.path.by_category(), name="dur_ns").rename_axis("category")

    @cached_property
    def path_by_rank(self) -> pd.DataFrame:
        """ns of the critical path per rank (rows; -1: on no rank) and category (columns)."""
        cp = self.critical_path
        table = cp.pivot_table(
            index="rank", columns="category", values="dur_ns", aggfunc="sum", observed=False
        )
        return table.reindex(columns=list(CATEGORIES)).fillna(0).astype("int64")

    @property
    def breakdown(self) -> pd.DataFrame:
        """Per rank (index ``rank``): device time split into compute, communication, memory and
        idle (``*_ns``, ``total_ns``, ``*_pct``), HTA's temporal breakdown."""
        return self.analysis.breakdown.copy(deep=False)

    def at_or_above(self, severity: Severity | str) -> list[Finding]:
        """Findings whose severity is at least ``severity`` (``"warning"`` or a Severity)."""
        if isinstance(severity, str):
            severity = Severity.parse(severity)
        return super().at_or_above(severity)

    def to_json(self) -> str:
        """The JSON report, byte for byte what ``tracediag report --format json`` writes."""
        from tracediag.report.json_report import render_json

        return render_json(self.to_dict())

    def what_if(self, change: Change) -> WhatIfResult:
        """``tracediag.what_if(self, change)``."""
        from tracediag.api.whatif import what_if

        return what_if(self, change)

    def tui(self) -> None:
        """Open the terminal UI on this diagnosis (returns when you quit it)."""
        from tracediag.api.job import open_tui

        open_tui(self)
