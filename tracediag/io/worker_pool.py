"""Worker processes shared by the loader and the readers: how many a reader may start for the
file it reads, and how to start them safely.

The loader reads files one at a time in this process and lets the reader of each spread its
work over ``jobs`` helpers (:func:`reader_helpers`); in pool workers and for readers called
directly the count is 0, so a reader never starts processes from inside a worker.
"""

from __future__ import annotations

import contextvars
import multiprocessing
import threading
from collections.abc import Iterator
from contextlib import contextmanager

# Processes the reader of the file being read in this process may start (helper_processes).
_HELPERS: contextvars.ContextVar[int] = contextvars.ContextVar("reader_helpers", default=0)


@contextmanager
def reader_helpers(count: int) -> Iterator[None]:
    """Within the block, a reader called in this process may start ``count`` helpers."""
    token = _HELPERS.set(count)
    try:
        yield
    finally:
        _HELPERS.reset(token)


def helper_processes() -> int:
    """How many processes a reader may start to share the work of one file: ``jobs`` (or the
    CPU count) while files are read one at a time in this process; 0 elsewhere (in pool
    workers, and for readers called directly). Below 2 a reader works alone."""
    return _HELPERS.get()


def start_context():
    """``fork`` (workers start in milliseconds) unless other threads run, as in the TUI, where
    a forked child could inherit a lock another thread holds; then a preloaded forkserver."""
    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    if "forkserver" in methods:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["tracediag.parsers"])
        return ctx
    return multiprocessing.get_context("spawn")
