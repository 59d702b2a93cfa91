"""Legacy Neuron device-profile JSON writer (``neuron-profile view --output-format json``).

One file per rank: an object of tables, each a list of row objects. ``instruction`` and ``dma``
rows carry nanosecond ``timestamp``/``duration`` on the rank's device clock; ``inst_dep_ids``
lists the ids of the instructions and DMA transfers a row waits on (a DMA row: its trigger).
``summary`` and ``metadata`` hold one object each (Summary times in seconds). ``cc_op`` is this
project's extension: the CcOp Parquet fields, so that collectives survive the legacy format.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson
import pandas as pd

from tracediag.generator.device_tables import RankTables
from tracediag.generator.summary import metadata, summary

SUBGROUP = {
    "tensor": "Tensor",
    "vector": "Vector",
    "scalar": "Scalar",
    "gpsimd": "GpSimd",
    "sync": "Sync",
}


def instruction_rows(tables: RankTables) -> pd.DataFrame:
    """The ``instruction`` table of one rank."""
    instr = tables.instructions
    return pd.DataFrame(
        {
            "timestamp": instr["start_ts"],
            "duration": instr["duration_ns"],
            "label": instr["timeline_track"],
            "subgroup": instr["engine"].map(SUBGROUP),
            "opcode": instr["opcode"],
            "hlo_name": instr["hlo_name"],
            "operands": instr["operands"],
            "id": instr["id"],
            "pc": instr["pc"],
            "inst_dep_ids": tables.instruction_deps.reindex(instr["id"]).to_numpy(),
            "layer": instr["layer"],
            "fully_qualified_subgraph": "/sg00",
            "elements": instr["tensor_elements"],
            "evt_wait_time": instr["evt_wait_time_ns"],
            "hbm_read_bytes": instr["hbm_read_bytes"],
            "hbm_write_bytes": instr["hbm_write_bytes"],
            "sbuf_read_bytes": instr["sbuf_read_bytes"],
            "sbuf_write_bytes": instr["sbuf_write_bytes"],
            "raw_flops": instr["raw_flops"],
            "adjusted_flops": instr["adjusted_flops"],
        }
    )


def dma_rows(tables: RankTables) -> pd.DataFrame:
    """The ``dma`` table of one rank: one row per DMA transfer."""
    blocks = tables.dma_blocks
    return pd.DataFrame(
        {
            "timestamp": blocks["start_ts"],
            "duration": blocks["duration_ns"],
            "subgroup": blocks["queue_name"],
            "transfer_size": blocks["transfer_bytes"],
            "id": blocks["id"],
            "inst_dep_ids": blocks["trigger"].to_numpy()[:, None].tolist(),
        }
    )


def rank_json(tables: RankTables) -> bytes:
    """The whole JSON document of one rank."""
    parts = {
        "instruction": instruction_rows(tables).to_json(orient="records"),
        "dma": dma_rows(tables).to_json(orient="records"),
        "cc_op": tables.cc_ops.to_json(orient="records"),
        "summary": orjson.dumps([summary(tables)]).decode(),
        "metadata": orjson.dumps([metadata(tables)]).decode(),
    }
    if tables.errors is not None:  # the Parquet Error fields (see parsers/neuron_errors.py)
        parts["error"] = tables.errors.to_json(orient="records")
    body = ",\n".join(f'"{name}": {text}' for name, text in parts.items())
    return ("{\n" + body + "\n}\n").encode()


def write_rank(tables: RankTables, path: Path, compress: bool = False) -> Path:
    """Write one rank's JSON to ``path`` (gzip, with a fixed header, when ``compress``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = rank_json(tables)
    if compress:
        # mtime=0 and no file name in the header: the same trace gives the same bytes.
        with (
            open(path, "wb") as raw,
            gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as f,
        ):
            f.write(data)
    else:
        path.write_bytes(data)
    return path
