"""``tracediag report PATH...``: diagnose traces and print the report (not a gate: exit 0)."""

from __future__ import annotations

import argparse

from tracediag.cli.by_source import add_by_options, check_by_options
from tracediag.cli.common import (
    add_diagnosis_options,
    add_summary_options,
    check_summary_options,
    diagnose_paths,
    emit,
    output_width,
    resolve_config,
    say,
    show_settings,
    statistics_text,
    use_color,
)
from tracediag.model.errors import UsageError
from tracediag.model.wording import plural


def add_parser(commands) -> None:
    """Register ``report`` on the subcommand parsers."""
    from tracediag.report.formats import REPORT_FORMATS

    p = commands.add_parser(
        "report",
        help="diagnose traces and print the report",
        description="Read traces, join the ranks, walk the critical path, run the rules and print "
        "the report. Exits 0 whatever it finds (use 'check' for a gate).",
    )
    add_diagnosis_options(p, paths_required=False)
    add_summary_options(p)
    p.add_argument(
        "--format", choices=REPORT_FORMATS, default="text", help="report format (default: text)"
    )
    add_by_options(p, "the critical path and the findings")
    p.add_argument(
        "--history",
        metavar="DB",
        help="with --format html: add trend charts of this history database ('check --record')",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Load, diagnose, render; 0 on success."""
    from tracediag.report.formats import render

    check_summary_options(args)
    if args.history and args.format != "html":
        raise UsageError("--history needs --format html")
    check_by_options(args, ("text", "markdown", "json"))
    config = resolve_config(args)
    if args.show_settings:
        return show_settings(args, config)
    diagnosis = diagnose_paths(args, config)
    if diagnosis.ignored_findings:
        say(args, f"{plural(diagnosis.ignored_findings, 'finding')} ignored by per-trace-ignores")
    if args.statistics:
        emit(args, statistics_text(args, diagnosis))
        return 0
    history = None
    if args.history:
        from tracediag.ci.history import load_history
        from tracediag.ci.trend import DEFAULT_METRICS, trend

        history = trend(*load_history(args.history), DEFAULT_METRICS)
    color, width = use_color(args.output), output_width(args.output)
    if args.by == "source":
        emit(args, _by_source(diagnosis, args.format, args.top, color, width))
        return 0
    emit(args, render(diagnosis, args.format, color=color, trend=history, width=width))
    return 0


def _by_source(diagnosis, fmt: str, top: int, color: bool, width: int) -> str:
    """The report with its ``by_source`` section: a key of the JSON report, or a section after
    the text and Markdown reports."""
    from tracediag.cli import by_source
    from tracediag.report.formats import FORMATS, RenderOptions

    report = diagnosis.to_dict()
    section = by_source.report_section(diagnosis, top)
    if fmt == "json":
        report["by_source"] = section
    out = FORMATS[fmt].render(report, RenderOptions(color, width, None, diagnosis))
    return out if fmt == "json" else out + by_source.render_report(section, fmt)
