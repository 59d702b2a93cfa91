"""Renderers of a :class:`~tracediag.engine.diagnose.Diagnosis`: one module per format, no analysis.

Every renderer reads the JSON report (``Diagnosis.to_dict()``), so all formats say the same; the
HTML page also draws pictures from the trace itself (``html_views``) when it has one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracediag.report.html import render_html
from tracediag.report.json_report import render_json
from tracediag.report.markdown import render_markdown
from tracediag.report.text import render_text

if TYPE_CHECKING:
    from tracediag.engine.diagnose import Diagnosis

#: Format name -> renderer of the report dictionary.
_RENDERERS = {
    "text": render_text,
    "json": render_json,
    "markdown": render_markdown,
    "html": render_html,
}
FORMATS = tuple(_RENDERERS)


def render(
    diagnosis: Diagnosis,
    fmt: str,
    *,
    color: bool = False,
    trend: dict | None = None,
    width: int = 100,
) -> str:
    """``diagnosis`` as text in format ``fmt`` (one of :data:`FORMATS`); ``color`` and ``width``
    (columns) for text only, ``trend`` (of :func:`tracediag.ci.trend.trend`) for HTML only."""
    if fmt not in _RENDERERS:
        raise ValueError(f"unknown report format {fmt!r} (choose from {', '.join(FORMATS)})")
    report = diagnosis.to_dict()
    if fmt == "text":
        return render_text(report, color=color, width=width)
    if fmt == "html":
        from tracediag.report.html_views import html_views

        return render_html(report, trend, html_views(diagnosis))
    return _RENDERERS[fmt](report)
