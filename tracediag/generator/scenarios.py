"""Named scenarios: which faults each one injects, sized to the workload's depth."""

from __future__ import annotations

from tracediag.generator import hardware as hw
from tracediag.generator.faults import Fault

SCENARIOS = {
    "clean": "no fault: a compute-bound step with prefetched weights and overlapped AllReduces",
    "slow_dma": "layer_1's forward weight DMA on qSyncIO0 runs at 25% of the queue bandwidth",
    "fragmented_dma": "a forward weight DMA is issued as 16 KiB transfers, each paying setup",
    "straggler": "rank 1's tensor and vector work on two layers is 1.5x slower",
    "engine_bottleneck": "vector work is 6x heavier: the vector engine bounds the step",
    "host_gaps": "GPU flavour: the CPU launch thread stalls twice, leaving the GPU idle",
    "mixed": "straggler (rank 1, one layer) plus slow_dma (all ranks, layer_1 forward)",
}

STRAGGLER_RANK = 1


def scenario_faults(name: str, ranks: int, layers: int) -> list[Fault]:
    """The faults of scenario ``name`` for a workload of ``ranks`` ranks and ``layers`` layers."""
    if name not in SCENARIOS:
        raise ValueError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}")
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
    }[name]
    for fault in faults:
        fault.check(ranks, layers)
    return faults
