"""Reading in a process pool and on Dask: the same trace and the same errors as a serial read."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from tests.test_cache import assert_same_parts, assert_same_trace, entries
from tracediag.cli.main import main
from tracediag.io import worker_pool
from tracediag.loading import cache
from tracediag.loading import read_units as parallel
from tracediag.loading.loader import discover, load
from tracediag.model.errors import TraceInputError, UsageError
from tracediag.parsers import neuron_parquet

SAMPLES = Path(__file__).parent.parent / "sample_traces"
JOBS = {
    "chrome": "chrome_host_gaps/chrome",
    "neuron-json": "neuron_json_fragmented_dma/json",
    "neuron-parquet": "neuron_parquet_straggler/parquet",
}


@pytest.fixture
def in_samples(monkeypatch):
    """Run from sample_traces/ so that paths are relative, as users type them."""
    monkeypatch.chdir(SAMPLES)


@pytest.fixture
def broken_job(tmp_path, monkeypatch) -> Path:
    """``job/``: a good rank 0 and a rank 1 whose gzip stream stops halfway (relative path)."""
    job = tmp_path / "job"
    job.mkdir()
    source = SAMPLES / JOBS["chrome"]
    shutil.copy(source / "rank_0.json.gz", job)
    data = (source / "rank_1.json.gz").read_bytes()
    (job / "rank_1.json.gz").write_bytes(data[: len(data) // 2])
    monkeypatch.chdir(tmp_path)
    return Path("job")


# ---- process pool -----------------------------------------------------------------------


@pytest.mark.parametrize("job", JOBS.values(), ids=JOBS.keys())
def test_the_pool_reads_the_same_trace_as_a_serial_read(job, in_samples):
    serial = load([job], cache=False, jobs=1)
    pooled = load([job], cache=False, jobs=2)
    assert_same_trace(serial, pooled)
    # Workers read absolute paths; what they return names the files as the user gave them.
    assert all(s.startswith(f"{job}/") for m in pooled.meta.values() for s in m.sources)


def test_pool_workers_fill_the_cache_and_a_reopen_needs_no_pool(in_samples, monkeypatch):
    fresh = load([JOBS["chrome"]], cache=False, jobs=1)
    load([JOBS["chrome"]], jobs=2)
    assert len(entries(cache.cache_root())) == 3  # two ranks and the assembled job

    def no_pool(*_args, **_kw):
        raise AssertionError("a process pool was started for a cached trace")

    monkeypatch.setattr(parallel, "ProcessPoolExecutor", no_pool)
    assert_same_trace(fresh, load([JOBS["chrome"]], jobs=2))


def test_small_inputs_read_serially_unless_jobs_is_given(in_samples, monkeypatch):
    started = []
    real = parallel.ProcessPoolExecutor
    monkeypatch.setattr(
        parallel, "ProcessPoolExecutor", lambda *a, **kw: started.append(a) or real(*a, **kw)
    )
    load([JOBS["chrome"]], cache=False)  # 2 files of a few hundred kB: not worth processes
    assert started == []
    load([JOBS["chrome"]], cache=False, jobs=2)
    assert [a[0] for a in started] == [2]


def test_two_cores_read_serially_unless_jobs_is_given(in_samples, monkeypatch):
    started = []
    real = parallel.ProcessPoolExecutor
    monkeypatch.setattr(
        parallel, "ProcessPoolExecutor", lambda *a, **kw: started.append(a) or real(*a, **kw)
    )
    monkeypatch.setattr(parallel, "POOL_MIN_BYTES", 0)  # the sample is big enough
    monkeypatch.setattr(parallel.os, "cpu_count", lambda: 2)
    load([JOBS["chrome"]], cache=False)
    assert started == []
    monkeypatch.setattr(parallel.os, "cpu_count", lambda: 8)
    load([JOBS["chrome"]], cache=False)
    assert [a[0] for a in started] == [2]  # two files: two workers


def test_two_cores_read_parquet_ranks_in_processes_the_same_trace(in_samples, monkeypatch):
    job = JOBS["neuron-parquet"]
    serial = load([job], cache=False, jobs=1)
    processes = []
    real_processes = parallel.ProcessPoolExecutor
    monkeypatch.setattr(
        parallel,
        "ProcessPoolExecutor",
        lambda *a, **kw: processes.append(a) or real_processes(*a, **kw),
    )
    monkeypatch.setattr(parallel.os, "cpu_count", lambda: 2)
    assert_same_trace(serial, load([job], cache=False))  # under POOL_MIN_BYTES: serial
    assert processes == []
    monkeypatch.setattr(parallel, "POOL_MIN_BYTES", 0)
    pooled = load([job], cache=False)
    assert [a[0] for a in processes] == [2]  # two ranks, two workers
    assert_same_trace(serial, pooled)
    load([JOBS["chrome"]], cache=False)  # no POOL_ON_FEW_CORES: read serially on 2 cores
    assert len(processes) == 1


def test_a_worker_error_is_the_serial_error(broken_job):
    with pytest.raises(TraceInputError) as serial:
        load([broken_job], cache=False, jobs=1)
    with pytest.raises(TraceInputError) as pooled:
        load([broken_job], cache=False, jobs=2)
    assert str(serial.value) == str(pooled.value)
    assert serial.value.path == pooled.value.path == "job/rank_1.json.gz"
    assert "truncated gzip stream" in serial.value.problem


def test_the_cli_prints_a_worker_error_as_one_line(broken_job, capsys):
    lines = []
    for jobs in ("1", "2"):
        assert main(["report", str(broken_job), "--jobs", jobs, "--no-cache", "-q"]) == 2
        lines.append(capsys.readouterr().err)
    assert lines[0] == lines[1]
    assert lines[0].startswith("tracediag: error: job/rank_1.json.gz: truncated gzip")
    assert lines[0].count("\n") == 1


def test_jobs_must_be_positive(capsys):
    assert main(["report", "x", "--jobs", "0"]) == 2
    assert "--jobs" in capsys.readouterr().err
    with pytest.raises(UsageError):
        load([SAMPLES / JOBS["chrome"]], jobs=0)


# ---- read units -----------------------------------------------------------------------------


def test_a_parquet_job_directory_is_read_per_rank_exactly_as_whole(in_samples):
    found, _ = discover([JOBS["neuron-parquet"]])
    units = parallel.split_units(found)
    assert [str(u.path) for u in units] == [f"{JOBS['neuron-parquet']}/rank_{r}" for r in (0, 1)]
    per_rank = [part for u in units for part in neuron_parquet.read(u.path)]
    assert_same_parts(neuron_parquet.read(Path(JOBS["neuron-parquet"])), per_rank)


def test_profiles_numbered_by_directory_order_are_read_whole(tmp_path):
    job = tmp_path / "job"
    for rank, name in ((0, "alpha"), (1, "beta")):
        shutil.copytree(SAMPLES / JOBS["neuron-parquet"] / f"rank_{rank}", job / name)
    found, _ = discover([job])
    assert [u.path for u in parallel.split_units(found)] == [job]
    trace = load([job], cache=False, jobs=2)
    assert trace.ranks == [0, 1]


def test_the_start_method_avoids_forking_a_threaded_process(monkeypatch):
    monkeypatch.setattr(worker_pool.threading, "active_count", lambda: 1)
    assert worker_pool.start_context().get_start_method() == "fork"
    monkeypatch.setattr(worker_pool.threading, "active_count", lambda: 3)  # e.g. the TUI's loader
    assert worker_pool.start_context().get_start_method() == "forkserver"


# ---- Dask -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def scheduler():
    """A two-worker in-process Dask cluster's address (as '--scheduler' would take)."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(
        n_workers=2, processes=False, threads_per_worker=1, dashboard_address=None
    ) as cluster:
        yield cluster.scheduler_address


def test_dask_reads_the_same_trace_and_the_caller_caches_it(scheduler, in_samples):
    serial = load([JOBS["neuron-parquet"]], cache=False, jobs=1)
    remote = load([JOBS["neuron-parquet"]], scheduler=scheduler)
    assert_same_trace(serial, remote)
    assert len(entries(cache.cache_root())) == 3
    assert_same_trace(serial, load([JOBS["neuron-parquet"]], jobs=1))


def test_a_dask_worker_error_is_the_serial_error(scheduler, broken_job):
    with pytest.raises(TraceInputError) as serial:
        load([broken_job], cache=False, jobs=1)
    with pytest.raises(TraceInputError) as remote:
        load([broken_job], cache=False, scheduler=scheduler)
    assert str(serial.value) == str(remote.value)


def test_an_unreachable_scheduler_is_a_usage_error(monkeypatch, capsys):
    pytest.importorskip("distributed")
    monkeypatch.setattr(parallel, "CONNECT_TIMEOUT_S", 0.5)
    path = str(SAMPLES / JOBS["chrome"])
    assert main(["report", path, "--no-cache", "--scheduler", "tcp://127.0.0.1:9", "-q"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tracediag: error: --scheduler tcp://127.0.0.1:9: cannot connect")
    assert err.count("\n") == 1


def test_without_dask_the_scheduler_option_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import fails as if not installed
    with pytest.raises(UsageError, match=r"pip install 'tracediag\[dask\]'"):
        load([SAMPLES / JOBS["chrome"]], cache=False, scheduler="tcp://127.0.0.1:9")


def test_the_dask_path_is_only_taken_for_misses(in_samples, monkeypatch):
    load([JOBS["chrome"]])
    monkeypatch.setattr(parallel, "_dask_client", lambda _address: pytest.fail("connected"))
    assert len(load([JOBS["chrome"]], scheduler="tcp://nowhere:8786")) > 0
