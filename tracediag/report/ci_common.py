"""What the CI renderers (JUnit, SARIF, GitHub annotations) share: rule metadata, the trace a
finding belongs to, and a finding's figures as text. They read the report and its ``gate``."""

from __future__ import annotations

from pathlib import PurePath

from tracediag.model.units import fmt_ns
from tracediag.model.wording import ranks_label
from tracediag.report.evidence_words import evidence_text
from tracediag.report.labels import window


def rule_info() -> dict[str, dict]:
    """Per rule code: ``name``, ``title``, ``severity``, ``doc`` (sections) and ``document``."""
    from tracediag.engine.rule import all_rules

    return {
        code: {
            "name": cls.name,
            "title": cls.title,
            "severity": str(cls.severity),
            "doc": dict(cls.doc),
            "document": cls.document(),
        }
        for code, cls in all_rules().items()
    }


def scope_label(finding: dict) -> str:
    """``"rank 1"``, ``"ranks 0-3"``, or ``"job"`` for a finding that names no rank."""
    return ranks_label(finding["ranks"]) if finding["ranks"] else "job"


def trace_path(report: dict, ranks: list[int] | None = None) -> str:
    """The input path holding the first of ``ranks`` (any input when none), posix-style."""
    inputs = report.get("inputs", [])
    if not inputs:
        return ""
    for i in inputs:
        if ranks and ranks[0] in i["ranks"]:
            return PurePath(i["path"]).as_posix()
    return PurePath(inputs[0]["path"]).as_posix()


def finding_figures(finding: dict, report: dict) -> str:
    """The finding as plain text: message, then one figure per line (where, impact, saving,
    window, evidence) and the suggestion."""
    where = [scope_label(finding)]
    for key in ("engine", "track", "layer", "op"):
        if finding.get(key):
            where.append(f"{key} {finding[key]}")
    lines = [
        finding["message"],
        "",
        f"severity: {finding['severity']}",
        f"where: {', '.join(where)}",
        # A share of the path, not always time on it (COL201: the others' wait, wherever).
        f"impact: {fmt_ns(finding['impact_ns'])} ({finding['impact_pct']:.2f}% of the "
        f"{fmt_ns(report['critical_path']['length_ns'])} critical path)",
        f"what-if saving: {fmt_ns(finding['saving_ns'])}",
    ]
    span = window(finding, report["critical_path"]["start_ns"])
    if span:
        lines.append(f"window: {span} from the start of the critical path")
    # In words, without our tables' row numbers (the JSON report and SARIF properties keep them).
    evidence = evidence_text(finding.get("evidence") or {}, report["critical_path"]["start_ns"])
    if evidence:
        lines += ["evidence:", *(f"  {line}" for line in evidence)]
    if finding.get("suggestion"):
        lines.append(f"suggestion: {finding['suggestion']}")
    return "\n".join(lines)


def gate_of(report: dict) -> dict:
    """The report's ``gate`` section; a KeyError naming ``check`` when it has none."""
    if "gate" not in report:
        raise KeyError("the CI formats need the gate of 'tracediag check' (report['gate'])")
    return report["gate"]
