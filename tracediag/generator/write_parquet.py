"""Neuron Explorer Parquet writer: one directory of tables per rank (``rank_<i>/``).

Columns and types follow ``neuron-parquet-fields.md`` (schema 7.4.0): integers are int64 except
the few documented as int32, numbers are float64, strings are strings, booleans are bool; optional
fields may be null. The Instruction table is split into ``Instruction_0.parquet``,
``Instruction_1.parquet``, ... when it exceeds ``split_rows`` rows, as Explorer splits large
tables.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from tracediag.generator.device_tables import RankTables
from tracediag.generator.summary import active_time, metadata, summary

#: Fields the schema documents as int32 (every other integer is int64).
INT32_FIELDS = {
    "packet_idx",
    "block_id",
    "read_num_sbuf_partitions",
    "write_num_sbuf_partitions",
    "ntff_version",
    "num_physical_cores",
    "num_dma_engines_per_neuroncore",
    "error_type_id",
}
#: Rows above which a table is written in parts (small for Instruction so that the samples
#: exercise readers' handling of split tables).
SPLIT_ROWS = {"Instruction": 150, "DmaPacket": 1_000_000}


def _arrow_type(name: str, series: pd.Series) -> pa.DataType:
    dtype = series.dtype
    if pd.api.types.is_bool_dtype(dtype):
        return pa.bool_()
    if pd.api.types.is_integer_dtype(dtype):
        return pa.int32() if name in INT32_FIELDS else pa.int64()
    if pd.api.types.is_float_dtype(dtype):
        return pa.float64()
    return pa.string()


def to_arrow(frame: pd.DataFrame) -> pa.Table:
    """A pyarrow table with the documented types and no pandas metadata."""
    arrays = [
        pa.array(frame[name], type=_arrow_type(name, frame[name]), from_pandas=True)
        for name in frame.columns
    ]
    return pa.Table.from_arrays(arrays, names=list(frame.columns))


def write_table(frame: pd.DataFrame, directory: Path, name: str) -> list[Path]:
    """Write one table, in parts when it exceeds its split threshold; return the files."""
    table = to_arrow(frame)
    limit = SPLIT_ROWS.get(name)
    if limit is None or table.num_rows <= limit:
        paths = [directory / f"{name}.parquet"]
        pq.write_table(table, paths[0], compression="zstd")
        return paths
    paths = []
    for part, offset in enumerate(range(0, table.num_rows, limit)):
        paths.append(directory / f"{name}_{part}.parquet")
        pq.write_table(table.slice(offset, limit), paths[-1], compression="zstd")
    return paths


def write_rank(tables: RankTables, directory: Path) -> list[Path]:
    """Write every table of one rank's device profile into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    cc_cores = "[" + ",".join(str(i) for i in range(6)) + "]"  # 6 CC-cores on Trn1
    frames = {
        "Instruction": tables.instructions,
        "DmaPacket": tables.dma_packets,
        "DmaPacketAggregated": tables.dma_blocks,
        "Flow": tables.flows,
        "CcOp": tables.cc_ops,
        "CcStream": pd.DataFrame({"stream_id": [0], "stream_index": [0], "cc_core_ids": cc_cores}),
        "ActiveTime": active_time(tables),
        "Summary": pd.DataFrame([summary(tables)]),
        "Metadata": pd.DataFrame([metadata(tables)]),
    }
    if tables.errors is not None:
        frames["Error"] = tables.errors
    paths = []
    for name, frame in frames.items():
        if len(frame):  # a table exists only when the profile has that activity
            paths += write_table(frame, directory, name)
    return paths
