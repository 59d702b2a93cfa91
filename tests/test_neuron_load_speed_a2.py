"""Loading and graph fast paths (issue 16, second pass) give what the plain paths gave.

``sort_orders.break_ties`` must order like ``np.lexsort`` (the reference here), ties of both keys in index
order; assembly copies each event column once and keeps every value, dtype and category of the
parts; the predecessor CSR counts edges per destination.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracediag.graph.dependencies import build_graph
from tracediag.graph.sort_orders import break_ties
from tracediag.model import schema as S
from tracediag.model.assembly import TRACK_KIND_COL, TRACK_LABEL, RankPart, assemble


def test_break_ties_is_lexsort():
    rng = np.random.default_rng(16)
    for size, key_span, minor_span in [
        (1, 1, 1),
        (2, 1, 1),
        (50, 3, 2),
        (1000, 40, 5),
        (999, 1000, 3),
    ]:
        key = rng.integers(0, key_span, size).astype(np.int64)
        minor = rng.integers(-2, minor_span, size).astype(np.int64)
        np.testing.assert_array_equal(break_ties(key, minor), np.lexsort((minor, key)))


def test_break_ties_written_out():
    # Keys 5,1,5,1,5 with minors 9,0,3,0,3: the 1s (rows 1, 3) tie on both keys and keep index
    # order; among the 5s, minor 3 (rows 2, 4) before 9 (row 0).
    key = np.array([5, 1, 5, 1, 5], dtype=np.int64)
    minor = np.array([9, 0, 3, 0, 3], dtype=np.int64)
    assert break_ties(key, minor).tolist() == [1, 3, 2, 4, 0]


def _part(rank: int, n: int, extra: dict) -> RankPart:
    events = pd.DataFrame(
        {
            S.KIND: pd.Categorical(["compute"] * n),
            S.NAME: pd.Categorical([f"op{rank}_{i % 2}" for i in range(n)]),
            S.TS: np.arange(n, dtype=np.int64) * 10 + rank,
            S.DUR: np.full(n, 5, dtype=np.int64),
            TRACK_LABEL: pd.Categorical(["tensor"] * n),
            TRACK_KIND_COL: ["compute_engine"] * n,
            **extra,
        }
    )
    return RankPart(meta=S.RankMeta(rank=rank), events=events)


def test_assembly_columns_copied_once_with_values_kept():
    parts = [
        _part(1, 2, {S.BYTES: np.array([7.0, 8.0]), "src_id": np.array([4, 5], dtype=np.int64)}),
        _part(0, 3, {"src_id": pd.Series([1, 2, 3], dtype="int64")}),
    ]
    trace = assemble(parts)
    ev = trace.events
    assert ev[S.RANK].tolist() == [0, 0, 0, 1, 1]
    assert ev[S.TS].tolist() == [0, 10, 20, 1, 11]
    # Rank 0 has no bytes: NaN there; integers stay integers where every part has them.
    assert ev[S.BYTES].tolist()[3:] == [7.0, 8.0] and ev[S.BYTES].isna().tolist()[:3] == [True] * 3
    assert ev["src_id"].dtype == np.int64 and ev["src_id"].tolist() == [1, 2, 3, 4, 5]
    assert ev[S.NAME].astype(str).tolist() == ["op0_0", "op0_1", "op0_0", "op1_0", "op1_1"]
    assert isinstance(ev[S.NAME].dtype, pd.CategoricalDtype)
    # The frame keeps the parts' column arrays apart (no block of several columns).
    assert all(block.shape[0] == 1 for block in ev._mgr.blocks if block.ndim == 2)


def test_predecessor_counts_per_node():
    # One track, three events in a row, plus a dependency 0 -> 2: node 2 has two predecessors.
    parts = [_part(0, 3, {})]
    parts[0].edges = pd.DataFrame(
        {S.SRC: [0], S.DST: [2], S.EDGE_KIND: pd.Categorical(["dependency"])}
    )
    graph = build_graph(assemble(parts))
    assert graph.pred_ptr.tolist() == [0, 0, 1, 3]
    assert graph.bind.tolist() == [-1, 0, 1]  # program order ends later (15) than 0 (5)
