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


def _point_line(metric: str, cp: dict) -> str:
    m = CATALOG[metric]
    word = "regression" if cp["regression"] else "improvement"
    rel = f" ({cp['change_pct']:+.1f}%)" if cp["change_pct"] is not None else ""
    return (
        f"change at run {cp['run_id']}: {format_value(m, cp['before_mean'])} -> "
        f"{format_value(m, cp['after_mean'])}{rel}, {word}, p = {cp['p_value']:.3g}"
    )


def render_trend_text(result: dict) -> str:
    """Aligned lines: metric, runs, latest, median, sparkline; change points below each."""
    lines = [
        f"{result['runs']} runs; change points at p < {result['alpha']:g} (permutation test)",
        "",
    ]
    width = max((len(m["metric"]) for m in result["metrics"]), default=0)
    for m in result["metrics"]:
        metric = CATALOG[m["metric"]]
        lines.append(
            f"{m['metric']:<{width}}  latest {format_value(metric, m['latest']):>10}  "
            f"median {format_value(metric, m['median']):>10}  {sparkline(m['values'])}"
        )
        lines += [f"{'':<{width}}  {_point_line(m['metric'], cp)}" for cp in m["change_points"]]
    return "\n".join(lines) + "\n"


def render_trend_markdown(result: dict) -> str:
    """A table of metrics and a list of change points."""
    lines = [
        "## tracediag trend",
        "",
        f"{result['runs']} runs; change points at p < {result['alpha']:g} (permutation test).",
        "",
        "| metric | latest | median | trend | change points |",
        "|---|---:|---:|---|---|",
    ]
    for m in result["metrics"]:
        metric = CATALOG[m["metric"]]
        points = "; ".join(_point_line(m["metric"], cp) for cp in m["change_points"]) or "-"
        lines.append(
            f"| {m['metric']} | {format_value(metric, m['latest'])} | "
            f"{format_value(metric, m['median'])} | {sparkline(m['values'])} | {points} |"
        )
    return "\n".join(lines) + "\n"
