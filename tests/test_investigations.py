"""The kernel investigations (DMA104, DMA105, CMP303, CMP304) against the generator's truth.

Each kernel scenario (``tracediag.generator.kernels``) is one NKI-style matmul on one
NeuronCore with one known cause; its truth's saving is the kernel re-simulated with the cause
removed. Each investigation must name the cause's rank, engine, window and source line, and
save within 15% of that truth. The bounds of the same profiles are checked against a hand
computation from the written Parquet tables (AWS's formulas, pandas alone) within 1%, and the
bottleneck against the simulation's busiest engine.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import tracediag
from tests.kernel_fixtures import diagnosed_kernels
from tracediag.generator import generate
from tracediag.generator.kernels import KERNEL_SCENARIOS
from tracediag.model import schema as S
from tracediag.model.findings import Severity

#: Scenario -> the investigation that must find its cause.
INVESTIGATION = {
    "dma_reloads": "DMA105",
    "small_tiles": "CMP303",
    "transpose_heavy": "CMP304",
    "strided_dma": "DMA104",
}
CODES = set(INVESTIGATION.values())


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    """Every kernel scenario written once and diagnosed: (profile dir, truth, diagnosis)."""
    return diagnosed_kernels(tmp_path_factory.mktemp("kernels"))


def _found(diagnosis, code):
    return [f for f in diagnosis.findings if f.code == code]


@pytest.mark.parametrize("scenario", sorted(INVESTIGATION))
def test_each_investigation_finds_its_cause_within_15_percent(kernels, scenario):
    _, truth, diagnosis = kernels[scenario]
    (fault,) = truth["faults"]
    found = _found(diagnosis, INVESTIGATION[scenario])
    assert len(found) == 1, [f.message for f in found]
    f = found[0]
    assert fault["saving_ns"] > 0
    assert abs(f.saving_ns - fault["saving_ns"]) <= 0.15 * fault["saving_ns"], (
        f.saving_ns,
        fault["saving_ns"],
    )
    assert f.ranks == (0,)
    assert f.engine == fault["engines"][0]
    # The window spans exactly the cause's nodes (the truth is on the profile's clock).
    assert abs(f.start_ns - fault["window_ns"][0]) <= 1_000
    assert abs(f.end_ns - fault["window_ns"][1]) <= 1_000
    assert 0 < f.impact_ns <= truth["step_time_ns"]
    assert f.saving_ns <= f.impact_ns  # each change only removes time its events hold
    (line,) = fault["source_lines"]
    assert line in f.message
    assert f.severity >= Severity.WARNING


def test_the_messages_say_what_each_investigation_measured(kernels):
    reload = _found(kernels["dma_reloads"][2], "DMA105")[0]
    assert reload.evidence["tensor"] == "B"
    assert reload.evidence["times_moved"] == pytest.approx(8.0)  # 8 row blocks, 8 loads of B
    assert reload.evidence["repeated_transfers"] == kernels["dma_reloads"][1]["faults"][0]["nodes"]
    tiles = _found(kernels["small_tiles"][2], "CMP303")[0]
    assert tiles.evidence["tile"] == "32x128"
    assert tiles.evidence["array_share"] == pytest.approx(0.25)
    assert tiles.evidence["matmuls"] == 1024
    transposes = _found(kernels["transpose_heavy"][2], "CMP304")[0]
    assert transposes.evidence["repeats"] == 192  # 3 of every 4 column blocks, 64 tiles
    assert transposes.evidence["result_copies"] == 192
    strided = _found(kernels["strided_dma"][2], "DMA104")[0]
    assert strided.evidence["transfers"] == 64
    assert strided.evidence["ratio"] < 0.5


def test_no_investigation_fires_on_the_clean_kernel_or_another_cause(kernels):
    assert not [f for f in kernels["kernel_clean"][2].findings if f.code in CODES]
    for scenario, (_, _, diagnosis) in kernels.items():
        others = {f.code for f in diagnosis.findings} & (CODES - {INVESTIGATION.get(scenario)})
        assert not others, (scenario, others)


def test_the_existing_samples_raise_none_of_the_investigations():
    """The training-step samples carry no TensorInfo, tile shapes nor transposes."""
    root = Path(__file__).resolve().parents[1] / "sample_traces"
    for name in ("neuron_parquet_clean", "neuron_parquet_slow_dma"):
        job = tracediag.load([str(root / name / "parquet")], cache=False)
        assert not [f for f in job.diagnose().findings if f.code in CODES], name


def test_source_lines_reach_the_canonical_events(kernels):
    profile, _, _ = kernels["small_tiles"]
    job = tracediag.load([str(profile.parent)], cache=False)
    ev = job.events
    lines = set(ev[S.SOURCE].dropna().astype(str))
    assert {"matmul_kernel.py:21", "matmul_kernel.py:31", "matmul_kernel.py:33"} <= lines
    mm = ev[(ev[S.NAME] == "MATMUL").to_numpy()]
    assert set(mm[S.TILE_ROWS]) == {32.0} and set(mm[S.TILE_COLS]) == {128.0}
    assert set(mm[S.TILE_MOVING]) == {512.0}
    assert job.meta[0].info["tensor_sizes"] == {"A": 2 << 20, "B": 4 << 20, "C": 4 << 20}


# ---- bounds against a hand computation from the tables (no tracediag code) ------------------
def _read(profile: Path, name: str) -> pd.DataFrame:
    parts = sorted(profile.glob(f"{name}.parquet")) + sorted(profile.glob(f"{name}_*.parquet"))
    return pd.concat([pd.read_parquet(p) for p in parts], ignore_index=True)


def _union(start, end) -> float:
    s, e = np.asarray(start, dtype=float), np.asarray(end, dtype=float)
    o = np.argsort(s)
    total, cur_s, cur_e = 0.0, s[o][0], e[o][0]
    for a, b in zip(s[o][1:], e[o][1:], strict=True):  # a test's reference: plain and obvious
        if a > cur_e:
            total, cur_s, cur_e = total + cur_e - cur_s, a, b
        else:
            cur_e = max(cur_e, b)
    return total + cur_e - cur_s


def _by_hand(profile: Path) -> dict:
    md = _read(profile, "Metadata").iloc[0]
    bw = float(md["dma_ddr_bandwidth"])
    rows, cols = float(md["tensor_engine_num_rows"]), float(md["tensor_engine_num_cols"])
    te = rows * cols * 2 * float(md["tensor_engine_clock_freq"]) * 1e9
    inst, pk, tens = _read(profile, "Instruction"), _read(profile, "DmaPacket"), None
    tens = _read(profile, "TensorInfo")
    busy = {e: _union(g["start_ts"], g["end_ts"]) for e, g in inst.groupby("engine")}
    busy["dma"] = _union(pk["start_ts"], pk["end_ts"])
    data = (pk["queue_type"] != "instruction") & (pk["transfer_bytes"] > 4)
    mm = inst[(inst["engine"] == "tensor") & (inst["opcode"] == "MATMUL")]
    flops = float(mm["adjusted_flops"].sum())
    transposed = float(mm.loc[mm["tensor_instruction_type"] == "TRANSPOSE", "adjusted_flops"].sum())
    bottleneck = max(busy, key=busy.get)
    return {
        "total_ns": float(
            max(inst["end_ts"].max(), pk["end_ts"].max())
            - min(inst["start_ts"].min(), pk["start_ts"].min())
        ),
        "memory_bound_ns": busy["dma"],
        "memory_ideal_ns": float(pk.loc[data, "transfer_bytes"].sum()) / bw * 1e9,
        "memory_necessary_ns": float(tens.loc[tens["type"].isin(["IN", "OUT"]), "size"].sum())
        / bw
        * 1e9,
        "compute_bound_ns": busy["tensor"],
        "compute_ideal_ns": flops / te * 1e9,
        "compute_useful_ns": (flops - transposed) / te * 1e9,
        "pipeline_bound_ns": busy[bottleneck],
        "bottleneck": bottleneck,
    }


@pytest.mark.parametrize("scenario", sorted(KERNEL_SCENARIOS))
def test_bounds_match_the_tables_and_name_the_simulated_bottleneck(kernels, scenario):
    profile, truth, diagnosis = kernels[scenario]
    row = diagnosis.bounds_df.loc[0]
    want = _by_hand(profile)
    for col, value in want.items():
        if col.endswith("_ns"):
            assert float(row[col]) == pytest.approx(value, rel=0.01), (scenario, col)
    assert row["bottleneck"] == want["bottleneck"] == truth["bottleneck"]
    assert float(row["total_ns"]) == pytest.approx(truth["step_time_ns"], rel=0.01)


def test_the_kernels_are_bound_where_their_cause_says(kernels):
    binding = {s: kernels[s][2].bounds_df.loc[0, "binding"] for s in KERNEL_SCENARIOS}
    assert binding["dma_reloads"] == "memory"
    assert binding["small_tiles"] == "compute"
    assert binding["slow_vector_engine"] == "pipeline"
    assert kernels["slow_vector_engine"][2].bounds_df.loc[0, "bottleneck"] == "vector"
    # Reloads are excess HBM traffic, small tiles TE underutilization, transposes overhead.
    reloads = kernels["dma_reloads"][2].bounds_df.loc[0]
    assert reloads["excess_hbm_traffic_ns"] > 0.5 * reloads["memory_ideal_ns"]
    tiles = kernels["small_tiles"][2].bounds_df.loc[0]
    assert tiles["te_underutilization_ns"] > 0.7 * tiles["compute_bound_ns"]
    transposes = kernels["transpose_heavy"][2].bounds_df.loc[0]
    assert transposes["transpose_overhead_ns"] > 0


def test_kernel_scenarios_run_on_one_core_and_write_parquet(tmp_path):
    with pytest.raises(ValueError, match="one NeuronCore"):
        generate("small_tiles", tmp_path / "a", formats=("parquet",), ranks=4)
    with pytest.raises(ValueError, match="Parquet"):
        generate("small_tiles", tmp_path / "b", formats=("chrome",))
    truth = generate("kernel_clean", tmp_path / "c", formats=("parquet", "json"))
    assert truth["faults"] == [] and "json" in truth["skipped_formats"]
    assert truth["step_time_ns"] == truth["step_time_without_faults_ns"]
