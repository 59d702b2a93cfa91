"""The declaration of :mod:`tracediag.parsers.neuron_system_json`: its ``FORMAT``, attributes and ``sniff``,
importable without its parse path (the registry sniffs with this module; the reader module is
imported on the first read).
"""

from __future__ import annotations

import re
from pathlib import Path

from tracediag.io.files import head
from tracediag.model.errors import TraceInputError

FORMAT = "neuron-system-json"
#: The hardware a profile that names none ran on (the documented default target).
DEFAULT_HARDWARE = "trn1"
_KEY = re.compile(rb'^\s*\{[^\[]{0,2000}?"trace_events?"\s*:\s*\[', re.DOTALL)


def sniff(path: Path) -> bool:
    """A JSON object whose first keys include ``trace_event`` or ``trace_events`` (a list)."""
    path = Path(path)
    if not path.is_file():
        return False
    try:
        text = head(path, 4096)
    except TraceInputError:
        return False
    return bool(_KEY.match(text.lstrip(b"\xef\xbb\xbf")))
