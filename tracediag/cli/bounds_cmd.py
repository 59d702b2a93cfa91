"""``tracediag bounds PATH...``: the performance bounds of each rank (memory, compute, pipeline),
the busiest engine and the gaps between the bounds, without running the rules."""

from __future__ import annotations

import argparse
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

from tracediag.cli.by_source import add_by_options, check_by_options
from tracediag.cli.common import MAX_WIDTH, add_reading_options, emit, load_paths, say
from tracediag.model.errors import UsageError
from tracediag.model.wording import plural, ranks_label

if TYPE_CHECKING:
    import pandas as pd

FORMATS = ("text", "json")
#: The schema of ``--format json``.
BOUNDS_SCHEMA = "tracediag.bounds/1"
NOTE = (
    "gaps say where the time goes, not what removing it saves: engines interact, so a saving "
    "needs a replay (tracediag report)"
)
#: Text rows: (family, bound, label).
_ROWS = (
    ("memory", "memory_bound", "DMA active (union of transfers)"),
    ("", "memory_ideal", "DMA bytes at the DMA peak"),
    ("", "memory_necessary", "IN/OUT tensor bytes at the DMA peak"),
    ("compute", "compute_bound", "{matrix} engine active"),
    ("", "compute_ideal", "all its FLOPs at its peak"),
    ("", "compute_useful", "the same without transposes"),
    ("pipeline", "pipeline_bound", "busiest engine ({bottleneck})"),
)
_BINDING_ROW = {"memory": "memory_bound", "compute": "compute_bound", "pipeline": "pipeline_bound"}


def add_parser(commands) -> None:
    """Register ``bounds`` on the subcommand parsers."""
    p = commands.add_parser(
        "bounds",
        help="print each rank's performance bounds, its bottleneck engine and the gaps",
        description="Read traces and print, per rank, what its step would take if one category "
        "of overhead were gone: memory (DMA active time; DMA bytes at the DMA peak; only the "
        "IN/OUT tensor bytes), compute (tensor-engine active time; its FLOPs at peak; without "
        "transposes) and pipeline (the busiest engine: the bottleneck), with the gaps between "
        "consecutive bounds (DMA idle, DMA inefficiency, excess HBM traffic; TE idle, TE "
        "underutilization, transpose overhead; serialization). Runs no rules.",
    )
    p.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="trace files or directories (a Neuron profile directory, per-rank files, a folder "
        "of them)",
    )
    p.add_argument("--format", choices=FORMATS, default="text", help="output (default: text)")
    p.add_argument(
        "--start-ns",
        type=int,
        metavar="NS",
        help="start of the window (aligned ns, with --end-ns; default: each rank's device span)",
    )
    p.add_argument("--end-ns", type=int, metavar="NS", help="end of the window (aligned ns)")
    p.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="tracediag.toml or pyproject.toml for [hardware] peaks and align (default: found "
        "upward from the current directory)",
    )
    p.add_argument(
        "--no-align",
        action="store_true",
        help="keep each rank's clock as recorded (the window is then in each rank's own clock)",
    )
    add_by_options(p, "the bounds")
    add_reading_options(p)
    p.add_argument("-o", "--output", type=Path, metavar="FILE", help="write to FILE, not stdout")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Load, compute the bounds, print them; 0 on success."""
    if (args.start_ns is None) != (args.end_ns is None):
        raise UsageError("--start-ns and --end-ns go together")
    if args.start_ns is not None and args.end_ns <= args.start_ns:
        raise UsageError("--end-ns must be after --start-ns")
    check_by_options(args, FORMATS)
    from tracediag.analysis import hardware as hw
    from tracediag.analysis.bounds import bounds_records, bounds_table
    from tracediag.engine.config import load_config

    config = load_config(args.config)
    trace = load_paths(args, config)
    try:
        peaks = hw.resolve_ranks(trace, config.hardware)
    except ValueError as exc:  # an unknown [hardware] profile or setting
        raise UsageError(str(exc)) from None
    window = None if args.start_ns is None else (args.start_ns, args.end_ns)
    if args.by == "source":
        return _run_by_source(args, trace, peaks, window)
    table = bounds_table(trace, peaks, window)
    say(args, f"bounds of {plural(len(table), 'rank')}")
    if args.format == "json":
        from tracediag.engine.diagnosis import report_json

        emit(
            args,
            report_json({"schema": BOUNDS_SCHEMA, "note": NOTE, "ranks": bounds_records(table)}),
        )
    else:
        emit(args, render_text(table))
    return 0


def _run_by_source(args: argparse.Namespace, trace, peaks: dict, window) -> int:
    """``--by source``: the bounds of each source line's events; one line when none has one."""
    from tracediag.analysis.source_lines import NO_SOURCE
    from tracediag.cli import by_source

    table = by_source.bounds_source_table(trace, peaks, window, args.top)
    say(args, f"bounds of {plural(len(table), 'source line')}")
    if args.format == "json":
        from tracediag.engine.diagnosis import report_json

        body = {"schema": BOUNDS_SCHEMA, "note": NOTE, "by": "source"}
        body["source_lines"] = by_source.bounds_source_records(table)
        if not len(table):
            body["no_source_lines"] = NO_SOURCE
        emit(args, report_json(body))
    else:
        emit(args, by_source.render_bounds(table) if len(table) else f"{NO_SOURCE}\n")
    return 0


def _fmt(x: float) -> str:
    return "-" if x != x else f"{round(x):,}"


def _ns(x: float) -> str:
    return "unknown" if x != x else f"{round(x):,} ns"


def _pct(x: float, total: float) -> str:
    return "-" if x != x or not total > 0 else f"{100 * x / total:.1f}"


def render_text(table: pd.DataFrame) -> str:
    """The bounds table of every rank as text (at most 100 columns); ranks without device work
    (host-only traces: no engine busy in an empty window) are one line, not a block of blanks."""
    from tracediag.analysis.bounds import GAPS

    idle = (table["total_ns"].to_numpy() <= 0) & ~table["bottleneck"].astype(bool).to_numpy()
    if len(table) and idle.all():
        return (
            f"no device work on any of the {plural(len(table), 'rank')}: bounds need device "
            "engine events (DMA, matrix, vector) and this trace has none\n"
        )
    blocks = []
    if idle.any():
        blocks.append(f"no device work on {ranks_label([int(r) for r in table.index[idle]])}")
    for r, row in table[~idle].iterrows():  # one row per rank
        total = float(row["total_ns"])
        head = f"rank {r}: window {row['start_ns']}..{row['end_ns']} ns ({_fmt(total)} ns); " + (
            f"bottleneck {row['bottleneck']} ({row['binding']}-bound)"
            if row["bottleneck"]
            else "no engine activity"
        )
        lines = [head, f"  {'family':<10}{'bound':<40}{'ns':>14}{'% window':>10}"]
        binding_row = _BINDING_ROW.get(row["binding"], "")
        for family, bound, label in _ROWS:
            text = label.format(
                matrix=row["matrix_engine"] or "matrix", bottleneck=row["bottleneck"] or "-"
            )
            value = float(row[f"{bound}_ns"])
            mark = "  <- binding" if bound == binding_row else ""
            lines.append(f"  {family:<10}{text:<40}{_fmt(value):>14}{_pct(value, total):>10}{mark}")
        gaps = [f"{label} {_ns(float(row[f'{g}_ns']))}" for g, (label, _, _) in GAPS.items()]
        lines.append("  gaps: " + "; ".join(gaps[:3]))
        lines.append("        " + "; ".join(gaps[3:6]))
        lines.append("        " + gaps[6])
        busy = {c[5:-3]: float(row[c]) for c in table.columns if c.startswith("busy_")}
        order = sorted((k for k, v in busy.items() if v == v), key=lambda k: -busy[k])
        engines = "engines busy (ns): " + ", ".join(f"{k} {_fmt(busy[k])}" for k in order)
        lines += textwrap.wrap(engines, MAX_WIDTH, initial_indent="  ", subsequent_indent="    ")
        lines.append(
            f"  peaks: DMA {_rate(row['dma_peak_Bps'], 1e9, 'GB/s')} ({row['dma_peak_source']}); "
            f"{row['matrix_engine'] or 'matrix'} {_rate(row['te_peak_flops'], 1e12, 'TFLOP/s')}"
        )
        lines.append(f"         ({row['te_peak_source']})")
        lines.append(
            f"  bytes: DMA {_fmt(float(row['dma_bytes']))}, IN/OUT "
            f"{_fmt(float(row['necessary_bytes']))} ({row['necessary_source']})"
        )
        blocks.append("\n".join(lines))
    body = "\n\n".join(blocks) if blocks else "no ranks"
    return f"{body}\n\n" + "\n".join(textwrap.wrap(f"Note: {NOTE}.", MAX_WIDTH)) + "\n"


def _rate(x: float, unit: float, name: str) -> str:
    return "unknown" if x != x else f"{x / unit:,.2f} {name}"
