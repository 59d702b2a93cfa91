"""Giving freed heap memory back to the operating system.

glibc's malloc keeps freed memory in the process for reuse; after a reader has built and dropped
millions of small objects and many megabyte-sized temporaries, hundreds of megabytes can sit
freed but resident, interleaved with the live columns. ``malloc_trim`` returns those pages (it
also releases free pages inside the heap, not only at its top), so the resident size follows the
data actually kept. Elsewhere (macOS, musl) this does nothing.

The other way round, for a whole command: glibc serves each block of 32 MB or more (a column of a
few million events) by a fresh ``mmap`` and unmaps it when freed, so every such numpy temporary
is faulted in and zeroed by the kernel again; :func:`keep_freed_memory` makes them come from the
heap and stay there for the next one.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
from pathlib import Path

# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_MAX, _M_ARENA_MAX = -1, -4, -8


@functools.cache
def _libc_function(name: str):
    libc = ctypes.util.find_library("c")
    try:
        return getattr(ctypes.CDLL(libc), name) if libc else None
    except (OSError, AttributeError):
        return None


def _malloc_trim():
    return _libc_function("malloc_trim")


def release_free_memory() -> None:
    """Return the heap's free pages to the operating system, where the C library allows it."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


#: Inputs of this many bytes and more are big enough for :func:`keep_freed_memory` to pay: on
#: 4 ranks x 1M instructions (210 MB of Parquet) it took 54 -> 40 CPU s, but on the 51 and
#: 25 MB real Chrome traces it saved nothing and kept 21-26 MB more resident.
BIG_INPUT_BYTES = 128 << 20


def inputs_are_big(
    paths: list[str], limit: int = BIG_INPUT_BYTES, max_entries: int = 10_000
) -> bool:
    """Whether the files at ``paths`` (directories walked, symbolic links to directories not
    followed; other arguments ignored) hold at least ``limit`` bytes; stops counting once
    there, or after ``max_entries`` directory entries (a huge tree is not walked to the end)."""
    total, seen = 0, 0
    stack = [Path(p) for p in paths]
    while stack and seen < max_entries:
        path = stack.pop()
        try:
            if path.is_dir():
                with os.scandir(path) as entries:
                    for entry in entries:
                        seen += 1
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(Path(entry.path))
                        elif entry.is_file():
                            total += entry.stat().st_size
            elif path.is_file():
                total += path.stat().st_size
        except OSError:
            continue  # the command reports what it cannot read
        if total >= limit:
            return True
    return False


def keep_freed_memory() -> None:
    """For the rest of the process, take every allocation from the heap (no ``mmap`` per large
    block) and keep freed heap memory for reuse instead of returning it at once: a report of
    4 ranks x 1M instructions spent a third of its CPU time in the kernel zeroing the pages of
    its temporaries. :func:`release_free_memory` still returns the free pages when called. The
    peak resident size grows a little (freed blocks wait for reuse). One arena for every
    thread: blocks freed in a rule thread's own arena could not serve the next thread's (on the
    clean-room writer's 4 x 1M job, threads with an arena each peaked at 4.37-4.46 GB, with one at 4.20). glibc only;
    elsewhere nothing."""
    mallopt = _libc_function("mallopt")
    if mallopt is not None:
        mallopt(_M_MMAP_MAX, 0)
        mallopt(_M_TRIM_THRESHOLD, 2**31 - 1)
        mallopt(_M_ARENA_MAX, 1)
