"""``--show-settings`` of report and check: the resolved configuration, each value with where
it came from: ``default``, the config file's path, or the command-line flags that set it.

Text is TOML-like (``key = value  # source``) under a line naming the config file; json is
``{"config_file": PATH | null, "settings": {key: {"value": ..., "source": ...}}}``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import orjson

from tracediag.ci.baseline_settings import KEYS as BASELINE_KEYS
from tracediag.engine.config import Config, config_table

DEFAULT = "default"

#: Config-file keys, then the reading options only the command line sets.
FILE_KEYS = (
    "select",
    "extend-select",
    "ignore",
    "fail-on",
    "align",
    "layout",
    "severity",
    "rules",
    "hardware",
    "budgets",
    "per-trace-ignores",
    "baseline",
)
READING_KEYS = ("cache", "jobs", "scheduler")


def resolved_settings(args: argparse.Namespace, config: Config) -> dict[str, dict]:
    """key -> ``{"value", "source"}`` for every setting, as ``resolve_config`` left it."""
    table = config_table(Path(config.source)) if config.source else {}
    base = {k: (config.source if k in table else DEFAULT) for k in FILE_KEYS}
    flags: dict[str, list[str]] = {k: [] for k in (*FILE_KEYS, *READING_KEYS)}
    if args.select is not None:  # --select starts afresh: the file's three lists are dropped
        base.update({"select": "--select", "extend-select": "--select", "ignore": "--select"})
    if args.extend_select:
        flags["extend-select"].append("--extend-select")
    if args.ignore:
        flags["ignore"].append("--ignore")
    for key, flag in (("fail-on", "fail_on"), ("layout", "layout")):
        if getattr(args, flag, None) is not None:
            base[key] = f"--{key}"
    align = config.align
    if args.no_align:
        align, base["align"] = False, "--no-align"
    values = {
        "select": config.select,
        "extend-select": config.extend_select,
        "ignore": config.ignore,
        "fail-on": str(config.fail_on),
        "align": align,
        "layout": config.layout,
        "severity": {code: str(s) for code, s in config.severity.items()},
        "rules": config.rule_options,
        "hardware": config.hardware,
        "budgets": {b.key: b.written for b in config.budgets},
        "per-trace-ignores": config.per_trace_ignores,
        "baseline": {key: getattr(config.baseline, attr) for key, attr in BASELINE_KEYS.items()},
        "cache": not args.no_cache,
        "jobs": args.jobs,
        "scheduler": args.scheduler,
    }
    for key, flag, given in (
        ("cache", "--no-cache", args.no_cache),
        ("jobs", "--jobs", args.jobs is not None),
        ("scheduler", "--scheduler", args.scheduler is not None),
    ):
        base[key] = flag if given else DEFAULT
    out = {}
    for key, value in values.items():
        # A default that a flag only added to is no source worth naming.
        sources = [] if base[key] == DEFAULT and flags[key] else [base[key]]
        out[key] = {"value": value, "source": ", ".join(sources + flags[key])}
    return out


_NONE_MEANS = {
    "layout": "none (inferred from the collectives)",
    "jobs": "auto (one per input file up to the CPU count, on more than 2 cores)",
    "scheduler": "none (read here)",
}


def render_settings(config: Config, settings: dict[str, dict], fmt: str) -> str:
    """The settings as ``json`` or TOML-like ``text``."""
    config_file = config.source or None
    if fmt == "json":
        doc = {"config_file": config_file, "settings": settings}
        return orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n"
    head = f"# config file: {config_file or 'none found (defaults)'}"
    left = {
        key: f"{key} = " + (_NONE_MEANS[key] if s["value"] is None else json.dumps(s["value"]))
        for key, s in settings.items()
    }
    pad = min(max(map(len, left.values())), 60)
    lines = [head]
    for key, s in settings.items():
        if key == READING_KEYS[0]:
            lines.append("# reading (command line only)")
        lines.append(f"{left[key]:<{pad}}  # {s['source']}")
    return "\n".join(lines) + "\n"
