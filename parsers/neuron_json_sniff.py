"""The declaration of :mod:`tracediag.parsers.neuron_json`: its ``FORMAT``, attributes and ``sniff``,
importable without its parse path (the registry sniffs with this module; the reader module is
imported on the first read).
"""

from __future__ import annotations

import re
from pathlib import Path

from tracediag.io.files import head
from tracediag.model.errors import TraceInputError

FORMAT = "neuron-json"
#: A device profile on a NeuronCore clock: the loader joins system profiles onto it.
NEURON_DEVICE_PROFILE = True
#: The hardware a profile that names none ran on (the documented default target).
DEFAULT_HARDWARE = "trn1"
_SNIFF_BYTES = 1 << 16
_LEGACY_KEY = re.compile(rb'"(?:instruction|dma|summary|profile_info)"\s*:\s*\[')
_FIRST_VALUE_IS_OBJECT = re.compile(rb'^\{\s*"(?:[^"\\]|\\.)*"\s*:\s*\{')
_SUMMARY_FIELD = re.compile(
    rb'"(?:total_time|total_exec_time|total_active_time|dma_active_time|hbm_read_bytes|cc_op_count'
    rb'|mfu_estimated_percent|(?:tensor|vector|scalar|gpsimd|sync)_engine_\w+)"\s*:'
)


def sniff(path: Path) -> bool:
    """An object holding the legacy tables, or an object of flat Summary objects; never Chrome
    JSON (``traceEvents`` or a list of events)."""
    path = Path(path)
    if not path.is_file():
        return False
    try:
        text = head(path, _SNIFF_BYTES)
    except TraceInputError:
        return False
    body = text.lstrip(b"\xef\xbb\xbf \t\r\n")
    if not body.startswith(b"{") or b'"traceEvents"' in text:
        return False
    if _LEGACY_KEY.search(text):
        return True
    return bool(_FIRST_VALUE_IS_OBJECT.match(body) and _SUMMARY_FIELD.search(text))
