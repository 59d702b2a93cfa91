"""The columnar fast paths of loading (issue 16) give what the per-row paths gave.

Text read from Parquet's dictionary pages becomes the Categorical that decoding and re-encoding
gave (distinct values in order of first appearance, nulls missing); integers become ``Int64``;
queue engines are matched per distinct queue name; assembly recodes edge kinds and track
attributes without a string per row. Expected values are written out by hand.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from tracediag.model import schema as S
from tracediag.model.assembly import (
    TRACK_ENGINE,
    TRACK_KIND_COL,
    TRACK_LABEL,
    RankPart,
    assemble,
)
from tracediag.parsers.neuron_dma_triggers import _queue_engines
from tracediag.parsers.neuron_parquet_tables import read_table, table_files


def _write(path, table: pa.Table) -> None:
    pq.write_table(table, path)


def test_text_categories_in_first_appearance_order(tmp_path):
    # A dictionary the writer sorted ("a" first) though "zeta" appears first in the rows.
    engine = pa.DictionaryArray.from_arrays(
        pa.array([2, 0, None, 2, 1], pa.int32()), pa.array(["a", "m", "zeta"])
    )
    _write(
        tmp_path / "Instruction.parquet",
        pa.table({"start_ts": pa.array([5, None, 7, 8, 2**64 - 1], pa.uint64()), "engine": engine}),
    )
    df = read_table(table_files(tmp_path)["Instruction"], ["start_ts", "engine"])
    assert list(df["engine"].cat.categories) == ["zeta", "a", "m"]
    assert df["engine"].cat.codes.tolist() == [0, 1, -1, 0, 2]
    assert str(df["start_ts"].dtype) == "Int64"
    assert df["start_ts"].isna().tolist() == [False, True, False, False, False]
    assert df["start_ts"].iloc[4] == -1  # an unsigned 64-bit id wraps, as the device writes it
    assert df["start_ts"].iloc[3] == 8


def test_parts_with_different_dictionaries(tmp_path):
    _write(tmp_path / "Instruction_0.parquet", pa.table({"start_ts": [1, 2], "op": ["b", "a"]}))
    _write(
        tmp_path / "Instruction_1.parquet",
        pa.table({"start_ts": [3, 4, 5], "op": ["c", None, "a"]}),
    )
    _write(
        tmp_path / "Instruction_2.parquet",
        pa.table({"start_ts": [6], "op": pa.array([None], pa.null())}),
    )
    df = read_table(table_files(tmp_path)["Instruction"], ["start_ts", "op"])
    assert df["start_ts"].tolist() == [1, 2, 3, 4, 5, 6]
    assert list(df["op"].cat.categories) == ["b", "a", "c"]
    assert df["op"].cat.codes.tolist() == [0, 1, 2, -1, 1, -1]


def test_queue_engines_per_distinct_name():
    names = ["qSyncIO0", "qScalarSpill-Q1", None, "qSyncIO0", "qVectorX", "ring7"]
    expected_codes = [0, 1, -1, 0, 2, 3]
    expected_engines = ["sync", "scalar", "unknown", "sync", "vector", "unknown"]
    for column in (pd.Series(names, dtype="category"), pd.Series(names, dtype=object)):
        codes, engines = _queue_engines(column, len(names))
        assert codes.tolist() == expected_codes
        assert list(engines) == expected_engines
    codes, engines = _queue_engines(None, 2)
    assert codes.tolist() == [-1, -1] and list(engines) == ["unknown", "unknown"]


def _part(rank: int, labels: list[str], kinds: list[str]) -> RankPart:
    n = len(labels)
    events = pd.DataFrame(
        {
            S.KIND: pd.Categorical(["compute"] * n),
            S.NAME: pd.Categorical([f"op{i}" for i in range(n)]),
            S.TS: np.arange(n, dtype=np.int64) * 10,
            S.DUR: np.full(n, 5, dtype=np.int64),
            TRACK_LABEL: pd.Categorical(labels),
            TRACK_KIND_COL: pd.Categorical(["compute_engine"] * n),
            TRACK_ENGINE: pd.Categorical([lab.split("/")[0] for lab in labels]),
        }
    )
    edges = pd.DataFrame(
        {
            S.SRC: np.arange(len(kinds), dtype=np.int64),
            S.DST: np.arange(len(kinds), dtype=np.int64) + 1,
            S.EDGE_KIND: pd.Categorical(kinds),
        }
    )
    return RankPart(meta=S.RankMeta(rank=rank), events=events, edges=edges)


def test_assembly_edge_kinds_and_tracks():
    parts = [
        _part(1, ["vector", "tensor", "vector"], ["dma_trigger", "weird"]),
        _part(0, ["tensor", "tensor/pcore1", "tensor"], ["dependency", "dependency"]),
    ]
    trace = assemble(parts)
    # Rank 0 first: its edges, then rank 1's shifted by rank 0's 3 events; "weird" is missing.
    assert trace.edges[S.SRC].tolist() == [0, 1, 3, 4]
    assert trace.edges[S.DST].tolist() == [1, 2, 4, 5]
    assert trace.edges[S.EDGE_KIND].astype(object).tolist()[:3] == [
        "dependency",
        "dependency",
        "dma_trigger",
    ]
    assert pd.isna(trace.edges[S.EDGE_KIND].iloc[3])
    assert list(trace.edges[S.EDGE_KIND].cat.categories) == list(S.EDGE_KINDS)
    # Tracks sorted by label within a rank, with the engine of their first event.
    assert trace.tracks[S.RANK].tolist() == [0, 0, 1, 1]
    assert trace.tracks[S.TRACK_NAME].tolist() == ["tensor", "tensor/pcore1", "tensor", "vector"]
    assert trace.tracks[S.ENGINE].tolist() == ["tensor", "tensor", "tensor", "vector"]
    assert trace.tracks[S.CLOCK].tolist() == ["rank0", "rank0", "rank1", "rank1"]
    assert trace.events[S.TRACK].tolist() == [0, 1, 0, 3, 2, 3]
