"""Small canonical traces written by hand, for rule tests with exact numbers."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from tracediag.model import schema as S
from tracediag.model.assembly import RankPart, assemble

TRACK_KIND = {
    "sync": "compute_engine",
    "tensor": "compute_engine",
    "vector": "compute_engine",
    "scalar": "compute_engine",
    "gpsimd": "compute_engine",
    "cc": "cc_core",
}


@dataclass
class RankSpec:
    """Events of one rank: ``add`` returns the event's local index for edges."""

    rank: int
    rows: list[dict] = field(default_factory=list)
    edges: list[tuple[int, int, str]] = field(default_factory=list)
    colls: list[dict] = field(default_factory=list)
    hardware: str = "trn1.32xlarge"
    fmt: str = "neuron-parquet"

    def add(self, name, track, kind, start, end, **extra) -> int:
        tk = TRACK_KIND.get(
            track,
            "dma_queue"
            if kind == "dma"
            else "cpu_thread"
            if kind in ("host", "sync")
            else "gpu_stream",
        )
        engine = (
            track
            if tk == "compute_engine"
            else {"dma_queue": "dma", "cc_core": "cc", "cpu_thread": "cpu"}.get(tk, "gpu")
        )
        self.rows.append(
            {
                S.NAME: name,
                S.KIND: kind,
                S.TS: start,
                S.DUR: end - start,
                "track_label": track,
                "track_kind": tk,
                "track_engine": engine,
                **extra,
            }
        )
        return len(self.rows) - 1

    def dep(self, a: int, b: int, kind: str = "dependency") -> None:
        self.edges.append((a, b, kind))

    def collective(
        self, event: int, key: str, arrival: int, op: str = "AllReduce", nbytes: float = 1e6
    ) -> None:
        row = self.rows[event]
        self.colls.append(
            {
                S.EVENT: event,
                S.MATCH_KEY: key,
                S.COLL_OP: op,
                S.GROUP: "",
                S.SEQ: len(self.colls),
                S.BYTES: nbytes,
                S.ARRIVAL: arrival,
                S.START: row[S.TS],
                S.END: row[S.TS] + row[S.DUR],
            }
        )

    def part(self) -> RankPart:
        events = pd.DataFrame(self.rows)
        events[S.TS] = events[S.TS].astype(np.int64)
        events[S.DUR] = events[S.DUR].astype(np.int64)
        edges = (
            pd.DataFrame(self.edges, columns=[S.SRC, S.DST, S.EDGE_KIND])
            if self.edges
            else S.empty_frame(S.EDGE_COLUMNS)
        )
        part = RankPart(
            meta=S.RankMeta(
                rank=self.rank,
                sources=[f"rank{self.rank}"],
                format=self.fmt,
                hardware=self.hardware,
            ),
            events=events,
            edges=edges,
        )
        if self.colls:
            part.collectives = pd.DataFrame(self.colls)
        return part


def build(*specs: RankSpec) -> S.Trace:
    """Assemble the ranks into a validated trace (already on one clock: no alignment)."""
    return assemble([s.part() for s in specs])


def matmul_chain(specs: list[tuple[str, int, float]], hardware: str = "trn1.32xlarge") -> RankSpec:
    """A chain of tensor-engine matmuls on rank 0: (dtype, duration ns, flops) each, one layer
    each, each depending on the one before."""
    spec = RankSpec(0, hardware=hardware)
    t, prev = 0, None
    for k, (dtype, dur, flops) in enumerate(specs):
        mm = spec.add(
            "MATMUL", "tensor", "compute", t, t + dur, layer=f"layer_{k}", flops=flops, dtype=dtype
        )
        if prev is not None:
            spec.dep(prev, mm)
        prev, t = mm, t + dur
    return spec
