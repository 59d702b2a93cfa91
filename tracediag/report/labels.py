"""Short labels the renderers share: percentages, rank lists, time windows, severity counts."""

from __future__ import annotations

from tracediag.model.units import fmt_ns
from tracediag.model.wording import plural


def percent(part: float, whole: float) -> str:
    """``part`` as a percentage of ``whole`` with one decimal (``"19.2%"``); ``"-"`` if no whole."""
    return f"{100.0 * part / whole:.1f}%" if whole else "-"


def window(finding: dict, path_start_ns: int) -> str:
    """The finding's time window relative to the start of the critical path, or ``""``."""
    start, end = finding["start_ns"], finding["end_ns"]
    if not (start or end):
        return ""
    return f"{fmt_ns(start - path_start_ns)} to {fmt_ns(end - path_start_ns)}"


def severity_counts(summary: dict) -> str:
    """``"1 error, 2 warnings, 0 info"`` from the report's summary ("info" is a mass noun: no
    plural)."""
    return ", ".join(
        [plural(summary["error"], "error"), plural(summary["warning"], "warning")]
        + [f"{summary['info']} info"]
    )


def total_saving(summary: dict) -> tuple[str, str, str]:
    """(label, value, note) for the summary's total saving: the joint replay of the changes of
    the findings at warning or above where the report has one (``total_saving_ns_joint``), else,
    for reports saved before it existed, the sum of the savings (which counts overlapping causes
    more than once)."""
    joint = summary.get("total_saving_ns_joint")
    if joint is None or "joint_findings" not in summary:
        added = summary.get("total_saving_ns_upper_bound", 0)
        return "Sum of the savings", fmt_ns(added), "savings overlap; each is measured alone"
    n, added = summary["joint_findings"], summary["joint_sum_ns"]
    if not n:
        return (
            "No finding at warning or above",
            "nothing to total",
            "info findings are not added up",
        )
    if n == 1:
        return "Fixing the finding at warning or above", f"{fmt_ns(joint)} shorter", "by replay"
    note = "by one replay of all their changes"
    if added != joint:
        note += f"; their savings, each measured alone, add up to {fmt_ns(added)}"
    return f"Fixing the {n} findings at warning or above together", f"{fmt_ns(joint)} shorter", note


def layout_label(layout: dict) -> str:
    """``dp=2 tp=1 pp=4 ep=1 (inferred)``, with the layout's notes."""
    sizes = " ".join(f"{d}={layout[d]}" for d in ("dp", "tp", "pp", "ep"))
    notes = "; ".join(layout.get("notes", []))
    return f"{sizes} ({layout['source']}{'; ' + notes if notes else ''})"
