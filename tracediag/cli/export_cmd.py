"""``tracediag export PATH... -o FILE``: the aligned, diagnosed job as a trace to open in the
Perfetto UI (``perfetto``: protobuf) or in Chrome-trace viewers (``chrome``: trace-event JSON).

The format is the output name's (``.json``/``.json.gz``: chrome, gzip-compressed for ``.gz``;
``.pftrace``/``.perfetto-trace``/``.pb``: perfetto) unless ``--format`` names it; a name that
says one format while ``--format`` says the other is refused, so a file never holds what its
name does not.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tracediag.cli.common import add_diagnosis_options, diagnose_paths, resolve_config, say
from tracediag.model.errors import UsageError

FORMATS = ("perfetto", "chrome")
#: Output name endings -> the format they mean (lower case).
EXTENSIONS = {
    ".json": "chrome",
    ".json.gz": "chrome",
    ".pftrace": "perfetto",
    ".perfetto-trace": "perfetto",
    ".pb": "perfetto",
}
_ENDINGS = "'.json' or '.json.gz' (chrome) or '.pftrace', '.perfetto-trace' or '.pb' (perfetto)"


def add_parser(commands) -> None:
    """Register ``export`` on the subcommand parsers."""
    p = commands.add_parser(
        "export",
        help="write the diagnosed job as a Perfetto (or Chrome JSON) trace to open in a viewer",
        description="Diagnose traces like 'report', then write them with ranks as processes, "
        "tracks as threads, the critical path as flow arrows and each finding as an annotated "
        "slice on its own track. Open the result in the Perfetto UI (ui.perfetto.dev). The "
        "format follows the name of -o: .json or .json.gz (gzip) is Chrome trace JSON, "
        ".pftrace, .perfetto-trace or .pb is Perfetto protobuf.",
    )
    add_diagnosis_options(
        p,
        output_help="the trace to write (required); its name picks the format: "
        ".json/.json.gz (chrome) or .pftrace/.perfetto-trace/.pb (perfetto)",
    )
    p.add_argument(
        "--format",
        choices=FORMATS,
        help="perfetto (protobuf) or chrome (trace-event JSON) (default: from the name of -o)",
    )
    p.set_defaults(run=run)


def format_for(output: Path, given: str | None) -> str:
    """The export format of ``output``: ``given`` (``--format``) or the name's; a usage error
    when there is neither, or when they disagree."""
    name = output.name.lower()
    named = next((fmt for end, fmt in EXTENSIONS.items() if name.endswith(end)), None)
    if given is None:
        if named is None:
            raise UsageError(
                f"{output}: cannot tell the export format from the name: end it in {_ENDINGS}, "
                "or give --format"
            )
        return named
    if named is not None and named != given:
        raise UsageError(
            f"{output}: the name says {named} but --format is {given}: rename it or drop --format"
        )
    if given == "perfetto" and name.endswith(".gz"):
        raise UsageError(f"{output}: the perfetto export is not compressed: drop '.gz'")
    return given


def run(args: argparse.Namespace) -> int:
    """Diagnose and write the export; exit 0."""
    if args.output is None:
        raise UsageError("export needs -o FILE (the trace to write)")
    fmt = format_for(args.output, args.format)  # before reading: a bad name costs no load
    diagnosis = diagnose_paths(args, resolve_config(args))
    if fmt == "chrome":
        from tracediag.export.chrome_trace import write_chrome

        write_chrome(diagnosis, args.output)  # gzip-compressed when the name ends in .gz
    else:
        from tracediag.export.perfetto_trace import write_perfetto

        write_perfetto(diagnosis, args.output)
    say(args, f"wrote {args.output} ({fmt})")
    return 0
