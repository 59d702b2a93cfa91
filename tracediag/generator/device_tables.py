"""One rank's device-flavour results as columnar frames, on that rank's device clock.

Column names are the Neuron Explorer Parquet names (``neuron-parquet-fields.md``); the legacy
JSON writer renames what it needs. Ids: every instruction and DMA block has a 64-bit id unique
within the rank (the same on every rank: one program), collectives are referred to by ``op_id``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracediag.generator import hardware as hw
from tracediag.generator.precision import error_rows, instruction_dtype_fields
from tracediag.generator.program import CC, DMA, INSTR
from tracediag.generator.simulate import DeviceRun

NODE_ID_BASE = 1 << 32  # ids above 32 bits, as real profiles have
PACKET_ID_BASE = 3 << 32
TRACKS = {
    "tensor": "TensorMatrix",
    "vector": "Vector",
    "scalar": "Scalar",
    "gpsimd": "GpSimd",
    "sync": "Sync",
}
ACTIVATION_FN = {"gelu": "GELU", "gelu-backward": "GELU_DX", "exponential": "EXP", "rsqrt": "RSQRT"}
#: Flow table name of each node kind (indexed by INSTR, DMA, CC).
FLOW_TABLE = np.array(["instruction", "dma_block", "cc_op"], dtype=object)


@dataclass(frozen=True)
class RankTables:
    """The frames one rank's device profile is written from."""

    rank: int
    instructions: pd.DataFrame
    dma_blocks: pd.DataFrame
    dma_packets: pd.DataFrame
    cc_ops: pd.DataFrame
    flows: pd.DataFrame
    instruction_deps: pd.Series  # instruction id -> list of instruction/DMA ids it waits on
    errors: pd.DataFrame | None = None  # the Error table (numerical_error faults), else None


def node_ids(run: DeviceRun) -> np.ndarray:
    """The id of every node as the tables write it (``op_id`` for collectives)."""
    ids = NODE_ID_BASE + np.arange(len(run.program), dtype=np.int64)
    cc = run.program.kind == CC
    ids[cc] = np.arange(int(cc.sum()))
    return ids


def rank_tables(run: DeviceRun, rank: int, offset: int) -> RankTables:
    """Frames of ``rank`` with times on its device clock (true time + ``offset``)."""
    p = run.program
    start = run.schedule.start[:, rank] + offset
    end = run.schedule.end[:, rank] + offset
    ids = node_ids(run)
    src, dst = p.edges()
    return RankTables(
        rank=rank,
        instructions=_instructions(run, rank, start, end, ids, src, dst),
        dma_blocks=_blocks(run, start, end, ids, src, dst),
        dma_packets=_packets(run, rank, start, ids),
        cc_ops=_cc_ops(run, start, end, src, dst),
        flows=pd.DataFrame(
            {
                "in_id": ids[src],
                "out_id": ids[dst],
                "in_table": FLOW_TABLE[p.kind[src]],
                "out_table": FLOW_TABLE[p.kind[dst]],
                "dependency_type": "FLOW_DEPENDENCE",
                "gap_time": start[dst] - end[src],
            }
        ),
        instruction_deps=_instruction_deps(p, ids, src, dst),
        errors=error_rows(run, rank, end),
    )


def _instructions(run, rank, start, end, ids, src, dst) -> pd.DataFrame:
    p = run.program
    rows = np.flatnonzero(p.kind == INSTR)
    engine = p.engine[rows]
    opcode = p.opcode[rows]
    # The DMA each trigger started: first transfer start, last transfer end.
    dma = p.kind[dst] == DMA
    trig_start = pd.Series(start[dst[dma]], dtype="Int64").groupby(src[dma]).min().reindex(rows)
    trig_end = pd.Series(end[dst[dma]], dtype="Int64").groupby(src[dma]).max().reindex(rows)
    matmul = opcode == "MATMUL"
    operands, adjusted_flops = instruction_dtype_fields(run, rank, rows)
    op = pd.Series(p.hlo_name[rows]).str.rsplit(".", n=1).str[0]
    chain = np.where(
        opcode == "PSEUDO_TRIGGER_COLLECTIVE",
        "PSEUDO_TRIGGER_COLLECTIVE_2 " + p.operands[rows].astype(str),
        None,
    )
    frame = pd.DataFrame(
        {
            "start_ts": start[rows],
            "end_ts": end[rows],
            "duration_ns": end[rows] - start[rows],
            "engine": engine,
            "timeline_track": pd.Series(engine).map(TRACKS),
            "pcore_idx": 0,
            "opcode": opcode,
            "operands": operands,
            "compiler_opcode": opcode,
            "id": ids[rows],
            "pc": pd.Series(engine).groupby(engine).cumcount().to_numpy() * 16,
            "bir_id": "sg0000:" + pd.Series(200_000 + rows).astype(str),
            "raw_bir_id": 200_000 + rows,
            "evt_wait_time_ns": run.schedule.start[rows, rank] - run.schedule.free[rows, rank],
            "hlo_name": p.hlo_name[rows],
            "layer": p.layer[rows],
            "dma_trigger_start_ts": trig_start.array,
            "dma_trigger_end_ts": trig_end.array,
            "dma_wait_time_ns": (trig_start - end[rows]).array,
            "instruction_chain": chain,
            "hbm_read_bytes": p.hbm_read[rows],
            "hbm_write_bytes": p.hbm_write[rows],
            "sbuf_read_bytes": p.sbuf_read[rows],
            "sbuf_write_bytes": p.sbuf_write[rows],
            "tensor_instruction_type": np.where(matmul, "REGULAR", None),
            "tensor_elements": np.where(matmul, p.elements[rows], 0),
            "raw_flops": p.flops[rows],
            "adjusted_flops": adjusted_flops,  # BF16-equivalent: x4 for an FP32 matmul
            "scalar_activation_fn": op.map(ACTIVATION_FN).where(engine == "scalar", None),
        }
    )
    return frame.sort_values(["start_ts", "id"], kind="stable", ignore_index=True)


def _blocks(run, start, end, ids, src, dst) -> pd.DataFrame:
    p = run.program
    rows = np.flatnonzero(p.kind == DMA)
    queue = p.engine[rows]
    nbytes = p.nbytes[rows]
    read = p.direction[rows] == "read"
    duration = end[rows] - start[rows]
    # Each transfer's trigger; the consumer (completion) of the last transfer of each DMA.
    trigger = pd.Series(ids[src], index=dst).groupby(level=0).first().reindex(rows).to_numpy()
    consumer = (p.kind[src] == DMA) & (p.kind[dst] == INSTR)
    completion = pd.Series(ids[dst[consumer]], dtype="Int64").groupby(src[consumer]).first()
    shape = np.char.mod("[%d]", nbytes // 2)
    # Byte offset of each transfer inside its DMA (non-zero only when a DMA is fragmented).
    within = pd.Series(nbytes).groupby(p.dma_key[rows]).cumsum().to_numpy() - nbytes
    offset = np.char.mod("[0x%x]", within)
    semaphore = {q: f"S[{10 + i}] ({q})" for q, i in hw.QUEUE_INDEX.items()}
    sbuf, hbm = "0-127", ""
    return pd.DataFrame(
        {
            "start_ts": start[rows],
            "end_ts": end[rows],
            "duration_ns": duration,
            "id": ids[rows],
            "pcore_idx": 0,
            "block_id": np.arange(len(rows), dtype=np.int32),
            "queue_idx": pd.Series(queue).map(hw.QUEUE_INDEX).to_numpy(),
            "queue_name": queue,
            "queue_type": "data",
            "op": p.direction[rows],
            "variable": p.variable[rows],
            "read_bytes": nbytes,
            "write_bytes": nbytes,
            "transfer_bytes": nbytes,
            "throughput": nbytes / (duration * 1e-9),
            "source": np.where(read, "[HBM]", "[SB]"),
            "dest": np.where(read, "[SB]", "[HBM]"),
            "semaphore_id": pd.Series(queue).map(semaphore),
            "read_sbuf_partitions": np.where(read, hbm, sbuf),
            "read_num_sbuf_partitions": np.where(read, 0, 128).astype(np.int32),
            "read_shape": shape,
            "read_offset": np.where(read, offset, "[0x0]"),
            "read_steps": "[1]",
            "write_sbuf_partitions": np.where(read, sbuf, hbm),
            "write_num_sbuf_partitions": np.where(read, 128, 0).astype(np.int32),
            "write_shape": shape,
            "write_offset": np.where(read, "[0x0]", offset),
            "write_steps": "[1]",
            "trigger": trigger.astype(np.int64),
            "completion": completion.reindex(rows).array,
        }
    ).sort_values(["start_ts", "id"], kind="stable", ignore_index=True)


def _packets(run, rank, start, ids) -> pd.DataFrame:
    p = run.program
    block = p.packet_block
    duration = run.packet_duration[:, rank]
    # Packets of one transfer run back to back from the transfer's start.
    first = np.maximum.accumulate(np.where(p.packet_first, np.arange(len(block)), 0))
    done = np.cumsum(duration)
    before = done - duration - (done[first] - duration[first])
    packet_start = start[block] + before
    queue = p.engine[block]
    index = np.arange(len(block), dtype=np.int64)
    return pd.DataFrame(
        {
            "start_ts": packet_start,
            "end_ts": packet_start + duration,
            "duration_ns": duration,
            "pcore_idx": 0,
            "id": PACKET_ID_BASE + index,
            "packet_idx": (index - first).astype(np.int32),
            "packet_aggregation_id": ids[block],
            "engine_idx": pd.Series(queue).map(hw.QUEUE_INDEX).to_numpy(),
            "read_bytes": p.packet_bytes,
            "write_bytes": p.packet_bytes,
            "transfer_bytes": p.packet_bytes,
            "throughput": p.packet_bytes / (duration * 1e-9),
            "queue_type": "data",
            "variable": p.variable[block],
            "queue_name": queue,
            "queue_idx": pd.Series(queue).map(hw.QUEUE_INDEX).to_numpy(),
            # A stable checksum-looking value: Knuth's multiplicative hash of (rank, packet).
            "crc": (index * 2_654_435_761 + rank * 40_503) % (1 << 32),
        }
    ).sort_values(["start_ts", "id"], kind="stable", ignore_index=True)


def _cc_ops(run, start, end, src, dst) -> pd.DataFrame:
    p = run.program
    rows = np.flatnonzero(p.kind == CC)
    ranks = run.ranks
    trigger = src[np.isin(dst, rows)]  # each collective has exactly one dependency: its trigger
    nbytes = p.nbytes[rows]
    duration = end[rows] - start[rows]
    algbw = nbytes / (duration * 1e-9)
    group = "[[" + ", ".join(str(r) for r in range(ranks)) + "]]"
    return pd.DataFrame(
        {
            "start_ts": start[rows],
            "end_ts": end[rows],
            "duration_ns": duration,
            "operation": p.opcode[rows],
            "algorithm": "Ring",
            "num_elements": p.elements[rows],
            "dtype": "bf16",
            "op_id": np.arange(len(rows), dtype=np.int64),
            "stream_id": 0,
            "stream_index": 0,
            "trigger_engine": "Pool",
            "input_size": nbytes,
            "output_size": nbytes,
            "algorithm_bandwidth": algbw,
            "bus_bandwidth": algbw * 2 * (ranks - 1) / max(ranks, 1),
            "trigger_start_ts": start[trigger],
            "cc_trigger_start_delay": start[rows] - start[trigger],
            "replica_group_id": 0,
            "replica_group": group,
        }
    )


def _instruction_deps(p, ids, src, dst) -> pd.Series:
    """Per instruction (by id), the ids of the instructions and DMA transfers it waits on."""
    instr = np.flatnonzero(p.kind == INSTR)
    position = np.full(len(p), -1)
    position[instr] = np.arange(len(instr))
    keep = (p.kind[dst] == INSTR) & (p.kind[src] != CC)
    order = np.argsort(position[dst[keep]], kind="stable")
    counts = np.bincount(position[dst[keep]], minlength=len(instr))
    lists = np.split(ids[src[keep]][order], np.cumsum(counts)[:-1])
    return pd.Series(lists, index=ids[instr])
