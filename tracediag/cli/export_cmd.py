"""``tracediag export PATH... -o FILE``: the aligned, diagnosed job as a trace to open in the
Perfetto UI (``--format perfetto``, the default) or in Chrome-trace viewers (``--format chrome``).
"""

from __future__ import annotations

import argparse

from tracediag.cli.common import add_diagnosis_options, diagnose_paths, resolve_config, say
from tracediag.model.errors import UsageError

FORMATS = ("perfetto", "chrome")


def add_parser(commands) -> None:
    """Register ``export`` on the subcommand parsers."""
    p = commands.add_parser(
        "export",
        help="write the diagnosed job as a Perfetto (or Chrome JSON) trace to open in a viewer",
        description="Diagnose traces like 'report', then write them with ranks as processes, "
        "tracks as threads, the critical path as flow arrows and each finding as an annotated "
        "slice on its own track. Open the result in the Perfetto UI (ui.perfetto.dev).",
    )
    add_diagnosis_options(p)
    p.add_argument(
        "--format",
        choices=FORMATS,
        default="perfetto",
        help="perfetto (protobuf, .pftrace) or chrome (trace-event JSON) (default: perfetto)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Diagnose and write the export; exit 0."""
    if args.output is None:
        raise UsageError("export needs -o FILE (the trace to write)")
    diagnosis = diagnose_paths(args, resolve_config(args))
    if args.format == "chrome":
        from tracediag.export.chrome_trace import write_chrome

        write_chrome(diagnosis, args.output)
    else:
        from tracediag.export.perfetto_trace import write_perfetto

        write_perfetto(diagnosis, args.output)
    say(args, f"wrote {args.output} ({args.format})")
    return 0
