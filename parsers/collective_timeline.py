"""Reader of our collective timeline format (JSON Lines; docs/formats-collective-timeline.md):
one record per collective instance per rank, for tools tracediag does not read natively.

The file is parsed columnar by Arrow's JSON reader (no Python object per record). Every rank
becomes a part with one ``collective`` event per record on a ``cc_core`` track per communicator
(or group), and one collective row whose match key is ``"{communicator or group}|{op}|{seq}"``.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import orjson
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from tracediag.io import files as fileio
from tracediag.model import schema as S
from tracediag.model.assembly import (
    TRACK_DEVICE,
    TRACK_ENGINE,
    TRACK_KIND_COL,
    TRACK_LABEL,
    RankPart,
)
from tracediag.model.errors import TraceInputError
from tracediag.parsers.neuron_events import TRIGGER_TS
from tracediag.parsers.neuron_part import Piece, finish_part

FORMAT = "collective-timeline"
HEADER = "tracediag-collective-timeline"
REQUIRED = ("rank", "op", "seq", "start_ns", "end_ns")
_INTEGERS = ("rank", "seq", "start_ns", "end_ns", "arrival_ns")
_TEXTS = ("op", "communicator", "name", "dtype", "algorithm")


def sniff(path: Path) -> bool:
    """A file whose first line is our header, or a record holding every required key."""
    path = Path(path)
    if not path.is_file():
        return False
    try:
        first = fileio.head(path, 1 << 14).split(b"\n", 1)[0]
        record = orjson.loads(first)
    except (orjson.JSONDecodeError, TraceInputError):
        return False
    if not isinstance(record, dict):
        return False
    return record.get("format") == HEADER or all(k in record for k in REQUIRED)


def read(path: Path) -> list[RankPart]:
    """One part per rank of the file (see the module docstring)."""
    path = Path(path)
    table = _table(path)
    counts: dict[str, int] = {}
    frame = _columns(table, path, counts)
    parts = []
    for rank, rows in frame.groupby("rank", sort=True).indices.items():  # a loop over ranks
        meta = S.RankMeta(rank=int(rank), sources=[str(path)], format=FORMAT)
        meta.info["rank_source"] = "record"
        if not parts:
            for reason, n in counts.items():
                meta.count(reason, n)
        mine = frame.iloc[rows].sort_values("start_ns", kind="stable").reset_index(drop=True)
        events, collectives = _rank_tables(mine)
        parts.append(finish_part(meta, [Piece("records", events)], [], collectives))
    return parts


def _table(path: Path) -> pa.Table:
    data = fileio.read_bytes(path)
    try:
        return pj.read_json(pa.BufferReader(data))
    except pa.ArrowInvalid as exc:
        raise TraceInputError(path, f"not a valid collective timeline: {exc}") from None


def _bad_utf8(path: Path) -> TraceInputError:
    """The error for a file whose field names are not UTF-8, with the first bad byte's offset
    (the file is decoded only on this error path)."""
    try:
        fileio.read_bytes(path).decode("utf-8")
    except UnicodeDecodeError as exc:
        return TraceInputError(path, f"invalid UTF-8 at byte {exc.start}")
    return TraceInputError(path, "invalid UTF-8")


def _columns(table: pa.Table, path: Path, counts: dict[str, int]) -> pd.DataFrame:
    """The records as typed columns; the header and records missing a required value go."""
    try:
        names = set(table.column_names)
    except UnicodeDecodeError:  # Arrow validates field names only when they are decoded
        raise _bad_utf8(path) from None
    missing = [k for k in REQUIRED if k not in names]
    if missing:
        raise TraceInputError(path, f"no record has the required field(s) {', '.join(missing)}")
    out = {}
    for key in (*_INTEGERS, "bytes"):
        if key in names:
            col = table.column(key)
            if key == "bytes" and pa.types.is_nested(col.type):
                raise TraceInputError(path, f"field 'bytes' must be a number (found {col.type})")
            if not (pa.types.is_integer(col.type) or pa.types.is_null(col.type) or key == "bytes"):
                raise TraceInputError(path, f"field {key!r} must be an integer (found {col.type})")
            out[key] = col.to_pandas(types_mapper={pa.int64(): pd.Int64Dtype()}.get)
    for key in _TEXTS:
        if key in names and pa.types.is_nested(table.column(key).type):
            raise TraceInputError(path, f"field {key!r} must be text (found {table[key].type})")
        out[key] = table.column(key).to_pandas() if key in names else None
    if "group" in names and not _is_group_type(table.column("group").type):
        raise TraceInputError(
            path, f"field 'group' must be a list of ranks or text (found {table['group'].type})"
        )
    out["group"] = _groups(table.column("group")) if "group" in names else None
    frame = pd.DataFrame({k: v for k, v in out.items() if v is not None})
    header = frame[list(REQUIRED)].isna().all(axis=1)
    if "format" in names:
        header &= table.column("format").to_pandas().eq(HEADER).to_numpy()
    else:
        header[:] = False
    incomplete = frame[list(REQUIRED)].isna().any(axis=1) & ~header
    if incomplete.any():
        counts["records missing a required value: skipped"] = int(incomplete.sum())
    return frame[~header & ~incomplete].reset_index(drop=True)


def _is_group_type(kind: pa.DataType) -> bool:
    """Text ("0,1,2,3"), or a list of integer ranks (a list of nulls: empty lists)."""
    if pa.types.is_list(kind):
        return pa.types.is_integer(kind.value_type) or pa.types.is_null(kind.value_type)
    return pa.types.is_string(kind) or pa.types.is_null(kind)


def _groups(col: pa.ChunkedArray) -> pd.Series:
    """Groups as canonical sorted member lists ``"0,1,2,3"``, formatted per distinct group."""
    if pa.types.is_list(col.type):  # [0, 1, 2, 3] -> "0,1,2,3" in Arrow, not per row
        col = pc.binary_join(pc.cast(col, pa.list_(pa.string())), ",")
    codes, uniq = pd.factorize(col.to_pandas())
    canonical = [
        ",".join(str(m) for m in sorted(int(x) for x in re.findall(r"-?\d+", str(u)))) for u in uniq
    ]
    return pd.Series(np.array(canonical + [""], dtype=object)[codes])


def _rank_tables(f: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    n = len(f)
    group = f["group"].fillna("") if "group" in f else pd.Series([""] * n)
    comm = f["communicator"].fillna("") if "communicator" in f else pd.Series([""] * n)
    scope = comm.where(comm != "", group).astype(str)
    op = f["op"].astype(str)
    start = f["start_ns"].to_numpy(dtype=np.int64)
    name = f["name"].fillna(op) if "name" in f else op
    nbytes = (
        pd.to_numeric(f["bytes"], errors="coerce").to_numpy(np.float64)
        if "bytes" in f
        else np.full(n, np.nan)
    )
    label = "collectives " + scope.where(scope != "", "?")
    events = pd.DataFrame(
        {
            S.KIND: pd.Categorical(["collective"] * n),
            S.NAME: pd.Categorical(name),
            S.TS: start,
            S.DUR: f["end_ns"].to_numpy(dtype=np.int64) - start,
            S.BYTES: nbytes,
            S.SRC_ID: f["seq"].to_numpy(dtype=np.int64),
            TRACK_LABEL: pd.Categorical(label),
            TRACK_KIND_COL: pd.Categorical(["cc_core"] * n),
            TRACK_ENGINE: pd.Categorical(["cc"] * n),
            TRACK_DEVICE: pd.Categorical([""] * n),
        }
    )
    arrival = (
        f["arrival_ns"] if "arrival_ns" in f else pd.Series(pd.NA, index=f.index, dtype="Int64")
    )

    def text(key: str) -> np.ndarray:
        return (
            f[key].fillna("").astype(str).to_numpy(dtype=object)
            if key in f
            else np.full(n, "", dtype=object)
        )

    collectives = pd.DataFrame(
        {
            S.EVENT: np.arange(n, dtype=np.int64),
            S.MATCH_KEY: (scope + "|" + op + "|" + f["seq"].astype(str)).to_numpy(dtype=object),
            S.COLL_OP: op.to_numpy(dtype=object),
            S.GROUP: group.astype(str).to_numpy(dtype=object),
            S.SEQ: f["seq"].to_numpy(dtype=np.int64),
            S.BYTES: nbytes,
            S.ALGORITHM: text("algorithm"),
            S.ALGBW: np.full(n, np.nan),
            S.BUSBW: np.full(n, np.nan),
            S.DTYPE: text("dtype"),
            TRIGGER_TS: arrival.astype("Int64").array,
        }
    )
    return events, collectives
