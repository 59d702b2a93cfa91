"""The one :class:`Diagnosis` every front end reads: findings, the analysis behind them, the
JSON report dict (schema ``tracediag.report/1``) and tables for notebooks."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import orjson
import pandas as pd

from tracediag import __version__
from tracediag.analysis.bounds import bounds_records, bounds_table
from tracediag.analysis.context import Analysis
from tracediag.analysis.utilization import mfu_by_rank
from tracediag.ci.saved_report import REPORT_SCHEMA
from tracediag.engine.config import Config
from tracediag.graph.critical_path import CATEGORIES
from tracediag.graph.inferred_edges import counts_by_rank
from tracediag.model import schema as S
from tracediag.model.findings import Finding, Severity
from tracediag.model.numeric_formats import precision_records
from tracediag.whatif.bound_gaps import with_gap_savings
from tracediag.whatif.user_changes import Change, WhatIfResult, what_if

# Rules put numpy scalars and arrays in ``evidence``; non-str keys (rank numbers) are allowed.
_JSON_OPTIONS = orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS
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
class Diagnosis:
    """A diagnosis: the findings (sorted by saving), the analysis they came from, and tables
    of both for notebooks. Every front end (CLI, TUI, API, CI gate) reads this one object;
    :func:`tracediag.engine.diagnose.diagnose` makes it. Times are aligned ns.

    >>> d = tracediag.diagnose(job)                                   # doctest: +SKIP
    >>> d.findings[0].code, d.findings[0].saving_ns                   # doctest: +SKIP
    >>> d.critical_path.groupby("category", observed=True).dur_ns.sum()  # doctest: +SKIP
    """

    trace: S.Trace
    analysis: Analysis
    findings: list[Finding]
    config: Config
    rules_run: list[str] = field(default_factory=list)

    ignored_findings: int = 0  # dropped by the configuration's per-trace-ignores

    def at_or_above(self, severity: Severity | str) -> list[Finding]:
        """Findings whose severity is at least ``severity`` (``"warning"`` or a Severity)."""
        if isinstance(severity, str):
            severity = Severity.parse(severity)
        return [f for f in self.findings if f.severity >= severity]

    def to_dict(self) -> dict:
        """The JSON report (schema ``tracediag.report/1``), a public contract."""
        a = self.analysis
        bd = a.breakdown
        mfu = mfu_by_rank(self.trace, a.window_ns or a.step_ns, a.hardware)  # window FLOPs
        inferred = counts_by_rank(a.inferred)
        path_gap = a.path.gap_by_rank()
        ranks = []
        for r in self.trace.ranks:
            m = self.trace.meta[r]
            pct = (
                {
                    k: round(float(bd.at[r, f"{k}_pct"]), 2)
                    for k in ("compute", "communication", "memory", "idle")
                }
                if r in bd.index
                else {}
            )
            ranks.append(
                {
                    "rank": r,
                    "format": m.format,
                    "hardware": m.hardware,
                    "step_time_ns": int(a.step_ns.get(r, 0)),
                    "mfu_pct": mfu.get(r),
                    "clock_offset_ns": int(m.clock_offset_ns),
                    "clock": m.info.get("clock", ""),
                    "breakdown_pct": pct,
                    "repairs": dict(m.repairs),
                    "inferred_edges": inferred.get(r, {}),
                    "path_gap_pct": a.pct(path_gap.get(r, 0)),
                    "hardware_peaks": _peaks(a.hardware.get(r)),
                }
            )
        by_cat = a.path.by_category()
        steps = a.job_steps
        return {
            "schema": REPORT_SCHEMA,
            "tool": {"name": "tracediag", "version": __version__},
            "inputs": [
                {
                    "path": i.path,
                    "format": i.format,
                    "rank": i.ranks[0] if len(i.ranks) == 1 else None,
                    "ranks": i.ranks,
                }
                for i in self.trace.inputs
            ],
            "ranks": ranks,
            "critical_path": {
                "start_ns": a.path.start_ns,
                "end_ns": a.path.end_ns,
                "length_ns": a.length_ns,
                "by_category_ns": {c: by_cat[c] for c in CATEGORIES},
                "compute_by_engine_ns": a.path.compute_by_engine(),
                "edges": {
                    "recorded": len(self.trace.edges),
                    "inferred": len(a.inferred) if a.inferred is not None else 0,
                    "ignored": dict(a.graph.dropped_edges),
                },
            },
            "durations": {k: [dict(row) for row in v] for k, v in a.durations.items()},
            "layout": a.layout.to_dict(),
            "bounds": bounds_records(self.bounds_df),
            "precision": precision_records(self.trace, a.matmul_work),
            "steps": steps.to_dicts(),
            "step_summary": steps.summary(),
            "findings": self._findings_with_steps(),
            "summary": {
                "findings": len(self.findings),
                **{str(s): sum(1 for f in self.findings if f.severity == s) for s in Severity},
                # Kept for reports read by older tools: the savings add overlapping changes
                # (two rules fixing one stall count it twice). The joint replay is the bound.
                "total_saving_ns_upper_bound": int(sum(f.saving_ns for f in self.findings)),
                "total_saving_ns_joint": self.joint_saving_ns,
                "joint_findings": len(self._headline),
                "joint_sum_ns": int(sum(f.saving_ns for f in self._headline)),
            },
            "config": {
                "source": self.config.source,
                "select": self.config.select + self.config.extend_select,
                "ignore": self.config.ignore,
                "fail_on": str(self.config.fail_on),
                "rules_run": self.rules_run,
            },
        }

    def _findings_with_steps(self) -> list[dict]:
        """The findings' dicts, each with ``steps_seen`` (how many steps its window overlaps;
        None for a finding without a window) and ``steps_total``."""
        steps = self.analysis.job_steps
        starts = [f.start_ns for f in self.findings]
        ends = [f.end_ns for f in self.findings]
        seen = steps.seen(starts, ends).tolist() if self.findings else []
        out = []
        for f, n in zip(self.findings, seen, strict=True):  # one per finding
            d = f.to_dict()
            d["steps_seen"] = int(n) if (f.start_ns or f.end_ns) else None
            d["steps_total"] = steps.n
            out.append(d)
        return out

    def __repr__(self) -> str:
        worst = max((f.severity for f in self.findings), default=None)
        return (
            f"<Diagnosis step {self.step_time_ns} ns, {len(self.findings)} findings"
            f"{f' (worst: {worst})' if worst is not None else ''}, "
            f"{len(self.trace.ranks)} ranks>"
        )

    @property
    def _headline(self) -> list[Finding]:
        """The findings the joint saving is of: those at warning or above. Info findings are
        context and noise-level candidates (every rank at its peers' pace on a clean job): made
        all at once they would promise time no fix of a real problem gives."""
        return self.at_or_above(Severity.WARNING)

    @cached_property
    def joint_saving_ns(self) -> int | None:
        """ns the step would be shorter with the changes of every finding at warning or above
        made at once, by ONE replay of all their what-ifs together (a node two findings change
        keeps the larger cut); None when one of them with a saving recorded no change (see
        ``Analysis.finding(change=)``)."""
        return self.analysis.joint_saving(self._headline)

    @property
    def step_time_ns(self) -> int:
        """The analysed window: first start to last end of the job's device work (ns)."""
        return int(self.analysis.length_ns)

    @property
    def step_time_by_rank(self) -> dict[int, int]:
        """Per rank: its typical step, the median of its steps' times (ns; its window when the
        trace numbers no steps; see :mod:`tracediag.analysis.steps`)."""
        return dict(self.analysis.step_ns)

    @property
    def typical_step_ns(self) -> int:
        """The job's typical step: the median of its steps' times (ns)."""
        return self.analysis.job_steps.typical_ns

    @property
    def steps_df(self) -> pd.DataFrame:
        """One row per step in time order: number, start_ns, end_ns, span_ns, step_ns, the
        critical path's ns per category in it (``path_<category>_ns``), outlier and cause
        (:class:`tracediag.analysis.steps.JobSteps`; ``analysis.job_steps.by_rank`` has each
        rank's step and breakdown)."""
        return self.analysis.job_steps.table.copy()

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

    @cached_property
    def bounds_df(self) -> pd.DataFrame:
        """Per rank (index ``rank``) over its device span: the performance bounds (memory: DMA
        active, DMA bytes at peak, IN/OUT bytes at peak; compute: tensor-engine active, FLOPs
        at peak, without transposes; pipeline: the busiest engine), the gaps between them with
        AWS's names, the ``bottleneck`` engine and the peaks used with their sources; see
        :func:`tracediag.analysis.bounds.bounds_table` (and :meth:`bounds_in` for a window).
        Each gap's ``<gap>_saving_ns`` is what the replayed step gains with it closed (NaN when
        the graph is too large to replay them all; ``gap_savings_note`` says so), see
        :func:`tracediag.whatif.bound_gaps.gap_savings`."""
        return with_gap_savings(self.analysis, self.analysis.bounds)

    def bounds_in(self, start_ns: int, end_ns: int) -> pd.DataFrame:
        """:attr:`bounds_df` over the window ``[start_ns, end_ns)`` (aligned ns) of every rank."""
        table = bounds_table(self.trace, self.analysis.hardware, (start_ns, end_ns))
        return with_gap_savings(self.analysis, table)

    def to_json(self) -> str:
        """The JSON report, byte for byte what ``tracediag report --format json`` writes."""
        return report_json(self.to_dict())

    def what_if(self, change: Change) -> WhatIfResult:
        """``tracediag.what_if(self, change)``."""
        return what_if(self, change)

    def tui(self) -> None:
        """Open the terminal UI on this diagnosis (returns when you quit it)."""
        # The one upward import of the engine (listed in the import contracts): a notebook
        # user opens the TUI from the object in hand; textual loads only when it is called.
        from tracediag.api.job import open_tui

        open_tui(self)


def report_json(report: dict) -> str:
    """The report dictionary as indented JSON text ending in a newline."""
    return orjson.dumps(report, option=_JSON_OPTIONS | orjson.OPT_APPEND_NEWLINE).decode()


def _peaks(hw) -> dict:
    """The peaks the rules compared this rank with, and where they came from."""
    if hw is None:
        return {"source": "unknown"}
    return {
        "source": hw.source,
        "name": hw.name,
        "peak_flops_bf16": hw.peak_flops or None,
        "hbm_bw": hw.hbm_bw or None,
        "link_bw": hw.link_bw or None,
        "dma_queue_bw": hw.dma_queue_bw or None,
    }
