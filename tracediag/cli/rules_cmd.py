"""``tracediag rules`` (the rule table, as text or json) and ``tracediag rule CODE`` (one rule's
document; ``--all``: every rule's)."""

from __future__ import annotations

import argparse
import shutil
import sys

import orjson

from tracediag.model.errors import UsageError, did_you_mean
from tracediag.model.findings import FAMILIES, family_of


def add_parsers(commands) -> None:
    """Register ``rules`` and ``rule`` on the subcommand parsers."""
    p = commands.add_parser(
        "rules",
        help="list the rules",
        description="List every rule: code, name, family, default severity and title "
        "(--format json: the same as a list of objects).",
    )
    p.add_argument(
        "--family", choices=list(FAMILIES.values()), help="only the rules of this family"
    )
    p.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help="text (a table cut to the terminal) or json (a list of {code, name, family, "
        "severity, title}) (default: text)",
    )
    p.set_defaults(run=run_rules)
    p = commands.add_parser(
        "rule",
        help="print one rule's document",
        description="Print a rule's document: what it finds, why it matters, how to fix, an "
        "example, options. 'tracediag rule --all' prints every rule's.",
    )
    p.add_argument("code", nargs="?", metavar="CODE", help="rule code (e.g. DMA101) or name")
    p.add_argument("--all", action="store_true", help="print every rule's document, in code order")
    p.set_defaults(run=run_rule)


def run_rules(args: argparse.Namespace) -> int:
    """Print the rule table, one rule a line, cut to the terminal's width (on a terminal only:
    a pipe or a file gets whole lines)."""
    from tracediag.engine.rule import all_rules

    rows = [
        (cls.code, cls.name, family_of(cls.code), str(cls.severity), cls.title)
        for cls in all_rules().values()
        if args.family is None or family_of(cls.code) == args.family
    ]
    if args.format == "json":
        keys = ("code", "name", "family", "severity", "title")
        doc = [dict(zip(keys, row, strict=True)) for row in rows]
        print(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode())
        return 0
    header = ("code", "name", "family", "severity", "title")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    width = _table_width()
    for row in [header, *rows]:
        line = "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=False)) + "  " + row[4]
        print(line if width is None or len(line) <= width else line[: width - 1] + "…")
    return 0


def _table_width() -> int | None:
    """The terminal's columns (``COLUMNS`` when set), uncapped: a table of one line per rule
    uses what the terminal has; None (no cut) when stdout is no terminal."""
    if not sys.stdout.isatty():
        return None
    return shutil.get_terminal_size((100, 24)).columns


def _family_codes(wanted: str, rules: dict) -> list[str]:
    """The codes ``wanted`` stands for as a prefix (``DMA``, ``DMA1``) or a family name
    (``dma``, ``collective``); empty when it is neither."""
    key = wanted.upper()
    by_family = [c for c in rules if family_of(c) == wanted.lower()]
    return by_family or ([c for c in rules if c.startswith(key)] if key.isalnum() else [])


def run_rule(args: argparse.Namespace) -> int:
    """Print the document of the rule named by code (any case) or by name; ``--all``: every
    rule's, in code order, a blank line between two."""
    from tracediag.engine.rule import all_rules

    rules = all_rules()
    if args.all == (args.code is not None):
        raise UsageError("rule needs a CODE or --all, not both (see 'tracediag rule --help')")
    if args.all:
        print("\n\n".join(rules[code].document().rstrip("\n") for code in sorted(rules)))
        return 0
    wanted = args.code.strip()
    by_name = {cls.name: cls for cls in rules.values()}
    cls = rules.get(wanted.upper()) or by_name.get(wanted.lower())
    family = _family_codes(wanted, rules)
    if cls is None and family:
        listed = ", ".join(f"{c} ({rules[c].name})" for c in family)
        raise UsageError(
            f"{wanted} names {len(family)} rules, not one: {listed}; "
            f"'tracediag rule {family[0]}' prints one, 'tracediag rules --family {family_of(family[0])}' lists them"
        )
    if cls is None:
        hint = did_you_mean(wanted.upper(), rules) or did_you_mean(wanted, by_name)
        hint = hint or " ('tracediag rules' lists them)"
        raise UsageError(f"no rule {wanted}{hint}")
    print(cls.document())
    return 0
