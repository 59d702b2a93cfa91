"""The steps in words, for the text and Markdown reports: how many, the typical step, the
spread and the outliers with their cause. Reads only the report's ``steps`` and
``step_summary`` (reports saved before steps existed have neither: no lines)."""

from __future__ import annotations

from tracediag.model.units import fmt_ns
from tracediag.model.wording import plural


def has_steps(report: dict) -> bool:
    """Whether the report holds more than one step (one step is the whole window: nothing to
    add to the critical path's figures)."""
    return (report.get("step_summary") or {}).get("n", 0) > 1


def step_name(step: dict) -> str:
    """``ProfilerStep#13`` style: ``step 13`` by the trace's number, else by its position."""
    return f"step {step['number']}" if step.get("number") is not None else f"step [{step['index']}]"


def steps_headline(report: dict) -> str:
    """``6 steps (5 to 10): typical (median) 155.0 ms, p90 164.4 ms, max 167.7 ms``."""
    s = report["step_summary"]
    numbers = [st["number"] for st in report["steps"] if st.get("number") is not None]
    span = f" ({min(numbers)} to {max(numbers)})" if numbers else ""
    return (
        f"{plural(s['n'], 'step')}{span}: typical (median) {fmt_ns(s['typical_ns'])},"
        f" p90 {fmt_ns(s['p90_ns'])}, max {fmt_ns(s['max_ns'])}"
    )


def outlier_texts(report: dict) -> list[str]:
    """One line per outlier step: its time against the typical step, and its cause."""
    s = report["step_summary"]
    typical = s["typical_ns"]
    out = []
    for i in s["outliers"]:
        st = report["steps"][i]
        ratio = f" ({st['step_time_ns'] / typical:.2f}x typical)" if typical else ""
        cause = (st.get("cause") or {}).get("text", "")
        head = f"{step_name(st)}: {fmt_ns(st['step_time_ns'])}{ratio}"
        out.append(f"{head}: {cause}" if cause else head)
    return out


def no_outlier_text(report: dict) -> str:
    """What the reports say when no step is an outlier, with the threshold."""
    above = report["step_summary"].get("outlier_above_ns")
    return f"No outlier step (none slower than {fmt_ns(above)})." if above else "No outlier step."


def steps_seen(finding: dict) -> str:
    """``in 3 of 5 steps`` for a finding of a report of several steps, else ``""``."""
    total, seen = finding.get("steps_total", 0), finding.get("steps_seen")
    return f"in {seen} of {total} steps" if total > 1 and seen is not None else ""


def typical_index(steps: list[dict], typical_ns: int) -> int:
    """The step to show as the typical one (the HTML report and the TUI open on it): the first
    whose time is closest to the typical (median) step time."""
    return min(range(len(steps)), key=lambda i: abs(steps[i]["step_time_ns"] - typical_ns))
