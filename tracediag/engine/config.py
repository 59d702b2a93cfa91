"""Configuration: ``[tool.tracediag]`` in pyproject.toml or a ``tracediag.toml``; CLI flags win.

Keys (ruff-like): ``select``, ``extend-select``, ``ignore`` (codes or prefixes), ``fail-on``
(error|warning|info), ``[rules.CODE]`` option tables, ``[severity]`` per-code overrides,
``[hardware]`` (``profile`` and peak overrides), ``[budgets]`` (limits on report metrics, see
budgets.py), ``[per-trace-ignores]`` (glob on an input path, or ``rank:GLOB`` -> codes, see
trace_ignores.py), ``[baseline]`` (noise thresholds of ``check --baseline``), ``layout``
(``"dp=4,tp=8,pp=4"`` or a table: the parallel layout, instead of inferring it).
"""

from __future__ import annotations

import difflib
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from tracediag.ci.baseline_settings import BaselineSettings
from tracediag.ci.budgets import Budget, parse_budgets
from tracediag.model.errors import UsageError, did_you_mean
from tracediag.model.findings import Severity

KNOWN_KEYS = {
    "select",
    "extend-select",
    "ignore",
    "fail-on",
    "rules",
    "severity",
    "hardware",
    "align",
    "budgets",
    "per-trace-ignores",
    "baseline",
    "layout",
}


@dataclass
class Config:
    """Resolved settings for one diagnosis."""

    select: list[str] = field(default_factory=lambda: ["ALL"])
    extend_select: list[str] = field(default_factory=list)
    ignore: list[str] = field(default_factory=list)
    fail_on: Severity = Severity.ERROR
    rule_options: dict[str, dict] = field(default_factory=dict)
    severity: dict[str, Severity] = field(default_factory=dict)
    hardware: dict = field(default_factory=dict)
    align: bool = True
    budgets: list[Budget] = field(default_factory=list)  # [budgets]: limits on report metrics
    per_trace_ignores: dict[str, list[str]] = field(default_factory=dict)  # glob -> codes
    baseline: BaselineSettings = field(default_factory=BaselineSettings)
    layout: dict[str, int] | None = None  # layout: explicit dp/tp/pp/ep sizes (layout.py)
    source: str = ""  # the file it came from, "" for defaults

    def is_selected(self, code: str) -> bool:
        """Selected by ``select``/``extend-select`` and not ``ignore``d (prefix match)."""

        def match(patterns: list[str]) -> bool:
            return any(p == "ALL" or code.startswith(p) for p in patterns)

        return match(self.select + self.extend_select) and not match(self.ignore)

    def options_for(self, code: str, defaults: dict) -> dict:
        """The rule's options: defaults updated by config; unknown option names are an error."""
        given = self.rule_options.get(code, {})
        unknown = set(given) - set(defaults)
        if unknown:
            raise UsageError(
                f"{self.source or 'config'}: unknown options for {code}: {sorted(unknown)}"
                f"{_did_you_mean(sorted(unknown), defaults)} (known: {sorted(defaults)})"
            )
        return {**defaults, **given}


def find_config(start: Path) -> Path | None:
    """The nearest tracediag.toml, or pyproject.toml with a [tool.tracediag] table, upward from start.

    Only a pyproject.toml that parses and has no such table is passed over: a broken one may
    hold the table, so it is an error (skipping it would drop its ignores and change the gate).
    """
    for d in [start, *start.parents]:
        if (d / "tracediag.toml").is_file():
            return d / "tracediag.toml"
        py = d / "pyproject.toml"
        if py.is_file() and "tracediag" in _read_toml(py).get("tool", {}):
            return py
    return None


def _read_toml(path: Path) -> dict:
    """The file's TOML; a missing file, bad TOML or bad UTF-8 is one line naming the file."""
    try:
        return tomllib.loads(Path(path).read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{path}: config file not found") from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: invalid TOML: not UTF-8 (byte {exc.start})") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: invalid TOML: {exc}") from None


def load_config(path: Path | None = None, cwd: Path | None = None) -> Config:
    """Read the config file (given, or found from ``cwd``); defaults when there is none."""
    if path is None:
        path = find_config((cwd or Path.cwd()).resolve())
        if path is None:
            return Config()
    return from_mapping(config_table(path), str(path))


def config_table(path: Path) -> dict:
    """The settings table of a config file: ``[tool.tracediag]`` of a pyproject.toml (empty
    when it has none), the whole of any other file."""
    data = _read_toml(path)
    if Path(path).name == "pyproject.toml":
        data = data.get("tool", {}).get("tracediag", {})
    return data


def from_mapping(data: dict, source: str = "") -> Config:
    """Build a Config from the table's keys, rejecting unknown ones."""
    unknown = set(data) - KNOWN_KEYS
    if unknown:
        raise UsageError(
            f"{source or 'config'}: unknown keys {sorted(unknown)}"
            f"{_did_you_mean(sorted(unknown), KNOWN_KEYS)} (known: {sorted(KNOWN_KEYS)})"
        )
    cfg = Config(source=source)
    try:
        if "select" in data:
            cfg.select = _codes(data["select"])
        cfg.extend_select = _codes(data.get("extend-select", []))
        cfg.ignore = _codes(data.get("ignore", []))
        if "fail-on" in data:
            cfg.fail_on = Severity.parse(data["fail-on"])
        cfg.rule_options = {k.upper(): dict(v) for k, v in data.get("rules", {}).items()}
        cfg.severity = {k.upper(): Severity.parse(v) for k, v in data.get("severity", {}).items()}
        cfg.hardware = dict(data.get("hardware", {}))
        cfg.align = bool(data.get("align", True))
        cfg.budgets = parse_budgets(dict(data.get("budgets", {})))
        cfg.per_trace_ignores = {
            str(k): _codes(v) for k, v in dict(data.get("per-trace-ignores", {})).items()
        }
        cfg.baseline = BaselineSettings.from_table(dict(data.get("baseline", {})))
        if "layout" in data:
            from tracediag.analysis.parallel_layout import parse_layout  # (pandas: not for --help)

            cfg.layout = parse_layout(data["layout"])
    except (ValueError, TypeError) as exc:
        raise UsageError(f"{source or 'config'}: {exc}") from None
    return cfg


def check_patterns(where: str, patterns: list[str], known) -> None:
    """A usage error, ``"{where}: XYZ1 matches no rule (did you mean ...?)"``, for the first of
    ``patterns`` (codes or prefixes, as ``select``/``ignore`` take them) that matches none of
    the ``known`` rule codes; the hint also offers the families (``DAM`` -> ``DMA``)."""
    known = list(known)
    families = sorted({m.group() for code in known if (m := re.match(r"[A-Z]+", code))})
    for p in patterns:
        if p != "ALL" and not any(code.startswith(p) for code in known):
            raise UsageError(f"{where}: {p} matches no rule{did_you_mean(p, families + known)}")


def check_config_codes(config: Config, known) -> None:
    """The file's ``select``, ``extend-select`` and ``ignore`` checked like the same options on
    the command line: a mistyped code is an error naming the file and key, not a silent no-op."""
    source = config.source or "config"
    for key, patterns in (
        ("select", config.select),
        ("extend-select", config.extend_select),
        ("ignore", config.ignore),
    ):
        check_patterns(f"{source}: {key}", patterns, known)


def _did_you_mean(words: list[str], known) -> str:
    """``"; did you mean 'select'?"`` for the first word with a close known one, else ``""``."""
    for word in words:
        close = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6)
        if close:
            which = f" for '{word}'" if len(words) > 1 else ""
            return f"; did you mean '{close[0]}'{which}?"
    return ""


def _codes(value) -> list[str]:
    if isinstance(value, str):
        value = [v for v in value.split(",") if v.strip()]
    return [str(v).strip().upper() for v in value]
