"""The declaration of :mod:`tracediag.parsers.chrome_json`: its ``FORMAT`` and ``sniff``, importable
without the Chrome/Kineto parse path (so that sniffing a Perfetto or XPlane file, which the
Chrome reader sees first, imports none of it).
"""

from __future__ import annotations

import re
from pathlib import Path

from tracediag.io import files as fileio

FORMAT = "chrome-json"
_SNIFF_BYTES = 1 << 20  # Kineto writes device properties (kilobytes) before "traceEvents"
_TRACE_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:')
_EVENT_KEYS = (re.compile(rb'"ph"\s*:\s*"'), re.compile(rb'"ts"\s*:'))


def sniff(path: Path) -> bool:
    """A file whose content is a JSON object with ``traceEvents`` or a list of events with ``ph``."""
    path = Path(path)
    if not path.is_file():
        return False
    text = fileio.sniff_head(path, _SNIFF_BYTES).lstrip(b"\xef\xbb\xbf \t\r\n")
    if text.startswith(b"["):
        return re.match(rb"\[\s*\{", text) is not None and _EVENT_KEYS[0].search(text) is not None
    if not text.startswith(b"{"):
        return False
    if _TRACE_EVENTS_KEY.search(text):
        return True
    # "traceEvents" beyond the head: accept only event-shaped content (Neuron JSON has no "ph").
    return all(k.search(text) for k in _EVENT_KEYS)
