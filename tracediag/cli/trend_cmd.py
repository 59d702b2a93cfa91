"""``tracediag trend DB``: each metric over the recorded runs, with statistical change points."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import orjson

from tracediag.ci.metrics import CATALOG
from tracediag.model.errors import UsageError

FORMATS = ("text", "markdown", "json")


def add_parser(commands) -> None:
    """Register ``trend`` on the subcommand parsers."""
    p = commands.add_parser(
        "trend",
        help="metrics over the runs recorded with 'check --record', with change points",
        description="Show each metric over the runs of a history database (written by "
        "'check --record DB') and flag change points: shifts that stand out from the "
        "series' own noise (binary segmentation; the largest Welch t over splits, tested "
        "against simulated Gaussian noise), named by the run's --label.",
    )
    p.add_argument("db", metavar="DB", help="history database: a path or sqlite:/// URL")
    p.add_argument(
        "--metric",
        action="append",
        metavar="NAME",
        help="a metric to show (repeatable; default: the gated ones: "
        "step-time-ns, the critical-path categories, mfu-pct)",
    )
    p.add_argument("--last", type=int, metavar="N", help="only the last N runs")
    p.add_argument("--alpha", type=float, default=0.01, help="significance level (default 0.01)")
    p.add_argument("--format", choices=FORMATS, default="text", help="output format")
    p.add_argument(
        "--fail-on-change",
        action="store_true",
        help="exit 1 when a metric's latest change point is a regression",
    )
    p.add_argument("-o", "--output", type=Path, metavar="FILE", help="write to FILE, not stdout")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Read the history, test each metric, print; 1 with --fail-on-change and a regression."""
    from tracediag.ci.history import load_history
    from tracediag.ci.trend import DEFAULT_METRICS, trend
    from tracediag.report.trend_render import render_trend_markdown, render_trend_text

    metrics = args.metric or DEFAULT_METRICS
    unknown = [m for m in metrics if m not in CATALOG]
    if unknown:
        raise UsageError(f"--metric: no metric {unknown[0]} (known: {', '.join(CATALOG)})")
    if not 0 < args.alpha < 1:
        raise UsageError("--alpha must be between 0 and 1")
    if args.last is not None and args.last < 1:
        raise UsageError("--last must be at least 1")
    runs, table = load_history(args.db, args.last)
    result = trend(runs, table, metrics, args.alpha)
    if args.format == "json":
        text = orjson.dumps(result, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE).decode()
    elif args.format == "markdown":
        text = render_trend_markdown(result)
    else:
        text = render_trend_text(result)
    if args.output is None:
        sys.stdout.write(text)
    else:
        args.output.write_text(text, encoding="utf-8")
    regressed = [
        m["metric"]
        for m in result["metrics"]
        if m["change_points"] and m["change_points"][-1]["regression"]
    ]
    if regressed and args.fail_on_change:
        print(f"tracediag: regression in {', '.join(regressed)}", file=sys.stderr)
        return 1
    return 0
