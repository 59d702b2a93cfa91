"""The one table of output formats: what each is, which commands offer it, how it renders.

``report`` and ``check`` read their ``--format`` choices from here, and render through
:func:`render` and :func:`render_check`; a new format is one row of :data:`FORMATS` and its
renderer module. Renderers are imported when used, so building the command line stays cheap.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tracediag.engine.diagnosis import Diagnosis


@dataclass(frozen=True)
class RenderOptions:
    """What a renderer may use beside the report: terminal colour and width (text), the trend
    of a run history and the diagnosis itself for pictures of the trace (HTML)."""

    color: bool = False
    width: int = 100
    trend: dict | None = None
    diagnosis: Diagnosis | None = None


@dataclass(frozen=True)
class OutputFormat:
    """One output format: its name, the commands that offer it, and its renderer of the report
    dictionary (a check report carries a ``gate`` section the renderer adds)."""

    name: str
    commands: tuple[str, ...]
    render: Callable[[dict, RenderOptions], str]


def _text(report: dict, o: RenderOptions) -> str:
    from tracediag.report.gate_text import render_gate_text
    from tracediag.report.text import render_text

    out = render_text(report, color=o.color, width=o.width)
    return out + render_gate_text(report["gate"]) if "gate" in report else out


def _json(report: dict, o: RenderOptions) -> str:
    from tracediag.report.json_report import render_json

    return render_json(report)


def _markdown(report: dict, o: RenderOptions) -> str:
    from tracediag.report.gate_text import render_gate_markdown
    from tracediag.report.markdown import render_markdown

    out = render_markdown(report)
    return out + render_gate_markdown(report["gate"]) if "gate" in report else out


def _html(report: dict, o: RenderOptions) -> str:
    from tracediag.report.html import render_html
    from tracediag.report.html_views import html_views

    return render_html(report, o.trend, html_views(o.diagnosis) if o.diagnosis else None)


def _junit(report: dict, o: RenderOptions) -> str:
    from tracediag.report.junit import render_junit

    return render_junit(report)


def _sarif(report: dict, o: RenderOptions) -> str:
    from tracediag.report.sarif import render_sarif

    return render_sarif(report)


def _github(report: dict, o: RenderOptions) -> str:
    from tracediag.report.github import render_github

    return render_github(report)


_BOTH = ("report", "check")
#: Every output format, in the order ``--help`` lists them.
FORMATS: dict[str, OutputFormat] = {
    f.name: f
    for f in (
        OutputFormat("text", _BOTH, _text),
        OutputFormat("json", _BOTH, _json),
        OutputFormat("markdown", _BOTH, _markdown),
        OutputFormat("html", _BOTH, _html),  # check: the report with its gate section
        OutputFormat("junit", ("check",), _junit),
        OutputFormat("sarif", ("check",), _sarif),
        OutputFormat("github", ("check",), _github),
    )
}
REPORT_FORMATS = tuple(n for n, f in FORMATS.items() if "report" in f.commands)
CHECK_FORMATS = tuple(n for n, f in FORMATS.items() if "check" in f.commands)


def _format(fmt: str, command: str) -> OutputFormat:
    offered = tuple(n for n, f in FORMATS.items() if command in f.commands)
    if fmt not in offered:
        raise ValueError(f"unknown {command} format {fmt!r} (choose from {', '.join(offered)})")
    return FORMATS[fmt]


def render(
    diagnosis: Diagnosis,
    fmt: str,
    *,
    color: bool = False,
    trend: dict | None = None,
    width: int = 100,
) -> str:
    """``diagnosis`` as text in format ``fmt`` (one of :data:`REPORT_FORMATS`); ``color`` and
    ``width`` (columns) for text only, ``trend`` (of :func:`tracediag.ci.trend.trend`) for HTML."""
    out = _format(fmt, "report")
    return out.render(diagnosis.to_dict(), RenderOptions(color, width, trend, diagnosis))


def render_check(
    report: dict,
    fmt: str,
    *,
    color: bool = False,
    width: int = 100,
    diagnosis: Diagnosis | None = None,
) -> str:
    """The check report (with ``gate``) in format ``fmt`` (one of :data:`CHECK_FORMATS`);
    ``color`` and ``width`` (columns) for text only, ``diagnosis`` (the one ``report`` came
    from) for the pictures of the trace in HTML."""
    return _format(fmt, "check").render(report, RenderOptions(color, width, None, diagnosis))
