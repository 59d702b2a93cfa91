"""The rule engine: analyse a trace, run the selected rules, return a :class:`Diagnosis`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from tracediag import __version__
from tracediag.analysis.context import GRAPH_STAGE, PATH_STAGE, Analysis, analyse
from tracediag.analysis.durations import layer_durations, op_durations
from tracediag.analysis.parallel_layout import resolve_layout
from tracediag.analysis.utilization import mfu_by_rank
from tracediag.engine.config import Config
from tracediag.engine.rule import all_rules
from tracediag.graph.critical_path import CATEGORIES
from tracediag.model import schema as S
from tracediag.model.errors import UsageError, did_you_mean
from tracediag.model.findings import Finding, Severity

REPORT_SCHEMA = "tracediag.report/1"


@dataclass
class Diagnosis:
    """The result of a diagnosis: findings sorted by saving, plus the analysis they came from."""

    trace: S.Trace
    analysis: Analysis
    findings: list[Finding]
    config: Config
    rules_run: list[str] = field(default_factory=list)

    def at_or_above(self, severity: Severity) -> list[Finding]:
        """Findings whose severity is at least ``severity``."""
        return [f for f in self.findings if f.severity >= severity]

    def to_dict(self) -> dict:
        """The JSON report (schema ``tracediag.report/1``), a public contract."""
        a = self.analysis
        bd = a.breakdown
        mfu = mfu_by_rank(self.trace, a.step_ns, a.hardware)
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
                }
            )
        by_cat = a.path.by_category()
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
            "durations": {
                "by_layer": layer_durations(self.trace),
                "by_op": op_durations(self.trace),
            },
            "layout": a.layout.to_dict(),
            "findings": [f.to_dict() for f in self.findings],
            "summary": {
                "findings": len(self.findings),
                **{str(s): sum(1 for f in self.findings if f.severity == s) for s in Severity},
                "total_saving_ns_upper_bound": int(sum(f.saving_ns for f in self.findings)),
            },
            "config": {
                "source": self.config.source,
                "select": self.config.select + self.config.extend_select,
                "ignore": self.config.ignore,
                "fail_on": str(self.config.fail_on),
                "rules_run": self.rules_run,
            },
        }


#: The stages of :func:`diagnose`, in order, as its ``progress`` callback announces them.
DIAGNOSE_STAGES = (GRAPH_STAGE, PATH_STAGE, "running the rules")


def diagnose(
    trace: S.Trace, config: Config | None = None, progress: Callable[[str], None] | None = None
) -> Diagnosis:
    """Analyse ``trace`` and run every selected rule; findings sorted by saving. ``progress``
    is called with each of :data:`DIAGNOSE_STAGES` as it starts."""
    config = config or Config()
    try:
        analysis = analyse(trace, config.hardware, progress)
    except ValueError as exc:  # bad hardware overrides
        raise UsageError(f"{config.source or 'config'}: {exc}") from None
    if config.layout:
        analysis.layout = resolve_layout(trace, config.layout)
    rules = all_rules()
    for code in list(config.rule_options) + list(config.severity):
        if code not in rules:
            raise UsageError(
                f"{config.source or 'config'}: no rule {code}{did_you_mean(code, rules)}"
            )
    if progress:
        progress(DIAGNOSE_STAGES[-1])
    findings: list[Finding] = []
    run = []
    for code, cls in rules.items():
        if not config.is_selected(code):
            continue
        run.append(code)
        opts = config.options_for(code, cls.options)
        for f in cls().check(analysis, opts):
            if code in config.severity:
                f = replace(f, severity=config.severity[code])
            findings.append(f)
    findings.sort(key=Finding.sort_key)
    return Diagnosis(trace, analysis, findings, config, run)
