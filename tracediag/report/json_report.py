"""The JSON report: exactly ``Diagnosis.to_dict()`` (schema ``tracediag.report/1``), indented."""

from __future__ import annotations

import orjson

# Rules put numpy scalars and arrays in ``evidence``; non-str keys (rank numbers) are allowed.
_OPTIONS = orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS


def render_json(report: dict) -> str:
    """The report dictionary as indented JSON text ending in a newline."""
    return orjson.dumps(report, option=_OPTIONS | orjson.OPT_APPEND_NEWLINE).decode()
