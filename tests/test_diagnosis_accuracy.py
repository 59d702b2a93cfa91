"""Diagnosis accuracy against the generator's ground truth, for every format it writes.

For each injected fault the right family must fire at the right place (ranks, engine or queue,
layer, window) at warning or above, DMA and skew savings within 15% of the true saving (from
re-simulation without the fault), and the clean scenario must stay clean at warning and above.
"""

from __future__ import annotations

import json
import shutil

import pyarrow.parquet as pq
import pytest

from tracediag.engine.diagnose import diagnose
from tracediag.generator import SCENARIOS, generate
from tracediag.generator.kernels import KERNEL_SCENARIOS
from tracediag.loading.loader import load
from tracediag.model.findings import Severity

FORMATS = ("parquet", "json", "chrome")
CODES = {
    "dma": ("DMA101", "DMA102"),
    "collective": ("COL201",),
    "compute": ("CMP302",),
    "host": ("HST401",),
}
SAVING_TOLERANCE = {"dma": 0.15, "collective": 0.15}


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    root = tmp_path_factory.mktemp("jobs")
    out = {}
    # The one-core kernel scenarios have their own accuracy tests (test_investigations.py).
    for scenario in (s for s in SCENARIOS if s not in KERNEL_SCENARIOS):
        generate(scenario, root / scenario, ranks=4, seed=7, formats=FORMATS)
        _strip(root / scenario, keep_waits=True)
        _strip(root / scenario, keep_waits=False)
        out[scenario] = root / scenario
    return out


def _strip(job, keep_waits: bool) -> None:
    """The same Parquet profiles without Flow tables (dependencies must come from the
    instructions' semaphore waits) and, for "parquet-bare", without those waits either (only
    each engine's idle time before an instruction is left to go by)."""
    dest = job / ("parquet-noflow" if keep_waits else "parquet-bare")
    shutil.copytree(job / "parquet", dest)
    for flow in dest.rglob("Flow*.parquet"):
        flow.unlink()
    if not keep_waits:
        for part in dest.rglob("Instruction*.parquet"):
            pq.write_table(pq.read_table(part).drop(["evt_wait_time_ns"]), part)


def _truth(job, fmt):
    truth = json.loads((job / "truth.json").read_text())
    return truth["chrome" if fmt == "chrome" else "device"]  # stripped Parquet too


def _overlaps(f, window):
    return f.start_ns < window[1] and window[0] < f.end_ns


def _matches(f, fault) -> bool:
    if not set(fault["ranks"]) <= set(f.ranks) and not set(f.ranks) <= set(fault["ranks"]):
        return False
    if fault["layers"] and not any(layer in f.layer for layer in fault["layers"]):
        return False
    if fault["queue"] and f.track != fault["queue"]:
        return False
    # Neuron truth names engines (tensor), GPU truth streams (stream 7): a finding's engine or
    # track (named with its device in reports: gpu1/stream 7) must be one of them.
    engines = set(fault["engines"])
    if (
        fault["family"] in ("compute", "collective")
        and engines
        and not {f.engine, f.track, f.track.split("/", 1)[-1]} & engines
    ):
        return False
    return _overlaps(f, fault["window_ns"])


def _check_fault(d, fault):
    codes = CODES[fault["family"]]
    found = [
        f
        for f in d.findings
        if f.code in codes and f.severity >= Severity.WARNING and _matches(f, fault)
    ]
    assert found, (
        fault,
        [(f.code, f.ranks, f.engine, f.track, f.layer, f.start_ns, f.end_ns) for f in d.findings],
    )
    tol = SAVING_TOLERANCE.get(fault["family"])
    if tol is not None:
        best = min(found, key=lambda f: abs(f.saving_ns - fault["saving_ns"]))
        assert abs(best.saving_ns - fault["saving_ns"]) <= tol * fault["saving_ns"], (
            best.saving_ns,
            fault["saving_ns"],
        )


@pytest.mark.parametrize("fmt", ["parquet", "json", "parquet-noflow", "parquet-bare"])
@pytest.mark.parametrize(
    "scenario", ["slow_dma", "fragmented_dma", "straggler", "engine_bottleneck", "mixed"]
)
def test_device_faults_are_found_where_injected(jobs, scenario, fmt):
    d = diagnose(load([jobs[scenario] / fmt]))
    truth = _truth(jobs[scenario], fmt)
    assert d.analysis.length_ns == truth["step_time_ns"]
    for fault in truth["faults"]:
        _check_fault(d, fault)


# The Chrome flavour of fragmented_dma is host-bound (hundreds of small copy calls) and of
# engine_bottleneck has one compute stream: neither has a device-side cause a rule can name yet.
@pytest.mark.parametrize("scenario", ["slow_dma", "straggler", "mixed", "host_gaps"])
def test_gpu_faults_are_found_where_injected(jobs, scenario):
    d = diagnose(load([jobs[scenario] / "chrome"]))
    for fault in _truth(jobs[scenario], "chrome")["faults"]:
        _check_fault(d, fault)


@pytest.mark.parametrize("fmt", FORMATS)
def test_clean_job_is_clean_at_warning(jobs, fmt):
    d = diagnose(load([jobs["clean"] / fmt]))
    assert not d.at_or_above(Severity.WARNING), [
        (f.code, f.message) for f in d.at_or_above(Severity.WARNING)
    ]


@pytest.mark.parametrize("fmt", FORMATS)
def test_clocks_are_aligned_to_the_truth(jobs, fmt):
    trace = load([jobs["straggler"] / fmt])
    truth = _truth(jobs["straggler"], fmt)
    assert [trace.meta[r].clock_offset_ns for r in trace.ranks] == truth["align_to_rank0_ns"]
