"""Independent pieces of work on one big trace, run in threads.

Most of tracediag's time on a big trace is numpy's (sorts, gathers, bincounts, the compiled
replay), which runs without the GIL, so pieces that only read the same arrays overlap in threads
without copying anything to another process. On 4 ranks x 1M Neuron instructions (5.6M events,
written by the clean-room writer of tests/cleanroom) on 2 cores, the rules took 10.6 s one after
another and 7.4-8.0 s in 2 threads, with the same findings. Below :data:`BIG_TRACE_EVENTS` the
pieces take well under a second and run in order.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

#: From this many events a trace's pieces run in threads.
BIG_TRACE_EVENTS = 1_000_000
#: At most this many threads: more would mostly wait for the GIL in the pieces' Python code.
MAX_THREADS = 4


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def runs_in_threads(events: int) -> bool:
    """Whether :func:`map_in_threads` spreads the pieces of a trace of ``events`` over threads."""
    return events >= BIG_TRACE_EVENTS and min(cores(), MAX_THREADS) >= 2


def map_in_threads(fn: Callable[[T], R], items: Iterable[T], *, events: int) -> list[R]:
    """``[fn(x) for x in items]``, in threads when the trace has ``events`` >=
    :data:`BIG_TRACE_EVENTS` and there are cores to share; the results in the items' order and
    the first item's error in that order raised, as in the loop."""
    items = list(items)
    threads = min(cores(), MAX_THREADS, len(items))
    if threads < 2 or not runs_in_threads(events):
        return [fn(x) for x in items]
    with ThreadPoolExecutor(threads, thread_name_prefix="tracediag") as pool:
        return list(pool.map(fn, items))
