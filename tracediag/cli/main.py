"""The ``tracediag`` command line: ``main(argv) -> int`` and the console-script ``entry()``.

Exit codes (like ruff): 0 the gate passes, 1 it fails (``check``: findings at or above it,
budgets exceeded, regressions against a baseline), 2 usage, configuration or input error. Errors are one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import difflib
import gc
import os
import sys
import traceback

from tracediag import __version__
from tracediag.cli import (
    baseline_cmd,
    bounds_cmd,
    check_cmd,
    completion,
    diff_cmd,
    export_cmd,
    generate_cmd,
    report_cmd,
    rules_cmd,
    trend_cmd,
)
from tracediag.cli import tui_cmd as tui_command
from tracediag.io.release_memory import inputs_are_big, keep_freed_memory
from tracediag.model.errors import TracediagError, UsageError

EPILOG = """exit codes: 0 the gate passes, 1 it fails (check: findings at or above it, budgets
exceeded, regressions against a baseline; trend --fail-on-change), 2 usage, configuration or
input error"""


class _Parser(argparse.ArgumentParser):
    """argparse whose errors are one-line UsageErrors (its own prints the usage block first)."""

    def error(self, message: str):
        raise UsageError(f"{message} (see '{self.prog} --help')")


def build_parser() -> argparse.ArgumentParser:
    """The parser with every subcommand registered."""
    parser = _Parser(
        prog="tracediag",
        description="Why is this ML accelerator job slow? Reads Neuron and PyTorch/Kineto traces, "
        "walks the cross-rank critical path and names the stalls with what fixing them saves.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"tracediag {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    report_cmd.add_parser(commands)
    check_cmd.add_parser(commands)
    baseline_cmd.add_parser(commands)
    diff_cmd.add_parser(commands)
    trend_cmd.add_parser(commands)
    rules_cmd.add_parsers(commands)
    generate_cmd.add_parser(commands)
    export_cmd.add_parser(commands)
    bounds_cmd.add_parser(commands)
    tui_command.add_parser(commands)
    completion.add_parser(commands, parser)
    return parser


def _fail(message: str) -> None:
    print(f"tracediag: error: {' '.join(message.split())}", file=sys.stderr, flush=True)


def _tui_by_default(parser: argparse.ArgumentParser, argv: list[str] | None) -> list[str]:
    """``tracediag PATH...`` opens the TUI: ``tui`` goes before a first argument that is no
    subcommand or option and is, or looks like, a path."""
    from pathlib import Path

    argv = sys.argv[1:] if argv is None else list(argv)
    names = next(a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    if not argv or argv[0].startswith("-") or argv[0] in names:
        return argv
    # Only what is or looks like a path opens the TUI (which then reports a missing one): a bare
    # word is a usage error (see _check_command), never an interactive screen a script would
    # hang on.
    first = argv[0]
    if not Path(first).exists() and not any(c in first for c in "/\\."):
        return argv
    return ["tui", *argv]


def _check_command(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    """An unknown first word is a usage error naming the closest subcommand ("did you mean")."""
    names = next(a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    if not argv or argv[0].startswith("-") or argv[0] in names:
        return
    close = difflib.get_close_matches(argv[0], list(names), n=1, cutoff=0.6)
    hint = f"; did you mean '{close[0]}'?" if close else f" (see '{parser.prog} --help')"
    raise UsageError(f"unknown command '{argv[0]}'{hint}")


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """``parser.parse_args``, but an option the subcommand does not know is that subcommand's
    error: it names the closest of its options and points to its own ``--help``."""
    args, extra = parser.parse_known_args(argv)
    if not extra:
        return args
    sub = next(
        a.choices[args.command]
        for a in parser._actions
        if isinstance(a, argparse._SubParsersAction)
    )
    flags = [o for a in sub._actions for o in a.option_strings]
    guess = next((x for x in extra if x.startswith("-")), "")
    close = difflib.get_close_matches(guess.split("=")[0], flags, n=1, cutoff=0.6) if guess else []
    hint = f"; did you mean '{close[0]}'?" if close else ""
    sub.error(f"unrecognized arguments: {' '.join(extra)}{hint}")
    raise AssertionError("unreachable")  # error() raises


def main(argv: list[str] | None = None) -> int:
    """Run one command; returns the exit code. Expected errors become one line on stderr."""
    try:
        parser = build_parser()
        argv = _tui_by_default(parser, argv)
        _check_command(parser, argv)
        args = _parse(parser, argv)
        return args.run(args)
    except TracediagError as exc:
        _fail(exc.one_line())
        return exc.exit_code
    except BrokenPipeError:  # the reader of stdout left (`| head`): entry() ends quietly
        raise
    except OSError as exc:  # e.g. -o into a missing directory, an unreadable config file
        where = f"{exc.filename}: " if exc.filename else ""
        _fail(f"{where}{exc.strerror or exc}")
        return 2
    except SystemExit as exc:  # --help and --version
        return exc.code if isinstance(exc.code, int) else 0


def entry() -> None:
    """The console script: ``main`` with a last resort against tracebacks and broken pipes."""
    if inputs_are_big(sys.argv[1:]):  # numpy temporaries reuse the heap, not fresh kernel pages
        keep_freed_memory()
    try:
        code = main()
    except KeyboardInterrupt:
        _fail("interrupted")
        code = 130
    except BrokenPipeError:  # e.g. `tracediag report ... | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 1
    except Exception as exc:  # a bug: one line unless TRACEDIAG_DEBUG asks for the traceback
        if os.environ.get("TRACEDIAG_DEBUG"):
            traceback.print_exc()
        _fail(
            f"internal error: {type(exc).__name__}: {exc} (set TRACEDIAG_DEBUG=1 for the traceback)"
        )
        code = 2
    # The interpreter's shutdown collections would traverse every object of the imported
    # libraries (pandas alone: ~0.2 s per command); frozen, they are skipped. Finalizers and
    # atexit handlers still run.
    gc.freeze()
    sys.exit(code)
