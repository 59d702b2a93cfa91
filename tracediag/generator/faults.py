"""Injectable faults: what each one changes in the program or in the durations it simulates.

A fault never writes a time: it changes work (a slower engine, a slower queue, more DMA transfers,
a host stall) and the scheduler works out what that does to the step. Removing a fault (for the
ground truth's what-if saving) means dropping it from the list: every fault is a deviation from
what the peers achieve (nominal engine speed, the queue's normal bandwidth), so without it the
affected rank runs at its peers' median speed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracediag.generator import hardware as hw
from tracediag.generator.program import DMA, INSTR, Program

#: Fault kind -> the rule family expected to name it.
FAMILIES = {
    "slow_dma": "dma",
    "fragmented_dma": "dma",
    "straggler": "collective",
    "engine_bottleneck": "compute",
    "host_gaps": "host",
    "fp32_matmul": "precision",
    "numerical_error": "precision",
}


def layer_name(index: int) -> str:
    """The name of layer ``index`` as traces show it."""
    return f"layer_{index}"


def dma_key(purpose: str, phase: str, layer: int) -> str:
    """The key of one logical DMA (all its transfers), e.g. ``weight:fwd:layer_1``."""
    return f"{purpose}:{phase}:{layer_name(layer)}"


@dataclass(frozen=True)
class Fault:
    """One injected fault. ``ranks`` None means every rank.

    - ``slow_dma``: the weight DMA of ``layers[0]`` in ``phase`` (fwd or bwd) on ``queue``
      runs at ``factor`` x the queue's bandwidth.
    - ``fragmented_dma``: that DMA is issued as transfers of ``transfer_bytes`` (< 32 KiB), each
      paying the per-transfer setup.
    - ``straggler``: instructions of ``engines`` in ``layers`` (forward and backward) take
      ``factor`` x longer.
    - ``engine_bottleneck``: every instruction of ``engines`` takes ``factor`` x longer.
    - ``host_gaps``: (GPU flavour only) the CPU launch thread stalls ``stall_ns`` before launching
      the first op of ``layers[0]`` in ``phase``.
    - ``fp32_matmul``: the tensor-engine MATMULs of ``layers`` (forward and backward) run in FP32:
      ``factor`` x longer (the hardware's bf16/fp32 peak ratio); the tables say fp32.
    - ``numerical_error``: the MATMULs of ``layers`` in ``phase`` (every phase when empty)
      produce NaN: the device's ``Error`` table gets a row at the end of each; no time changes.
    """

    kind: str
    ranks: tuple[int, ...] | None = None
    layers: tuple[int, ...] = ()
    phase: str = ""
    engines: tuple[str, ...] = ()
    queue: str | None = None
    factor: float = 1.0
    transfer_bytes: int = 0
    stall_ns: int = 0

    @property
    def family(self) -> str:
        """The rule family (dma, collective, compute, host) expected to report this fault."""
        return FAMILIES[self.kind]

    @property
    def device_visible(self) -> bool:
        """False for faults that only exist in the GPU flavour (host launch stalls)."""
        return self.kind != "host_gaps"

    @property
    def gpu_visible(self) -> bool:
        """False for faults the GPU flavour does not model: precision faults need GEMM kernel
        names and durations at a GPU's fp32/bf16 peak ratio, which it does not render."""
        return self.kind not in ("fp32_matmul", "numerical_error")

    def rank_mask(self, ranks: int) -> np.ndarray:
        """Boolean (ranks,) mask of the ranks this fault hits."""
        mask = np.zeros(ranks, dtype=bool)
        if self.ranks is None:
            mask[:] = True
        else:
            mask[list(self.ranks)] = True
        return mask

    def target_key(self) -> str | None:
        """The DMA key this fault acts on (slow/fragmented DMA), else None."""
        if self.kind in ("slow_dma", "fragmented_dma"):
            return dma_key("weight", self.phase, self.layers[0])
        return None

    def check(self, ranks: int, layers: int) -> None:
        """Raise ValueError when the fault names ranks or layers the workload lacks."""
        if self.kind not in FAMILIES:
            raise ValueError(f"unknown fault kind {self.kind!r}")
        if self.ranks is not None and (min(self.ranks) < 0 or max(self.ranks) >= ranks):
            raise ValueError(f"{self.kind}: ranks {self.ranks} outside 0..{ranks - 1}")
        if self.layers and max(self.layers) >= layers:
            raise ValueError(f"{self.kind}: layer {max(self.layers)} outside 0..{layers - 1}")
        if self.kind == "fragmented_dma" and not 0 < self.transfer_bytes < 32 * 1024:
            raise ValueError("fragmented_dma: transfer_bytes must be below 32 KiB")


def transfer_bytes_for(faults: list[Fault], key: str, nbytes: int) -> int:
    """The transfer (DMA block) size of the logical DMA ``key``: whole unless fragmented."""
    for fault in faults:
        if fault.kind == "fragmented_dma" and fault.target_key() == key:
            return fault.transfer_bytes
    return nbytes


def node_mask(fault: Fault, program: Program) -> np.ndarray:
    """Boolean mask of the program nodes a fault slows down (none for host_gaps)."""
    engine = program.engine
    if fault.kind in ("slow_dma", "fragmented_dma"):
        mask = (program.kind == DMA) & (program.dma_key == fault.target_key())
        return mask & (engine == fault.queue) if fault.kind == "slow_dma" else mask
    if fault.kind in ("straggler", "engine_bottleneck", "fp32_matmul", "numerical_error"):
        mask = (program.kind == INSTR) & np.isin(engine, list(fault.engines))
        if fault.kind != "engine_bottleneck":
            mask &= np.isin(program.layer, [layer_name(i) for i in fault.layers])
        if fault.kind in ("fp32_matmul", "numerical_error"):
            mask &= program.opcode == "MATMUL"
        if fault.kind == "numerical_error" and fault.phase:
            mask &= program.phase == fault.phase
        return mask
    return np.zeros(len(program), dtype=bool)


def duration_factors(faults: list[Fault], program: Program, ranks: int) -> np.ndarray:
    """(N, ranks) instruction duration multipliers from straggler, engine-bottleneck and
    fp32-matmul faults."""
    factors = np.ones((len(program), ranks))
    for fault in faults:
        if fault.kind in ("straggler", "engine_bottleneck", "fp32_matmul"):
            factors[np.ix_(node_mask(fault, program), fault.rank_mask(ranks))] *= fault.factor
    return factors


def bandwidth(faults: list[Fault], program: Program, ranks: int) -> np.ndarray:
    """(N, ranks) bytes/ns of every DMA node: its queue's rate unless a slow_dma hits it."""
    rate = np.zeros(len(program))
    dma = program.kind == DMA
    rate[dma] = pd.Series(program.engine[dma]).map(hw.QUEUE_BYTES_PER_NS).to_numpy()
    result = np.repeat(rate[:, None], ranks, axis=1)
    for fault in faults:
        if fault.kind == "slow_dma":
            result[np.ix_(node_mask(fault, program), fault.rank_mask(ranks))] *= fault.factor
    return result
