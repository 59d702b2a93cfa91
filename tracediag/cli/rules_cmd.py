"""``tracediag rules`` (the rule table) and ``tracediag rule CODE`` (one rule's document)."""

from __future__ import annotations

import argparse

from tracediag.cli.common import output_width
from tracediag.model.errors import UsageError, did_you_mean
from tracediag.model.findings import FAMILIES, family_of


def add_parsers(commands) -> None:
    """Register ``rules`` and ``rule`` on the subcommand parsers."""
    p = commands.add_parser(
        "rules",
        help="list the rules",
        description="List every rule: code, name, family, default severity and title.",
    )
    p.add_argument(
        "--family", choices=list(FAMILIES.values()), help="only the rules of this family"
    )
    p.set_defaults(run=run_rules)
    p = commands.add_parser(
        "rule",
        help="print one rule's document",
        description="Print a rule's "
        "document: what it finds, why it matters, how to fix, an example, options.",
    )
    p.add_argument("code", metavar="CODE", help="rule code (e.g. DMA101) or name")
    p.set_defaults(run=run_rule)


def run_rules(args: argparse.Namespace) -> int:
    """Print the rule table, one rule a line, cut to the terminal's width (at most 100 columns)."""
    from tracediag.engine.rule import all_rules

    rows = [
        (cls.code, cls.name, family_of(cls.code), str(cls.severity), cls.title)
        for cls in all_rules().values()
        if args.family is None or family_of(cls.code) == args.family
    ]
    header = ("code", "name", "family", "severity", "title")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    width = output_width(None)
    for row in [header, *rows]:
        line = "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=False)) + "  " + row[4]
        print(line if len(line) <= width else line[: width - 1] + "…")
    return 0


def run_rule(args: argparse.Namespace) -> int:
    """Print the document of the rule named by code (any case) or by name."""
    from tracediag.engine.rule import all_rules

    rules = all_rules()
    wanted = args.code.strip()
    by_name = {cls.name: cls for cls in rules.values()}
    cls = rules.get(wanted.upper()) or by_name.get(wanted.lower())
    if cls is None:
        raise UsageError(
            f"no rule {wanted}{did_you_mean(wanted.upper(), rules) or did_you_mean(wanted, by_name)}"
        )
    print(cls.document())
    return 0
