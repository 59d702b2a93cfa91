"""``tracediag tui PATH...`` (and ``tracediag PATH...``): explore traces in the terminal UI.

Options are parsed and the configuration resolved before the app starts, so usage errors are
the CLI's one line; load errors show in the app and are printed again when it exits. Without a
terminal (a CI step, a pipe, a redirect) the app would draw into a file and wait for keys that
never come, so it refuses with one line naming the commands meant for scripts.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tracediag.cli.common import (
    add_reading_options,
    codes,
    layout_sizes,
    reading_options,
    resolve_config,
)
from tracediag.model.errors import UsageError


def add_parser(commands) -> None:
    """Register ``tui`` on the subcommand parsers."""
    p = commands.add_parser(
        "tui",
        help="explore traces in the terminal UI (also 'tracediag PATH...')",
        description="Open the terminal UI: the overview, every finding with its evidence and "
        "rule document, the critical path, arrival lateness per rank, and a timeline of any "
        "finding's window. Press ? in the app for its keys. It needs a terminal on stdin, stdout "
        "and stderr: scripts and CI use 'report' or 'check'.",
    )
    p.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="trace files or directories (a Neuron profile directory, per-rank files, a folder of them)",
    )
    p.add_argument(
        "--config", type=Path, metavar="FILE", help="tracediag.toml or pyproject.toml to read"
    )
    sel = p.add_argument_group("rule selection (codes or prefixes, comma-separated; CLI wins)")
    sel.add_argument("--select", type=codes, metavar="CODES", help="run only these rules")
    sel.add_argument("--extend-select", type=codes, metavar="CODES", help="run these as well")
    sel.add_argument("--ignore", type=codes, metavar="CODES", help="do not run these rules")
    p.add_argument(
        "--layout",
        type=layout_sizes,
        metavar="SIZES",
        help="the parallel layout, e.g. dp=4,tp=8,pp=4, instead of inferring it (as for report)",
    )
    p.add_argument("--no-align", action="store_true", help="keep each rank's clock as recorded")
    add_reading_options(p)
    p.set_defaults(run=run)


def not_a_terminal() -> str | None:
    """The first of stdin, stdout and stderr that is no terminal (the app reads keys on stdin
    and draws on stderr; stdout redirected means the user wants text), else None."""
    for name in ("stdin", "stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is None or not stream.isatty():
            return name
    return None


def run(args: argparse.Namespace) -> int:
    """Run the app; 0 after a normal quit, 2 after a load error (printed on stderr too)."""
    from tracediag.tui.app import make_app

    config = resolve_config(args)
    missing = not_a_terminal()
    if missing is not None:
        raise UsageError(
            f"the terminal UI needs a terminal ({missing} is not one); for scripts and CI use "
            f"'tracediag report PATH...' or 'tracediag check PATH...'"
        )
    app = make_app(
        args.paths,
        config=config,
        align=config.align and not args.no_align,
        reading=reading_options(args),
    )
    app.run()
    if app.error_line:
        print(app.error_line, file=sys.stderr, flush=True)
        return 2
    return app.return_code or 0
