"""The terminal report: inputs, ranks, the critical path by category, findings ranked by saving.

Reads only ``Diagnosis.to_dict()``; lines fit ``width`` columns (100 unless the caller sizes it
to a terminal); ANSI colour only when asked for.
"""

from __future__ import annotations

import re
import textwrap

from tracediag.model.units import fmt_ns
from tracediag.model.wording import plural, ranks_label
from tracediag.report.bounds_precision import text_lines as bounds_text
from tracediag.report.labels import layout_label, percent, severity_counts, total_saving, window
from tracediag.report.step_lines import (
    has_steps,
    no_outlier_text,
    outlier_texts,
    shows_steps,
    steps_headline,
    steps_seen,
)

WIDTH = 100
MIN_WIDTH = 60  # narrower requests are laid out at this width
_BAR = 30  # characters for 100% of the critical path
_MAX_INPUTS = 8  # more inputs are summarised in one line
_SEVERITY_STYLE = {"error": "1;31", "warning": "1;33", "info": "36"}


class _Style:
    def __init__(self, color: bool):
        self.color = color

    def __call__(self, text: str, code: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.color else text

    def heading(self, text: str) -> str:
        return self(text, "1")

    def severity(self, sev: str, width: int = 0) -> str:
        # Pad before styling so escape codes do not upset the alignment.
        return self(sev.ljust(width), _SEVERITY_STYLE.get(sev, "0"))


# "196.7 µs", "49.2 GB/s": keep a number and its unit on one line.
_NUMBER_UNIT = re.compile(r"(\d) (ns|µs|ms|s|B|KiB|MiB|GiB|GB/s)\b")
_NBSP = "\u00a0"  # textwrap splits on ASCII whitespace only


def _wrap(text: str, indent: int, hanging: int, width: int = WIDTH) -> list[str]:
    """``text`` wrapped to ``width``, first line indented by ``indent``, the rest by ``hanging``."""
    glued = _NUMBER_UNIT.sub(rf"\1{_NBSP}\2", text)
    lines = textwrap.wrap(
        glued, width, initial_indent=" " * indent, subsequent_indent=" " * hanging
    )
    return [line.replace(_NBSP, " ") for line in lines]


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _inputs(report: dict, width: int) -> list[str]:
    inputs = report["inputs"]
    lines = []
    for inp in inputs[:_MAX_INPUTS]:
        where = f"{inp['format']:<16} {ranks_label(inp['ranks'])}"
        room = max(width - 4 - len(where), 12)
        lines.append(_clip(f"  {_clip(inp['path'], room):<{room}}  {where}", width))
    if len(inputs) > _MAX_INPUTS:
        lines.append(f"  ... and {len(inputs) - _MAX_INPUTS} more inputs")
    return lines or ["  (none recorded)"]


def _pct_cell(pct: dict, key: str, width: int) -> str:
    return f"{pct[key]:>{width - 1}.1f}%" if key in pct else f"{'-':>{width}}"


#: The ranks table after its rank column: (header, width, alignment). On a narrow terminal the
#: columns of _NARROW_DROPS give way, in that order.
_RANK_COLUMNS = (
    ("format", 16, "<"),
    ("hardware", 16, "<"),
    ("step time", 11, ">"),
    ("clock offset", 13, ">"),
    ("compute", 8, ">"),
    ("comm", 6, ">"),
    ("memory", 7, ">"),
    ("idle", 6, ">"),
)
_NARROW_DROPS = ("hardware", "format", "clock offset")


def _rank_columns(width: int) -> list[tuple[str, int, str]]:
    columns = list(_RANK_COLUMNS)
    for name in _NARROW_DROPS:
        if 9 + sum(w + 1 for _, w, _ in columns) - 1 <= width:
            break
        columns = [c for c in columns if c[0] != name]
    return columns


def _ranks(report: dict, width: int) -> list[str]:
    columns = _rank_columns(width)

    def row(rank: str, cells: dict[str, str]) -> str:
        text = " ".join(f"{_clip(cells[h], w):{a}{w}}" for h, w, a in columns)
        return _clip(f"  {rank:>5}  {text}", width)

    lines = [row("rank", {h: h for h, _, _ in columns})]
    repairs = []
    for r in report["ranks"]:
        pct = r["breakdown_pct"]
        cells = {
            "format": r["format"] or "-",
            "hardware": r["hardware"] or "-",
            "step time": fmt_ns(r["step_time_ns"]),
            "clock offset": fmt_ns(r["clock_offset_ns"]),
            "compute": _pct_cell(pct, "compute", 8),
            "comm": _pct_cell(pct, "communication", 6),
            "memory": _pct_cell(pct, "memory", 7),
            "idle": _pct_cell(pct, "idle", 6),
        }
        lines.append(row(str(r["rank"]), cells))
        if r["repairs"]:
            done = ", ".join(f"{n} {reason}" for reason, n in sorted(r["repairs"].items()))
            repairs.append(f"rank {r['rank']}: {done}")
    by_clock: dict[str, list[int]] = {}
    for r in report["ranks"]:
        by_clock.setdefault(r["clock"] or "as recorded", []).append(r["rank"])
    clocks = "; ".join(f"{how} {ranks_label(ranks)}" for how, ranks in by_clock.items())
    lines += _wrap(f"Clock alignment: {clocks}", 2, 4, width)
    if report.get("layout"):  # reports saved before layouts existed have none
        lines += _wrap(f"Parallel layout: {layout_label(report['layout'])}", 2, 4, width)
    by_source: dict[str, list[int]] = {}
    for r in report["ranks"]:
        source = (r.get("hardware_peaks") or {}).get("source")  # older reports have none
        if source and source != "unknown":
            by_source.setdefault(source, []).append(r["rank"])
    if by_source:
        peaks = "; ".join(f"{how} {ranks_label(ranks)}" for how, ranks in by_source.items())
        lines += _wrap(f"Hardware peaks from: {peaks}", 2, 4, width)
    if repairs:
        lines.append("  Rows repaired or dropped:")
        lines += [_clip(f"    {line}", width) for line in repairs]
    return lines


def _critical_path(report: dict, width: int) -> list[str]:
    cp = report["critical_path"]
    length = cp["length_ns"]
    lines = []
    bar_width = min(_BAR, width - 46)  # what the category, time and share leave
    for cat, ns in cp["by_category_ns"].items():
        bar = "█" * round(bar_width * ns / length) if length else ""
        lines.append(f"  {cat:<20} {fmt_ns(ns):>11} {percent(ns, length):>7}  {bar}")
    engines = sorted(cp["compute_by_engine_ns"].items(), key=lambda kv: -kv[1])
    if engines:
        # One engine's figures stay on one line.
        parts = ", ".join(
            f"{e} {fmt_ns(ns)} ({percent(ns, length)})".replace(" ", _NBSP) for e, ns in engines
        )
        lines += _wrap(f"compute by engine: {parts}", 2, 4, width)
    return lines


#: Info findings whose replay saves less than this share of the critical path are left out of
#: the text report (one line names them; JSON, Markdown and HTML list them in full), except the
#: trace family's, which say how far the report can be trusted.
QUIET_SAVING_PCT = 0.1


def is_quiet(f: dict, length_ns: int) -> bool:
    """Whether the text report leaves finding ``f`` out: info, outside the trace family, with a
    saving under :data:`QUIET_SAVING_PCT` of the path (``length_ns``)."""
    if f["severity"] != "info" or f["family"] == "trace":
        return False
    return f["saving_ns"] < QUIET_SAVING_PCT / 100.0 * length_ns if length_ns else True


def _facts(f: dict) -> str:
    if not f["saving_ns"] and not f["impact_ns"]:
        return ""
    saving = fmt_ns(f["saving_ns"]) if f["saving_ns"] else "none by replay"
    return f"impact {fmt_ns(f['impact_ns'])} ({f['impact_pct']:.1f}% of path), saving {saving}"


def _findings(report: dict, style: _Style, width: int) -> list[str]:
    path_start = report["critical_path"]["start_ns"]
    length = report["critical_path"]["length_ns"]
    lines: list[str] = []
    shown = [f for f in report["findings"] if not is_quiet(f, length)]
    quiet = [f for f in report["findings"] if is_quiet(f, length)]
    for n, f in enumerate(shown, 1):
        head = f"{n:>3}. {f['code']:<7} "
        title = _clip(f["title"], width - len(head) - 8)
        lines.append(f"{head}{style.severity(f['severity'], 8)}{style.heading(title)}")
        where = [ranks_label(f["ranks"])] if f["ranks"] else []
        # the track where it says more than the engine (a queue, a stream, a thread)
        where += [
            f"{k} {f[k]}"
            for k in ("engine", "track", "layer", "op")
            if f[k] and not (k == "track" and f[k] == f["engine"])
        ]
        span = window(f, path_start)
        if span:
            where.append(f"window {span}")
        if steps_seen(f):
            where.append(steps_seen(f))
        for text in (" | ".join(where), _facts(f), f["message"]):
            lines += _wrap(text, 5, 7, width)
        if f["suggestion"]:
            lines += _wrap(f"fix: {f['suggestion']}", 5, 10, width)
        lines.append("")
    if quiet:
        names = ", ".join(
            f"{f['code']} {ranks_label(f['ranks'])}" if f["ranks"] else f["code"] for f in quiet
        )
        lines += _wrap(
            f"Not shown: {plural(len(quiet), 'info finding')} whose fix saves under"
            f" {QUIET_SAVING_PCT}% of the path by replay ({names}); --format markdown, html or"
            f" json lists {'it' if len(quiet) == 1 else 'them'}.",
            2,
            4,
            width,
        )
        lines.append("")
    return lines or ["  No findings.", ""]


def _steps(report: dict, width: int) -> list[str]:
    """The steps' count, typical step, spread and outliers (only for more than one step)."""
    lines = _wrap(steps_headline(report) + ".", 2, 4, width)
    outliers = outlier_texts(report)
    if outliers:
        lines.append("  Outlier steps:")
        for text in outliers:
            lines += _wrap(text, 4, 6, width)
    else:
        lines += _wrap(no_outlier_text(report), 2, 4, width)
    lines += _wrap(
        "The ranks' step time is each rank's median step; the critical path and the findings"
        " cover every step.",
        2,
        4,
        width,
    )
    return lines


def render_text(report: dict, *, color: bool = False, width: int = WIDTH) -> str:
    """The report for a terminal; ``color`` adds ANSI styles (the caller decides: TTY, NO_COLOR);
    lines fit ``width`` columns (at least :data:`MIN_WIDTH`)."""
    style = _Style(color)
    width = max(width, MIN_WIDTH)
    cp = report["critical_path"]
    summary = report["summary"]
    tool = report["tool"]
    title = (
        f"{tool['name']} {tool['version']}: {plural(len(report['ranks']), 'rank')},"
        f" critical path {fmt_ns(cp['length_ns'])},"
        f" {plural(summary['findings'], 'finding')} ({severity_counts(summary)})"
    )
    out = [*(style.heading(line) for line in _wrap(title, 0, 2, width)), ""]
    out += [style.heading("Inputs"), *_inputs(report, width), ""]
    out += [style.heading("Ranks"), *_ranks(report, width), ""]
    if has_steps(report):
        out += [style.heading("Steps"), *_steps(report, width), ""]
    elif shows_steps(report):  # one step, and marker-only ones left out: say so
        out += [style.heading("Steps"), *_wrap(steps_headline(report) + ".", 2, 4, width), ""]
    out += [
        style.heading(f"Critical path: {fmt_ns(cp['length_ns'])}, by category"),
        *_critical_path(report, width),
        "",
    ]
    out += bounds_text(report, width, style.heading)
    findings_head = "Findings, by what-if saving (windows from the start of the critical path)"
    out += [style.heading(_clip(findings_head, width)), *_findings(report, style, width)]
    label, value, note = total_saving(summary)
    out += _wrap(f"{label}: {value} ({note}).", 0, 2, width)
    return "\n".join(out) + "\n"
