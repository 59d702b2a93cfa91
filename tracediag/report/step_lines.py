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
    """``6 steps (5 to 10): typical (median) 155.0 ms, p90 164.4 ms, max 167.7 ms``, then the
    marker-only steps left out (:func:`left_out_text`); one step: ``1 step (1): 9.288 ms``."""
    s = report["step_summary"]
    numbers = [st["number"] for st in report["steps"] if st.get("number") is not None]
    span = ""
    if numbers:
        low, high = min(numbers), max(numbers)
        span = f" ({low})" if low == high else f" ({low} to {high})"
    times = (
        f"typical (median) {fmt_ns(s['typical_ns'])}, p90 {fmt_ns(s['p90_ns'])},"
        f" max {fmt_ns(s['max_ns'])}"
        if s["n"] > 1
        else fmt_ns(s["typical_ns"])
    )
    left_out = left_out_text(report)
    return f"{plural(s['n'], 'step')}{span}: {times}" + (f"; {left_out}" if left_out else "")


def left_out_text(report: dict) -> str:
    """``1 empty step (marker only: step 2) left out``: the steps that hold nothing but their
    ``ProfilerStep`` marker (the one ``prof.stop()`` closes at once), which no figure counts;
    ``""`` when none (or in a report saved before they were listed)."""
    empty = (report.get("step_summary") or {}).get("empty_steps") or []
    if not empty:
        return ""
    word = "step" if len(empty) == 1 else "steps"
    which = ", ".join(map(str, empty))
    return f"{plural(len(empty), 'empty step')} (marker only: {word} {which}) left out"


def shows_steps(report: dict) -> bool:
    """Whether the text and Markdown reports print a Steps section: for several steps, or for
    one when steps were left out (so the report says so)."""
    return has_steps(report) or bool(left_out_text(report))


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
