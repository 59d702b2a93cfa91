"""Kernel micro-benchmarks: one NKI-style tiled matmul on one NeuronCore, with a known cause.

``C[M, N] = A[M, K] @ B[K, N]`` in bf16, tiles of K=128 partitions (the PE array's rows),
M=128 (its columns) and N=512 (the moving tensor's free size). Per row block ``m`` and column
block ``n``: the sync engine triggers the loads of the A and B tiles not yet in SBUF (qSyncIO0),
the tensor engine accumulates one MATMUL per K tile in PSUM, the vector engine evacuates the
PSUM result in four 128x128 chunks and the gpsimd engine triggers each chunk's store
(qVectorIO0). Every node carries the NKI source line it comes from.

A cause changes the kernel, never a time (the scheduler of :mod:`simulate` works out the
times); the truth re-simulates the kernel with the cause removed:

- ``reload_b``: B's tiles are loaded again for every row block instead of staying in SBUF;
- ``k_slice`` < 128: each MATMUL contracts ``k_slice`` rows, a fraction of the PE array
  (the moving tensor still streams N columns, so a small tile takes as long as a full one);
- ``transposes``: A comes untransposed; each tile is transposed on the tensor engine (an
  identity MATMUL) and copied out of PSUM by the scalar engine, ``"once"`` per tile or
  ``"every"`` column block again (redundant: the same tile, the same result);
- ``vector_factor``: the PSUM evacuations run that many times slower (a slow vector engine);
- ``strided``: A's loads read 32-byte descriptors (a strided layout) instead of 256-byte rows.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from tracediag.generator import hardware as hw
from tracediag.generator.program import DMA, INSTR, RESOURCES, Program

KERNEL_FILE = "matmul_kernel.py"
#: Source line of each kind of node in the kernel's NKI source.
LINES = {
    "load_a": 21,
    "load_b": 24,
    "transpose": 27,
    "transpose_copy": 28,
    "matmul": 31,
    "evacuate": 33,
    "store": 34,
}
LOAD_QUEUE, STORE_QUEUE = hw.WEIGHT_QUEUE, hw.ACTIVATION_QUEUE
QUEUE_BYTES_PER_NS = 190.0  # one queue's streaming rate (assumed; below the 410 B/ns peak)
PACKET_NS = 60  # per DMA packet: descriptor fetch and completion (assumed)
DESCRIPTOR_NS = 0.5  # per descriptor (one contiguous run of bytes) (assumed)
MATMUL_FIXED_NS = 16  # PE array fill and drain per MATMUL (assumed)
TRIGGER_NS = 64
#: Trigger end -> first byte on an idle queue: descriptors a kernel generates in hardware (DGE)
#: are ready sooner than a host-built queue's (assumed).
DMA_LATENCY_NS = 200
EVAC_CHUNKS = 4
SBUF_A, SBUF_B, PSUM = 0x10000, 0x800000, 0x2000000
ELEMENT = 2  # bf16


@dataclass(frozen=True)
class KernelShape:
    """Matrix and tile sizes of the kernel."""

    m: int = 1024
    k: int = 1024
    n: int = 2048
    tile_k: int = hw.TENSOR_ROWS
    tile_m: int = hw.TENSOR_COLS
    tile_n: int = 512


@dataclass(frozen=True)
class KernelCause:
    """How the kernel deviates from its efficient form (the defaults: none)."""

    reload_b: bool = False
    k_slice: int = hw.TENSOR_ROWS
    transposes: str = "none"  # "none", "once" (A untransposed), "every" (redundant repeats)
    vector_factor: float = 1.0
    strided: bool = False

    def removed(self) -> KernelCause:
        """The same kernel without its cause: A untransposed still needs one transpose per tile."""
        fixed = KernelCause()
        return replace(fixed, transposes="once") if self.transposes != "none" else fixed


@dataclass
class KernelProgram:
    """The program and, per node, what the tables write beyond it."""

    program: Program
    source: np.ndarray  # object: "matmul_kernel.py:31"
    role: np.ndarray  # object: a key of LINES
    transpose: np.ndarray  # bool: a transpose on the tensor engine
    redundant: np.ndarray  # bool: a node the cause adds (a reload, a repeated transpose)
    descriptor: np.ndarray  # int64: bytes per descriptor of a DMA (0 elsewhere)
    tensors: dict[str, tuple[str, int]]  # tensor -> (IN/OUT, bytes)


class _Nodes:
    """Appends nodes in program order; one DMA transfer is one packet of at most 64 KiB."""

    def __init__(self):
        self.cols: dict[str, list] = {k: [] for k in _FIELDS}
        self.deps: list[list[int]] = []
        self.lats: list[list[int]] = []

    def add(self, kind, resource, deps, lat=0, **cols) -> int:
        index = len(self.deps)
        assert all(0 <= d < index for d in deps)
        self.deps.append(list(deps))
        self.lats.append([lat] * len(deps))
        cols.update(kind=kind, resource=RESOURCES.index(resource))
        for name, default in _FIELDS.items():
            self.cols[name].append(cols.pop(name, default))
        assert not cols, sorted(cols)
        return index

    def dma(self, engine, queue, role, variable, nbytes, descriptor, direction, deps, redundant):
        """A trigger instruction on ``engine`` and the transfer it starts; returns the transfer."""
        line = f"{KERNEL_FILE}:{LINES[role]}"
        hbm = {"hbm_read": nbytes} if direction == "read" else {"hbm_write": nbytes}
        trigger = self.add(
            INSTR, engine, deps, opcode="PSEUDO_DMA_TRIGGER", hlo_name=f"{role}.{len(self.deps)}",
            operands=f"name=sg0000 queue={queue} bytes={nbytes}", work_ns=TRIGGER_NS,
            source=line, role=role, redundant=redundant, **hbm,
        )  # fmt: skip
        return self.add(
            DMA, queue, [trigger], lat=DMA_LATENCY_NS, nbytes=nbytes, variable=variable,
            direction=direction, dma_key=f"{role}:{variable}", source=line, role=role,
            redundant=redundant, descriptor=descriptor,
        )  # fmt: skip


_FIELDS = {
    "kind": INSTR, "resource": 0, "opcode": "", "hlo_name": "", "operands": "", "work_ns": 0.0,
    "flops": 0, "elements": 0, "sbuf_read": 0, "sbuf_write": 0, "hbm_read": 0, "hbm_write": 0,
    "nbytes": 0, "dma_key": "", "variable": "", "direction": "", "source": "", "role": "",
    "transpose": False, "redundant": False, "descriptor": 0,
}  # fmt: skip


def _pe(b: _Nodes, deps, role, rows, cols, moving, src, dst, transpose=False, redundant=False):
    """A tensor-engine instruction: ``rows`` x ``cols`` of the PE array, ``moving`` columns
    streamed through it (one per cycle, whatever share of the array the tile uses)."""
    return b.add(
        INSTR, "tensor", deps, opcode="MATMUL", hlo_name=f"{role}.{len(b.deps)}",
        operands=(
            f"S[5] (Tensor)++@complete src=bf16@0x{src:x}[1,0,0][{moving},1,1] "
            f"dst=0x{dst:x}[1,0,0][{moving},1,1] {rows}*{cols}"
        ),
        work_ns=moving / hw.TENSOR_CLOCK_GHZ + MATMUL_FIXED_NS,
        flops=2 * rows * cols * moving, elements=cols * moving,
        sbuf_read=(rows * cols + rows * moving) * ELEMENT, sbuf_write=cols * moving * 4,
        source=f"{KERNEL_FILE}:{LINES[role]}", role=role, transpose=transpose, redundant=redundant,
    )  # fmt: skip


def _elementwise(b: _Nodes, engine, deps, role, elements, factor=1.0, redundant=False) -> int:
    work = elements / hw.ELEMENTWISE_ELEMS_PER_NS + hw.INSTRUCTION_OVERHEAD_NS
    return b.add(
        INSTR, engine, deps, opcode="TENSOR_COPY", hlo_name=f"{role}.{len(b.deps)}",
        operands=f"op=copy src=fp32@0x{PSUM:x}[{elements}] dst=bf16@0x{SBUF_A:x}",
        work_ns=work * factor, elements=elements, sbuf_read=elements * 4,
        sbuf_write=elements * ELEMENT, source=f"{KERNEL_FILE}:{LINES[role]}", role=role,
        redundant=redundant,
    )  # fmt: skip


def build_kernel(shape: KernelShape, cause: KernelCause) -> KernelProgram:
    """The kernel's program with ``cause``."""
    b = _Nodes()
    tk, tm, tn = shape.tile_k, shape.tile_m, shape.tile_n
    a_bytes, b_bytes = tk * tm * ELEMENT, tk * tn * ELEMENT
    a_desc = 32 if cause.strided else tm * ELEMENT  # one row of a partition: 256 B
    loaded_a: dict[tuple[int, int], int] = {}
    loaded_b: dict[tuple[int, int], int] = {}
    ready_a: dict[tuple[int, int], int] = {}  # the A tile as the matmul reads it (transposed)
    ks = shape.k // tk
    for m in range(shape.m // tm):
        for n in range(shape.n // tn):
            for k in range(ks):  # loads in the order of first use
                if (m, k) not in loaded_a:
                    loaded_a[m, k] = b.dma(
                        "sync", LOAD_QUEUE, "load_a", "A", a_bytes, a_desc, "read", [], False
                    )
                    ready_a[m, k] = loaded_a[m, k]
                if (k, n) not in loaded_b or cause.reload_b:
                    again = (k, n) in loaded_b
                    loaded_b[k, n] = b.dma(
                        "sync", LOAD_QUEUE, "load_b", "B", b_bytes, tn * ELEMENT, "read", [], again
                    )
            if cause.transposes != "none":
                for k in range(ks):
                    if n and cause.transposes != "every":
                        continue
                    src = SBUF_A + (m * ks + k) * a_bytes  # the same tile, the same address
                    t = _pe(b, [loaded_a[m, k]], "transpose", tk, tm, tm, src, PSUM + k * 4096,
                            transpose=True, redundant=n > 0)  # fmt: skip
                    ready_a[m, k] = _elementwise(
                        b, "scalar", [t], "transpose_copy", tk * tm, redundant=n > 0
                    )
            prev = -1
            for k in range(ks):
                for part in range(tk // cause.k_slice):
                    deps = [ready_a[m, k], loaded_b[k, n]] + ([prev] if prev >= 0 else [])
                    src = SBUF_B + ((k * shape.n // tn + n) * tk + part * cause.k_slice) * tn
                    prev = _pe(b, deps, "matmul", cause.k_slice, tm, tn, src, PSUM)
            chunk = tm * tn // EVAC_CHUNKS
            for _ in range(EVAC_CHUNKS):
                copy = _elementwise(b, "vector", [prev], "evacuate", chunk, cause.vector_factor)
                b.dma("gpsimd", STORE_QUEUE, "store", "C", chunk * ELEMENT, tm * ELEMENT,
                      "write", [copy], False)  # fmt: skip
    return _pack(b, shape, cause)


def _pack(b: _Nodes, shape: KernelShape, cause: KernelCause) -> KernelProgram:
    c = b.cols
    kind = np.array(c["kind"], dtype=np.int8)
    lengths = np.array([len(d) for d in b.deps], dtype=np.int64)
    blocks = np.flatnonzero(kind == DMA)
    text = {f: np.array(c[f], dtype=object) for f in
            ("opcode", "hlo_name", "operands", "dma_key", "variable", "direction")}  # fmt: skip
    ints = {f: np.array(c[f], dtype=np.int64) for f in
            ("flops", "elements", "sbuf_read", "sbuf_write", "hbm_read", "hbm_write", "nbytes")}  # fmt: skip
    program = Program(
        shape=shape,  # type: ignore[arg-type]  # the tables read no WorkloadShape field
        kind=kind,
        resource=np.array(c["resource"], dtype=np.int16),
        layer=np.full(len(kind), "", dtype=object),
        phase=np.full(len(kind), "kernel", dtype=object),
        work_ns=np.array(c["work_ns"], dtype=np.float64),
        dep_ptr=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
        dep_src=np.array([d for deps in b.deps for d in deps], dtype=np.int64),
        dep_lat=np.array([x for lat in b.lats for x in lat], dtype=np.int64),
        packet_block=blocks.astype(np.int64),
        packet_bytes=ints["nbytes"][blocks],
        packet_first=np.ones(len(blocks), dtype=bool),
        **text,
        **ints,
    )
    tensors = {
        "A": ("IN", shape.m * shape.k * ELEMENT),
        "B": ("IN", shape.k * shape.n * ELEMENT),
        "C": ("OUT", shape.m * shape.n * ELEMENT),
    }
    return KernelProgram(
        program=program,
        source=np.array(c["source"], dtype=object),
        role=np.array(c["role"], dtype=object),
        transpose=np.array(c["transpose"], dtype=bool),
        redundant=np.array(c["redundant"], dtype=bool),
        descriptor=np.array(c["descriptor"], dtype=np.int64),
        tensors=tensors,
    )


def packet_durations(kp: KernelProgram) -> np.ndarray:
    """ns of every DMA packet (one per transfer): its fixed cost, its bytes at the queue's
    rate and a cost per descriptor (small descriptors make many)."""
    p = kp.program
    blocks = p.packet_block
    descriptors = np.ceil(p.packet_bytes / np.maximum(kp.descriptor[blocks], 1))
    ns = PACKET_NS + p.packet_bytes / QUEUE_BYTES_PER_NS + descriptors * DESCRIPTOR_NS
    return np.rint(ns).astype(np.int64)
