"""``tracediag baseline PATH... -o FILE``: write a baseline for ``check --baseline``.

Each PATH is one run (a trace file, a directory of one job's per-rank profiles, or a saved JSON
report). Several runs of the same build make the baseline noise-aware.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import orjson

from tracediag.cli.common import add_diagnosis_options, emit, resolve_config, say
from tracediag.cli.runs import report_of
from tracediag.model.errors import UsageError
from tracediag.model.wording import plural


def add_parser(commands) -> None:
    """Register ``baseline`` on the subcommand parsers."""
    p = commands.add_parser(
        "baseline",
        help="write a baseline (several runs: noise-aware) for 'check --baseline'",
        description="Diagnose each PATH as one run (a trace file, a directory holding one job's "
        "per-rank profiles, or a saved JSON report) and write their metrics and finding "
        "fingerprints as a baseline. Several runs of one build give the noise that "
        "'check --baseline' allows.",
    )
    add_diagnosis_options(p)
    p.add_argument(
        "--append",
        type=Path,
        metavar="FILE",
        help="add the runs to this existing baseline (it may also be the -o file)",
    )
    p.add_argument(
        "--keep", type=int, metavar="N", help="keep only the last N runs (with --append)"
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Diagnose every run and write the baseline; 0 on success."""
    from tracediag.ci.baseline import load_baseline, make_baseline

    if args.keep is not None and args.keep < 1:
        raise UsageError("--keep must be at least 1")
    config = resolve_config(args)
    previous = load_baseline(args.append) if args.append else None
    reports = [(str(path), report_of(path, args, config)) for path in args.paths]
    baseline = make_baseline(reports, previous, args.keep)
    emit(
        args,
        orjson.dumps(baseline, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE).decode(),
    )
    say(args, f"baseline of {plural(len(baseline['runs']), 'run')}")
    return 0
