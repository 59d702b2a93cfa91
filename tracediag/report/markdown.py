"""The Markdown report, sized for a pull-request comment: summary, critical path, findings."""

from __future__ import annotations

import html

from tracediag.model.units import fmt_ns
from tracediag.model.wording import rank_list, ranks_label
from tracediag.report.bounds_precision import markdown_lines as bounds_markdown
from tracediag.report.labels import layout_label, percent, severity_counts, total_saving, window
from tracediag.report.step_lines import (
    has_steps,
    no_outlier_text,
    outlier_texts,
    shows_steps,
    steps_headline,
    steps_seen,
)

#: Rows of the findings table and findings detailed below it; the rest is counted, since a
#: PR comment has a size limit (65536 characters on GitHub).
MAX_ROWS = 30
MAX_DETAILS = 5


def _cell(value) -> str:
    text = str(value) if value not in ("", None) else "-"
    return text.replace("|", "\\|").replace("\n", " ")


def _table(header: list[str], rows: list[list], align: str) -> list[str]:
    """A table; ``align`` holds one of ``l``/``r`` per column."""
    rule = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(rule) + " |"]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return lines


def _summary(report: dict) -> list[str]:
    cp = report["critical_path"]
    summary = report["summary"]
    formats = sorted({i["format"] for i in report["inputs"]})
    rows = [
        ["Inputs", f"{len(report['inputs'])} ({', '.join(formats) or '-'})"],
        ["Ranks", rank_list([r["rank"] for r in report["ranks"]])],
        ["Critical path", fmt_ns(cp["length_ns"])],
        *(
            [["Parallel layout", layout_label(report["layout"])]]
            if report.get("layout")  # reports saved before layouts existed have none
            else []
        ),
        ["Findings", f"{summary['findings']} ({severity_counts(summary)})"],
        _saving_row(summary),
        ["Gate", f"fail on {report['config']['fail_on']}"],
    ]
    return _table(["", ""], rows, "ll")


def _saving_row(summary: dict) -> list[str]:
    label, value, note = total_saving(summary)
    return [label, f"{value} ({note})"]


def _ranks(report: dict) -> list[str]:
    rows = []
    for r in report["ranks"]:
        pct = r["breakdown_pct"]
        rows.append(
            [
                r["rank"],
                r["format"],
                r["hardware"],
                fmt_ns(r["step_time_ns"]),
                fmt_ns(r["clock_offset_ns"]),
            ]
            + [
                f"{pct[k]:.1f}%" if k in pct else "-"
                for k in ("compute", "communication", "memory", "idle")
            ]
        )
    header = [
        "rank",
        "format",
        "hardware",
        "step time",
        "clock offset",
        "compute",
        "comm",
        "memory",
        "idle",
    ]
    table = _table(header, rows, "rlllrrrrr")
    return ["<details><summary>Per rank</summary>", "", *table, "", "</details>"]


def _steps(report: dict) -> list[str]:
    """The steps' count, typical step, spread and outliers with their causes."""
    lines = [steps_headline(report) + ".", ""]
    outliers = outlier_texts(report)
    lines += [f"- Outlier {text}" for text in outliers] if outliers else [no_outlier_text(report)]
    return [*lines, ""]


def _critical_path(report: dict) -> list[str]:
    cp = report["critical_path"]
    length = cp["length_ns"]
    rows = [[c, fmt_ns(ns), percent(ns, length)] for c, ns in cp["by_category_ns"].items()]
    lines = _table(["category", "time", "% of path"], rows, "lrr")
    engines = sorted(cp["compute_by_engine_ns"].items(), key=lambda kv: -kv[1])
    if engines:
        parts = ", ".join(f"{e} {fmt_ns(ns)} ({percent(ns, length)})" for e, ns in engines)
        lines += ["", f"Compute by engine: {parts}."]
    return lines


def _findings(report: dict) -> list[str]:
    findings = report["findings"]
    if not findings:
        return ["No findings."]
    rows = [
        [
            n,
            f"`{f['code']}`",
            f["severity"],
            rank_list(f["ranks"]),
            f["engine"],
            f["layer"],
            f"{fmt_ns(f['impact_ns'])} ({f['impact_pct']:.1f}%)",
            fmt_ns(f["saving_ns"]),
            f["title"],
        ]
        for n, f in enumerate(findings[:MAX_ROWS], 1)
    ]
    header = ["#", "code", "severity", "ranks", "engine", "layer", "impact", "saving", "title"]
    lines = _table(header, rows, "rlllllrrl")
    if len(findings) > MAX_ROWS:
        lines += ["", f"... and {len(findings) - MAX_ROWS} more findings (see the JSON report)."]
    return lines


def _details(report: dict) -> list[str]:
    path_start = report["critical_path"]["start_ns"]
    lines: list[str] = []
    for f in report["findings"][:MAX_DETAILS]:
        title = html.escape(f["title"])  # inside HTML, unlike the rest of the Markdown
        summary = f"<b>{f['code']}</b> {title}: saving {fmt_ns(f['saving_ns'])}"
        lines += [f"<details><summary>{summary}</summary>", "", f["message"], ""]
        facts = [ranks_label(f["ranks"])] if f["ranks"] else []
        facts += [f"{k} `{f[k]}`" for k in ("engine", "track", "layer", "op") if f[k]]
        span = window(f, path_start)
        if span:
            facts.append(f"window {span} from the start of the critical path")
        if steps_seen(f):
            facts.append(steps_seen(f))
        facts.append(f"impact {fmt_ns(f['impact_ns'])} ({f['impact_pct']:.1f}% of the path)")
        lines += ["- " + "; ".join(facts), ""]
        if f["suggestion"]:
            lines += [f"**How to fix:** {f['suggestion']}", ""]
        lines += ["</details>", ""]
    return lines


def render_markdown(report: dict) -> str:
    """The report as GitHub-flavoured Markdown."""
    cp = report["critical_path"]
    tool = report["tool"]
    out = [f"## {tool['name']} report", "", *_summary(report), "", *_ranks(report), ""]
    if has_steps(report):
        out += ["### Steps", "", *_steps(report)]
    elif shows_steps(report):  # one step, and marker-only ones left out: say so
        out += ["### Steps", "", steps_headline(report) + ".", ""]
    out += [f"### Critical path ({fmt_ns(cp['length_ns'])})", "", *_critical_path(report), ""]
    out += bounds_markdown(report, _table)
    out += ["### Findings, by what-if saving", "", *_findings(report), ""]
    if report["findings"]:
        out += [
            f"### Top {min(MAX_DETAILS, len(report['findings']))} findings",
            "",
            *_details(report),
        ]
    out.append(f"<sub>{tool['name']} {tool['version']}, report schema `{report['schema']}`</sub>")
    return "\n".join(out) + "\n"
