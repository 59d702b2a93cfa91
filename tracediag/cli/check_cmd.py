"""``tracediag check PATH...``: the CI gate; exit 1 when a finding is at or above ``--fail-on``."""

from __future__ import annotations

import argparse

from tracediag.cli.common import (
    add_diagnosis_options,
    diagnose_paths,
    emit,
    resolve_config,
    say,
    use_color,
)
from tracediag.findings import Severity
from tracediag.report.labels import plural


def add_parser(commands) -> None:
    """Register ``check`` on the subcommand parsers."""
    p = commands.add_parser(
        "check",
        help="the CI gate: exit 1 on findings at or above a severity",
        description="Diagnose traces like 'report', then exit 1 if any finding is at or above the "
        "gate (--fail-on, else the config's fail-on, else error); 0 otherwise; 2 on usage, "
        "configuration or input errors.",
    )
    add_diagnosis_options(p)
    p.add_argument(
        "--format", choices=("text", "json"), default="text", help="report format (default: text)"
    )
    p.add_argument(
        "--fail-on",
        choices=[str(s) for s in reversed(Severity)],
        help="lowest severity that fails the check (default: config fail-on, else error)",
    )
    p.add_argument(
        "--exit-zero", action="store_true", help="exit 0 even when findings reach the gate"
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Diagnose, print the report, then the verdict on stderr; the exit code is the verdict."""
    from tracediag.report import render

    config = resolve_config(args)
    if args.fail_on is not None:
        config.fail_on = Severity.parse(
            args.fail_on
        )  # the report then shows the gate actually applied
    diagnosis = diagnose_paths(args, config)
    emit(args, render(diagnosis, args.format, color=use_color(args.output)))
    failing = diagnosis.at_or_above(config.fail_on)
    if not failing:
        say(args, f"check passed: no finding at or above {config.fail_on}")
        return 0
    say(args, f"check failed: {plural(len(failing), 'finding')} at or above {config.fail_on}")
    return 0 if args.exit_zero else 1
