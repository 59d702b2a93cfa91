"""``tracediag report PATH...``: diagnose traces and print the report (not a gate: exit 0)."""

from __future__ import annotations

import argparse

from tracediag.cli.common import (
    add_diagnosis_options,
    diagnose_paths,
    emit,
    output_width,
    resolve_config,
    say,
    use_color,
)
from tracediag.model.errors import UsageError
from tracediag.report.labels import plural


def add_parser(commands) -> None:
    """Register ``report`` on the subcommand parsers."""
    from tracediag.report import FORMATS

    p = commands.add_parser(
        "report",
        help="diagnose traces and print the report",
        description="Read traces, join the ranks, walk the critical path, run the rules and print "
        "the report. Exits 0 whatever it finds (use 'check' for a gate).",
    )
    add_diagnosis_options(p)
    p.add_argument(
        "--format", choices=FORMATS, default="text", help="report format (default: text)"
    )
    p.add_argument(
        "--history",
        metavar="DB",
        help="with --format html: add trend charts of this history database ('check --record')",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Load, diagnose, render; 0 on success."""
    from tracediag.engine.trace_ignores import apply_per_trace_ignores
    from tracediag.report import render

    if args.history and args.format != "html":
        raise UsageError("--history needs --format html")
    config = resolve_config(args)
    diagnosis = diagnose_paths(args, config)
    diagnosis, dropped = apply_per_trace_ignores(diagnosis, config.per_trace_ignores)
    if dropped:
        say(args, f"{plural(dropped, 'finding')} ignored by per-trace-ignores")
    history = None
    if args.history:
        from tracediag.ci.history import load_history
        from tracediag.ci.trend import DEFAULT_METRICS, trend

        history = trend(*load_history(args.history), DEFAULT_METRICS)
    color, width = use_color(args.output), output_width(args.output)
    emit(args, render(diagnosis, args.format, color=color, trend=history, width=width))
    return 0
