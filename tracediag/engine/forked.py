"""Independent pieces of work on a mid-sized trace, shared with one forked copy of this process.

Below :data:`~tracediag.io.threads.BIG_TRACE_EVENTS` the rules' time is mostly pandas' and
Python's, which holds the GIL, so threads would not overlap them. A forked child starts with
everything this process built (the trace, the graph, the analysis so far) at the cost of copying
its page tables, takes the pieces it claims from a counter both processes share, and sends back
what they returned. What a piece builds for itself in the child (a cached table) comes back
only if the piece returns it (the engine's rules return a few small ones); the rest the parent
builds again if it needs it, as it would have. The results come back pickled from
the child this process forked, never from a file: this lives in the engine, not among the
readers and the file layer, which unpickle nothing (tests/test_cache_security.py).
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing
import os
import pickle
import sys
import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

from tracediag.io import threads

T = TypeVar("T")
R = TypeVar("R")

#: From this many events a forked child pays for itself: the copy of the page tables and the
#: pieces' shared tables built twice cost ~10-30 ms, the rules of a 50k-event trace ~0.2-0.4 s.
FORK_FROM_EVENTS = 20_000


def forks_pay(events: int) -> bool:
    """Whether :func:`map_with_child` forks for a trace of ``events``: mid-sized (big traces run
    their pieces in threads), a second core, Linux's ``fork`` (elsewhere it is not safe with the
    libraries loaded), and no other Python thread whose locks the child could inherit held."""
    return (
        FORK_FROM_EVENTS <= events < threads.BIG_TRACE_EVENTS
        and threads.cores() >= 2
        and sys.platform.startswith("linux")
        and threading.active_count() == 1
    )


def map_with_child(fn: Callable[[T], R], items: Sequence[T], *, events: int) -> list[R]:
    """``[fn(x) for x in items]``, the items shared with a forked child when
    :func:`forks_pay`; results in the items' order, and the first item's error in that order
    raised, as in the loop. An item whose result does not come back (the child died, or its
    result cannot be pickled) is run here."""
    items = list(items)
    if len(items) < 2 or not forks_pay(events):
        return [fn(x) for x in items]
    context = multiprocessing.get_context("fork")
    claimed = context.Value("i", 0)  # the next item to claim, in memory both processes share
    receive, send = context.Pipe(duplex=False)
    # Frozen while the child runs, the objects built so far are not traversed by this process's
    # collector, which would write to their headers and copy every page that holds one (the
    # child collects nothing).
    frozen_here = gc.get_freeze_count() == 0
    if frozen_here:
        gc.freeze()
    pid = os.fork()
    if pid == 0:  # the child: never returns, never runs the parent's exit handlers
        gc.disable()  # short-lived: its garbage ends with it
        receive.close()
        code = 1
        try:
            send.send_bytes(pickle.dumps(_run_claimed(fn, items, claimed)))
            code = 0
        finally:
            os._exit(code)
    send.close()
    try:
        outcomes = _run_claimed(fn, items, claimed)
        # EOF, or an error that does not unpickle: what the child claimed and did not send is
        # run below.
        with contextlib.suppress(Exception):
            outcomes.update(pickle.loads(receive.recv_bytes()))
    finally:
        receive.close()  # first: a child still sending then fails instead of waiting forever
        with contextlib.suppress(ChildProcessError):  # reaped already (SIGCHLD ignored)
            os.waitpid(pid, 0)
        if frozen_here:
            gc.unfreeze()
    results = []
    for i, x in enumerate(items):
        ok, value = outcomes[i] if i in outcomes else _outcome(fn, x)
        if not ok:
            raise value
        results.append(value)
    return results


def _run_claimed(fn, items, claimed) -> dict[int, tuple[bool, object]]:
    """Claim items one at a time until none is left; each item's (ok, result or error)."""
    outcomes = {}
    while True:
        with claimed.get_lock():
            i = claimed.value
            claimed.value += 1
        if i >= len(items):
            return outcomes
        outcomes[i] = _outcome(fn, items[i])


def _outcome(fn, x) -> tuple[bool, object]:
    try:
        return True, fn(x)
    except Exception as exc:  # raised in item order by the caller, as the loop would
        return False, exc
