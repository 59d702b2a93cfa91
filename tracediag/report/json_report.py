"""The JSON report: exactly ``Diagnosis.to_dict()`` (schema ``tracediag.report/1``), indented."""

from __future__ import annotations

from tracediag.engine.diagnosis import report_json


def render_json(report: dict) -> str:
    """The report dictionary as indented JSON text ending in a newline (see ``report_json``)."""
    return report_json(report)
