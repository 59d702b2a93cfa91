"""The columnar program of one training step on one NeuronCore, and the workload's sizes.

Nodes are instructions (on the tensor, vector, scalar, gpsimd and sync engines), DMA transfers
(blocks, on a DMA queue) and collective ops (on the CC stream), in program order: every engine,
queue and stream executes its own nodes in this order (in-order issue), and every dependency
points to an earlier node. The same program runs on every rank.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tracediag.generator import hardware as hw

INSTR, DMA, CC = 0, 1, 2
ENGINES = ("tensor", "vector", "scalar", "gpsimd", "sync")
RESOURCES = (*ENGINES, hw.WEIGHT_QUEUE, hw.ACTIVATION_QUEUE, hw.CC_STREAM)
BF16 = 2


@dataclass(frozen=True)
class WorkloadShape:
    """Sizes of the simulated model step (defaults give a ~6 ms step on trn1)."""

    layers: int = 4
    tokens: int = 2048
    hidden: int = 3072
    tiles: int = 4  # token row tiles per layer (lets the vector work of one overlap the next)
    k_splits: int = 2  # MATMUL instructions per tile (contraction split, accumulated in PSUM)

    @property
    def weight_bytes(self) -> int:
        """Bytes of one layer's bf16 weight matrix."""
        return self.hidden * self.hidden * BF16

    @property
    def tile_elements(self) -> int:
        """Elements of one token tile of a layer's activation."""
        return self.tokens // self.tiles * self.hidden


@dataclass(frozen=True)
class Program:
    """Columnar program: node arrays (length N) and dependencies in CSR form."""

    shape: WorkloadShape
    kind: np.ndarray  # int8: INSTR, DMA, CC
    resource: np.ndarray  # int16 index into RESOURCES
    opcode: np.ndarray  # object
    hlo_name: np.ndarray  # object
    layer: np.ndarray  # object: layer_<i>, loss, optimizer
    phase: np.ndarray  # object: fwd, loss, bwd, opt
    operands: np.ndarray  # object
    work_ns: np.ndarray  # float64: nominal instruction duration
    flops: np.ndarray  # int64: MATMUL flops
    elements: np.ndarray  # int64: elements processed (instructions), gradient elements (CC)
    sbuf_read: np.ndarray  # int64
    sbuf_write: np.ndarray  # int64
    hbm_read: np.ndarray  # int64: bytes a DMA trigger moves out of HBM
    hbm_write: np.ndarray  # int64: bytes a DMA trigger moves into HBM
    nbytes: np.ndarray  # int64: DMA block bytes, CC bytes
    dma_key: np.ndarray  # object: logical DMA of a block ("" elsewhere)
    variable: np.ndarray  # object: tensor a DMA block moves
    direction: np.ndarray  # object: DMA "read" (HBM -> SBUF) or "write"
    dep_ptr: np.ndarray  # int64 (N + 1)
    dep_src: np.ndarray  # int64 (E)
    dep_lat: np.ndarray  # int64 (E): minimum latency from the source's end
    packet_block: np.ndarray  # int64 (P): DMA node of each packet, grouped by block
    packet_bytes: np.ndarray  # int64 (P)
    packet_first: np.ndarray  # bool (P): first packet of its block (pays the transfer setup)

    def __len__(self) -> int:
        return len(self.kind)

    @property
    def engine(self) -> np.ndarray:
        """Resource name of every node (engine, queue or CC stream)."""
        return np.asarray(RESOURCES, dtype=object)[self.resource]

    def edges(self) -> tuple[np.ndarray, np.ndarray]:
        """(src, dst) node index of every dependency."""
        dst = np.repeat(np.arange(len(self)), np.diff(self.dep_ptr))
        return self.dep_src, dst
