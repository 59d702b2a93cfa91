"""Low-precision formats (MXFP8, MXFP4, NVFP4, FP8 e4m3/e5m2): names in kernel names and Neuron
operands, the hardware's rate per format, the LNC=2 tensor-engine peak, and NUM701's target.

Kernel names are copied from public sources, each cited beside it; expected figures are the
vendors' published numbers typed here by hand, not read from the table under test.
"""

from __future__ import annotations

import pandas as pd
import pytest

import tracediag
from tests.cleanroom.neuron_device_writer import write_scenario
from tests.trace_factory import build, matmul_chain
from tracediag.analysis import hardware as hw
from tracediag.analysis.bounds import bounds_table, te_peak
from tracediag.engine.config import Config
from tracediag.engine.diagnose import diagnose
from tracediag.model import numeric_formats as dtypes

REAL_KERNELS = {
    # NVIDIA/TransformerEngine issue #1391 ("FP8 GEMM Kernels"), an H100 FP8 linear layer.
    "sm90_xmma_gemm_e4m3bf16_e4m3f32_f32_tn_n_tilesize128x128x128_warpgroupsize1x1x1_"
    "execute_segment_k_off_kernel__5x_cublas": "fp8_e4m3",
    # The same issue: the BF16 kernel it replaced.
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_"
    "execute_segment_k_off_kernel__5x_cublas": "bf16",
    # NVIDIA/cutlass issue #2923 ("FP8 Blockwise GEMM worse than fp16 case"), sm100 FP8 GEMM.
    "cutlass3x_sm100_tensorop_gemm_e4m3_e4m3_f32_bf16_bf16_64x120x128_1x1x1_0_tnn_align8_"
    "cpasync_1sm_epi_nosmem": "fp8_e4m3",
    # CUTLASS block-scaled kernel names as a public benchmark script selects them
    # (cutlass3x_sm100_bstensorop_moe_gemm_ue8m0xe4m3_ue8m0xe4m3_f32_*: "bs_fp8_e4m3", and
    # ..._ue8m0xe2m1_ue8m0xe2m1_f32_f16*: "BS-FP4(E2M1)"), and a public NVFP4 kernel prefix
    # (cutlass3x_sm100_bstensorop_gemm_ue4m3xe2m1_ue4m3xe2m1_f32_void_ with an mxfp4 output).
    "cutlass3x_sm100_bstensorop_moe_gemm_ue8m0xe4m3_ue8m0xe4m3_f32_bf16_bf16": "mxfp8",
    "cutlass3x_sm100_bstensorop_moe_gemm_ue8m0xe2m1_ue8m0xe2m1_f32_f16": "mxfp4",
    "cutlass3x_sm100_bstensorop_gemm_ue4m3xe2m1_ue4m3xe2m1_f32_void_ue8m0xe2m1": "nvfp4",
    # triton-lang/triton PR #11371 ("Fix NVFP4 matmul profiler names"): the corrected NVFP4
    # name and the old, MXFP4-labelled one (output fp8e4nv x two packed FP4 operands).
    "_p_matmul_NNT_fp8e4nvxnvfp4xnvfp4_": "nvfp4",
    "_p_matmul_NNT_fp8e4nvxmxfp4xmxfp4_": "mxfp4",
    # cuBLAS on Blackwell names no dtype (nvjet_sm100_..., seen in public vLLM/SGLang profiles).
    "nvjet_sm100_tst_128x256_64x4_1x2_h_bz_TNT": "unknown",
}


def _names(values) -> list[str]:
    return dtypes.names(values).tolist()


def test_real_low_precision_kernel_names():
    found = _names(dtypes.from_kernel_names(list(REAL_KERNELS)))
    assert dict(zip(REAL_KERNELS, found, strict=True)) == REAL_KERNELS


def test_a_mixed_operand_matmul_takes_the_wider_operand():
    # bf16 activations x mxfp4 weights (gpt-oss MoE on Hopper) run at the bf16 rate; an
    # FP8 x FP4 block-scaled MMA at the FP8 rate.
    names = ["_matmul_ogs_NNT_bf16xbf16xmxfp4_", "_p_matmul_NNT_bf16xfp8e4nvxmxfp4_"]
    names += ["cutlass3x_sm100_bstensorop_gemm_ue8m0xe4m3_ue8m0xe2m1_f32_bf16_bf16"]
    assert _names(dtypes.from_kernel_names(names)) == ["bf16", "fp8_e4m3", "mxfp8"]


def test_nki_and_torch_spellings():
    # NKI (nki.language.float8_e4m3fn_x4 / float4_e2m1fn_x4: packed operands of
    # nc_matmul_mx on NeuronCore-v4), torch and AMD FNUZ names.
    spelled = ["float8_e4m3fn_x4", "float8_e5m2_x4", "float4_e2m1fn_x4", "float8_e4m3fn",
               "float8_e5m2", "float8_e4m3fnuz", "nvfp4", "float4_e2m1fn", "cfp8", "mxfp8"]  # fmt: skip
    assert _names(dtypes.normalise(spelled)) == [
        "mxfp8", "mxfp8", "mxfp4", "fp8_e4m3", "fp8_e5m2", "fp8_e4m3", "nvfp4", "fp4", "fp8",
        "mxfp8",
    ]  # fmt: skip
    ops = ["src=float8_e4m3fn_x4@0x5600[1,0,0] dst=0x2000000", "src=float4_e2m1fn_x4@0x10 3*128"]
    assert _names(dtypes.from_operands(ops)) == ["mxfp8", "mxfp4"]


def test_an_fp8_rate_keeps_a_low_precision_name_but_corrects_a_16_bit_one():
    from tracediag.parsers.neuron_events import instruction_dtypes

    frame = pd.DataFrame(
        {
            "raw_flops": [1e9, 1e9, 1e9, 1e9],
            "adjusted_flops": [0.25e9, 0.25e9, 4e9, 0.5e9],  # trn3 MXFP8: 4x the BF16 rate
            "operands": ["src=float8_e4m3fn_x4@0x1", "src=bf16@0x1", "src=mxfp8@0x1", None],
        }
    )
    assert _names(instruction_dtypes(frame)) == ["mxfp8", "fp8", "fp32", "fp8"]


# ---- hardware rates ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("NVIDIA B200", "b200"),
        ("NVIDIA GB200", "gb200"),
        ("AMD Instinct MI355X", "mi355x"),
        ("AMD Instinct MI325X", "mi325x"),
        ("trn3.48xlarge", "trn3"),
        ("trn2.48xlarge", "trn2"),
    ],
)
def test_devices_are_detected(text, key):
    assert hw.detect(text)[0] == key


def test_vendor_figures_per_rank():
    T = 1e12
    # AWS "Trainium2 Architecture": 667 BF16, 1,299 FP8, 181 FP32 TFLOPS per 8-core device.
    trn2, lnc2 = hw.PROFILES["trn2"], hw.PROFILES["trn2-lnc2"]
    assert trn2.rate("bf16") == pytest.approx(667 * T / 8)
    assert trn2.rate("fp8_e4m3") == pytest.approx(1299 * T / 8)  # either FP8 encoding
    assert lnc2.rate("fp32") == pytest.approx(181 * T / 4) and lnc2.hbm_bw == 2.9e12 / 4
    # AWS "Trainium3 Architecture": 2,517 MXFP8/MXFP4 and 671 BF16 TFLOPS per 8 cores.
    trn3 = hw.PROFILES["trn3"]
    assert trn3.rate_ratio("mxfp8", "bf16") == pytest.approx(2517 / 671)
    assert trn3.rate("fp8") is None  # no unscaled FP8 figure published
    # NVIDIA Blackwell brief, HGX B200 dense: FP4 9, FP8 4.5, BF16 2.25 PFLOPS, FP32 80 TFLOPS.
    b200 = hw.PROFILES["b200"]
    assert b200.rate("nvfp4") == b200.rate("mxfp4") == 9000 * T
    assert b200.rate("mxfp8") == b200.rate("fp8_e5m2") == 4500 * T
    assert b200.rate_ratio("fp32", "bf16") == pytest.approx(80 / 2250)
    # AMD MI355X: MXFP4 10,066.4, FP8 5,033.2, BF16 2,516.6 TFLOPS; no NVFP4, no TF32.
    mi355 = hw.PROFILES["mi355x"]
    assert mi355.rate_ratio("mxfp4", "bf16") == pytest.approx(4.0, rel=1e-3)
    assert mi355.rate("nvfp4") is None and mi355.rate("tf32") is None
    assert hw.PROFILES["h100"].rate("mxfp8") is None  # Hopper runs no MX format natively


# ---- the LNC=2 tensor-engine peak -------------------------------------------------------------


@pytest.fixture(scope="module")
def lnc2(tmp_path_factory):
    root = tmp_path_factory.mktemp("lnc2")
    truth = write_scenario("lnc2", root, formats=("parquet",))
    paths = {int(r): root / rel for r, rel in truth["files"]["parquet"].items()}
    job = tracediag.load([str(p) for p in paths.values()], cache=False)
    return job, paths


def test_an_lnc2_rank_has_the_peak_of_both_physical_cores(lnc2):
    job, paths = lnc2
    peaks = hw.resolve_ranks(job.trace)
    table = bounds_table(job.trace, peaks)
    for rank, profile in paths.items():
        md = pd.read_parquet(next(profile.glob("Metadata*.parquet"))).iloc[0]
        assert int(md["num_physical_cores"]) == 2
        one_core = (
            float(md["tensor_engine_num_rows"])
            * float(md["tensor_engine_num_cols"])
            * 2.0
            * float(md["tensor_engine_clock_freq"])
            * 1e9
        )
        row = table.loc[rank]
        # One function: the bounds and the rank's hardware profile use the same peak.
        assert row["te_peak_flops"] == pytest.approx(2 * one_core, rel=1e-9)
        assert peaks[rank].peak_flops == pytest.approx(2 * one_core, rel=1e-9)
        assert te_peak(job.trace.meta[rank].info, None)[0] == row["te_peak_flops"]
        assert "LNC=2" in row["te_peak_source"] and "trn2" in peaks[rank].name
        assert row["dma_peak_Bps"] == pytest.approx(2 * float(md["dma_ddr_bandwidth"]))
        # At one core's peak the ideal would exceed the time the engines were busy (74 us
        # busy, 102 us of FLOPs at one array's peak): both arrays worked, so the gaps must not
        # be negative at the right peak.
        assert row["hw_flops"] / one_core * 1e9 > row["compute_bound_ns"]
        assert 0 < row["compute_ideal_ns"] <= row["compute_bound_ns"]
        assert 0 < row["memory_ideal_ns"] <= row["memory_bound_ns"]


def test_lnc1_metadata_keeps_the_single_core_peak():
    info = {"tensor_engine_num_rows": 128, "tensor_engine_num_cols": 128}
    info |= {"tensor_engine_clock_freq": 2.8, "num_physical_cores": 1}
    assert hw.metadata_te_peak(info) == pytest.approx(128 * 128 * 2 * 2.8e9)
    assert hw.metadata_te_peak({**info, "num_physical_cores": 2}) == pytest.approx(
        2 * 128 * 128 * 2 * 2.8e9
    )


# ---- NUM701 against the hardware's rate per format ------------------------------------------


def _num701(spec):
    d = diagnose(build(spec), Config(select=["NUM701"]))
    (f,) = [f for f in d.findings if f.code == "NUM701"]
    return f


def test_num701_on_an_mxfp8_recipe_prices_fp32_at_the_mxfp8_rate():
    # trn3: all other matmuls in MXFP8, so MXFP8 is the target: 183 / 2517 of the time.
    f = _num701(matmul_chain([("mxfp8", 1000, 1e9)] * 3 + [("fp32", 13_754, 1e9)], "trn3.48xlarge"))
    assert f.evidence["target_dtype"] == {"0": "mxfp8"}
    assert f.saving_ns == pytest.approx(13_754 - 13_754 * 183 / 2517, abs=1)
    assert "mxfp8 rate (the model's own format" in f.message


def test_num701_prefers_bf16_when_the_recipe_keeps_bf16_layers():
    # 75% MXFP8, 25% BF16: a layer kept in FP32 is priced at BF16 (183 / 671), not MXFP8.
    chain = [("mxfp8", 1000, 1e9)] * 3 + [("bf16", 1000, 1e9), ("fp32", 3666, 1e9)]
    f = _num701(matmul_chain(chain, "trn3.48xlarge"))
    assert f.evidence["model_dtype"] == {"0": "mxfp8"}
    assert f.evidence["target_dtype"] == {"0": "bf16"}
    assert f.saving_ns == pytest.approx(3666 - 3666 * 183 / 671, abs=1)
    assert "most precise format the model's other matmuls use" in f.message
    assert f.evidence["rates_flops"]["bf16"] == pytest.approx(671e12 / 8)


def test_num701_on_b200_fp8_recipe():
    # B200: FP8 e4m3 recipe, FP32 matmul: 80 / 4500 TFLOPS.
    chain = [("fp8_e4m3", 1000, 1e9)] * 4 + [("fp32", 56_250, 1e9)]
    f = _num701(matmul_chain(chain, "NVIDIA B200"))
    assert f.evidence["target_dtype"] == {"0": "fp8_e4m3"}
    assert f.saving_ns == pytest.approx(56_250 - 1000, abs=1)
