"""Reader of the Chrome trace-event JSON our own export writes (``tracediag export -o
x.trace.json.gz``, :mod:`tracediag.export.chrome_trace`): one file of every rank, one process
id per rank, the top-level ``tracediag`` key holding what the format has no place for.

The events' names and exact times come from their ``X`` events (in the order written: the
event ids); their kind, track, fields, the tracks, the dependencies, the collectives and each
rank's meta from the ``tracediag`` key (:mod:`tracediag.model.own_export`). The findings'
process and the critical path's flow arrows are the diagnosis, not the job: left out.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from tracediag.model import own_export
from tracediag.model import schema as S
from tracediag.model.assembly import (
    TRACK_CLOCK,
    TRACK_DEVICE,
    TRACK_ENGINE,
    TRACK_KIND_COL,
    TRACK_LABEL,
    RankPart,
)
from tracediag.model.errors import TraceInputError
from tracediag.parsers.chrome_columns import EventColumns
from tracediag.parsers.chrome_events import tabulate

KEY = "tracediag"
FORMAT = "chrome-json"


def is_ours(metadata: dict) -> bool:
    """The document carries a ``tracediag`` key of a schema this reader knows."""
    return own_export.ranks_of(metadata.get(KEY)) is not None


def _text(column: dict, rows: np.ndarray | None = None) -> np.ndarray:
    """A ``{"values", "codes"}`` column as objects (None where missing)."""
    values = np.array([*map(str, column["values"]), None], dtype=object)
    codes = np.asarray(column["codes"], dtype=np.int64)
    return values[codes if rows is None else codes[rows]]


def _numbers(values) -> np.ndarray:
    return np.array(values, dtype=np.float64)  # JSON null (NaN when written) -> NaN


def read_parts(path: Path, columns: EventColumns) -> list[RankPart]:
    """One part per rank of our own export (see the module docstring)."""
    block = columns.metadata[KEY]
    table = tabulate(columns)
    sl = table.slices
    pids = {str(k): int(v) for k, v in block["pids"].items()}
    ev = block["events"]
    n = int(ev["n"])
    pid = sl["pid"].astype(str).to_numpy(dtype=object)
    mine = (sl["ph"].astype(str).to_numpy() == "X") & pd.Series(pid).isin(pids).to_numpy()
    sl = sl[mine].sort_values("pos", kind="stable")
    if len(sl) != n:
        raise TraceInputError(
            path, f"its 'tracediag' key describes {n} events, the file has {len(sl)}: edited?"
        )
    track = np.asarray(ev[S.TRACK], dtype=np.int64)
    tracks = block["tracks"]
    t_rank = np.asarray(tracks[S.RANK], dtype=np.int64)
    rank = t_rank[track]
    events = pd.DataFrame(
        {
            S.KIND: pd.Categorical(sl["cat"].astype(str).to_numpy(dtype=object)),
            S.NAME: pd.Categorical(sl["name"].astype(str).to_numpy(dtype=object)),
            S.TS: sl["ts_ns"].to_numpy(dtype=np.int64),
            S.DUR: sl["dur_ns"].to_numpy(dtype=np.int64),
            S.SRC_ID: np.asarray(ev[S.SRC_ID], dtype=np.int64),
            TRACK_LABEL: _text(tracks[S.TRACK_NAME], track),
            TRACK_KIND_COL: _text(tracks[S.TRACK_KIND], track),
            TRACK_ENGINE: _text(tracks[S.ENGINE], track),
            TRACK_DEVICE: _text(tracks[S.DEVICE], track),
            TRACK_CLOCK: _text(tracks[S.CLOCK], track),
        }
    )
    for col in (S.BYTES, S.FLOPS, S.WAIT, S.STEP, S.TRANSPOSE_FLOPS):
        if col in ev:
            events[col] = _numbers(ev[col])
    for col in (S.LAYER, S.OP, S.SOURCE, S.DTYPE):
        if col in ev:
            events[col] = pd.Categorical(_text(ev[col]))
    local = np.zeros(n, dtype=np.int64)  # each event's row within its rank
    order = np.argsort(rank, kind="stable")
    first = np.searchsorted(rank[order], rank[order])
    local[order] = np.arange(n) - first
    ed, co = block["edges"], block["collectives"]
    src = np.asarray(ed[S.SRC], dtype=np.int64)
    dst = np.asarray(ed[S.DST], dtype=np.int64)
    kind = _text(ed[S.EDGE_KIND])
    coll = pd.DataFrame(
        {
            c: _text(co[c]) if t == "object" else np.asarray(co[c], dtype=t)
            for c, t in S.COLLECTIVE_COLUMNS.items()
        }
    )
    coll[S.MATCH_KEY] = coll[S.COLL_KEY].astype(str)  # the instance, the same on every rank
    entries = own_export.ranks_of(block) or {}
    parts = []
    for r in np.unique(t_rank):  # a loop over ranks
        rows = np.flatnonzero(rank == r)
        meta = S.RankMeta(rank=int(r), sources=[str(path)], format=FORMAT)
        meta.info.update({"rank_source": "process id", "written_by": "tracediag export"})
        own_export.restore(meta, entries.get(str(int(r))))
        keep = (rank[src] == r) & (rank[dst] == r)
        edges = pd.DataFrame(
            {S.SRC: local[src[keep]], S.DST: local[dst[keep]], S.EDGE_KIND: kind[keep]}
        )
        c = coll[coll[S.RANK].to_numpy() == r].drop(columns=[S.COLL_KEY, S.RANK])
        c[S.EVENT] = local[c[S.EVENT].to_numpy(dtype=np.int64)]
        part_events = events.iloc[rows].reset_index(drop=True)
        parts.append(RankPart(meta, part_events, edges, c.reset_index(drop=True)))
    return parts
