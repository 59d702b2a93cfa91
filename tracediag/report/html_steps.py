"""The HTML report's Steps section: a table of the steps (time, outlier and cause), a bar chart
of their times on an axis in time units, and, for the step picked in the table, its critical
path by category and its breakdown per rank.

No script: each step has a hidden radio button; a row's label checks it, and one CSS rule per
step shows that step's panel and marks its row (``:checked ~``). The typical step (the one
closest to the median step time) is checked when the page opens. Reads only the report's
``steps`` and ``step_summary``; a report of one step (or saved before steps) has no section.
"""

from __future__ import annotations

from html import escape

from tracediag.model.units import fmt_ns
from tracediag.report.step_lines import (
    has_steps,
    no_outlier_text,
    step_name,
    steps_headline,
    typical_index,
)
from tracediag.report.svg import CATEGORY_COLORS, axis_unit

#: The bar chart: room for the step labels, the plot's width (the longest step's bar) and the
#: height of a bar's row (px).
LABEL_PX, PLOT_PX, ROW_PX = 90, 640, 16
#: Bar colours of the chart: a step, the typical step, an outlier (used nowhere else on the page).
STEP_COLOR, TYPICAL_COLOR, OUTLIER_COLOR = "#5C6BC0", "#00897B", "#AD1457"
#: Row shading of the table: the typical step and an outlier step.
TYPICAL_ROW, OUTLIER_ROW = "#E0F2F1", "#FCE4EC"
#: At most this many steps get a row, a bar and a panel (a Neuron job may run thousands of
#: executions; the summary line still counts them all).
MAX_STEPS = 200
#: Width of a share bar in the panels' tables when it is the whole step.
SHARE_BAR_PX = 60
BREAKDOWN = ("compute", "communication", "memory", "idle")

STYLE = f"""
.steps input.pick{{display:none}}.step-panel{{display:none;margin-top:10px}}
.step-panel table{{margin-bottom:12px}}
.steps label{{cursor:pointer;text-decoration:underline dotted}}
.steps tr.typical{{background:{TYPICAL_ROW}}}.steps tr.outlier{{background:{OUTLIER_ROW}}}
"""


def steps_section(report: dict) -> str:
    """The Steps section (empty without several steps)."""
    if not has_steps(report):
        return ""
    s = report["step_summary"]
    steps = report["steps"][:MAX_STEPS]
    typical = typical_index(steps, s["typical_ns"])
    shown = "" if len(steps) == s["n"] else f" The first {len(steps)} are shown."
    rule = (
        f"Outliers: {len(s['outliers'])}, {s['outlier_rule']}."
        if s["outliers"]
        else no_outlier_text(report)
    )
    picks = "".join(
        f'<input type="radio" class="pick" name="step" id="step-pick-{i}"'
        + (" checked" if i == typical else "")
        + ">"
        for i in range(len(steps))
    )
    css = "".join(
        f"#step-pick-{i}:checked~#step-panel-{i}{{display:block}}"
        f"#step-pick-{i}:checked~table #step-row-{i}{{outline:2px solid #222}}"
        for i in range(len(steps))
    )
    return (
        "<h2>Steps</h2>"
        f'<p>{escape(steps_headline(report))}.</p><p class="muted">{escape(rule)}{shown} '
        "Each step's time is the median over the ranks of their own step. Click a step to see "
        "its critical path and ranks; the typical step (shaded green) is shown first.</p>"
        f'<div class="steps"><style>{STYLE}{css}</style>{picks}'
        + _steps_table(steps, typical, s["typical_ns"])
        + step_bars(steps, typical)
        + "".join(_panel(st, i == typical) for i, st in enumerate(steps))
        + "</div>"
    )


def _steps_table(steps: list[dict], typical: int, typical_ns: int) -> str:
    rows = []
    for i, st in enumerate(steps):
        css = "outlier" if st["outlier"] else "typical" if i == typical else ""
        mark = "outlier" if st["outlier"] else "typical" if i == typical else ""
        cause = (st.get("cause") or {}).get("text", "")
        ratio = f"{st['step_time_ns'] / typical_ns:.2f}x" if typical_ns else "-"
        rows.append(
            f'<tr id="step-row-{i}" class="{css}">'
            f'<td><label for="step-pick-{i}">{escape(step_name(st))}</label></td>'
            f'<td class="num">{fmt_ns(st["step_time_ns"])}</td><td class="num">{ratio}</td>'
            f"<td>{mark}</td><td>{escape(cause)}</td></tr>"
        )
    return (
        '<table><tr><th>step</th><th class="num">time</th><th class="num">vs typical</th>'
        "<th></th><th>cause</th></tr>" + "".join(rows) + "</table>"
    )


def step_bars(steps: list[dict], typical: int) -> str:
    """One horizontal bar per step, as long as its time (the longest: :data:`PLOT_PX`), on an
    axis from 0 in one time unit; the typical step and the outliers in their own colours."""
    longest = max(st["step_time_ns"] for st in steps) or 1
    per, unit = axis_unit(longest)
    top = 6
    axis_y = top + len(steps) * ROW_PX + 2
    body = []
    for i, st in enumerate(steps):
        y = top + i * ROW_PX
        color = OUTLIER_COLOR if st["outlier"] else TYPICAL_COLOR if i == typical else STEP_COLOR
        # Whole pixels, so the drawn bar is the value to within half a pixel.
        w = round(PLOT_PX * st["step_time_ns"] / longest)
        body.append(
            f'<text x="{LABEL_PX - 6}" y="{y + 12}" font-size="11" text-anchor="end" '
            f'fill="#222">{escape(step_name(st))}</text>'
            f'<rect x="{LABEL_PX}" y="{y + 2}" width="{w}" height="{ROW_PX - 4}" fill="{color}">'
            f"<title>{escape(step_name(st))}: {fmt_ns(st['step_time_ns'])}</title></rect>"
        )
    body.append(
        f'<line x1="{LABEL_PX}" y1="{axis_y}" x2="{LABEL_PX + PLOT_PX}" y2="{axis_y}" '
        'stroke="#555"/>'
    )
    for k in range(5):
        anchor = "start" if k == 0 else "end" if k == 4 else "middle"
        body.append(
            f'<text x="{LABEL_PX + PLOT_PX * k / 4:.1f}" y="{axis_y + 14}" font-size="11" '
            f'text-anchor="{anchor}" fill="#222">{longest * k / 4 / per:.4g}</text>'
        )
    body.append(
        f'<text x="{LABEL_PX + PLOT_PX}" y="{axis_y + 30}" font-size="11" text-anchor="end" '
        f'fill="#555">step time ({unit})</text>'
    )
    width, height = LABEL_PX + PLOT_PX + 10, axis_y + 36
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="step times">'
        + "".join(body)
        + "</svg>"
    )


def _share(ns: int, total: int, color: str) -> str:
    """``ns`` with a bar of its share of ``total``."""
    px = round(SHARE_BAR_PX * min(ns / total, 1.0)) if ns > 0 and total > 0 else 0
    bar = f'<span class="bar" style="width:{px}px;background:{color}"></span>' if px else ""
    pct = f" ({100.0 * ns / total:.1f}%)" if total > 0 else ""
    return f"{bar}{fmt_ns(ns)}{pct}"


def _panel(st: dict, typical: bool) -> str:
    """A step's critical path by category and its ranks' breakdown (hidden until picked)."""
    i = st["index"]
    path = st["critical_path_ns"]
    length = sum(path.values())
    cats = "".join(
        f'<tr><td>{escape(c)}</td><td class="num">'
        f"{_share(ns, length, CATEGORY_COLORS.get(c, '#777'))}</td></tr>"
        for c, ns in path.items()
        if ns
    )
    ranks = []
    for r in st["ranks"]:
        bd, total = r["breakdown_ns"], r["step_time_ns"]
        cells = (
            [_share(bd[k], total, "#78909C") for k in BREAKDOWN]
            + [fmt_ns(r["host_gap_ns"]) if r["host_gap_ns"] is not None else "-"]
            if bd
            else ["-"] * (len(BREAKDOWN) + 1)
        )
        ranks.append(
            f"<tr><td>rank {r['rank']}</td><td class='num'>{fmt_ns(total)}</td>"
            + "".join(f'<td class="num">{c}</td>' for c in cells)
            + "</tr>"
        )
    head = "".join(f'<th class="num">{k}</th>' for k in (*BREAKDOWN, "of which host gap"))
    what = " (typical)" if typical else " (outlier)" if st["outlier"] else ""
    no_device = (
        '<p class="muted">No device activity on these ranks: no breakdown.</p>'
        if st["ranks"] and not any(r["breakdown_ns"] for r in st["ranks"])
        else ""
    )
    return (
        f'<div class="step-panel" id="step-panel-{i}">'
        f"<h3>{escape(step_name(st))}{what}: {fmt_ns(st['step_time_ns'])}</h3>"
        f'<p class="muted">span on every rank {fmt_ns(st["span_ns"])}; the critical path '
        f"spends {fmt_ns(length)} in it</p>"
        "<table><tr><th>critical path</th><th class='num'>time (share)</th></tr>"
        f"{cats}</table>"
        "<table><tr><th>rank</th><th class='num'>step time</th>"
        f"{head}</tr>{''.join(ranks)}</table>{no_device}</div>"
    )
