"""Performance bounds (tracediag.analysis.bounds, ``Diagnosis.bounds_df``, ``tracediag bounds``)
against a hand computation from the Parquet tables the clean-room Neuron writer wrote.

The expected numbers follow AWS's method (neuron-nki-profile-querying, performance-bounds.md),
read from the files with pyarrow/pandas alone: DMA active = the union of ``DmaPacket``
intervals; DMA bytes = ``transfer_bytes`` of packets that are not on an ``instruction`` queue,
of more than 4 bytes, starting in the window; necessary bytes = ``TensorInfo`` IN/OUT sizes;
TE active and each engine's busy time from ``ActiveTime``; FLOPs = ``adjusted_flops`` of the
Tensor MATMULs starting in the window, the transposes among them by
``tensor_instruction_type``; peaks from ``Metadata``. The step time is the simulation's truth.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import tracediag
from tests.cleanroom.neuron_device_writer import write_scenario
from tracediag.analysis import hardware as hw
from tracediag.analysis.bounds import GAPS, bounds_table
from tracediag.cli.main import main

SCENARIOS = ("slow_weight_dma", "clean", "tp_exposed_allreduce", "pipeline_1f1b")


# ---- the hand computation (no tracediag code) ------------------------------------------------
def read(profile: Path, name: str) -> pd.DataFrame | None:
    """A table of a profile directory, its part files concatenated."""
    parts = sorted(profile.glob(f"{name}.parquet")) + sorted(
        profile.glob(f"{name}_[0-9]*.parquet"), key=lambda p: int(p.stem.rsplit("_", 1)[1])
    )
    if not parts:
        return None
    return pd.concat([pd.read_parquet(p) for p in parts], ignore_index=True)


def union_ns(start, end, t0=-np.inf, t1=np.inf) -> float:
    """Length of the union of [start, end) clipped to [t0, t1)."""
    s = np.maximum(np.asarray(start, dtype=float), t0)
    e = np.minimum(np.asarray(end, dtype=float), t1)
    keep = s < e
    s, e = s[keep], e[keep]
    if not len(s):
        return 0.0
    o = np.argsort(s)
    s, e = s[o], e[o]
    total, cur_s, cur_e = 0.0, s[0], e[0]
    for a, b in zip(s[1:], e[1:], strict=True):  # a test's reference: plain and obvious
        if a > cur_e:
            total += cur_e - cur_s
            cur_s, cur_e = a, b
        else:
            cur_e = max(cur_e, b)
    return total + cur_e - cur_s


def expected(profile: Path, total_ns: float, t0=-np.inf, t1=np.inf) -> dict:
    """AWS's bounds of one profile over [t0, t1) in the tables' own timestamps."""
    md = read(profile, "Metadata").iloc[0]
    dma_bw = float(md["dma_ddr_bandwidth"])
    te_peak = (
        float(md["tensor_engine_num_rows"])
        * float(md["tensor_engine_num_cols"])
        * 2.0
        * float(md["tensor_engine_clock_freq"])
        * 1e9
    )
    pk = read(profile, "DmaPacket")
    tens = read(profile, "TensorInfo")
    active = read(profile, "ActiveTime")
    inst = read(profile, "Instruction")
    dma_active = union_ns(pk["start_ts"], pk["end_ts"], t0, t1)
    started = (pk["start_ts"] >= t0) & (pk["start_ts"] < t1)
    data = (pk["queue_type"] != "instruction") & (pk["transfer_bytes"] > 4) & started
    dma_bytes = float(pk.loc[data, "transfer_bytes"].sum())
    necessary = float(tens.loc[tens["type"].isin(["IN", "OUT"]), "size"].sum())
    engine = active["engine"].str.lower()
    busy = {
        e: union_ns(active.loc[engine == e, "start_ts"], active.loc[engine == e, "end_ts"], t0, t1)
        for e in ("tensor", "vector", "scalar", "gpsimd")
    }
    busy["dma"] = dma_active
    mm = inst[
        (inst["engine"].str.lower() == "tensor")
        & (inst["opcode"] == "MATMUL")
        & (inst["start_ts"] >= t0)
        & (inst["start_ts"] < t1)
    ]
    flops = float(mm["adjusted_flops"].sum())
    transpose = float(mm.loc[mm["tensor_instruction_type"] == "TRANSPOSE", "adjusted_flops"].sum())
    bottleneck = max(busy, key=busy.get)
    return {
        "total_ns": total_ns,
        "memory_bound_ns": dma_active,
        "memory_ideal_ns": dma_bytes / dma_bw * 1e9,
        "memory_necessary_ns": necessary / dma_bw * 1e9,
        "compute_bound_ns": busy["tensor"],
        "compute_ideal_ns": flops / te_peak * 1e9,
        "compute_useful_ns": (flops - transpose) / te_peak * 1e9,
        "pipeline_bound_ns": busy[bottleneck],
        "bottleneck": bottleneck,
        "busy": busy,
    }


# ---- fixtures ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """Each scenario written once (Parquet only): its directory and truth."""
    root = tmp_path_factory.mktemp("bounds")
    out = {}
    for name in SCENARIOS + ("no_dma_tables",):
        truth = write_scenario(name, root / name, formats=("parquet",))
        out[name] = (root / name, truth)
    return out


def profiles(directory: Path, truth: dict) -> dict[int, Path]:
    return {int(r): directory / rel for r, rel in truth["files"]["parquet"].items()}


def loaded(directory: Path, truth: dict, **options):
    job = tracediag.load(
        [str(p) for p in profiles(directory, truth).values()], cache=False, **options
    )
    peaks = {r: hw.resolve(m.hardware, m.format) for r, m in job.trace.meta.items()}
    return job, peaks


def close(a: float, b: float, rel: float = 0.01) -> bool:
    return abs(a - b) <= rel * max(abs(b), 1.0)


# ---- the bounds against the tables -------------------------------------------------------------
@pytest.mark.parametrize("name", SCENARIOS)
def test_bounds_match_the_tables_within_one_percent(written, name):
    directory, truth = written[name]
    job, peaks = loaded(directory, truth)
    table = bounds_table(job.trace, peaks)
    assert sorted(table.index) == sorted(profiles(directory, truth))
    for rank, profile in profiles(directory, truth).items():
        want = expected(profile, float(truth["step_time_ns"][str(rank)]))
        row = table.loc[rank]
        for col in [c for c in want if c.endswith("_ns")]:
            assert close(float(row[col]), want[col]), (name, rank, col, row[col], want[col])
        assert row["bottleneck"] == want["bottleneck"], (name, rank, want["busy"])
        # The simulation's own DMA busy time (union of its packets) agrees as well.
        assert close(float(row["memory_bound_ns"]), truth["dma"]["dma_active_ns"][str(rank)])
        assert row["dma_peak_source"] == "Metadata dma_ddr_bandwidth"
        assert row["te_peak_source"].startswith("Metadata")
        assert row["necessary_source"] == "TensorInfo IN/OUT"


def test_gaps_are_the_differences_of_consecutive_bounds(written):
    directory, truth = written["slow_weight_dma"]
    job, peaks = loaded(directory, truth)
    row = bounds_table(job.trace, peaks).loc[0]
    want = expected(profiles(directory, truth)[0], float(truth["step_time_ns"]["0"]))
    pairs = {
        "dma_idle_ns": ("total_ns", "memory_bound_ns"),
        "dma_inefficiency_ns": ("memory_bound_ns", "memory_ideal_ns"),
        "excess_hbm_traffic_ns": ("memory_ideal_ns", "memory_necessary_ns"),
        "te_idle_ns": ("total_ns", "compute_bound_ns"),
        "te_underutilization_ns": ("compute_bound_ns", "compute_ideal_ns"),
        "transpose_overhead_ns": ("compute_ideal_ns", "compute_useful_ns"),
        "serialization_ns": ("total_ns", "pipeline_bound_ns"),
    }
    for gap, (high, low) in pairs.items():
        assert abs(float(row[gap]) - (want[high] - want[low])) <= 0.01 * want["total_ns"], gap
    assert float(row["transpose_overhead_ns"]) > 0  # the writer's kernels carry transposes


def test_the_slow_weight_dma_makes_dma_the_bottleneck_and_adds_dma_inefficiency(written):
    slow = loaded(*written["slow_weight_dma"])
    clean = loaded(*written["clean"])
    s, c = bounds_table(*slow).loc[0], bounds_table(*clean).loc[0]
    assert s["bottleneck"] == "dma" and s["binding"] == "memory"
    assert c["bottleneck"] == "tensor" and c["binding"] == "compute"
    # Same bytes at the same peak, slower transfers: the whole growth is DMA inefficiency.
    assert close(float(s["memory_ideal_ns"]), float(c["memory_ideal_ns"]))
    assert float(s["dma_inefficiency_ns"]) > float(c["dma_inefficiency_ns"]) + 20_000


def test_a_window_selects_the_intervals_inside_it(written):
    directory, truth = written["slow_weight_dma"]
    job, peaks = loaded(directory, truth, align=False)  # the tables' own timestamps
    profile = profiles(directory, truth)[0]
    pk = read(profile, "DmaPacket")
    lo, hi = int(pk["start_ts"].min()), int(pk["end_ts"].max())
    t0, t1 = lo + (hi - lo) // 4, lo + (hi - lo) // 2
    row = bounds_table(job.trace, peaks, {0: (t0, t1)}).loc[0]
    want = expected(profile, float(t1 - t0), t0, t1)
    assert (int(row["start_ns"]), int(row["end_ns"])) == (t0, t1)
    for col in [c for c in want if c.endswith("_ns")]:
        assert close(float(row[col]), want[col]), (col, row[col], want[col])
    assert 0 < float(row["memory_bound_ns"]) < (t1 - t0)


def test_a_rank_without_dma_tables_has_no_memory_bounds(written):
    directory, truth = written["no_dma_tables"]
    job, peaks = loaded(directory, truth)
    table = bounds_table(job.trace, peaks)
    for rank, profile in profiles(directory, truth).items():
        row = table.loc[rank]
        assert np.isnan(row["memory_bound_ns"]) and np.isnan(row["dma_idle_ns"])
        busy = read(profile, "ActiveTime").groupby("engine").duration_ns.sum()
        assert row["bottleneck"] == busy.idxmax().lower()
        assert close(float(row["compute_bound_ns"]), float(busy["tensor"]))


def test_diagnosis_bounds_df_is_the_table_of_the_analysed_job(written):
    directory, truth = written["slow_weight_dma"]
    job, peaks = loaded(directory, truth)
    d = job.diagnose()
    table = bounds_table(job.trace, d.analysis.hardware)
    pd.testing.assert_frame_equal(d.bounds_df[table.columns], table)
    # The diagnosis adds each gap's replayed saving, never more than the gap.
    for gap in GAPS:
        saving = d.bounds_df[f"{gap}_saving_ns"]
        assert (saving.isna() | (saving <= table[f"{gap}_ns"])).all(), gap
    assert (d.bounds_df["gap_savings_note"] == "").all()
    assert d.bounds_df is d.bounds_df  # cached
    start = int(d.bounds_df["start_ns"].min())
    window = d.bounds_in(start, start + 50_000)
    assert (window["total_ns"] == 50_000).all()
    assert (window["memory_bound_ns"] < d.bounds_df["memory_bound_ns"]).all()


# ---- the command -------------------------------------------------------------------------------
def test_command_names_the_vector_engine_of_engine_bottleneck(tmp_path, capsys):
    out = tmp_path / "eb"
    assert main(["generate", "engine_bottleneck", str(out), "--formats", "parquet", "-q"]) == 0
    truth = json.loads((out / "truth.json").read_text())
    assert [f["engines"] for f in truth["faults"]] == [["vector"]]
    assert main(["bounds", str(out / "parquet"), "--format", "json", "-q", "--no-cache"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["schema"] == "tracediag.bounds/1"
    assert [r["rank"] for r in report["ranks"]] == list(range(truth["ranks"]))
    for r in report["ranks"]:
        assert r["bottleneck"] == "vector" and r["binding"] == "pipeline", r["engine_busy_ns"]
        busy = r["engine_busy_ns"]
        assert busy["vector"] == max(busy.values()) == r["bounds_ns"]["pipeline_bound"]
        gap = r["window"]["total_ns"] - r["bounds_ns"]["pipeline_bound"]
        assert r["gaps_ns"]["serialization"] == pytest.approx(gap, abs=1)


def test_command_text_marks_the_binding_bound(written, capsys):
    directory, truth = written["slow_weight_dma"]
    paths = [str(p) for p in profiles(directory, truth).values()]
    assert main(["bounds", *paths, "-q", "--no-cache"]) == 0
    text = capsys.readouterr().out
    rank0 = text.split("\n\n")[0]
    assert rank0.startswith("rank 0:") and "bottleneck dma (memory-bound)" in rank0
    binding = [line for line in rank0.splitlines() if "<- binding" in line]
    assert len(binding) == 1 and "DMA active" in binding[0]
    for name in ("DMA idle", "DMA inefficiency", "excess HBM traffic", "TE idle"):
        assert name in rank0
    for name in ("TE underutilization", "transpose overhead", "serialization"):
        assert name in rank0
    assert max(len(line) for line in text.splitlines()) <= 100


def test_command_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    bad = tmp_path / "Instruction.parquet"
    bad.write_bytes(b"PAR1 not really parquet")
    assert main(["bounds", str(tmp_path), "-q", "--no-cache"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and str(tmp_path) in err
    assert main(["bounds", str(tmp_path), "--start-ns", "5"]) == 2


def test_fp32_matmul_flops_count_at_their_slower_rate(tmp_path):
    """The generator's fp32_matmul writes raw and adjusted FLOPs: the ideal compute bound is
    the tables' adjusted (BF16-rate) FLOPs at the Metadata peak, not the raw ones."""
    out = tmp_path / "fp32"
    assert main(["generate", "fp32_matmul", str(out), "--formats", "parquet", "-q"]) == 0
    job = tracediag.load(str(out / "parquet"), cache=False)
    peaks = {r: hw.resolve(m.hardware, m.format) for r, m in job.trace.meta.items()}
    table = bounds_table(job.trace, peaks)
    for rank in table.index:
        profile = out / "parquet" / f"rank_{rank}"
        md = read(profile, "Metadata").iloc[0]
        peak = md["tensor_engine_num_rows"] * md["tensor_engine_num_cols"] * 2.0
        peak *= md["tensor_engine_clock_freq"] * 1e9
        inst = read(profile, "Instruction")
        mm = inst[(inst["engine"].str.lower() == "tensor") & (inst["opcode"] == "MATMUL")]
        assert mm["adjusted_flops"].sum() > 1.5 * mm["raw_flops"].sum()  # FP32 is there
        want = mm["adjusted_flops"].sum() / peak * 1e9
        assert close(float(table.loc[rank, "compute_ideal_ns"]), want)
