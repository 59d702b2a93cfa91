"""Pieces of work on a big trace in threads: the results and errors of the serial loop, and a
diagnosis whose rules ran in threads equal to one whose rules ran one after another."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tracediag.engine.config import Config
from tracediag.engine.diagnose import diagnose
from tracediag.io import threads
from tracediag.loading.loader import load

SAMPLES = Path(__file__).parent.parent / "sample_traces"


@pytest.fixture
def two_cores(monkeypatch):
    monkeypatch.setattr(threads, "cores", lambda: 2)


def test_small_traces_run_in_order_in_this_thread(two_cores):
    names = threads.map_in_threads(
        lambda _x: threading.current_thread().name,
        range(3),
        events=threads.BIG_TRACE_EVENTS - 1,
    )
    assert names == [threading.current_thread().name] * 3


def test_big_traces_run_in_threads_with_results_in_order(two_cores):
    started = threading.Barrier(2, timeout=10)  # both items run at once, or this times out

    def piece(x: int) -> int:
        started.wait()
        return x * 10

    assert threads.map_in_threads(piece, [1, 2], events=threads.BIG_TRACE_EVENTS) == [10, 20]


def test_the_first_error_in_item_order_is_raised(two_cores):
    def piece(x: int) -> int:
        if x in (2, 3):
            raise ValueError(f"item {x}")
        return x

    with pytest.raises(ValueError, match="item 2"):
        threads.map_in_threads(piece, [1, 2, 3], events=threads.BIG_TRACE_EVENTS)


def test_one_core_runs_in_order(monkeypatch):
    monkeypatch.setattr(threads, "cores", lambda: 1)
    names = threads.map_in_threads(
        lambda _x: threading.current_thread().name, range(2), events=10**9
    )
    assert names == [threading.current_thread().name] * 2


@pytest.mark.parametrize("sample", ["neuron_parquet_straggler/parquet", "chrome_straggler/chrome"])
def test_rules_in_threads_find_what_serial_rules_find(sample, two_cores, monkeypatch):
    trace = load([SAMPLES / sample], cache=False)
    serial = diagnose(trace, Config())
    monkeypatch.setattr(threads, "BIG_TRACE_EVENTS", 0)
    ran_in = set()
    real = threads.ThreadPoolExecutor

    class Recording(real):
        def submit(self, fn, *args, **kwargs):
            def run(*a, **kw):
                ran_in.add(threading.current_thread().name)
                return fn(*a, **kw)

            return super().submit(run, *args, **kwargs)

    monkeypatch.setattr(threads, "ThreadPoolExecutor", Recording)
    threaded = diagnose(load([SAMPLES / sample], cache=False), Config())
    assert ran_in and all(name.startswith("tracediag") for name in ran_in)
    assert threaded.findings and threaded.findings == serial.findings
    # The report's steps were made in the pool beside the rules; serially, when asked.
    assert "job_steps" in threaded.analysis.__dict__
    assert "job_steps" not in serial.analysis.__dict__
    assert threaded.to_dict() == serial.to_dict()
