"""``tracediag trend`` output: one line per metric with a sparkline, then its change points."""

from __future__ import annotations

import numpy as np

from tracediag.ci.metrics import CATALOG, format_value

BARS = "▁▂▃▄▅▆▇█"


def sparkline(values: list[float], width: int = 40) -> str:
    """The last ``width`` values as block characters, lowest to highest."""
    v = np.asarray(values[-width:], dtype=np.float64)
    if not len(v):
        return ""
    lo, hi = v.min(), v.max()
    if hi == lo:
        return BARS[0] * len(v)
    idx = np.round((v - lo) / (hi - lo) * (len(BARS) - 1)).astype(int)
    return "".join(BARS[i] for i in idx)


#: How the change points are tested, for the header line.
METHOD = "largest Welch t over splits, against simulated Gaussian noise"


def run_name(cp: dict) -> str:
    """The run where a change starts: its label (and id), or its id when it has no label."""
    label = cp.get("label", "")
    return f"{label} (run {cp['run_id']})" if label else f"run {cp['run_id']}"


def _point_line(metric: str, cp: dict) -> str:
    m = CATALOG[metric]
    word = "regression" if cp["regression"] else "improvement"
    rel = f" ({cp['change_pct']:+.1f}%)" if cp["change_pct"] is not None else ""
    return (
        f"change at {run_name(cp)}: {format_value(m, cp['before_mean'])} -> "
        f"{format_value(m, cp['after_mean'])}{rel}, {word}, p = {cp['p_value']:.3g}"
    )


def _too_few(result: dict) -> str:
    """Why p < alpha cannot be reached, or '' when it can with the runs there are."""
    alpha, needed = result["alpha"], result["runs_needed"]
    if needed is None:
        return f"p < {alpha:g} is unreachable: the test's smallest p-value is 0.001"
    if result["runs"] < needed:
        return f"too few runs for p < {alpha:g}: a change point needs at least {needed} runs"
    return ""


def _metric_note(result: dict, m: dict) -> str:
    """A metric's own shortfall (fewer recorded values than runs), when the runs suffice."""
    if m["reachable"] or _too_few(result):
        return ""
    return f"  (too few runs for p < {result['alpha']:g})"


def render_trend_text(result: dict) -> str:
    """Aligned lines: metric, runs, latest, median, sparkline; change points below each."""
    lines = [f"{result['runs']} runs; change points at p < {result['alpha']:g} ({METHOD})"]
    if _too_few(result):
        lines.append(_too_few(result))
    lines.append("")
    width = max((len(m["metric"]) for m in result["metrics"]), default=0)
    for m in result["metrics"]:
        metric = CATALOG[m["metric"]]
        lines.append(
            f"{m['metric']:<{width}}  latest {format_value(metric, m['latest']):>10}  "
            f"median {format_value(metric, m['median']):>10}  {sparkline(m['values'])}"
            f"{_metric_note(result, m)}"
        )
        lines += [f"{'':<{width}}  {_point_line(m['metric'], cp)}" for cp in m["change_points"]]
    return "\n".join(lines) + "\n"


def render_trend_markdown(result: dict) -> str:
    """A table of metrics and a list of change points."""
    lines = [
        "## tracediag trend",
        "",
        f"{result['runs']} runs; change points at p < {result['alpha']:g} ({METHOD}).",
        *([f"**{_too_few(result)}.**"] if _too_few(result) else []),
        "",
        "| metric | latest | median | trend | change points |",
        "|---|---:|---:|---|---|",
    ]
    for m in result["metrics"]:
        metric = CATALOG[m["metric"]]
        points = "; ".join(_point_line(m["metric"], cp) for cp in m["change_points"])
        points = points or ("-" if m["reachable"] else "too few runs")
        lines.append(
            f"| {m['metric']} | {format_value(metric, m['latest'])} | "
            f"{format_value(metric, m['median'])} | {sparkline(m['values'])} | {points} |"
        )
    return "\n".join(lines) + "\n"
