"""Names and constant arguments the Chrome/Kineto flavour gives to simulated operations.

Kernel and operator names are the ones PyTorch 2.x on an H100 shows for the same work (a cuBLAS
GEMM for MATMUL, ATen elementwise and reduction kernels, an NCCL ring AllReduce). Keyed by the
HLO op of the device instruction (the part of ``hlo_name`` before the dot).
"""

from __future__ import annotations

GEMM = (
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_"
    "execute_segment_k_off_kernel__5x_cublas"
)


def _elementwise(functor: str, arity: int = 3) -> str:
    array = f"at::detail::Array<char*, {arity}>"
    return f"void at::native::vectorized_elementwise_kernel<4, {functor}, {array} >(int, {functor}, {array})"


def _reduce(functor: str) -> str:
    op = f"at::native::ReduceOp<float, at::native::func_wrapper_t<float, {functor}>, unsigned int, float, 4>"
    return f"void at::native::reduce_kernel<512, 1, {op} >({op})"


#: HLO op -> (CPU operator, GPU kernel).
OPS = {
    "dot": ("aten::mm", GEMM),
    "add": ("aten::add", _elementwise("at::native::CUDAFunctor_add<c10::BFloat16>")),
    "multiply": ("aten::mul", _elementwise("at::native::binary_internal::MulFunctor<float>")),
    "reduce": ("aten::sum", _reduce("at::native::sum_functor<c10::BFloat16, float, float>")),
    "gelu": ("aten::gelu", _elementwise("at::native::GeluCUDAKernelImpl_functor", 2)),
    "gelu-backward": (
        "aten::gelu_backward",
        _elementwise("at::native::GeluBackwardCUDAKernelImpl_functor"),
    ),
    "exponential": ("aten::exp", _elementwise("at::native::exp_kernel_cuda_functor", 2)),
    "convert": ("aten::_to_copy", _elementwise("at::native::direct_copy_kernel_cuda_functor", 2)),
    "rsqrt": ("aten::rsqrt", _elementwise("at::native::rsqrt_kernel_cuda_functor", 2)),
    "adam": (
        "aten::_fused_adam_",
        "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<"
        "at::native::(anonymous namespace)::TensorListMetadata<4>, "
        "at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4>, float>",
    ),
}
NCCL_KERNEL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
MEMCPY = {"read": "Memcpy HtoD (Pinned -> Device)", "write": "Memcpy DtoH (Device -> Pinned)"}

#: Launch geometry and occupancy Kineto records per kernel family.
GEMM_ARGS = {
    "grid": [132, 1, 1],
    "block": [384, 1, 1],
    "registers per thread": 168,
    "shared memory": 213_000,
    "blocks per SM": 1.0,
    "warps per SM": 12.0,
    "est. achieved occupancy %": 19,
}
ELEMENTWISE_ARGS = {
    "grid": [4096, 1, 1],
    "block": [128, 1, 1],
    "registers per thread": 32,
    "shared memory": 0,
    "blocks per SM": 31.03,
    "warps per SM": 124.12,
    "est. achieved occupancy %": 100,
}
NCCL_ARGS = {
    "grid": [16, 1, 1],
    "block": [544, 1, 1],
    "registers per thread": 96,
    "shared memory": 108_912,
    "blocks per SM": 0.12,
    "warps per SM": 2.06,
    "est. achieved occupancy %": 3,
}

DEVICE_PROPERTIES = {
    "name": "NVIDIA H100 80GB HBM3",
    "totalGlobalMem": 85_029_158_912,
    "computeMajor": 9,
    "computeMinor": 0,
    "maxThreadsPerBlock": 1024,
    "maxThreadsPerMultiprocessor": 2048,
    "regsPerBlock": 65536,
    "regsPerMultiprocessor": 65536,
    "warpSize": 32,
    "sharedMemPerBlock": 49152,
    "sharedMemPerMultiprocessor": 233_472,
    "numSms": 132,
    "sharedMemPerBlockOptin": 232_448,
}
