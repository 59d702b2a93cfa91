"""The two-rank step of shared/design/critical-path-example.md as a canonical trace."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracediag.model import schema as S
from tracediag.model.assembly import RankPart, assemble

# (name, track, kind, start, end)
_EVENTS = [
    ("trig0", "sync", "compute", 0, 5),
    ("d0", "q0", "dma", 20, 120),
    ("m1", "tensor", "compute", 120, 320),
    ("v1", "vector", "compute", 320, 420),
    ("AR", "cc", "collective", 570, 670),
    ("m2", "tensor", "compute", 680, 780),
]
# (src, dst, kind) by name
_EDGES = [
    ("trig0", "d0", "dma_trigger"),
    ("d0", "m1", "dependency"),
    ("m1", "v1", "dependency"),
    ("v1", "AR", "dependency"),
    ("AR", "m2", "dependency"),
]
_TRACK_KIND = {
    "sync": "compute_engine",
    "tensor": "compute_engine",
    "vector": "compute_engine",
    "q0": "dma_queue",
    "cc": "cc_core",
}
_ENGINE = {"sync": "sync", "tensor": "tensor", "vector": "vector", "q0": "dma", "cc": "cc"}


def rank_part(rank: int, slow_vector_end: int | None = None, offset: int = 0) -> RankPart:
    """One rank of the example; ``slow_vector_end`` makes v1 end later (the straggler)."""
    rows = []
    for name, track, kind, start, end in _EVENTS:
        if name == "v1" and slow_vector_end is not None:
            end = slow_vector_end
        rows.append((name, track, kind, start + offset, end - start))
    names = [r[0] for r in rows]
    events = pd.DataFrame(
        {
            S.NAME: names,
            S.KIND: [r[2] for r in rows],
            S.TS: np.array([r[3] for r in rows], dtype=np.int64),
            S.DUR: np.array([r[4] for r in rows], dtype=np.int64),
            "track_label": [r[1] for r in rows],
            "track_kind": [_TRACK_KIND[r[1]] for r in rows],
            "track_engine": [_ENGINE[r[1]] for r in rows],
        }
    )
    idx = {n: i for i, n in enumerate(names)}
    edges = pd.DataFrame(
        {
            S.SRC: [idx[a] for a, _, _ in _EDGES],
            S.DST: [idx[b] for _, b, _ in _EDGES],
            S.EDGE_KIND: [k for _, _, k in _EDGES],
        }
    )
    arrival = (slow_vector_end if slow_vector_end is not None else 420) + offset
    coll = pd.DataFrame(
        {
            S.EVENT: [idx["AR"]],
            S.MATCH_KEY: ["AR"],
            S.COLL_OP: ["AllReduce"],
            S.GROUP: ["0,1"],
            S.SEQ: [0],
            S.BYTES: [1024.0],
            S.ARRIVAL: [arrival],
            S.START: [570 + offset],
            S.END: [670 + offset],
        }
    )
    meta = S.RankMeta(rank=rank, sources=[f"example rank {rank}"], format="example")
    return RankPart(meta=meta, events=events, edges=edges, collectives=coll)


def example_trace(offset_rank1: int = 0) -> S.Trace:
    """Both ranks; rank 1's clock may be shifted by ``offset_rank1`` ns."""
    return assemble([rank_part(0), rank_part(1, slow_vector_end=570, offset=offset_rank1)])
