"""Giving freed heap memory back to the operating system.

glibc's malloc keeps freed memory in the process for reuse; after a reader has built and dropped
millions of small objects and many megabyte-sized temporaries, hundreds of megabytes can sit
freed but resident, interleaved with the live columns. ``malloc_trim`` returns those pages (it
also releases free pages inside the heap, not only at its top), so the resident size follows the
data actually kept. Elsewhere (macOS, musl) this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools


@functools.cache
def _malloc_trim():
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None


def release_free_memory() -> None:
    """Return the heap's free pages to the operating system, where the C library allows it."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
