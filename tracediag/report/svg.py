"""Inline SVG charts for the HTML report: no script, no external file, readable offline."""

from __future__ import annotations

from html import escape

import numpy as np

#: One colour per critical-path category (colour-blind-friendly Okabe-Ito palette).
CATEGORY_COLORS = {
    "compute": "#0072B2",
    "dma_transfer": "#E69F00",
    "dma_wait": "#D55E00",
    "collective_transfer": "#009E73",
    "collective_skew": "#CC79A7",
    "host": "#56B4E9",
    "gap": "#999999",
}
SEVERITY_COLORS = {"error": "#C62828", "warning": "#EF6C00", "info": "#1565C0"}


def _svg(width: int, height: int, body: list[str], label: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(label)}">'
        + "".join(body)
        + "</svg>"
    )


def _text(
    x: float, y: float, text: str, size: int = 12, anchor: str = "start", fill: str = "#222"
) -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" '
        f'fill="{fill}">{escape(text)}</text>'
    )


def stacked_bar(
    parts: list[tuple[str, float, str]], total: float, width: int = 860, caption: str = ""
) -> str:
    """One horizontal bar split into ``(label, value, colour)`` parts, a percent scale under it
    (``caption`` after 100%: what the whole is), and a legend below."""
    body = []
    x = 0.0
    for label, value, color in parts:
        w = width * value / total if total else 0.0
        if w > 0:
            body.append(
                f'<rect x="{x:.2f}" y="0" width="{w:.2f}" height="36" fill="{color}">'
                f"<title>{escape(label)}</title></rect>"
            )
        x += w
    body.append(f'<line x1="0" y1="38" x2="{width}" y2="38" stroke="#555"/>')
    for k in range(5):
        anchor = "start" if k == 0 else "end" if k == 4 else "middle"
        text = f"{25 * k}%" + (f" {caption}" if k == 4 and caption else "")
        body.append(_text(width * k / 4, 52, text, 11, anchor, "#555"))
    y = 80
    col = 0
    for label, _value, color in parts:
        lx = 10 + (col % 3) * (width // 3)
        body.append(f'<rect x="{lx}" y="{y - 10}" width="12" height="12" fill="{color}"/>')
        body.append(_text(lx + 18, y, label))
        col += 1
        if col % 3 == 0:
            y += 20
    height = y + (0 if col % 3 == 0 else 20)
    return _svg(width, height, body, "critical path by category")


def _heat(value: float) -> str:
    """White (0) to red (1) for how far a cell is from the median rank."""
    v = max(0.0, min(1.0, value))
    g = int(255 - 160 * v)
    return f"rgb(255,{g},{g})"


def heatmap(
    rows: list[str], columns: list[str], cells: list[list[tuple[str, float]]], cell_w: int = 110
) -> str:
    """A grid of ``(text, badness 0..1)`` cells: rows are ranks, columns metrics."""
    row_h = 22 if len(rows) <= 64 else max(4, 1400 // len(rows))
    left, top = 70, 24
    body = [
        _text(left + i * cell_w + cell_w / 2, 16, c, 12, "middle") for i, c in enumerate(columns)
    ]
    for r, (label, line) in enumerate(zip(rows, cells, strict=True)):
        y = top + r * row_h
        if row_h >= 12:
            body.append(_text(left - 8, y + row_h * 0.7, label, 11, "end"))
        for c, (text, badness) in enumerate(line):
            x = left + c * cell_w
            body.append(
                f'<rect x="{x}" y="{y}" width="{cell_w - 2}" height="{row_h - 2}" '
                f'fill="{_heat(badness)}"><title>{escape(label)}: {escape(columns[c])} {escape(text)}</title></rect>'
            )
            if row_h >= 12:
                body.append(_text(x + cell_w / 2, y + row_h * 0.7, text, 11, "middle"))
    return _svg(left + len(columns) * cell_w, top + len(rows) * row_h + 4, body, "per-rank heatmap")


#: (ns per unit, name) for a time axis: the largest unit the axis's span reaches.
_AXIS_UNITS = ((1_000_000_000, "s"), (1_000_000, "ms"), (1_000, "µs"), (1, "ns"))
#: Room below a time axis's line for its ticks and its caption.
AXIS_ROOM = 40


def axis_unit(span_ns: float) -> tuple[int, str]:
    """(ns per unit, unit name) of a time axis spanning ``span_ns``: ``(1_000_000, "ms")`` for
    8.1 ms, so its ticks read ``0, 2.032, ... 8.128`` under one caption naming ``ms``."""
    return next(((n, u) for n, u in _AXIS_UNITS if span_ns >= n), _AXIS_UNITS[-1])


def _time_axis(left, plot, axis_y, start, span, x, caption: str, prefix: str = "") -> list[str]:
    """A horizontal axis under a timeline: five ticks in one unit (the first and last kept
    inside the plot) and a caption naming the unit and what the times count from."""
    per, unit = axis_unit(span)
    out = [f'<line x1="{left}" y1="{axis_y}" x2="{left + plot}" y2="{axis_y}" stroke="#555"/>']
    for k in range(5):
        t = start + span * k // 4
        anchor = "start" if k == 0 else "end" if k == 4 else "middle"
        text = f"{prefix if k else ''}{(t - start) / per:.4g}"
        out.append(_text(x(t), axis_y + 16, text, 11, anchor))
    out.append(_text(left + plot, axis_y + 32, f"time ({unit}) {caption}", 11, "end", "#555"))
    return out


def timeline(
    start: int, end: int, lanes: list[tuple[str, int, int, str]], shade: tuple[int, int] | None,
    caption: str, width: int = 860,
) -> str:  # fmt: skip
    """Bars ``(label, start, end, colour)`` on one time axis from ``start`` to ``end``, the
    window ``shade`` highlighted; ``caption`` says what the axis's times count from."""
    left, lane_h, top = 220, 22, 10
    span = max(end - start, 1)
    plot = width - left - 10

    def x(t: int) -> float:
        return left + plot * (t - start) / span

    body = []
    height = top + len(lanes) * lane_h + 8 + AXIS_ROOM
    if shade:
        body.append(
            f'<rect x="{x(shade[0]):.1f}" y="0" width="{max(x(shade[1]) - x(shade[0]), 2):.1f}" '
            f'height="{height - AXIS_ROOM - 2}" fill="#FFF3C4"/>'
        )
    for i, (label, s, e, color) in enumerate(lanes):
        y = top + i * lane_h
        body.append(_text(left - 8, y + 15, label[:34], 11, "end"))
        body.append(
            f'<rect x="{x(s):.1f}" y="{y + 3}" width="{max(x(e) - x(s), 2):.1f}" height="{lane_h - 6}" '
            f'fill="{color}"><title>{escape(label)}</title></rect>'
        )
    body += _time_axis(left, plot, height - AXIS_ROOM, start, span, x, caption)
    return _svg(width, height, body, "timeline")


def line_chart(
    values: list[float],
    labels: list[str],
    marks: list[int],
    fmt,
    width: int = 860,
    height: int = 220,
) -> str:
    """A line over runs with dashed lines at the ``marks`` (indices of change points)."""
    left, top, bottom = 80, 10, 30
    n = len(values)
    lo, hi = min(values), max(values)
    pad = (hi - lo) * 0.1 or abs(hi) * 0.01 or 1.0
    lo, hi = lo - pad, hi + pad
    plot_w, plot_h = width - left - 10, height - top - bottom

    def px(i: int) -> float:
        return left + (plot_w * i / (n - 1) if n > 1 else plot_w / 2)

    def py(v: float) -> float:
        return top + plot_h * (hi - v) / (hi - lo)

    body = [
        f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" stroke="#555"/>',
        _text(left - 6, py(hi - pad) + 4, fmt(hi - pad), 11, "end"),
        _text(left - 6, py(lo + pad) + 4, fmt(lo + pad), 11, "end"),
    ]
    for m in marks:
        body.append(
            f'<line x1="{px(m):.1f}" y1="{top}" x2="{px(m):.1f}" y2="{top + plot_h}" '
            'stroke="#C62828" stroke-dasharray="5,4"/>'
        )
    points = " ".join(f"{px(i):.1f},{py(v):.1f}" for i, v in enumerate(values))
    body.append(f'<polyline points="{points}" fill="none" stroke="#0072B2" stroke-width="2"/>')
    for i, v in enumerate(values):
        body.append(
            f'<circle cx="{px(i):.1f}" cy="{py(v):.1f}" r="3" fill="#0072B2">'
            f"<title>{escape(labels[i])}: {escape(fmt(v))}</title></circle>"
        )
    body.append(_text(left, height - 8, labels[0] if labels else "", 11))
    body.append(_text(left + plot_w, height - 8, labels[-1] if labels else "", 11, "end"))
    return _svg(width, height, body, "trend")


def _skew_fill(level: int) -> str:
    """Grey for a rank not in the collective, then white (on time) to dark red (the latest)."""
    return ("#E0E0E0", "#FFFFFF", "#FFE0B2", "#FFB74D", "#F4511E", "#B71C1C")[level + 1]


def skew_grid(grid, fmt, width: int = 860) -> str:
    """Arrival lateness per rank (rows) and collective instance (columns, in time order), from a
    :class:`tracediag.analysis.arrival_skew.LatenessGrid`: a straggler is a dark row."""
    n_inst, n_ranks = grid.late.shape
    left, top = 70, 8
    cell_w = max(2.0, min(24.0, (width - left - 10) / max(n_inst, 1)))
    row_h = 18 if n_ranks <= 48 else max(3, 900 // n_ranks)
    body = []
    for c, rank in enumerate(grid.ranks):
        y = top + c * row_h
        if row_h >= 10:
            body.append(_text(left - 8, y + row_h * 0.75, f"rank {rank}", 11, "end"))
        for r in range(n_inst):  # a loop over drawn cells (capped by the caller)
            late = grid.late[r, c]
            tip = (
                f"rank {rank}, {grid.ops[r]} #{r + 1}: not a participant"
                if np.isnan(late)
                else f"rank {rank}, {grid.ops[r]} #{r + 1}: arrived {fmt(abs(late))} "
                + ("after" if late > 0 else "before")
                + " the others' median"
                + (" (last)" if grid.last[r, c] else "")
            )
            body.append(
                f'<rect x="{left + r * cell_w:.1f}" y="{y}" width="{max(cell_w - 1, 1):.1f}" '
                f'height="{row_h - 1}" fill="{_skew_fill(int(grid.level[r, c]))}">'
                f"<title>{escape(tip)}</title></rect>"
            )
    axis_y = top + n_ranks * row_h + 4
    body.append(
        f'<line x1="{left}" y1="{axis_y}" x2="{left + n_inst * cell_w:.1f}" y2="{axis_y}" '
        'stroke="#555"/>'
    )
    # The columns are instances, not a time scale: the axis says so and how many.
    caption = f"collective instances 1 to {n_inst}, in time order \u2192"
    body.append(_text(left, axis_y + 16, caption, 11, "start", "#555"))
    return _svg(
        int(max(left + n_inst * cell_w + 10, left + 8 * len(caption))), axis_y + 24, body,
        "collective arrival skew",
    )  # fmt: skip


#: Characters of a worst-window lane label drawn before it is cut with an ellipsis.
LANE_LABEL = 38


def window_lanes(view, caption: str, width: int = 860) -> str:
    """The events of a time window, one lane per track, merged to pixel resolution, with the
    critical path's events underlined in black and the finding's own window shaded;
    ``caption`` says what the axis's times count from."""
    # The label column fits "rank 12 cpu 123456/123457 (thread #10)" (peers.track_labels).
    left, lane_h, top = 250, 20, 6
    plot = width - left - 10
    scale = plot / 640  # the view's pixel grid is html_views.PLOT_PX wide
    span = max(view.end_ns - view.start_ns, 1)

    def x(t: int) -> float:
        return left + plot * (t - view.start_ns) / span

    height = top + len(view.lanes) * lane_h + 8 + AXIS_ROOM
    body = [
        f'<rect x="{x(view.finding_start_ns):.1f}" y="0" '
        f'width="{max(x(view.finding_end_ns) - x(view.finding_start_ns), 2):.1f}" '
        f'height="{height - AXIS_ROOM - 2}" fill="#FFF3C4"/>'
    ]
    for i, lane in enumerate(view.lanes):
        y = top + i * lane_h
        label = lane.label if len(lane.label) <= LANE_LABEL else lane.label[: LANE_LABEL - 1] + "…"
        body.append(_text(left - 8, y + 14, label, 11, "end"))
        for (a, b), name in zip(lane.bars, lane.names, strict=True):
            body.append(
                f'<rect x="{left + a * scale:.1f}" y="{y + 2}" width="{max((b - a) * scale, 1):.1f}" '
                f'height="{lane_h - 8}" fill="{lane.color}"><title>{escape(name)}</title></rect>'
            )
        for a, b in lane.path_bars:
            body.append(
                f'<rect x="{left + a * scale:.1f}" y="{y + lane_h - 6}" '
                f'width="{max((b - a) * scale, 1):.1f}" height="3" fill="#111"/>'
            )
    body += _time_axis(left, plot, height - AXIS_ROOM, view.start_ns, span, x, caption, "+")
    return _svg(width, height, body, "worst window timeline")
