"""Synthetic workload generator: a simulated data-parallel training step with injected faults.

:func:`generate` simulates one step on N ranks (NeuronCores of a trn1.32xlarge), writes it in
every format tracediag reads and returns the ground truth (also written as ``truth.json``):

- ``parquet/rank_<i>/``: Neuron Explorer Parquet tables (device flavour);
- ``json/rank_<i>.json[.gz]``: legacy Neuron device JSON (device flavour);
- ``chrome/rank_<i>.json.gz``: Kineto JSON of the same step run as a PyTorch GPU job;
- ``perfetto/rank_<i>.pftrace`` + ``perfetto/system_profile.pftrace``: Neuron Perfetto device
  traces and the system trace of the host side (device flavour);
- ``system_json/system_profile.json`` and ``system_parquet/SystemProfileEvents.parquet``: the host
  side as Neuron system-profile JSON and Explorer Parquet (see :mod:`write_system_profile`).

Times come out of a list scheduler over the step's dependency graph; faults change work, never
times. truth.json: ``scenario``, ``description``, ``seed``, ``ranks``, ``layers``, ``scale``,
``formats``; one section per flavour written, ``device`` (Parquet, legacy JSON) and ``chrome``
(``clock_offset_ns``, ``align_to_rank0_ns``, ``step_time_ns``, ``step_time_without_faults_ns``,
``faults``); the top level repeats the section of ``flavour`` (device when Parquet or legacy JSON
was written, else chrome). host_gaps faults exist only in the chrome flavour.

The parallel scenarios (``pipeline_*``, ``tp_*``: a dp x tp x pp job) are simulated by
:mod:`parallel_write`: Neuron Parquet and JSON only, truth with the ``layout`` and per-stage
bubbles (see there). The kernel scenarios (``kernel_clean``, ``dma_reloads``, ``small_tiles``,
``transpose_heavy``, ``slow_vector_engine``, ``strided_dma``: one matmul kernel on one
NeuronCore) are simulated by :mod:`kernels`: Neuron Parquet only.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tracediag.generator import (
    write_chrome,
    write_neuron_json,
    write_parquet,
    write_perfetto,
    write_system_profile,
)
from tracediag.generator.clocks import device_offsets, host_offsets
from tracediag.generator.device_tables import rank_tables
from tracediag.generator.gpu_flavour import run_gpu
from tracediag.generator.kernels import KERNEL_SCENARIOS, generate_kernel
from tracediag.generator.parallel_layout import PARALLEL_SCENARIOS
from tracediag.generator.parallel_write import generate_parallel
from tracediag.generator.program import WorkloadShape
from tracediag.generator.scenarios import SCENARIOS, scenario_faults
from tracediag.generator.simulate import run_device
from tracediag.generator.truth import device_truth, gpu_truth

FORMATS = ("parquet", "json", "chrome", "perfetto", "system")
#: What ``generate`` writes unless told: the formats of the first release.
DEFAULT_FORMATS = ("parquet", "json", "chrome")
DEFAULT_RANKS = 4
DEFAULT_LAYERS = 4

__all__ = ["DEFAULT_FORMATS", "FORMATS", "SCENARIOS", "generate"]


def generate(
    scenario: str,
    out: Path,
    formats: tuple[str, ...] = DEFAULT_FORMATS,
    ranks: int | None = None,
    seed: int = 0,
    scale: float = 1.0,
    *,
    gzip_json: bool = False,
) -> dict:
    """Simulate ``scenario`` on ``ranks`` ranks, write ``formats`` under ``out``, return truth.

    ``scale`` multiplies the model depth (4 layers at 1.0, at least 2): the step time and the
    number of events grow linearly with it. ``gzip_json`` writes the legacy JSON gzipped.
    Raises ValueError for an unknown scenario or format, or a scenario needing more ranks.
    """
    if not formats:
        raise ValueError("no format to write")
    unknown = set(formats) - set(FORMATS)
    if unknown:
        raise ValueError(f"unknown formats {sorted(unknown)}; known: {', '.join(FORMATS)}")
    if scenario in KERNEL_SCENARIOS:
        return generate_kernel(scenario, out, formats, ranks, seed)
    ranks = DEFAULT_RANKS if ranks is None else int(ranks)
    if ranks < 1:
        raise ValueError("ranks must be at least 1")
    if scenario in PARALLEL_SCENARIOS:
        return generate_parallel(scenario, out, formats, ranks, seed, scale, gzip_json=gzip_json)
    shape = WorkloadShape(layers=max(2, round(DEFAULT_LAYERS * scale)))
    faults = scenario_faults(scenario, ranks, shape.layers)
    hidden = sorted({f.kind for f in faults if not f.gpu_visible})
    if hidden and set(formats) == {"chrome"}:
        raise ValueError(f"scenario {scenario!r} has no Chrome (GPU) flavour")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    device = run_device(shape, faults, ranks, seed)
    truth: dict = {
        "scenario": scenario,
        "description": SCENARIOS[scenario],
        "seed": seed,
        "ranks": ranks,
        "layers": shape.layers,
        "scale": scale,
        "formats": [f for f in FORMATS if f in formats],
    }
    for fmt in (*FORMATS, "system_json", "system_parquet"):  # no stale output of a past run
        shutil.rmtree(out / fmt, ignore_errors=True)
    if {"parquet", "json", "perfetto", "system"} & set(formats):
        offsets = device_offsets(ranks, seed)
        every = []
        for rank in range(ranks):
            tables = rank_tables(device, rank, int(offsets[rank]))
            every.append(tables)
            if "perfetto" in formats:
                write_perfetto.write_rank(tables, out / "perfetto" / f"rank_{rank}.pftrace")
            if "parquet" in formats:
                write_parquet.write_rank(tables, out / "parquet" / f"rank_{rank}")
            if "json" in formats:
                name = f"rank_{rank}.json" + (".gz" if gzip_json else "")
                write_neuron_json.write_rank(tables, out / "json" / name, compress=gzip_json)
        truth["device"] = device_truth(shape, faults, device, seed, offsets)
        if {"perfetto", "system"} & set(formats):
            _write_host_side(every, offsets, formats, out)
            truth["device"]["host_clock_offset_ns"] = write_system_profile.HOST_EPOCH_NS
    if "chrome" in formats and hidden:
        truth["formats"].remove("chrome")
        truth["skipped_formats"] = {
            "chrome": f"the GPU flavour does not model {', '.join(hidden)} faults"
        }
    elif "chrome" in formats:
        gpu = run_gpu(device, faults, seed)
        hosts = host_offsets(ranks, seed)
        for rank in range(ranks):
            path = out / "chrome" / f"rank_{rank}.json.gz"
            write_chrome.write_rank(gpu, rank, int(hosts[rank]), path)
        truth["chrome"] = gpu_truth(shape, faults, gpu, seed, hosts)
    truth["flavour"] = "device" if "device" in truth else "chrome"
    truth.update(truth[truth["flavour"]])
    (out / "truth.json").write_text(json.dumps(truth, indent=2) + "\n")
    return truth


def _write_host_side(tables: list, offsets, formats: tuple[str, ...], out: Path) -> None:
    """The system profile of the step: Perfetto beside the device traces, JSON and Parquet."""
    events = write_system_profile.host_events(tables, offsets, write_system_profile.HOST_EPOCH_NS)
    if "perfetto" in formats:
        write_system_profile.write_perfetto(events, out / "perfetto" / "system_profile.pftrace")
    if "system" in formats:
        write_system_profile.write_json(events, out / "system_json" / "system_profile.json")
        write_system_profile.write_parquet(events, out / "system_parquet")
