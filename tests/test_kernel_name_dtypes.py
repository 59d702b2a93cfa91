"""Kernel-name dtypes read as dtype tokens, never as mangling fragments (issue 17, item 2).

AMD Composable Kernel GEMMs carry Itanium-mangled names full of substitutions (``SA_SB_SB_``,
``SS_SS_``); an FP32 pattern ``_sb_``/``_ss_`` read those as FP32 and NUM701 reported "44 matmuls
in fp32" on a bf16 MI300 job. The CK data types are the mangled template arguments of the
gridwise GEMM (``ttft``: bf16 = ushort ``t``, float ``f``).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from tracediag.engine.diagnose import diagnose
from tracediag.loading.loader import load
from tracediag.model import numeric_formats as dtypes

SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces"

# Heads of real names (kineto_mi300_resnet_act_checkpoint.json.gz), cut after the fragments that
# matter: the data-type run, then the substitutions that used to read as fp32.
CK_BWD_WEIGHT = (
    "_ZN2ck16tensor_operation6device37kernel_batched_gemm_xdlops_bwd_weightINS_47GridwiseGemm_"
    "bk0mk1_bk0nk1_mn_xdlops_bwd_weightILi64EttftLNS_25InMemoryDataOperationEnumE1ENS_16Tensor"
    "DescriptorINS_5TupleIJNS_5EmbedINS6_IJiiEEEESG_SG_SG_SE_SG_EEESS_SS_SA_SB_SB_EEE"
)
CK_CONV_V3 = (
    "_ZN2ck16tensor_operation6device12_GLOBAL__N_139kernel_grouped_conv_fwd_xdl_cshuffle_v3INS_"
    "28GridwiseGemm_xdl_cshuffle_v3INS_13tensor_layout4gemm8RowMajorENS6_11ColumnMajorES7_ttftt"
    "NS0_12element_wise11PassThroughESA_SA_LNS1_18GemmSpecializationE7ELi256E"
)
CK_MULTIPLE_D = (
    "_ZN2ck16tensor_operation6device12_GLOBAL__N_149kernel_grouped_conv_fwd_multiple_abd_xdl_"
    "cshuffleINS_34GridwiseGemmMultipleD_xdl_cshuffleItttftNS_5TupleIJEEEtNS0_12element_wise"
)
# The same grammar with other types (written here, as CK would mangle them).
CK_FP16 = CK_BWD_WEIGHT.replace("ILi64EttftL", "ILi64EDF16_DF16_fDF16_L")
CK_FP32 = CK_BWD_WEIGHT.replace("ILi64EttftL", "ILi64EffffL")


def _names(values) -> list[str]:
    return dtypes.names(dtypes.from_kernel_names(list(values))).tolist()


def test_composable_kernel_names_read_their_template_types():
    names = [CK_BWD_WEIGHT, CK_CONV_V3, CK_MULTIPLE_D, CK_FP16, CK_FP32]
    assert _names(names) == ["bf16", "bf16", "bf16", "fp16", "fp32"]
    assert dtypes.is_matmul_kernel(pd.Categorical(names)).all()


def test_mangling_fragments_are_not_dtype_tokens():
    # Mangled substitutions alone say nothing about a dtype.
    assert _names(["_ZN2ck6kernelINS_4GemmESA_SB_SB_SS_SS_EEvv", "foo_SB_SB_bar_ss_"]) == [
        "unknown",
        "unknown",
    ]


def test_tensile_types_token():
    names = [
        "Cijk_Ailk_Bljk_BBS_BH_MT64x64x64_MI16x16x16x1_SN_1LDSB0_APM1_ABV0_ACED0_AF0EM1",
        "Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32_MI16x16x1_SN_LDSB0",
        "Cijk_Alik_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1_SN",
        "Cijk_Ailk_Bljk_DB_MT64x64x16_SN",
        # an S further on (``_HA_S_SAV``) is not the types token
        "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x192x64_MI16x16x1_SN",
    ]
    assert _names(names) == ["bf16", "fp32", "fp16", "fp64", "bf16"]


def test_cudnn_offset_helpers_are_not_matmuls():
    names = pd.Categorical(
        [
            "cask_cudnn::computeWgradSplitKOffsetsKernel(cask_cudnn::ComputeSplitKOffsetsParams)",
            "cask_cudnn::computeWgradBOffsetsKernel(cask_cudnn::ComputeWgradBOffsetsParams)",
            "void cudnn::cnn::wgrad_alg0_engine<float, 128, 6, 7, 3, 3, 5, false, 512>(int)",
        ]
    )
    assert dtypes.is_matmul_kernel(names).tolist() == [False, False, True]


# Matmul kernels per dtype on real traces, counted by reading the names by hand: the MI300 job
# runs every GEMM/conv in bf16 (igemm_*_bf16, Cijk_*_BBS_*, CK ``ttft``); ResNet-50 on a V100
# is all fp32 once cuDNN's offset helpers (308 launches) are not counted as matmuls.
REAL = {
    "kineto_mi300_resnet_act_checkpoint.json.gz": {"bf16": 325},
    "kineto_resnet50_train_worker0.pt.trace.json.gz": {"fp32": 877},
    "kineto_h100_qwen_inference.json.gz": {"bf16": 275, "fp32": 1},
    "kineto_negative_queue_rank0.json.gz": {"tf32": 86, "fp32": 6},
}


@pytest.mark.parametrize("name", sorted(REAL))
def test_real_trace_matmul_dtypes(name):
    if not (SHARED / name).exists():
        pytest.skip("shared traces absent")
    trace = load([SHARED / name])
    found = Counter(dtypes.names(dtypes.event_dtypes(trace))[dtypes.matmul_events(trace)])
    assert dict(found) == REAL[name]


def test_mi300_bf16_job_has_no_fp32_matmul_finding():
    path = SHARED / "kineto_mi300_resnet_act_checkpoint.json.gz"
    if not path.exists():
        pytest.skip("shared traces absent")
    diagnosis = diagnose(load([path]))
    assert [f for f in diagnosis.findings if f.code == "NUM701"] == []
