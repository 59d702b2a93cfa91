"""``tracediag diff A B``: two runs side by side, or a measured run against a predicted one."""

from __future__ import annotations

import argparse

import orjson

from tracediag.cli.common import add_diagnosis_options, emit, resolve_config
from tracediag.cli.runs import report_of
from tracediag.model.errors import UsageError

FORMATS = ("text", "markdown", "json")


def add_parser(commands) -> None:
    """Register ``diff`` on the subcommand parsers."""
    p = commands.add_parser(
        "diff",
        help="compare two runs: step time, critical path, layers and operators",
        description="Compare run B with run A (each a trace file, a directory holding one job's "
        "per-rank profiles, or a saved JSON report): step time, critical-path categories, "
        "per-layer and per-operator durations with the change and its significance (Welch's "
        "t-test, Benjamini-Hochberg q-values), the rank whose step time grew most, and the findings B "
        "adds and A loses (matched by fingerprint). With --predicted, B is a simulator's or "
        "emulator's trace of the same program: per-operator error, correlation, the operators "
        "furthest off.",
    )
    for name, role in (("a", "A, the reference"), ("b", "B, compared with A")):
        p.add_argument(
            name,
            metavar=name.upper(),
            help=f"run {role}: a trace file, a directory of one job's profiles, or a saved "
            "JSON report",
        )
    add_diagnosis_options(p, paths=False)
    p.add_argument(
        "--format", choices=FORMATS, default="text", help="output format (default: text)"
    )
    p.add_argument(
        "--predicted", action="store_true", help="B is a prediction of A (correlate, not diff)"
    )
    p.add_argument(
        "--top", type=int, default=20, metavar="N", help="rows per table (default 20; 0: all)"
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Diagnose (or read) both runs, compare, print; 0 on success."""
    from tracediag.ci.diff import correlate, diff_reports
    from tracediag.report.diff_render import render_diff_markdown, render_diff_text

    if args.top < 0:
        raise UsageError("--top must be 0 or more")
    config = resolve_config(args)
    a, b = (report_of(path, args, config) for path in (args.a, args.b))
    top = args.top or None
    result = correlate(a, b, top=top) if args.predicted else diff_reports(a, b, top=top)
    if args.format == "json":
        options = orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE | orjson.OPT_SERIALIZE_NUMPY
        text = orjson.dumps(result, option=options).decode()
    elif args.format == "markdown":
        text = render_diff_markdown(result)
    else:
        text = render_diff_text(result)
    emit(args, text)
    return 0
