"""Options and steps shared by the subcommands that diagnose traces (``report``, ``check``)."""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from tracediag.engine.config import Config, check_config_codes, check_patterns, load_config
from tracediag.model.errors import UsageError
from tracediag.model.wording import plural

if TYPE_CHECKING:
    from tracediag.engine.diagnosis import Diagnosis

MAX_WIDTH = 100  # text output is never wider: long lines are hard to read


def codes(text: str) -> list[str]:
    """``"dma101, COL"`` -> ``["DMA101", "COL"]`` (argparse type of the selection options)."""
    return [c.strip().upper() for c in text.split(",") if c.strip()]


def add_diagnosis_options(
    parser: argparse.ArgumentParser,
    paths_required: bool = True,
    paths: bool = True,
    output_help: str = "write the report to FILE, not stdout",
) -> None:
    """Inputs, configuration, rule selection, alignment, output and verbosity. Without
    ``paths_required`` the command checks for paths itself (see :func:`check_summary_options`);
    without ``paths`` the command declares its own positional inputs; ``output_help`` says what
    ``-o`` writes."""
    if paths:
        parser.add_argument(
            "paths",
            nargs="+" if paths_required else "*",
            metavar="PATH",
            help="trace files or directories (a Neuron profile directory, per-rank files, a "
            "folder of them)" + ("" if paths_required else "; none needed with --show-settings"),
        )
    parser.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="tracediag.toml or pyproject.toml to read (default: found upward from the current directory)",
    )
    sel = parser.add_argument_group("rule selection (codes or prefixes, comma-separated; CLI wins)")
    sel.add_argument(
        "--select", type=codes, metavar="CODES", help="run only these rules (ALL for every rule)"
    )
    sel.add_argument("--extend-select", type=codes, metavar="CODES", help="run these rules as well")
    sel.add_argument("--ignore", type=codes, metavar="CODES", help="do not run these rules")
    parser.add_argument(
        "--layout",
        type=layout_sizes,
        metavar="SIZES",
        help="the parallel layout, e.g. dp=4,tp=8,pp=4 (ranks numbered tp fastest, then dp, "
        "then stage), instead of inferring it from the collectives",
    )
    parser.add_argument(
        "--no-align",
        action="store_true",
        help="keep each rank's clock as recorded (no offset estimation)",
    )
    add_reading_options(parser)
    parser.add_argument("-o", "--output", type=Path, metavar="FILE", help=output_help)
    parser.add_argument(
        "-q", "--quiet", action="store_true", help="no progress or summary lines on stderr"
    )


def add_summary_options(parser: argparse.ArgumentParser) -> None:
    """``--statistics`` and ``--show-settings`` (text or json, like ``--format``)."""
    parser.add_argument(
        "--statistics",
        action="store_true",
        help="print how many findings each rule code gave (most frequent first) instead of the "
        "report (text or json)",
    )
    parser.add_argument(
        "--show-settings",
        action="store_true",
        help="print the resolved configuration, each value with where it came from (default, "
        "the config file, a flag), and exit 0 without reading traces (text or json)",
    )


SUMMARY_FORMATS = ("text", "json")


def check_summary_options(args: argparse.Namespace) -> None:
    """Usage errors of ``--statistics``/``--show-settings``, and paths unless only settings
    are shown; before anything is read."""
    for flag, given in (("--statistics", args.statistics), ("--show-settings", args.show_settings)):
        if given and args.format not in SUMMARY_FORMATS:
            raise UsageError(f"{flag} writes text or json, not --format {args.format}")
    if not args.paths and not args.show_settings:
        raise UsageError(
            f"the following arguments are required: PATH (see 'tracediag {args.command} --help')"
        )


def show_settings(args: argparse.Namespace, config: Config) -> int:
    """Write the resolved settings (``--show-settings``); exit code 0."""
    from tracediag.cli.show_settings import render_settings, resolved_settings

    emit(args, render_settings(config, resolved_settings(args, config), args.format))
    return 0


def statistics_text(args: argparse.Namespace, diagnosis: Diagnosis) -> str:
    """The ``--statistics`` output of the diagnosis's findings."""
    from tracediag.cli.finding_statistics import finding_statistics, render_statistics

    rows = finding_statistics(diagnosis.findings)
    return render_statistics(rows, args.format, output_width(args.output))


def jobs_count(text: str) -> int:
    """argparse type of ``--jobs``: a positive integer."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of processes")
    return n


def add_reading_options(parser: argparse.ArgumentParser) -> None:
    """How traces are read: the cache, reader processes, a Dask cluster."""
    group = parser.add_argument_group("reading")
    group.add_argument(
        "--no-cache",
        action="store_true",
        help="neither use nor fill the cache of parsed traces ($TRACEDIAG_CACHE_DIR, else "
        "~/.cache/tracediag; least recently used entries go beyond $TRACEDIAG_CACHE_MAX_GB, "
        "default 20)",
    )
    group.add_argument(
        "--jobs",
        type=jobs_count,
        metavar="N",
        help="reader processes (default: one per input file up to the CPU count on more than "
        "2 cores, threads for the ranks of a big Neuron Parquet job on fewer, and the CPU "
        "count within one big Chrome file; 1: serial)",
    )
    group.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="read the files on a Dask cluster (e.g. tcp://host:8786; needs tracediag[dask] "
        "and the inputs on a filesystem the workers share)",
    )


def reading_options(args: argparse.Namespace) -> dict:
    """``load()`` keyword arguments from the reading options."""
    return {"cache": not args.no_cache, "jobs": args.jobs, "scheduler": args.scheduler}


def layout_sizes(text: str) -> dict[str, int]:
    """argparse type of ``--layout``: ``dp=4,tp=8,pp=4`` -> sizes."""
    from tracediag.analysis.parallel_layout import parse_layout

    try:
        return parse_layout(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def resolve_config(args: argparse.Namespace) -> Config:
    """The config file's settings with the command line's on top, ruff-like.

    ``--select`` starts the selection afresh (the file's select, extend-select and ignore are
    dropped); ``--extend-select`` and ``--ignore`` add to what the file says.
    """
    from tracediag.engine.rule import all_rules

    config = load_config(args.config)
    known = list(all_rules())
    check_config_codes(config, known)  # the file's typos, as the flags' below
    for option, patterns in (
        ("--select", args.select),
        ("--extend-select", args.extend_select),
        ("--ignore", args.ignore),
    ):
        check_patterns(option, patterns or [], known)
    if args.select is not None:
        config.select, config.extend_select, config.ignore = args.select, [], []
    config.extend_select = config.extend_select + (args.extend_select or [])
    config.ignore = config.ignore + (args.ignore or [])
    if getattr(args, "layout", None):
        config.layout = args.layout
    return config


def say(args: argparse.Namespace, message: str) -> None:
    """A progress or summary line on stderr, unless ``--quiet``."""
    if not args.quiet:
        print(f"tracediag: {message}", file=sys.stderr, flush=True)


def load_paths(args: argparse.Namespace, config: Config):
    """The inputs as one aligned trace (progress on stderr unless quiet, and what was not read
    said in one line)."""
    from tracediag.loading.loader import load, skipped_text, stderr_progress

    trace = load(
        args.paths,
        align=config.align and not args.no_align,
        progress=None if args.quiet else stderr_progress,
        **reading_options(args),
    )
    if trace.skipped:
        say(args, skipped_text(trace.skipped))
    return trace


def _import_engine() -> None:
    """Import the diagnosis engine and the numeric stack under it with cyclic GC paused, then
    freeze what the imports built: collections during the ~600 module imports, and every later
    full collection, would traverse those objects again and again for nothing (they live as
    long as the process). 0.02-0.05 CPU s a report; forked reader helpers share the pages.
    Once per process: a later freeze would also hold an earlier diagnosis's garbage."""
    if "tracediag.engine.diagnose" in sys.modules:
        return
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        import tracediag.engine.diagnose  # noqa: F401 (pandas, numpy, pyarrow, the analyses)
        import tracediag.loading.loader  # noqa: F401
    finally:
        if was_enabled:
            gc.enable()
    gc.freeze()


def diagnose_paths(args: argparse.Namespace, config: Config) -> Diagnosis:
    """Load the inputs (progress on stderr unless quiet) and diagnose them."""
    _import_engine()
    from tracediag.engine.diagnose import diagnose

    trace = load_paths(args, config)
    say(args, f"diagnosing {plural(len(trace.ranks), 'rank')}, {plural(len(trace), 'event')}")
    return diagnose(trace, config)


def use_color(output: Path | None) -> bool:
    """ANSI colour only on a terminal, and never when NO_COLOR is set (no-color.org)."""
    return output is None and not os.environ.get("NO_COLOR") and sys.stdout.isatty()


def output_width(output: Path | None) -> int:
    """Columns of text output: the terminal's (``COLUMNS`` when set), at most 100; 100 for a
    file or a pipe, so saved reports and CI logs do not depend on who ran the command."""
    if output is not None or not sys.stdout.isatty():
        return MAX_WIDTH
    return min(shutil.get_terminal_size((MAX_WIDTH, 24)).columns, MAX_WIDTH)


def emit(args: argparse.Namespace, text: str) -> None:
    """Write ``text`` to ``--output`` or stdout."""
    if args.output is None:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    args.output.write_text(text, encoding="utf-8")
    say(args, f"wrote {args.output}")
