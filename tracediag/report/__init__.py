"""Renderers of a :class:`~tracediag.engine.diagnosis.Diagnosis`: one module per format, no
analysis; :mod:`tracediag.report.formats` is the table of formats and the way in.

Every renderer reads the JSON report (``Diagnosis.to_dict()``), so all formats say the same; the
HTML page also draws pictures from the trace itself (``html_views``) when it has one.
"""
