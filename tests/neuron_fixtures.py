"""Small Neuron profiles written in a test's tmp_path (no public Neuron profiles exist).

Field names follow shared/reference/neuron-parquet-fields.md (schema reference 7.4.0) and
neuron-formats.md (legacy JSON) exactly.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

METADATA = {
    "profile_schema_version": ["7.4.0"],
    "neuroncore_idx": [1],
    "neuron_device_idx": [0],
    "instance_type": ["trn1.32xlarge"],
    "tensor_engine_clock_freq": [1.4],
    "dma_ddr_bandwidth": [1.0e11],
    "hbm_ddr_bandwidth": [4.0e11],
}

#: Instruction ids 10..13: a matmul, a vector op that triggers a DMA block, the pseudo trigger
#: of collective 7 (on the "Pool" engine = gpsimd), and a sync op without duration_ns.
INSTRUCTION = {
    "start_ts": [1000, 1100, 1200, 1300],
    "end_ts": [1100, 1150, 1210, 1320],
    "duration_ns": [100, 50, 10, None],
    "engine": ["Tensor", "vector", "Pool", "Sync"],
    "pcore_idx": [0, 0, 0, 0],
    "opcode": ["MATMUL", "TENSOR_TENSOR", "PSEUDO_TRIGGER_COLLECTIVE", "NOP"],
    "operands": ["a", "b", "c", "d"],
    "id": [10, 11, 12, 13],
    "pc": [0, 4, 8, 12],
    "bir_id": ["sg0000:1", "sg0000:2", "sg0000:3", "sg0000:4"],
    "hlo_name": ["dot.1", "add.2", None, None],
    "layer": ["layer_1", "layer_1", None, "layer_2"],
    "nki_source_location": ["k.py:3", None, None, None],
    "evt_wait_time_ns": [5, None, 0, 7],
    "raw_flops": [1_000_000, 2048, None, None],
    "hbm_read_bytes": [64, None, None, None],
    "hbm_write_bytes": [32, None, None, None],
}

#: Block 500 = packets 1 and 2 on qSyncIO0; block 501 = packet 3, no queue name (engine 3).
DMA_PACKET = {
    "start_ts": [1160, 1170, 1400],
    "end_ts": [1170, 1190, 1450],
    "duration_ns": [10, 20, 50],
    "id": [1, 2, 3],
    "packet_idx": [0, 1, 0],
    "packet_aggregation_id": [500, 500, 501],
    "engine_idx": [2, 2, 3],
    "read_bytes": [1024, 2048, 4096],
    "write_bytes": [1024, 2048, 4096],
    "transfer_bytes": [1024, 2048, 4096],
    "throughput": [1.0e11, 1.0e11, 8.2e10],
    "queue_type": ["input", "input", "data"],
    "variable": ["input0", "input0", "unknown"],
    "queue_name": ["qSyncIO0", "qSyncIO0", None],
    "crc": [1, 2, 3],
}

#: Op 7 has no Flow edge in (its trigger instruction 12 is found by engine and time);
#: op 8 is reached by a Flow edge from instruction 13.
CC_OP = {
    "start_ts": [1250, 1500],
    "end_ts": [1290, 1600],
    "duration_ns": [40, 100],
    "operation": ["AllReduce", "AllGather"],
    "algorithm": ["Ring", "Mesh"],
    "num_elements": [4096, 1024],
    "dtype": ["bf16", "fp32"],
    "op_id": [7, 8],
    "stream_id": [0, 1],
    "stream_index": [0, 0],
    "trigger_engine": ["Pool", "Sync"],
    "input_size": [8192, 4096],
    "output_size": [8192, 16384],
    "algorithm_bandwidth": [2.0e8, 1.6e8],
    "bus_bandwidth": [3.0e8, 1.2e8],
    "trigger_start_ts": [1200, 1330],
    "cc_trigger_start_delay": [50, 170],
    "replica_group_id": [0, 1],
    "replica_group": ["[[0, 1, 2, 3], [4, 5, 6, 7]]", "[[0, 1, 2, 3, 4, 5, 6, 7]]"],
}

FLOW = {
    "in_id": [11, 500, 3, 10, 99, 1, 13],
    "in_table": [
        "instruction",
        "dma_block",
        "dma_packet",
        "instruction",
        "instruction",
        "semaphore",
        "instruction",
    ],
    "out_id": [500, 13, 13, 11, 11, 11, 8],
    "out_table": [
        "dma_block",
        "instruction",
        "instruction",
        "instruction",
        "instruction",
        "instruction",
        "cc_op",
    ],
    "dependency_type": ["FLOW_DEPENDENCE"] * 7,
    "gap_time": [10, 110, 0, 0, 0, 0, 180],
}

SUMMARY = {
    "total_time": [1.5e-6],
    "tensor_engine_active_time": [1.0e-7],
    "dma_transfer_count": [3],
    "mfu_estimated_percent": [12.5],
}

ACTIVE_TIME = {
    "start_ts": [1000, 1050, 1100],
    "end_ts": [1040, 1100, 1150],
    "engine": ["tensor", "Tensor", "vector"],
    "pcore_idx": [0, 0, 0],
    "duration_ns": [40, 50, 50],
}

SEMAPHORE_UPDATE = {
    "timestamp": [1100, 1200, 1300],
    "id": ["S[1]", "S[2]", "S[1]"],
    "value": [1, 1, 2],
}

TABLES = {
    "Metadata": METADATA,
    "Instruction": INSTRUCTION,
    "DmaPacket": DMA_PACKET,
    "CcOp": CC_OP,
    "Flow": FLOW,
    "Summary": SUMMARY,
    "ActiveTime": ACTIVE_TIME,
    "SemaphoreUpdate": SEMAPHORE_UPDATE,
}


def write_table(
    directory: Path, name: str, columns: dict, parts: int = 1, types: dict | None = None
) -> list[Path]:
    """Write a table as ``name.parquet`` or split in ``parts`` files ``name_<k>.parquet``."""
    directory.mkdir(parents=True, exist_ok=True)
    table = pa.table({c: pa.array(v, type=(types or {}).get(c)) for c, v in columns.items()})
    if parts == 1:
        paths = [directory / f"{name}.parquet"]
        pq.write_table(table, paths[0])
        return paths
    step = -(-table.num_rows // parts)
    paths = []
    for k in range(parts):
        paths.append(directory / f"{name}_{k}.parquet")
        pq.write_table(table.slice(k * step, step), paths[-1])
    return paths


def write_profile(directory: Path, tables: dict | None = None, **overrides) -> Path:
    """Write a profile directory: the standard tables, with ``overrides`` replacing some of
    them (a table given as None is left out)."""
    for name, columns in {**(TABLES if tables is None else tables), **overrides}.items():
        if columns is not None:
            write_table(directory, name, columns)
    return directory


# ---- legacy JSON ------------------------------------------------------------------------------


def legacy_doc(scale: int = 1) -> dict:
    """A legacy ntff.json document; ``scale=1000`` writes times in picoseconds."""
    return {
        "metadata": [
            {"neuroncore_idx": 0, "neuron_device_idx": 2, "instance_type": "trn1.2xlarge"}
        ],
        "summary": [{"total_time": 4.0e-7, "dma_transfer_count": 1}],
        "instruction": [
            {
                "timestamp": 10261883214 * scale,
                "duration": 148 * scale,
                "label": "TensorMatrix",
                "subgroup": "Tensor",
                "hlo_name": "%add.1 = add(%dot, %custom-call.44)",
                "opcode": "MATMUL",
                "operands": "S[5] (Tensor)++@complete",
                "id": 100,
                "pc": 16,
                "inst_dep_ids": [],
                "layer": "layer_0",
                "evt_wait_time": 12 * scale,
                "hbm_read_bytes": 256,
                "hbm_write_bytes": 0,
            },
            {
                "timestamp": 10261883400 * scale,
                "duration": 60 * scale,
                "label": "Act",
                "subgroup": "Scalar",
                "opcode": "ACTIVATE",
                "id": 101,
                "pc": 20,
                "inst_dep_ids": [100, 555],
                "layer": "layer_0",
                "nki_source_location": "kernel.py:42",
            },
            {
                "timestamp": 10261883500 * scale,
                "duration": 100 * scale,
                "label": "Pool",
                "subgroup": None,
                "opcode": "PSEUDO_TRIGGER_COLLECTIVE",
                "id": 102,
                "pc": 24,
                "inst_dep_ids": [200],
            },
        ],
        "dma": [
            {
                "subgroup": "qSyncIO0",
                "transfer_size": 4096,
                "timestamp": 10261883370 * scale,
                "duration": 25 * scale,
                "id": 200,
                "trigger_id": 100,
            },
        ],
        "cc_op": [
            {
                "start_ts": 10261883550 * scale,
                "end_ts": 10261883610 * scale,
                "duration_ns": 60 * scale,
                "operation": "AllReduce",
                "algorithm": "Ring",
                "dtype": "bf16",
                "op_id": 3,
                "stream_id": 0,
                "trigger_engine": "Pool",
                "trigger_start_ts": 10261883500 * scale,
                "input_size": 1024,
                "output_size": 1024,
                "replica_group": "[[0, 1]]",
            },
        ],
        "cc_stream": [{"stream_id": 0}],
    }


def write_json(path: Path, doc: object) -> Path:
    """Write ``doc`` with orjson (gzip when the name ends in .gz)."""
    data = orjson.dumps(doc)
    if path.name.endswith(".gz"):
        import gzip

        data = gzip.compress(data)
    path.write_bytes(data)
    return path
