"""The rule base class and the registry of built-in and third-party rules.

A rule lives in one module of ``tracediag.rules`` named after its code, declares its code, name,
default severity, options with defaults and a document with fixed sections, and yields
:class:`~tracediag.model.findings.Finding` objects from an :class:`~tracediag.analysis.context.Analysis`. It
does no I/O. Third-party rules register under the entry-point group ``tracediag.rules``.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, ClassVar

from tracediag.model.findings import Finding, Severity, family_of

if TYPE_CHECKING:
    from tracediag.analysis.context import Analysis

DOC_SECTIONS = ("what it finds", "why it matters", "how to fix", "example")


class Rule:
    """Subclass, set the class attributes, implement :meth:`check`."""

    code: ClassVar[str]
    name: ClassVar[str]  # kebab-case, e.g. "dma-wait-on-critical-path"
    title: ClassVar[str]  # one line, used as the finding's title
    severity: ClassVar[Severity]
    options: ClassVar[dict] = {}
    doc: ClassVar[dict[str, str]]  # DOC_SECTIONS -> text

    @property
    def family(self) -> str:
        return family_of(self.code)

    def check(self, ctx: Analysis, opts: dict) -> Iterable[Finding]:  # pragma: no cover
        raise NotImplementedError

    @classmethod
    def document(cls) -> str:
        """The rule's document as Markdown (what ``tracediag rule CODE`` prints)."""
        lines = [f"# {cls.code} {cls.name}", "", cls.title, ""]
        lines += [f"Family: {family_of(cls.code)}. Default severity: {cls.severity}.", ""]
        for section in DOC_SECTIONS:
            lines += [f"## {section.capitalize()}", "", cls.doc[section].strip(), ""]
        if cls.options:
            lines += ["## Options", ""]
            lines += [f"- `{k}` (default `{v}`)" for k, v in cls.options.items()]
            lines.append("")
        return "\n".join(lines)


def severity_by_saving(saving_pct: float, opts: dict, default: Severity) -> Severity:
    """error at ``opts['error_saving_pct']`` of the step, warning (or the rule's default when
    higher) at ``opts['warn_saving_pct']``, else info."""
    if saving_pct >= opts["error_saving_pct"]:
        return Severity.ERROR
    if saving_pct >= opts["warn_saving_pct"]:
        return max(default, Severity.WARNING)
    return Severity.INFO


def _validate(cls: type[Rule]) -> None:
    for attr in ("code", "name", "title", "severity", "doc"):
        if not hasattr(cls, attr):
            raise TypeError(f"rule {cls.__name__} lacks {attr}")
    family_of(cls.code)
    missing = [s for s in DOC_SECTIONS if s not in cls.doc]
    if missing:
        raise TypeError(f"rule {cls.code} document lacks sections {missing}")


def all_rules() -> dict[str, type[Rule]]:
    """Every rule class by code: the built-in ones, then the entry-point group ``tracediag.rules``."""
    import tracediag.rules as pkg

    found: dict[str, type[Rule]] = {}
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{pkg.__name__}.{info.name}")
        for obj in vars(module).values():
            if (
                isinstance(obj, type)
                and issubclass(obj, Rule)
                and obj is not Rule
                and obj.__module__ == module.__name__
            ):
                _add(found, obj)
    for ep in entry_points(group="tracediag.rules"):
        obj = ep.load()
        if not (isinstance(obj, type) and issubclass(obj, Rule)):
            raise TypeError(f"entry point {ep.name} of tracediag.rules is not a Rule subclass")
        _add(found, obj)
    return dict(sorted(found.items()))


def _add(found: dict[str, type[Rule]], cls: type[Rule]) -> None:
    _validate(cls)
    if cls.code in found and found[cls.code] is not cls:
        raise TypeError(
            f"rule code {cls.code} defined twice ({found[cls.code].__name__}, {cls.__name__})"
        )
    found[cls.code] = cls
