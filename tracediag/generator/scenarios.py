"""Named scenarios: which faults each one injects, sized to the workload's depth."""

from __future__ import annotations

from tracediag.generator import hardware as hw
from tracediag.generator.faults import Fault
from tracediag.generator.kernels import KERNEL_SCENARIOS
from tracediag.generator.parallel_layout import PARALLEL_SCENARIOS
from tracediag.generator.precision import fp32_matmul_fault

SCENARIOS = {
    "clean": "no fault: a compute-bound step with prefetched weights and overlapped AllReduces",
    "slow_dma": "layer_1's forward weight DMA on qSyncIO0 runs at 25% of the queue bandwidth",
    "fragmented_dma": "a forward weight DMA is issued as 16 KiB transfers, each paying setup",
    "straggler": "rank 1's tensor and vector work on two layers is 1.5x slower",
    "engine_bottleneck": "vector work is 6x heavier: the vector engine bounds the step",
    "host_gaps": "GPU flavour: the CPU launch thread stalls twice, leaving the GPU idle",
    "mixed": "straggler (rank 1, one layer) plus slow_dma (all ranks, layer_1 forward)",
    "fp32_matmul": "layer_1's matmuls run in FP32 on every rank: 4x slower than the BF16 rest",
    "numerical_error": "layer_1's forward matmuls produce NaN: the hardware reports each one",
    **PARALLEL_SCENARIOS,  # dp x tp x pp jobs, simulated by generator.parallel_write
    **KERNEL_SCENARIOS,  # one-NeuronCore kernel micro-benchmarks, by generator.kernels
}

STRAGGLER_RANK = 1


def scenario_faults(name: str, ranks: int, layers: int) -> list[Fault]:
    """The faults of scenario ``name`` for a workload of ``ranks`` ranks and ``layers`` layers."""
    if name not in SCENARIOS:
        raise ValueError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}")
    if name in PARALLEL_SCENARIOS:
        raise ValueError(f"{name} is a parallel scenario: generator.parallel_write simulates it")
    if name in KERNEL_SCENARIOS:
        raise ValueError(f"{name} is a kernel scenario: generator.kernels simulates it")
    last = layers - 1
    mid = min(2, last)
    slow = Fault("slow_dma", None, (1,), "fwd", queue=hw.WEIGHT_QUEUE, factor=0.25)
    straggler_layers = tuple(sorted({1, mid}))
    faults = {
        "clean": [],
        "slow_dma": [slow],
        "fragmented_dma": [Fault("fragmented_dma", None, (mid,), "fwd", transfer_bytes=16384)],
        "straggler": [
            Fault(
                "straggler",
                (STRAGGLER_RANK,),
                straggler_layers,
                engines=("tensor", "vector"),
                factor=1.5,
            )
        ],
        "engine_bottleneck": [
            Fault("engine_bottleneck", None, (), engines=("vector",), factor=6.0)
        ],
        "host_gaps": [
            Fault("host_gaps", None, (1,), "fwd", stall_ns=1_500_000),
            Fault("host_gaps", None, (mid,), "bwd", stall_ns=2_000_000),
        ],
        "mixed": [
            Fault("straggler", (STRAGGLER_RANK,), (mid,), engines=("tensor", "vector"), factor=1.5),
            slow,
        ],
        "fp32_matmul": [fp32_matmul_fault(1)],
        "numerical_error": [Fault("numerical_error", None, (1,), "fwd", engines=("tensor",))],
    }[name]
    for fault in faults:
        fault.check(ranks, layers)
    return faults
