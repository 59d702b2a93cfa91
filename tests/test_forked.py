"""Pieces of work on a mid-sized trace shared with a forked child: the results and errors of the
serial loop, items the child does not send back run here, and a diagnosis whose rules were
shared with a child equal to one whose rules ran one after another."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tracediag.engine import diagnose as diagnose_module
from tracediag.engine import forked
from tracediag.engine.config import Config
from tracediag.engine.diagnose import diagnose
from tracediag.io import threads
from tracediag.loading.loader import load

SAMPLES = Path(__file__).parent.parent / "sample_traces"
EVENTS = forked.FORK_FROM_EVENTS  # mid-sized: shared with a child


@pytest.fixture
def may_fork(monkeypatch):
    """Two cores, and the test runner's own threads (pytest-xdist's) not counted."""
    monkeypatch.setattr(threads, "cores", lambda: 2)
    monkeypatch.setattr(forked.threading, "active_count", lambda: 1)


def test_results_in_item_order_from_both_processes(may_fork):
    parent = os.getpid()

    def piece(x: int) -> tuple[int, bool]:
        time.sleep(0.05)  # long enough that both processes claim items
        return x * 10, os.getpid() == parent

    out = forked.map_with_child(piece, range(8), events=EVENTS)
    assert [v for v, _ in out] == [0, 10, 20, 30, 40, 50, 60, 70]
    here = [mine for _, mine in out]
    assert any(here) and not all(here)


def test_the_first_error_in_item_order_is_raised(may_fork):
    def piece(x: int) -> int:
        time.sleep(0.02)
        if x in (2, 3):
            raise ValueError(f"item {x}")
        return x

    with pytest.raises(ValueError, match="item 2"):
        forked.map_with_child(piece, range(6), events=EVENTS)


def test_items_of_a_child_that_dies_run_here(may_fork):
    parent = os.getpid()

    def piece(x: int) -> tuple[int, int]:
        time.sleep(0.02)
        if os.getpid() != parent:
            os._exit(3)  # the child dies on its first item, sending nothing
        return x, os.getpid()

    assert forked.map_with_child(piece, range(5), events=EVENTS) == [(x, parent) for x in range(5)]


def test_small_big_and_threaded_traces_stay_in_this_process(may_fork, monkeypatch):
    assert not forked.forks_pay(EVENTS - 1)
    assert not forked.forks_pay(threads.BIG_TRACE_EVENTS)  # big ones run in threads
    assert forked.forks_pay(EVENTS)
    monkeypatch.setattr(forked.threading, "active_count", lambda: 2)  # as in the TUI
    assert not forked.forks_pay(EVENTS)
    monkeypatch.setattr(threads, "cores", lambda: 1)
    monkeypatch.setattr(forked.threading, "active_count", lambda: 1)
    assert not forked.forks_pay(EVENTS)


@pytest.mark.parametrize("sample", ["chrome_straggler/chrome", "neuron_parquet_straggler/parquet"])
def test_rules_shared_with_a_child_find_what_serial_rules_find(sample, may_fork, monkeypatch):
    serial = diagnose(load([SAMPLES / sample], cache=False), Config())
    serial_parts = set(serial.analysis.__dict__)  # before the report builds more
    monkeypatch.setattr(forked, "FORK_FROM_EVENTS", 0)
    forks = []
    real_fork = os.fork

    def recording_fork():
        pid = real_fork()
        if pid:
            forks.append(pid)
        return pid

    monkeypatch.setattr(forked.os, "fork", recording_fork)
    shared = diagnose(load([SAMPLES / sample], cache=False), Config())
    shared_parts = set(shared.analysis.__dict__)
    assert len(forks) == 1
    assert shared.findings and shared.findings == serial.findings
    # The changes behind the savings came back in rule order: the joint saving is the same.
    assert list(shared.analysis.changes) == list(serial.analysis.changes)
    assert shared.to_dict() == serial.to_dict()
    # The small cached parts the rules built are here, whichever process built them.
    built = {k for k in diagnose_module._SENT_BACK if k in serial_parts}
    assert built and built <= set(shared_parts)


def test_a_process_that_ignores_its_children_still_gets_the_results(may_fork):
    import signal

    previous = signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children reaped by the kernel
    try:
        out = forked.map_with_child(lambda x: (time.sleep(0.02), x)[1], range(6), events=EVENTS)
    finally:
        signal.signal(signal.SIGCHLD, previous)
    assert out == list(range(6))
