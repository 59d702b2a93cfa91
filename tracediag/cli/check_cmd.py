"""``tracediag check PATH...``: the CI gate.

Exit 1 when the gate fails: a finding at or above ``--fail-on`` (with ``--baseline``: a new
one), a budget exceeded, or a metric regression against the baseline; 0 otherwise (and with
``--exit-zero``); 2 on usage, configuration or input errors.
"""

from __future__ import annotations

import argparse
from pathlib import Path

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
from tracediag.model.findings import Severity
from tracediag.model.wording import plural


def add_parser(commands) -> None:
    """Register ``check`` on the subcommand parsers."""
    from tracediag.report.formats import CHECK_FORMATS

    p = commands.add_parser(
        "check",
        help="the CI gate: exit 1 on findings at or above a severity, budgets, regressions",
        description="Diagnose traces like 'report', then exit 1 if the gate fails: a finding at "
        "or above --fail-on (else the config's fail-on, else error; with --baseline only new "
        "findings count), a budget of [tool.tracediag.budgets] exceeded, or a metric regression "
        "against the baseline; 0 otherwise; 2 on usage, configuration or input errors.",
    )
    add_diagnosis_options(p, paths_required=False)
    add_summary_options(p)
    p.add_argument(
        "--format",
        choices=CHECK_FORMATS,
        default="text",
        help="output format: text, json (the report with its gate), markdown, html (one "
        "self-contained page), junit (XML), sarif (2.1.0), github (workflow annotations) "
        "(default: text)",
    )
    p.add_argument(
        "--fail-on",
        choices=[str(s) for s in reversed(Severity)],
        help="lowest severity that fails the check (default: config fail-on, else error)",
    )
    p.add_argument(
        "--baseline",
        type=Path,
        metavar="FILE",
        help="compare with a baseline written by 'tracediag baseline': only new findings fail, "
        "and metrics worse than the baseline beyond its noise fail",
    )
    p.add_argument("--exit-zero", action="store_true", help="exit 0 even when the gate fails")
    p.add_argument(
        "--record",
        metavar="DB",
        help="append this run's metrics and verdict to a history database (SQLite path or "
        "sqlite:/// URL; created if missing) for 'tracediag trend'",
    )
    p.add_argument("--label", default="", help="a label for the recorded run (e.g. a build id)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Diagnose, judge, write the report, then the verdict on stderr; the exit code is the verdict."""
    from tracediag.ci.baseline import compare, load_baseline
    from tracediag.ci.gate import evaluate_gate, verdict_line
    from tracediag.report.formats import render_check

    check_summary_options(args)
    config = resolve_config(args)
    if args.fail_on is not None:
        config.fail_on = Severity.parse(args.fail_on)  # the report then shows the gate applied
    if args.show_settings:
        return show_settings(args, config)
    baseline = load_baseline(args.baseline) if args.baseline else None
    diagnosis = diagnose_paths(args, config)
    if diagnosis.ignored_findings:
        say(args, f"{plural(diagnosis.ignored_findings, 'finding')} ignored by per-trace-ignores")
    report = diagnosis.to_dict()
    comparison = compare(report, baseline, config.baseline) if baseline else None
    report["gate"] = evaluate_gate(report, config.fail_on, config.budgets, comparison)
    if args.statistics:  # the gate is judged as without it: the exit code stays the verdict
        emit(args, statistics_text(args, diagnosis))
    else:
        color, width = use_color(args.output), output_width(args.output)
        emit(
            args,
            render_check(report, args.format, color=color, width=width, diagnosis=diagnosis),
        )
    say(args, verdict_line(report["gate"]))
    if args.record:
        from tracediag.ci.history import record

        run_id = record(args.record, report, label=args.label, gate_passed=report["gate"]["passed"])
        say(args, f"recorded run {run_id} in {args.record}")
    if report["gate"]["passed"] or args.exit_zero:
        return 0
    return 1
