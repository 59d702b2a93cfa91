"""``tracediag report PATH...``: diagnose traces and print the report (not a gate: exit 0)."""

from __future__ import annotations

import argparse

from tracediag.cli.common import (
    add_diagnosis_options,
    diagnose_paths,
    emit,
    resolve_config,
    use_color,
)


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
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Load, diagnose, render; 0 on success."""
    from tracediag.report import render

    config = resolve_config(args)
    diagnosis = diagnose_paths(args, config)
    emit(args, render(diagnosis, args.format, color=use_color(args.output)))
    return 0
