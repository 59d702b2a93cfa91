"""``--by source`` of ``tracediag report`` and ``tracediag bounds``: the critical path, the
findings and the bounds grouped by the source line of their events (NKI / BIR debug lines).

The numbers come from :mod:`tracediag.analysis.source_lines`; this module only chooses the top
rows and writes them as text, Markdown or JSON-ready dicts.
"""

from __future__ import annotations

import argparse
import textwrap
from typing import TYPE_CHECKING

from tracediag.model.errors import UsageError

if TYPE_CHECKING:
    import pandas as pd

    from tracediag.engine.diagnosis import Diagnosis
    from tracediag.model import schema as S

GROUPINGS = ("source",)
#: Path categories shown as columns of the text table at most; the rest add up in "other".
_TEXT_CATEGORIES = 4


def add_by_options(parser: argparse.ArgumentParser, what: str) -> None:
    """``--by source`` and ``--top N``."""
    parser.add_argument(
        "--by",
        choices=GROUPINGS,
        help=f"group {what} by the source line of their events (NKI/BIR debug line; a DMA "
        "transfer takes the line of the instruction that triggered it)",
    )
    parser.add_argument(
        "--top",
        type=int,
        default=10,
        metavar="N",
        help="with --by: the N lines with the most time (default 10; 0: all)",
    )


def check_by_options(args: argparse.Namespace, formats: tuple[str, ...]) -> None:
    """Usage errors of ``--by``/``--top``."""
    if args.top < 0:
        raise UsageError("--top must be 0 or more")
    if args.by and args.format not in formats:
        raise UsageError(f"--by source writes {', '.join(formats)}, not --format {args.format}")


def _int(x) -> int | None:
    return None if x != x else int(round(float(x)))


def _fmt(x) -> str:
    return "-" if x is None or x != x else f"{round(float(x)):,}"


def _line(line: str) -> str:
    from tracediag.analysis.source_lines import short_line

    return short_line(line) if line else "(no source line)"


# ---- report --by source -----------------------------------------------------------------------


def report_section(diagnosis: Diagnosis, top: int) -> dict:
    """The ``by_source`` object of the JSON report: path time per source line (the ``top``
    lines), the findings per line and each finding's lines."""
    from tracediag.analysis import source_lines as sl

    trace = diagnosis.trace
    if not sl.has_sources(trace):
        return {"has_source_lines": False, "note": sl.NO_SOURCE}
    seg = diagnosis.analysis.path.segments
    per = sl.path_by_source(trace, seg)
    length = int(seg["dur_ns"].sum())
    named = per[per.index != ""]
    shown = named if top == 0 else named.head(top)
    cats = [c for c in per.columns if c != "path_ns"]
    lines = [
        {
            "source_line": str(line),
            "path_ns": int(row["path_ns"]),
            "path_pct": round(100 * int(row["path_ns"]) / length, 2) if length else 0.0,
            "by_category_ns": {c[:-3]: int(row[c]) for c in cats},
        }
        for line, row in shown.iterrows()  # the top lines, not events
    ]
    return {
        "has_source_lines": True,
        "critical_path": {
            "length_ns": length,
            "lines": int(len(named)),
            "no_source_ns": int(per["path_ns"].get("", 0)),
            "top": lines,
        },
        "findings": sl.findings_by_source(trace, diagnosis.findings),
        "finding_lines": [
            {"index": i, "code": f.code, "source_lines": sl.finding_lines(trace, f)}
            for i, f in enumerate(diagnosis.findings)
        ],
    }


def render_report(section: dict, fmt: str) -> str:
    """The ``by_source`` section as text or Markdown, to follow the report."""
    md = fmt == "markdown"
    if not section["has_source_lines"]:
        return f"\n{'## By source line' if md else 'By source line'}\n\n{section['note']}.\n"
    cp = section["critical_path"]
    top = cp["top"]
    totals: dict[str, int] = {}
    for row in top:  # the few shown lines
        for c, ns in row["by_category_ns"].items():
            totals[c] = totals.get(c, 0) + ns
    cats = [c for c, ns in sorted(totals.items(), key=lambda kv: -kv[1]) if ns][:_TEXT_CATEGORIES]
    head = ["source line", "path ns", "% path", *cats, "other"]
    rows = []
    for row in top:
        by = row["by_category_ns"]
        other = row["path_ns"] - sum(by[c] for c in cats)
        cells = [_fmt(row["path_ns"]), f"{row['path_pct']:.1f}", *(_fmt(by[c]) for c in cats)]
        rows.append([_line(row["source_line"]), *cells, _fmt(other)])
    title = (
        f"Critical path by source line (top {len(top)} of {cp['lines']} lines; path "
        f"{_fmt(cp['length_ns'])} ns, {_fmt(cp['no_source_ns'])} ns on no source line)"
    )
    out = [f"## {title}" if md else title, ""]
    out += _table(head, rows, md)
    title = "Findings by source line"
    out += ["", f"## {title}" if md else title, ""]
    if not section["findings"]:
        out.append("no finding points at a source line")
    for f in section["findings"]:
        who = ", ".join(
            f"{x['code']} ({x['events']} events, saving {_fmt(x['saving_ns'])} ns)"
            for x in f["findings"]
        )
        what = f"`{_line(f['source_line'])}`" if md else _line(f["source_line"])
        if md:
            out.append(f"- {what}: {who}")
        else:  # at most 100 columns
            out += textwrap.wrap(
                f"{what}: {who}", 98, initial_indent="  ", subsequent_indent="    "
            )
    return "\n" + "\n".join(out) + "\n"


def _table(head: list[str], rows: list[list[str]], md: bool) -> list[str]:
    if md:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        return lines + ["| " + " | ".join(r) + " |" for r in rows]
    width = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]

    def fmt(r: list[str]) -> str:  # the line column left, the numbers right
        cells = zip(r, width, strict=True)
        return "  " + "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(cells)
        )

    return [fmt(head), *(fmt(r) for r in rows)]


# ---- bounds --by source -----------------------------------------------------------------------


def bounds_source_table(trace: S.Trace, peaks: dict, window, top: int) -> pd.DataFrame:
    """The bounds per (rank, source line), the ``top`` lines per rank by pipeline time."""
    from tracediag.analysis.source_lines import bounds_by_source

    table = bounds_by_source(trace, peaks, window)
    flat = table.reset_index().sort_values(
        ["rank", "pipeline_bound_ns"], ascending=[True, False], kind="stable"
    )
    if top:
        flat = flat.groupby("rank", sort=False).head(top)
    return flat.set_index(["rank", "source_line"])


def bounds_source_records(table: pd.DataFrame) -> list[dict]:
    """One JSON-ready dict per (rank, source line): its bounds, gaps, bottleneck and inputs."""
    from tracediag.analysis.source_lines import LINE_BOUNDS, LINE_GAPS

    busy = [c for c in table.columns if c.startswith("busy_")]
    return [
        {
            "rank": int(rank),
            "source_line": str(line),
            "events": int(row["events"]),
            "bounds_ns": {b: _int(row[f"{b}_ns"]) for b in LINE_BOUNDS},
            "gaps_ns": {g: _int(row[f"{g}_ns"]) for g in LINE_GAPS},
            "bottleneck": row["bottleneck"] or None,
            "engine_busy_ns": {c[5:-3]: _int(row[c]) for c in busy},
            "dma_bytes": _int(row["dma_bytes"]),
            "hw_flops": None if row["hw_flops"] != row["hw_flops"] else float(row["hw_flops"]),
        }
        for (rank, line), row in table.iterrows()  # the top lines per rank
    ]


def render_bounds(table: pd.DataFrame) -> str:
    """The bounds per source line as text, one block per rank."""
    head = ["source line", "events", "DMA act", "DMA ideal", "TE act", "TE ideal", "pipeline"]
    head.append("engine")
    blocks = []
    for rank, rows in table.groupby(level=0, sort=True):
        body = [
            [
                _line(line),
                f"{int(r['events']):,}",
                _fmt(r["memory_bound_ns"]),
                _fmt(r["memory_ideal_ns"]),
                _fmt(r["compute_bound_ns"]),
                _fmt(r["compute_ideal_ns"]),
                _fmt(r["pipeline_bound_ns"]),
                r["bottleneck"] or "-",
            ]
            for (_, line), r in rows.iterrows()  # the top lines of one rank
        ]
        blocks.append(
            "\n".join([f"rank {rank}: bounds per source line (ns)", *_table(head, body, False)])
        )
    return "\n\n".join(blocks) + "\n"
