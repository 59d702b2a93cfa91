"""``tracediag generate``: synthetic traces with known injected causes (and the bundled samples)."""

from __future__ import annotations

import argparse
from pathlib import Path

from tracediag.cli.common import say
from tracediag.model.errors import UsageError, did_you_mean


def _formats(text: str) -> tuple[str, ...]:
    from tracediag.generator import FORMATS

    chosen = tuple(f.strip().lower() for f in text.split(",") if f.strip())
    if not chosen or set(chosen) - set(FORMATS):
        raise argparse.ArgumentTypeError(f"choose from {', '.join(FORMATS)}, comma-separated")
    return chosen


def add_parser(commands) -> None:
    """Register ``generate`` on the subcommand parsers."""
    p = commands.add_parser(
        "generate",
        help="write synthetic traces of a scenario (or the bundled samples)",
        description="Write a synthetic workload with a known, injected cause in the formats tracediag "
        "reads, for trying the tool and for tests. 'generate --list' lists the scenarios; "
        "'generate --samples DIR' rewrites the bundled sample_traces/.",
    )
    p.add_argument("scenario", nargs="?", metavar="SCENARIO", help="scenario name (see --list)")
    p.add_argument("out", nargs="?", type=Path, metavar="OUT", help="directory to write into")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--list", action="store_true", help="list the scenarios and exit")
    mode.add_argument(
        "--samples", type=Path, metavar="DIR", help="write every sample scenario into DIR"
    )
    p.add_argument(
        "--formats",
        type=_formats,
        metavar="LIST",
        help="comma-separated subset of parquet,json,chrome,perfetto,system (default: all)",
    )
    p.add_argument(
        "--ranks", type=int, metavar="N", help="number of ranks (default: the generator's)"
    )
    p.add_argument("--seed", type=int, default=0, metavar="S", help="random seed (default: 0)")
    p.add_argument(
        "--scale", type=float, default=1.0, metavar="X", help="workload size factor (default: 1.0)"
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no summary line on stderr")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """List scenarios, write the samples, or generate one scenario."""
    from tracediag import generator

    if args.list:
        width = max(map(len, generator.SCENARIOS), default=0)
        for name, description in generator.SCENARIOS.items():
            print(f"{name:<{width}}  {description}")
        return 0
    if args.samples is not None:
        if args.scenario is not None:
            raise UsageError("generate --samples DIR takes no SCENARIO or OUT")
        from tracediag.generator.samples import write_samples

        written = write_samples(args.samples)
        say(args, f"wrote {len(written)} sample directories to {args.samples}")
        return 0
    if args.scenario is None or args.out is None:
        raise UsageError("generate needs SCENARIO and OUT (or --list, or --samples DIR)")
    if args.scenario not in generator.SCENARIOS:
        raise UsageError(
            f"no scenario {args.scenario}{did_you_mean(args.scenario, generator.SCENARIOS)}"
        )
    if args.scale <= 0:
        raise UsageError(f"--scale must be positive, not {args.scale}")
    formats = args.formats or generator.FORMATS
    try:
        truth = generator.generate(
            args.scenario,
            args.out,
            formats=formats,
            ranks=args.ranks,
            seed=args.seed,
            scale=args.scale,
        )
    except ValueError as exc:  # e.g. a scenario that needs more ranks
        raise UsageError(f"generate {args.scenario}: {exc}") from None
    say(
        args,
        f"wrote {args.scenario} on {truth['ranks']} ranks ({', '.join(formats)}) to {args.out};"
        f" the injected faults are in {args.out / 'truth.json'}",
    )
    return 0
