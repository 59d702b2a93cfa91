"""Emits program nodes one at a time (instructions, DMA transfers, collectives) and packs them.

Durations here are nominal work (flops at the tensor engine's rate, elements at the vector lanes'
rate); faults and jitter scale them per rank at simulation time. DMA transfers carry bytes only:
their duration depends on the queue bandwidth, which a fault may change per rank.
"""

from __future__ import annotations

import numpy as np

from tracediag.generator import hardware as hw
from tracediag.generator.faults import Fault, dma_key, transfer_bytes_for
from tracediag.generator.program import CC, DMA, INSTR, RESOURCES, Program, WorkloadShape

_INT_FIELDS = ("flops", "elements", "sbuf_read", "sbuf_write", "hbm_read", "hbm_write", "nbytes")
_STR_FIELDS = (
    "opcode",
    "hlo_name",
    "layer",
    "phase",
    "operands",
    "dma_key",
    "variable",
    "direction",
)


class ProgramBuilder:
    """Appends nodes in program order; :meth:`finish` returns the columnar :class:`Program`."""

    def __init__(self, shape: WorkloadShape, faults: list[Fault]):
        self.shape = shape
        self.faults = faults
        self._kind: list[int] = []
        self._resource: list[int] = []
        self._work: list[float] = []
        self._cols: dict[str, list] = {f: [] for f in _INT_FIELDS + _STR_FIELDS}
        self._deps: list[list[int]] = []
        self._lats: list[list[int]] = []
        self._packet_block: list[np.ndarray] = []
        self._packet_bytes: list[np.ndarray] = []
        self._hlo_count = 0

    # ---- generic nodes ------------------------------------------------------------------
    def node(self, kind: int, resource: str, deps: list[int], lat: int = 0, **cols) -> int:
        """Append one node depending on ``deps`` (each with latency ``lat``); return its index."""
        index = len(self._kind)
        assert all(0 <= d < index for d in deps), "dependencies must precede the node"
        self._kind.append(kind)
        self._resource.append(RESOURCES.index(resource))
        self._work.append(float(cols.pop("work_ns", 0.0)))
        for name in _INT_FIELDS:
            self._cols[name].append(int(cols.pop(name, 0)))
        for name in _STR_FIELDS:
            self._cols[name].append(str(cols.pop(name, "")))
        assert not cols, f"unknown node fields {sorted(cols)}"
        self._deps.append(list(deps))
        self._lats.append([lat] * len(deps))
        return index

    @property
    def opcodes(self) -> list[str]:
        """Opcodes of the nodes appended so far, in program order."""
        return self._cols["opcode"]

    def hlo(self, op: str) -> str:
        """A fresh HLO instruction name such as ``dot.12``."""
        self._hlo_count += 1
        return f"{op}.{self._hlo_count}"

    def matmul(
        self,
        layer: str,
        phase: str,
        deps: list[int],
        rows: int,
        k: int,
        cols: int,
        accumulate: bool,
    ) -> int:
        """A tensor-engine MATMUL of [rows, k] x [k, cols] in bf16, accumulating in PSUM."""
        flops = 2 * rows * k * cols
        work = flops / (hw.TENSOR_PEAK_FLOPS_PER_NS * hw.MATMUL_EFFICIENCY)
        operands = (
            f"S[5] (Tensor)++@complete acc_flags={3 if accumulate else 1} row_grp=q0 "
            f"src=bf16@0x{0x5600 + 64 * rows:x}[1,0,0][{k // 128},1,1] "
            f"dst=0x2000000[1,0,0][{k // 128},1,1] {rows}*{cols}"
        )
        return self.node(
            INSTR,
            "tensor",
            deps,
            opcode="MATMUL",
            hlo_name=self.hlo("dot"),
            layer=layer,
            phase=phase,
            operands=operands,
            work_ns=work + hw.INSTRUCTION_OVERHEAD_NS,
            flops=flops,
            elements=rows * cols,
            sbuf_read=(rows * k + k * cols) * 2,
            sbuf_write=rows * cols * 4,
        )

    def elementwise(
        self,
        engine: str,
        opcode: str,
        op: str,
        layer: str,
        phase: str,
        deps: list[int],
        elements: int,
        passes: float = 1.0,
    ) -> int:
        """A vector/scalar/gpsimd instruction streaming ``elements`` ``passes`` times."""
        work = elements * passes / hw.ELEMENTWISE_ELEMS_PER_NS + hw.INSTRUCTION_OVERHEAD_NS
        sem = {"vector": "S[7] (Vector)", "scalar": "S[9] (Act)", "gpsimd": "S[11] (Pool)"}
        operands = f"{sem[engine]}++@complete op={op} src=bf16@0x4000[{elements}] dst=bf16@0x8000"
        return self.node(
            INSTR,
            engine,
            deps,
            opcode=opcode,
            hlo_name=self.hlo(op),
            layer=layer,
            phase=phase,
            operands=operands,
            work_ns=work,
            elements=elements,
            sbuf_read=int(elements * 2 * passes),
            sbuf_write=elements * 2,
        )

    # ---- DMA and collectives --------------------------------------------------------------
    def dma(
        self,
        trigger_engine: str,
        queue: str,
        purpose: str,
        phase: str,
        layer: int,
        nbytes: int,
        variable: str,
        direction: str,
        deps: list[int],
    ) -> int:
        """A trigger instruction and the DMA transfers it starts; returns the last transfer.

        The DMA is one transfer unless a fragmented_dma fault splits it. Transfers of one DMA
        run back to back on their serial queue, so the last one completes the DMA.
        """
        key = dma_key(purpose, phase, layer)
        name = key.split(":")[-1]
        read = nbytes if direction == "read" else 0
        trigger = self.node(
            INSTR,
            trigger_engine,
            deps,
            opcode="PSEUDO_DMA_TRIGGER",
            hlo_name=self.hlo(purpose),
            layer=name,
            phase=phase,
            work_ns=hw.TRIGGER_NS,
            hbm_read=read,
            hbm_write=nbytes - read,
            operands=f"name=sg0000 queue={queue} bytes={nbytes}",
        )
        size = transfer_bytes_for(self.faults, key, nbytes)
        block = trigger
        for offset in range(0, nbytes, size):
            block_bytes = min(size, nbytes - offset)
            block = self.node(
                DMA,
                queue,
                [trigger],
                lat=hw.DMA_QUEUE_LATENCY_NS,
                layer=name,
                phase=phase,
                nbytes=block_bytes,
                dma_key=key,
                variable=variable,
                direction=direction,
            )
            packets = -(-block_bytes // hw.DMA_PACKET_BYTES)
            sizes = np.full(packets, hw.DMA_PACKET_BYTES, dtype=np.int64)
            sizes[-1] = block_bytes - hw.DMA_PACKET_BYTES * (packets - 1)
            self._packet_block.append(np.full(packets, block, dtype=np.int64))
            self._packet_bytes.append(sizes)
        return block

    def collective(self, layer: str, phase: str, deps: list[int], elements: int) -> int:
        """A gpsimd PSEUDO_TRIGGER_COLLECTIVE and the bf16 AllReduce it triggers."""
        operands = (
            "$S[15]>=1 $S[15]++@complete ctype=ALL_REDUCE op=ADD dtype=bfloat16 cc_dim=0 "
            f"src0_pattern=[1,1][{elements},1] group_id=0 channel_id=0 stream_id=0"
        )
        trigger = self.node(
            INSTR,
            "gpsimd",
            deps,
            opcode="PSEUDO_TRIGGER_COLLECTIVE",
            hlo_name=self.hlo("all-reduce-start"),
            layer=layer,
            phase=phase,
            operands=operands,
            work_ns=hw.TRIGGER_NS,
        )
        return self.node(
            CC,
            hw.CC_STREAM,
            [trigger],
            opcode="AllReduce",
            hlo_name=self.hlo("all-reduce"),
            layer=layer,
            phase=phase,
            elements=elements,
            nbytes=elements * 2,
        )

    def finish(self) -> Program:
        """Pack the appended nodes into a :class:`Program`."""
        lengths = np.array([len(d) for d in self._deps], dtype=np.int64)
        flat = [d for deps in self._deps for d in deps]
        lats = [x for lat in self._lats for x in lat]
        cols = {f: np.array(self._cols[f], dtype=np.int64) for f in _INT_FIELDS}
        cols.update({f: np.array(self._cols[f], dtype=object) for f in _STR_FIELDS})
        packet_block = np.concatenate(self._packet_block)
        first = np.ones(len(packet_block), dtype=bool)
        first[1:] = packet_block[1:] != packet_block[:-1]
        return Program(
            shape=self.shape,
            kind=np.array(self._kind, dtype=np.int8),
            resource=np.array(self._resource, dtype=np.int16),
            work_ns=np.array(self._work),
            dep_ptr=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
            dep_src=np.array(flat, dtype=np.int64),
            dep_lat=np.array(lats, dtype=np.int64),
            packet_block=packet_block,
            packet_bytes=np.concatenate(self._packet_bytes),
            packet_first=first,
            **cols,
        )
