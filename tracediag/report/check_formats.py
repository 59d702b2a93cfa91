"""Output formats of ``tracediag check``: the report formats plus the CI formats.

The check report is the JSON report with a ``gate`` section (see :mod:`tracediag.ci.gate`);
``json`` writes it whole, ``text`` and ``markdown`` append the verdict to the report, ``junit``,
``sarif`` and ``github`` are for CI systems.
"""

from __future__ import annotations

from tracediag.report.gate_text import render_gate_markdown, render_gate_text
from tracediag.report.github import render_github
from tracediag.report.json_report import render_json
from tracediag.report.junit import render_junit
from tracediag.report.markdown import render_markdown
from tracediag.report.sarif import render_sarif
from tracediag.report.text import render_text

CHECK_FORMATS = ("text", "json", "markdown", "junit", "sarif", "github")


def render_check(report: dict, fmt: str, *, color: bool = False, width: int = 100) -> str:
    """The check report (with ``gate``) in format ``fmt`` (one of :data:`CHECK_FORMATS`);
    ``color`` and ``width`` (columns) for text only."""
    if fmt == "text":
        return render_text(report, color=color, width=width) + render_gate_text(report["gate"])
    if fmt == "markdown":
        return render_markdown(report) + render_gate_markdown(report["gate"])
    renderers = {
        "json": render_json,
        "junit": render_junit,
        "sarif": render_sarif,
        "github": render_github,
    }
    if fmt not in renderers:
        raise ValueError(f"unknown check format {fmt!r} (choose from {', '.join(CHECK_FORMATS)})")
    return renderers[fmt](report)
