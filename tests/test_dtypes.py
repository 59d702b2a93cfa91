"""Dtype names, Neuron operands and FLOP ratios, and the GPU kernel-name classifier."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tracediag.loading.loader import load
from tracediag.model import numeric_formats as dtypes
from tracediag.parsers.neuron_events import instruction_dtypes

SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces"


def _names(values) -> list[str]:
    return dtypes.names(values).tolist()


def test_spellings_are_normalised():
    spelled = ["bfloat16", "BF16", "float32", "fp32", "f32", "float16", "half", "fp8_e4m3",
               "float8_e5m2", "tf32", "float64", "int8", "complex64", None]  # fmt: skip
    assert _names(dtypes.normalise(spelled)) == [
        "bf16", "bf16", "fp32", "fp32", "fp32", "fp16", "fp16", "fp8_e4m3", "fp8_e5m2", "tf32", "fp64",
        "int8", "unknown", "unknown",
    ]  # fmt: skip


def test_neuron_operands_name_the_dtype():
    operands = [
        "S[5] (Tensor)++@complete acc_flags=3 row_grp=q0 src=fp16@0x5600[1,0,0][3,1,1] "
        "dst=0x2000000[1,0,0][3,1,1] 3*128 ",  # the reference's example row
        "S[5] (Tensor)++@complete acc_flags=1 row_grp=q0 src=fp32@0x5640[1,0,0][24,1,1] dst=0x2",
        "PSEUDO_TRIGGER_COLLECTIVE_2 $S[15]>=1 ctype=ALL_REDUCE op=ADD dtype=bfloat16 cc_dim=0",
        "data=0xd,0xd size=4,4 dst=0xffff026f038",
        None,
    ]
    assert _names(dtypes.from_operands(operands)) == ["fp16", "fp32", "bf16", "unknown", "unknown"]


def test_adjusted_flops_against_raw_flops():
    raw = np.array([1e9, 1e9, 1e9, 1e9, 0.0, np.nan])
    adjusted = np.array([1e9, 4e9, 0.5e9, 2e9, 0.0, 1e9])
    assert _names(dtypes.from_flops_ratio(raw, adjusted)) == [
        "bf16", "fp32", "fp8", "unknown", "unknown", "unknown"
    ]  # fmt: skip


def test_neuron_instructions_take_the_rate_over_the_text_for_fp32_and_fp8():
    frame = pd.DataFrame(
        {
            "raw_flops": [1e9, 1e9, 1e9, 1e9, 0.0],
            "adjusted_flops": [1e9, 4e9, 1e9, np.nan, 0.0],
            "operands": ["src=fp16@0x1", "src=bf16@0x1", None, "src=fp32@0x1", "src=bf16@0x4"],
        }
    )
    assert _names(instruction_dtypes(frame)) == ["fp16", "fp32", "bf16", "fp32", "bf16"]
    bare = pd.DataFrame({"raw_flops": [1e9], "adjusted_flops": [0.5e9]})
    assert _names(instruction_dtypes(bare)) == ["fp8"]


KERNELS = {
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_"
    "segment_k_off_kernel__5x_cublas": "bf16",
    "ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn": "fp16",
    "ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_tn": "bf16",
    "sm80_xmma_gemm_f16f16_f16f32_f32_nn_n_tilesize160x128x32_stage4_warpsize2x2x1_tensor16x8x16"
    "_kernel": "fp16",
    "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>"
    "(cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4::Params)": "tf32",
    "sm90_xmma_gemm_e4m3e4m3_e4m3f32_f32_tn_n_tilesize128x128x128_cublas": "fp8_e4m3",
    "cutlass3x_sm90_tensorop_gemm_f8f8_bf16_f32_128x128x128": "fp8",
    "ampere_sgemm_128x64_nn": "fp32",
    "volta_sgemm_128x64_nt": "fp32",
    "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x192x64_MI16x16x1_SN": "bf16",
    "Cijk_Ailk_Bjlk_SB_Bias_AS_SAV_UserArgs_MT64x16x16_MI16x16x1_SN": "fp32",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
    "at::detail::Array<char*, 3> >": "bf16",
    "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)": "bf16",
    "Memcpy HtoD (Pinned -> Device)": "unknown",
}


def test_kernel_names_are_classified():
    assert dict(zip(KERNELS, _names(dtypes.from_kernel_names(list(KERNELS))), strict=True)) == (
        KERNELS
    )


def test_kernel_names_seen_before_are_classified_the_same(monkeypatch):
    """The per-name memo: a second call (other names, other order, repeats) and a call after
    the memo overflowed and started again give the same dtypes as the first."""
    monkeypatch.setattr(dtypes, "_KERNEL_CODES", {})
    names = list(KERNELS)
    half = names[::2]
    assert _names(dtypes.from_kernel_names(half)) == [KERNELS[n] for n in half]
    mixed = names[::-1] + names[:3]
    assert _names(dtypes.from_kernel_names(mixed)) == [KERNELS[n] for n in mixed]
    monkeypatch.setattr(dtypes, "_KERNEL_CODES_MAX", 4)  # every call now overflows and clears
    assert _names(dtypes.from_kernel_names(mixed)) == [KERNELS[n] for n in mixed]
    assert len(dtypes._KERNEL_CODES) == len(KERNELS)


def test_matmul_kernels_are_told_from_other_kernels():
    names = pd.Categorical(
        [
            "ampere_sgemm_128x64_nn",
            "void fbgemm_gpu::permute_2D_lengths_kernel<int>(int, int, int const*, int*)",
            "sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw",
            "triton_tem_fused_mm_0",
            "void at::native::vectorized_elementwise_kernel<4, direct_copy_kernel_cuda>",
            "Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32",
        ]
    )
    assert dtypes.is_matmul_kernel(names).tolist() == [True, False, True, True, False, True]


# Kernel-name dtypes of the matmuls in real public traces (copied unchanged into ../shared).
REAL = {
    "kineto_alexnet_1rank.json.gz": {"fp32": 8, "tf32": 6},
    "kineto_sampled_rank-0.json.gz": {"fp32": 42, "tf32": 308},
    "kineto_amd_mi250_minitoy.json.gz": {"fp32": 2},
    "kineto_torch_compile_triton.json.gz": {"bf16": 7},
}


@pytest.mark.parametrize("name", sorted(REAL))
def test_real_traces_matmul_dtypes(name):
    if not (SHARED / name).exists():
        pytest.skip("shared traces absent")
    trace = load([SHARED / name])
    matmul = dtypes.matmul_events(trace)
    found = Counter(dtypes.names(dtypes.event_dtypes(trace))[matmul].tolist())
    for dtype, count in REAL[name].items():
        assert found[dtype] == count, found
    assert "unknown" not in found


def test_operand_dtypes_of_a_program_seen_before_come_from_its_cache(monkeypatch):
    monkeypatch.setattr(dtypes, "_OPERAND_CODES", {})
    first = pd.Categorical(["src=fp32@a", "dtype=bfloat16", "src=fp32@a", "none"])
    # Another rank of the same program: the same texts, other rows.
    again = pd.Categorical(["none", "src=fp32@a"], categories=first.categories)
    assert _names(dtypes.from_operands(first)) == ["fp32", "bf16", "fp32", "unknown"]
    assert len(dtypes._OPERAND_CODES) == 1
    assert _names(dtypes.from_operands(again)) == ["unknown", "fp32"]
    assert len(dtypes._OPERAND_CODES) == 1  # found, not matched again
    # The same texts in another order are another list, with codes of their own.
    other = pd.Categorical(["dtype=bfloat16"], categories=["none", "dtype=bfloat16", "src=fp32@a"])
    assert _names(dtypes.from_operands(other)) == ["bf16"]
    assert len(dtypes._OPERAND_CODES) == 2
    for i in range(dtypes._CACHED_LISTS + 3):  # bounded: full, it starts again
        dtypes.from_operands(pd.Categorical([f"dtype=fp{i}"]))
    assert len(dtypes._OPERAND_CODES) <= dtypes._CACHED_LISTS
