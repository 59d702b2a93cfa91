"""The HTML report: one self-contained file (inline CSS and SVG, no script, nothing fetched)
with pictures where people would rather look than read: the critical path by category, a
per-rank heatmap, the findings on a timeline with the worst window shaded, and a trend chart
when a history is given."""

from __future__ import annotations

from html import escape
from statistics import median

from tracediag.model.units import fmt_ns
from tracediag.model.wording import rank_list, ranks_label
from tracediag.report.bounds_precision import (
    BOUND_KEYS,
    bounds_note,
    bounds_rows,
    device_bounds,
    gap_note,
    gap_rows,
    precision_rows,
)
from tracediag.report.html_steps import steps_section
from tracediag.report.labels import severity_counts, total_saving, window
from tracediag.report.step_lines import has_steps
from tracediag.report.svg import (
    CATEGORY_COLORS,
    SEVERITY_COLORS,
    heatmap,
    line_chart,
    skew_grid,
    stacked_bar,
    timeline,
    window_lanes,
)

STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:940px;
color:#222;line-height:1.4}
h1{font-size:22px;margin-bottom:4px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:13px}td,th{padding:3px 10px;border-bottom:1px solid #eee;
text-align:left}th{background:#f5f5f5}.num{text-align:right;font-variant-numeric:tabular-nums}
.sev{color:#fff;border-radius:3px;padding:1px 6px;font-size:12px}
.error{background:#C62828}.warning{background:#EF6C00}.info{background:#1565C0}
.pass{color:#2E7D32;font-weight:600}.fail{color:#C62828;font-weight:600}
details{margin:6px 0}summary{cursor:pointer}.muted{color:#666;font-size:12px}
.bar{display:inline-block;height:9px;vertical-align:middle;margin-right:6px}
"""

#: Findings drawn on the timeline (the rest are in the table).
MAX_LANES = 15
#: The bounds table's bar per bound: its colour (one per column, none used elsewhere on the page)
#: and the width of a bar as long as the rank's window.
BOUND_COLORS = ("#8E24AA", "#CE93D8", "#00838F", "#80DEEA", "#6D4C41")
BOUND_BAR_PX = 60
#: From this many instances on, the skew heatmap may show a selection (html_views caps it).
MAX_SKEW_NOTE = 8


def _summary(report: dict) -> str:
    s = report["summary"]
    rows = [
        ("Inputs", ", ".join(escape(i["path"]) for i in report["inputs"]) or "-"),
        ("Ranks", escape(rank_list([r["rank"] for r in report["ranks"]]))),
        _path_row(report),
        ("Findings", f"{s['findings']} ({escape(severity_counts(s))})"),
        _saving_row(s),
    ]
    gate = report.get("gate")
    if gate:
        from tracediag.ci.gate import verdict_line

        css = "pass" if gate["passed"] else "fail"
        rows.append(("Gate", f'<span class="{css}">{escape(verdict_line(gate))}</span>'))
    return "<table>" + "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows) + "</table>"


def _path_row(report: dict) -> tuple[str, str]:
    """The critical path's length, saying what it covers: the whole traced window, which
    holds several steps when the trace marks them (the typical step is in the Steps section)."""
    length = fmt_ns(report["critical_path"]["length_ns"])
    if not has_steps(report):
        return "Critical path (whole window)", length
    s = report["step_summary"]
    return (
        f"Critical path (whole window, {s['n']} steps)",
        f'{length} <span class="muted">(typical step {escape(fmt_ns(s["typical_ns"]))}: '
        "see Steps)</span>",
    )


def _saving_row(summary: dict) -> tuple[str, str]:
    label, value, note = total_saving(summary)
    return label, f'{value} <span class="muted">({escape(note)})</span>'


def _critical_path(report: dict) -> str:
    cp = report["critical_path"]
    total = cp["length_ns"]
    parts = [
        (
            f"{c} {fmt_ns(ns)} ({100.0 * ns / total:.1f}%)" if total else c,
            ns,
            CATEGORY_COLORS.get(c, "#777"),
        )
        for c, ns in cp["by_category_ns"].items()
    ]
    engines = ", ".join(
        f"{escape(e)} {fmt_ns(ns)}"
        for e, ns in sorted(cp["compute_by_engine_ns"].items(), key=lambda kv: -kv[1])
    )
    return (
        "<h2>Critical path by category</h2>"
        + stacked_bar(parts, total, caption=f"of {fmt_ns(total)}")
        + (f'<p class="muted">compute by engine: {engines}</p>' if engines else "")
    )


def _rank_heatmap(report: dict, views=None) -> str:
    ranks = report["ranks"]
    if not ranks:
        return ""
    columns = ["step time", "compute", "communication", "memory", "idle", "MFU"]

    def value(r: dict, col: str):
        if col == "step time":
            return r["step_time_ns"]
        if col == "MFU":
            return r.get("mfu_pct")
        return r["breakdown_pct"].get(col)

    # One measure shades a whole row, so the darkest row is the rank that measure blames: the
    # arrival lateness COL201 and the skew grid read when the trace has collectives (a
    # straggler's own step time is no longer than the ranks that wait for it), else step time.
    lateness = getattr(views, "rank_lateness", None)
    if lateness is not None:
        columns = ["arrival lateness", *columns]
        measure = "mean arrival lateness at collectives (arrival minus the others' median)"
        full = f"full red: {fmt_ns(lateness.scale_ns)} late, the latest rank or 0.5% of the path"
        shade = {
            r["rank"]: max(lateness.mean_ns.get(r["rank"], 0.0), 0.0) / lateness.scale_ns
            if lateness.scale_ns > 0
            else 0.0
            for r in ranks
        }
    else:
        mid = median(r["step_time_ns"] for r in ranks)
        measure = "step time against the median rank"
        full = "full red: 10% more step time than the median rank"
        shade = {
            r["rank"]: (r["step_time_ns"] - mid) / (0.10 * mid) if mid > 0 else 0.0 for r in ranks
        }
    cells = []
    for r in ranks:
        line = []
        for col in columns:
            if col == "arrival lateness":
                v = lateness.mean_ns.get(r["rank"])
                text = "-" if v is None else ("+" if v > 0 else "") + fmt_ns(v)
            else:
                v = value(r, col)
                text = "-" if v is None else fmt_ns(v) if col == "step time" else f"{v:.1f}%"
            line.append((text, shade[r["rank"]]))
        cells.append(line)
    return (
        f"<h2>Ranks, shaded by {escape(measure.split(' (')[0])}</h2>"
        f'<p class="muted">Each row is shaded by its rank\'s {escape(measure)}: white at or '
        f"below 0, {escape(full)}. The other columns are shown, not shaded.</p>"
        + heatmap([f"rank {r['rank']}" for r in ranks], columns, cells, 100 if lateness else 110)
    )


def _timeline(report: dict) -> str:
    cp = report["critical_path"]
    timed = [f for f in report["findings"] if f["start_ns"] or f["end_ns"]][:MAX_LANES]
    if not timed:
        return ""
    lanes = [
        (f"{f['code']} {ranks_label(f['ranks']) if f['ranks'] else 'job'}", f["start_ns"], f["end_ns"],
         SEVERITY_COLORS.get(f["severity"], "#777"))
        for f in timed
    ]  # fmt: skip
    worst = timed[0]
    return (
        "<h2>Findings on the critical path's timeline</h2>"
        f'<p class="muted">The worst window (largest saving: {escape(worst["code"])}, '
        f"{escape(window(worst, cp['start_ns']))}) is shaded.</p>"
        + timeline(
            cp["start_ns"],
            cp["end_ns"],
            lanes,
            (worst["start_ns"], worst["end_ns"]),
            "from the start of the critical path",
        )
    )


def _skew(views) -> str:
    if views is None or views.skew is None:
        return ""
    g = views.skew
    shown = f"{len(g.keys)} collective instances" + (
        " (the latest-arriving, in time order)"
        if len(g.keys) >= MAX_SKEW_NOTE
        else ", in time order"
    )
    return (
        "<h2>Collective arrival skew</h2>"
        f'<p class="muted">Each cell is one rank at one of {shown}, shaded by how late it arrived '
        "against the median of the others (white: on time; dark red: the latest). A straggler is "
        "a dark row; grey: not a participant. Hover a cell for its figures.</p>"
        + skew_grid(g, fmt_ns)
    )


def _worst_window(report: dict, views) -> str:
    if views is None or views.window is None:
        return ""
    w = views.window
    t0 = report["critical_path"]["start_ns"]

    def at(ns: int) -> str:  # a time as the rest of the page gives it: into the critical path
        return escape(fmt_ns(ns - t0))

    return (
        f"<h2>Worst window: {escape(w.code)}</h2>"
        f'<p class="muted">Events of {escape(ranks_label(w.ranks))}, where the critical path '
        f"runs in this window, from {at(w.start_ns)} to {at(w.end_ns)} into the critical path, "
        "on the tracks it runs on, then their busiest; the finding's window "
        f"({at(w.finding_start_ns)} to {at(w.finding_end_ns)}) is shaded and the critical "
        "path's events are underlined in black.</p>"
        + window_lanes(w, "from the start of the window")
    )


def _table(header: list[str], rows: list[list[str]], text: tuple[int, ...]) -> str:
    """A plain table of cells already escaped: the columns ``text`` left-aligned, the others
    right-aligned numbers."""
    head = "".join(
        f"<th>{escape(h)}</th>" if i in text else f'<th class="num">{escape(h)}</th>'
        for i, h in enumerate(header)
    )
    body = "".join(
        "<tr>"
        + "".join(
            f"<td>{c}</td>" if i in text else f'<td class="num">{c}</td>' for i, c in enumerate(r)
        )
        + "</tr>"
        for r in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _bounds(report: dict) -> str:
    """Bounds per rank (as in the text report), each with a bar scaled to the rank's window,
    and the matmuls by numeric format."""
    out = []
    header, rows = bounds_rows(report)
    if rows:
        cells = []
        for b, row in zip(device_bounds(report), rows, strict=True):
            total = b["window"]["total_ns"] or 0
            line = [escape(row[0]), escape(row[1])]
            for key, color, text in zip(BOUND_KEYS, BOUND_COLORS, row[2:-1], strict=True):
                ns = b["bounds_ns"][key]
                px = round(BOUND_BAR_PX * min(ns / total, 1.0)) if ns and total > 0 else 0
                bar = f'<span class="bar" style="width:{px}px;background:{color}"></span>'
                line.append((bar if px else "") + escape(text))
            cells.append([*line, escape(row[-1])])
        out += [
            "<h2>Bounds per rank</h2>",
            '<p class="muted">The time each engine family needs, against the rank\'s window '
            "(a bar is its share of the window): DMA active and DMA at peak bandwidth (memory), "
            "tensor-engine active and all matmul FLOPs at peak (compute), the busiest engine "
            "(pipeline). Gaps and sources: <code>tracediag bounds --format json</code>.</p>",
            _table(header, cells, text=(0, len(header) - 1)),
        ]
    if note := bounds_note(report):  # the ranks without device work, in one line
        out += [] if rows else ["<h2>Bounds per rank</h2>"]
        out.append(f'<p class="muted">{escape(note)}</p>')
    header, rows = gap_rows(report)
    if rows:
        esc = [[escape(c) for c in r] for r in rows]
        out += [
            "<h2>Gaps between the bounds</h2>",
            '<p class="muted">What the step would gain with each gap closed, by replay of the '
            "dependency graph (never more than the gap).</p>",
            _table(header, esc, text=(0, 1, 2)),
        ]
    elif gap := gap_note(report):
        out.append(f'<p class="muted">Gap savings {escape(gap)}.</p>')
    header, rows = precision_rows(report)
    if rows:
        esc = [[escape(c) for c in r] for r in rows]
        out += ["<h2>Matmuls by numeric format</h2>", _table(header, esc, text=(0, 1))]
    return "".join(out)


def _gate(report: dict) -> str:
    """``check``'s verdict and a line per failure, budget and baseline change (as in text)."""
    gate = report.get("gate")
    if not gate:
        return ""
    from tracediag.ci.gate import verdict_line
    from tracediag.report.gate_text import baseline_summary, gate_lines

    css = "pass" if gate["passed"] else "fail"
    icon = {"x": "&#10060;", "ok": "&#9989;", "-": "&#8505;&#65039;"}
    items = "".join(f"<li>{icon[m]} {escape(t)}</li>" for m, t in gate_lines(gate))
    base = f"<p>{escape(baseline_summary(gate['baseline']))}</p>" if gate["baseline"] else ""
    return f'<h2>Gate</h2><p class="{css}">{escape(verdict_line(gate))}</p>{base}' + (
        f"<ul>{items}</ul>" if items else ""
    )


def _findings(report: dict) -> str:
    if not report["findings"]:
        return "<h2>Findings</h2><p>No findings.</p>"
    out = ["<h2>Findings</h2>"]
    for f in report["findings"]:
        where = ", ".join(
            [ranks_label(f["ranks"]) if f["ranks"] else "job"]
            + [f"{k} {f[k]}" for k in ("engine", "track", "layer", "op") if f.get(k)]
        )
        out.append(
            f'<details><summary><span class="sev {escape(f["severity"])}">{escape(f["severity"])}'
            f"</span> <b>{escape(f['code'])}</b> {escape(f['title'])} - saving "
            f"{fmt_ns(f['saving_ns'])} ({escape(where)})</summary>"
            f"<p>{escape(f['message'])}</p><p><i>Fix:</i> {escape(f['suggestion'])}</p>"
            f'<p class="muted">impact {fmt_ns(f["impact_ns"])} ({f["impact_pct"]:.2f}% of the path); '
            f"window {escape(window(f, report['critical_path']['start_ns']) or '-')}</p></details>"
        )
    return "".join(out)


def _trend(trend: dict | None) -> str:
    if not trend:
        return ""
    from tracediag.ci.metrics import CATALOG, format_value
    from tracediag.report.trend_render import run_name

    out = ["<h2>Trend</h2>"]
    for m in trend["metrics"]:
        if len(m["values"]) < 2:
            continue
        metric = CATALOG[m["metric"]]
        marks = [m["run_ids"].index(cp["run_id"]) for cp in m["change_points"]]
        out.append(f"<h3>{escape(metric.description)} ({escape(m['metric'])})</h3>")
        out.append(
            line_chart(
                m["values"],
                [f"run {i}" for i in m["run_ids"]],
                marks,
                lambda v, mt=metric: format_value(mt, v),
            )
        )
        for cp in m["change_points"]:
            word = "regression" if cp["regression"] else "improvement"
            out.append(
                f'<p class="muted">change at {escape(run_name(cp))}: '
                f"{escape(format_value(metric, cp['before_mean']))} to "
                f"{escape(format_value(metric, cp['after_mean']))} ({word}, p = {cp['p_value']:.3g})</p>"
            )
    return "".join(out)


def render_html(report: dict, trend: dict | None = None, views=None) -> str:
    """The report (and, given, the trend of :func:`tracediag.ci.trend.trend` and the trace's
    :class:`~tracediag.report.html_views.HtmlViews`) as one HTML page."""
    tool = report.get("tool", {})
    title = f"tracediag report: {fmt_ns(report['critical_path']['length_ns'])} critical path"
    body = [
        f"<h1>{escape(title)}</h1>",
        f'<p class="muted">{escape(tool.get("name", "tracediag"))} {escape(str(tool.get("version", "")))}</p>',
        _summary(report),
        _critical_path(report),
        _rank_heatmap(report, views),
        _skew(views),
        _timeline(report),
        _worst_window(report, views),
        _bounds(report),
        steps_section(report),
        _findings(report),
        _gate(report),
        _trend(trend),
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>"
        + "\n".join(b for b in body if b)
        + "</body></html>\n"
    )
