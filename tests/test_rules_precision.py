"""NUM rules (precision family): FP32 matmuls, transpose FLOPs, spill reloads, hardware errors.

On the generator's fp32_matmul job the FP32 matmuls are found where injected with the true
saving; the other rules on hand-made traces with exact numbers at and around their thresholds.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import orjson
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.trace_factory import RankSpec, build, matmul_chain
from tracediag.engine.config import Config
from tracediag.engine.diagnose import diagnose
from tracediag.generator import generate
from tracediag.io.files import read_bytes
from tracediag.loading.loader import load
from tracediag.model import numeric_formats as dtypes
from tracediag.model import schema as S
from tracediag.model.findings import Severity

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces"
NUM = ["NUM701", "NUM702", "NUM703", "NUM704"]


def _only(d, code):
    found = [f for f in d.findings if f.code == code]
    assert len(found) == 1, [(f.code, f.message) for f in d.findings]
    return found[0]


def _num(trace):
    return diagnose(trace, Config(select=NUM))


# ---- NUM701 on the generator's fp32_matmul scenario ----------------------------------------


@pytest.fixture(scope="module")
def fp32_job(tmp_path_factory):
    out = tmp_path_factory.mktemp("fp32")
    truth = generate("fp32_matmul", out, formats=("parquet", "json"), ranks=4, seed=7)
    return out, truth


@pytest.mark.parametrize("fmt", ["parquet", "json"])
def test_fp32_matmuls_are_found_where_injected_with_the_true_saving(fp32_job, fmt):
    out, truth = fp32_job
    (fault,) = truth["faults"]
    assert fault["kind"] == "fp32_matmul" and fault["params"] == {"slowdown": 4.0}
    trace = load([out / fmt])
    d = diagnose(trace)
    f = _only(d, "NUM701")
    assert f.ranks == (0, 1, 2, 3) == tuple(fault["ranks"])
    assert (f.engine, f.layer) == ("tensor", "layer_1") and fault["layers"] == ["layer_1"]
    assert [f.start_ns, f.end_ns] == fault["window_ns"]
    assert abs(f.saving_ns - fault["saving_ns"]) <= 0.15 * fault["saving_ns"]
    assert f.severity == Severity.ERROR  # 4.3 ms of an 11.1 ms step
    # The dtype column says fp32 for exactly the tensor-engine MATMULs of layer_1.
    ev = trace.events
    is_fp32 = ev[S.DTYPE].astype(object).to_numpy() == "fp32"
    in_layer = (ev[S.LAYER].astype(object).to_numpy() == "layer_1") & (
        ev[S.NAME].astype(str).to_numpy() == "MATMUL"
    )
    assert is_fp32.sum() == in_layer.sum() == f.evidence["events"] == 96
    assert (is_fp32 == in_layer).all()
    by_dtype = f.evidence["by_dtype"]
    assert set(by_dtype) == {"bf16", "fp32"} and by_dtype["fp32"]["events"] == 96
    # Per event FP32 runs 4x the time for a third of the bf16 FLOPs (1 layer in 4).
    assert by_dtype["bf16"]["flops"] == pytest.approx(3 * by_dtype["fp32"]["flops"])
    assert f.evidence["scale_factor"] == 0.25


def test_parquet_without_adjusted_flops_reads_the_dtype_from_the_operands(fp32_job, tmp_path):
    out, truth = fp32_job
    job = tmp_path / "parquet"
    shutil.copytree(out / "parquet" / "rank_0", job)
    for part in job.glob("Instruction*.parquet"):
        pq.write_table(pq.read_table(part).drop(["adjusted_flops"]), part)
    ev = load([job]).events
    counts = ev[S.DTYPE].astype(object).value_counts().to_dict()
    assert counts["fp32"] == 24 and counts["bf16"] > 72  # elementwise operands name bf16 too


def test_fp32_matmul_truth_saving_is_the_resimulated_difference(fp32_job):
    _, truth = fp32_job
    (fault,) = truth["faults"]
    assert fault["saving_ns"] == truth["step_time_ns"] - truth["step_time_without_faults_ns"]


# ---- NUM701 on hand-made traces --------------------------------------------------------------


def test_num701_scales_the_fp32_matmul_to_the_bf16_rate():
    chain = [("bf16", 1000, 1e9)] * 3 + [("fp32", 4000, 1e9)]
    f = _only(_num(build(matmul_chain(chain))), "NUM701")
    assert (f.ranks, f.engine, f.layer) == ((0,), "tensor", "layer_3")
    assert (f.start_ns, f.end_ns) == (3000, 7000)
    assert f.impact_ns == 4000 and f.impact_pct == pytest.approx(57.14)
    assert f.saving_ns == 3000  # 4000 ns at a quarter (trn1: 23.75 / 95 TFLOP/s)
    assert f.severity == Severity.ERROR
    assert f.evidence["model_dtype"] == {"0": "bf16"}


def test_num701_needs_the_model_to_run_mostly_in_a_fast_dtype():
    at_threshold = [("bf16", 1000, 1e9), ("fp32", 4000, 1e9)]  # half the FLOPs: fires
    assert _only(_num(build(matmul_chain(at_threshold))), "NUM701").saving_ns == 3000
    below = [("bf16", 1000, 1e9), ("fp32", 8000, 2e9)]  # a third: the model runs fp32
    assert not [f for f in _num(build(matmul_chain(below))).findings if f.code == "NUM701"]


def test_num701_without_a_peak_for_the_dtype_reports_no_saving():
    spec = matmul_chain([("bf16", 1000, 1e9)] * 3 + [("tf32", 2000, 1e9)])  # trn1: no tf32
    f = _only(_num(build(spec)), "NUM701")
    assert f.saving_ns == 0 and f.evidence["scale_factor"] is None
    assert f.severity == Severity.INFO


def test_num701_on_gpu_kernels_uses_their_names_and_the_gpu_peaks():
    spec = RankSpec(0, hardware="NVIDIA H100 80GB HBM3", fmt="kineto")
    bf16 = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_cublas"
    names = [bf16, bf16, bf16, "ampere_sgemm_128x64_nn"]
    t, prev = 0, None
    for k, (name, dur) in enumerate(zip(names, [1000, 1000, 1000, 14_761], strict=True)):
        kernel = spec.add(name, "stream 7", "compute", t, t + dur, layer=f"layer_{k}")
        if prev is not None:
            spec.dep(prev, kernel)
        prev, t = kernel, t + dur
    f = _only(_num(build(spec)), "NUM701")  # no FLOPs: 3 of 4 kernels are bf16
    assert (f.engine, f.layer, f.evidence["dtypes"]) == ("gpu", "layer_3", ["fp32"])
    # H100: fp32 67 against bf16 989 TFLOP/s: 14761 ns -> floor(999.99) = 999 ns.
    assert f.saving_ns == 14_761 - 999


# ---- NUM702 transposes -----------------------------------------------------------------------


def _transpose_chain(transpose_flops: float) -> RankSpec:
    spec = RankSpec(0)
    prev = None
    for k in range(4):
        extra = {"transpose_flops": transpose_flops} if k == 2 else {}
        mm = spec.add(
            "MATMUL", "tensor", "compute", 2500 * k, 2500 * (k + 1),
            layer=f"layer_{k}", flops=1e9, **extra,
        )  # fmt: skip
        if prev is not None:
            spec.dep(prev, mm)
        prev = mm
    return spec


def test_num702_fires_just_above_ten_percent_of_the_hardware_flops():
    assert not _num(build(_transpose_chain(0.4e9))).findings  # exactly 10%: quiet
    f = _only(_num(build(_transpose_chain(0.41e9))), "NUM702")  # 10.25%
    assert (f.ranks, f.engine, f.layer) == ((0,), "tensor", "layer_2")
    assert (f.start_ns, f.end_ns) == (5000, 7500)
    assert f.evidence["by_rank"]["0"]["transpose_pct"] == 10.25
    assert f.evidence["by_rank"]["0"]["source"] == "instructions"
    # 41% of the 2500 ns instruction is transposing: 1475 ns left.
    assert f.saving_ns == 1025 and f.impact_ns == 1025
    assert f.severity == Severity.WARNING


@pytest.mark.parametrize(("transpose", "fires"), [(100.0, False), (100.5, True)])
def test_num702_from_the_summary_alone(transpose, fires):
    trace = build(_transpose_chain(0.0))
    trace.meta[0].summary = {"transpose_flops": transpose, "hardware_flops": 1000.0}
    found = [f for f in _num(trace).findings if f.code == "NUM702"]
    assert bool(found) == fires
    if fires:
        (f,) = found
        assert f.evidence["by_rank"]["0"]["source"] == "summary"
        assert f.evidence["by_rank"]["0"]["transpose_pct"] == 10.05
        assert (f.start_ns, f.end_ns, f.saving_ns) == (0, 10_000, 0)
        assert f.severity == Severity.WARNING


# ---- NUM703 spill reloads --------------------------------------------------------------------


def _spill_trace(reload_bytes: float):
    spec = RankSpec(0)
    a = spec.add("MATMUL", "tensor", "compute", 0, 3000, layer="layer_0", flops=1e9)
    reload = spec.add("act_spill", "qScalarSpillReload0-Q1-E64", "dma", 3000, 5000, bytes=2e6)
    b = spec.add("MATMUL", "tensor", "compute", 5000, 8000, layer="layer_1", flops=1e9)
    spec.dep(a, reload, "dma_trigger")
    spec.dep(reload, b)
    trace = build(spec)
    trace.meta[0].summary = {"spill_reload_bytes": reload_bytes, "hbm_read_bytes": 8e6}
    return trace


def test_num703_fires_just_above_a_quarter_of_hbm_reads():
    assert not _num(_spill_trace(2e6)).findings  # exactly 25%
    f = _only(_num(_spill_trace(2.08e6)), "NUM703")  # 26%
    assert (f.ranks, f.engine, f.track) == ((0,), "dma", "qScalarSpillReload0-Q1-E64")
    assert (f.start_ns, f.end_ns) == (3000, 5000)
    assert f.evidence["by_rank"]["0"]["reload_pct"] == 26.0
    assert f.impact_ns == 2000 and f.saving_ns == 2000  # the reload sits on the path
    assert f.severity == Severity.ERROR  # 25% of the 8 us step


def test_num703_reads_summary_json_subgraphs():
    trace = _spill_trace(0.0)
    trace.meta[0].summary = {
        "sg00": {"spill_reload_bytes": 1e6, "hbm_read_bytes": 2e6},
        "sg01": {"spill_reload_bytes": 1e6, "hbm_read_bytes": 2e6},
    }
    assert _only(_num(trace), "NUM703").evidence["by_rank"]["0"]["reload_pct"] == 50.0


# ---- NUM704 hardware errors ------------------------------------------------------------------


def _error_rows(base: int) -> dict:
    return {
        "timestamp": [base + 100, base + 900, base + 500],
        "type": ["NUMERICAL", "NUMERICAL", "DMA"],
        "description": ["numerical error: NaN", "numerical error: NaN", "DMA2D OOB"],
        "error_type_id": [7, 7, 2],
        "metadata": ["psum overflow", "psum overflow", ""],
    }


def test_num704_reports_the_error_table_of_a_parquet_profile(tmp_path):
    job = tmp_path / "parquet"
    shutil.copytree(SAMPLES / "neuron_parquet_clean" / "parquet", job)
    base = pq.read_table(job / "rank_1" / "Instruction_0.parquet")["start_ts"][0].as_py()
    pq.write_table(pa.table(_error_rows(base)), job / "rank_1" / "Error.parquet")
    trace = load([job])
    d = diagnose(trace, Config(select=["NUM704"]))
    assert [f.severity for f in d.findings] == [Severity.ERROR, Severity.ERROR]
    numerical = next(f for f in d.findings if "NaN" in f.message)
    assert numerical.title == "The hardware reported a numerical error"
    assert numerical.ranks == (1,) and numerical.evidence["count"] == 2
    offset = trace.meta[1].clock_offset_ns
    assert (numerical.start_ns, numerical.end_ns) == (base + 100 + offset, base + 900 + offset)
    assert "psum overflow" in numerical.message
    oob = next(f for f in d.findings if "OOB" in f.message)
    assert oob.evidence["count"] == 1 and oob.title == "The hardware reported errors"


def test_num704_reads_the_legacy_json_error_table(tmp_path):
    src = sorted((SAMPLES / "neuron_json_fragmented_dma" / "json").iterdir())[0]
    doc = orjson.loads(read_bytes(src))  # gzipped
    base = doc["instruction"][0]["timestamp"]
    rows = pd.DataFrame(_error_rows(base)).to_dict(orient="records")
    doc["error"] = rows[:1]
    (tmp_path / "rank_0.json").write_bytes(orjson.dumps(doc))
    f = _only(diagnose(load([tmp_path / "rank_0.json"]), Config(select=["NUM704"])), "NUM704")
    assert f.severity == Severity.ERROR and f.evidence["count"] == 1


def test_num704_reports_numerical_err_events():
    spec = RankSpec(0)
    spec.add("MATMUL", "tensor", "compute", 0, 3000, layer="layer_0")
    spec.add("numerical_err", "tensor", "marker", 1200, 1200)
    spec.add("numerical_err", "tensor", "marker", 2400, 2400)
    f = _only(_num(build(spec)), "NUM704")
    assert f.severity == Severity.ERROR and f.evidence["count"] == 2
    assert (f.start_ns, f.end_ns) == (1200, 2400)


@pytest.fixture(scope="module")
def numerical_job(tmp_path_factory):
    out = tmp_path_factory.mktemp("numerical")
    return out, generate("numerical_error", out, formats=("parquet", "json"), ranks=2, seed=7)


@pytest.mark.parametrize("fmt", ["parquet", "json"])
def test_num704_finds_the_generated_numerical_errors(numerical_job, fmt):
    out, truth = numerical_job
    (fault,) = truth["faults"]
    assert (fault["kind"], fault["saving_ns"], fault["phase"]) == ("numerical_error", 0, "fwd")
    d = diagnose(load([out / fmt]))
    f = _only(d, "NUM704")
    assert f.severity == Severity.ERROR and f.ranks == tuple(fault["ranks"]) == (0, 1)
    assert f.title == "The hardware reported a numerical error"
    # One error at the end of each of layer_1's 8 forward MATMULs, on each rank.
    assert f.evidence["by_rank"] == {"0": 8, "1": 8}
    assert fault["window_ns"][0] < f.start_ns < f.end_ns == fault["window_ns"][1]
    assert not [g for g in d.findings if g.code != "NUM704" and g.severity >= Severity.WARNING]


# ---- quiet where nothing is wrong ------------------------------------------------------------


@pytest.mark.parametrize(
    "sample", sorted(p.name for p in SAMPLES.iterdir() if p.is_dir()) if SAMPLES.is_dir() else []
)
def test_num_rules_say_nothing_on_the_samples(sample):
    truth = json.loads((SAMPLES / sample / "truth.json").read_text())
    fmt = truth["formats"][0]
    assert _num(load([SAMPLES / sample / fmt])).findings == []


@pytest.mark.parametrize(
    "name",
    [
        "kineto_alexnet_1rank.json.gz",
        "kineto_sampled_rank-0.json.gz",
        "kineto_amd_mi250_minitoy.json.gz",
    ],
)
def test_num_rules_say_nothing_on_real_fp32_and_tf32_jobs(name):
    if not (SHARED / name).exists():
        pytest.skip("shared traces absent")
    trace = load([SHARED / name])
    assert np.isin(dtypes.names(dtypes.event_dtypes(trace))[dtypes.matmul_events(trace)],
                   ["fp32", "tf32"]).all()  # fmt: skip
    assert _num(trace).findings == []


def test_precision_scenarios_have_no_gpu_flavour(tmp_path):
    # The Chrome flavour renders no fp32 GEMM kernels: it is skipped, said so in the truth,
    # rather than shipping a fault no rule can see.
    from tracediag.generator import generate

    truth = generate("fp32_matmul", tmp_path / "g", formats=("parquet", "chrome"), ranks=2)
    assert truth["formats"] == ["parquet"] and "chrome" not in truth
    assert "fp32_matmul" in truth["skipped_formats"]["chrome"]
    assert not (tmp_path / "g" / "chrome").exists()
    with pytest.raises(ValueError, match="no Chrome"):
        generate("numerical_error", tmp_path / "h", formats=("chrome",), ranks=2)
