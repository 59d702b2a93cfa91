"""Assemble parser output into one canonical :class:`~tracediag.model.schema.Trace`.

Parsers do not intern tracks or number events globally: each produces one :class:`RankPart` per
rank with *local* row numbers, and :func:`assemble` concatenates the parts, interns
``(rank, track label)`` into track ids, shifts edge and collective references, numbers collective
instances across ranks from the parsers' ``match_key`` and validates the result.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals

from tracediag.model import schema as S
from tracediag.model.part_arena import joined_view
from tracediag.model.replica_groups import split_by_replica_group
from tracediag.model.untriggered_receives import bind_untriggered

#: Extra columns a part's events carry to describe their track.
TRACK_LABEL = "track_label"
TRACK_KIND_COL = "track_kind"
TRACK_ENGINE = "track_engine"
TRACK_DEVICE = "track_device"
TRACK_CLOCK = "track_clock"


@dataclass
class RankPart:
    """One rank's tables as a parser produced them.

    ``events`` has the canonical event columns except ``rank``/``track``, plus ``track_label``
    (unique per serial resource within the rank), ``track_kind`` and optionally ``track_engine``,
    ``track_device`` and ``track_clock``. ``edges.src``/``edges.dst`` and ``collectives.event``
    are row positions in ``events``. ``collectives`` need not carry ``coll_key``.
    """

    meta: S.RankMeta
    events: pd.DataFrame
    edges: pd.DataFrame = field(default_factory=lambda: S.empty_frame(S.EDGE_COLUMNS))
    collectives: pd.DataFrame = field(
        default_factory=lambda: S.empty_frame(
            {k: v for k, v in S.COLLECTIVE_COLUMNS.items() if k not in (S.COLL_KEY, S.RANK)}
        )
    )


def sanitize_events(events: pd.DataFrame, meta: S.RankMeta, what: str = "events") -> pd.DataFrame:
    """Drop rows without a usable time and clamp negative durations, counting both in ``meta``.

    Returns the frame with a fresh RangeIndex; callers that hold row references must remap them
    with the returned frame's ``orig_row`` column (the row's position before sanitizing).
    """
    ts, dur = _as_float(events[S.TS]), _as_float(events[S.DUR])
    bad = ~np.isfinite(ts) | ~np.isfinite(dur) | (np.abs(ts) > 2**62) | (np.abs(dur) > 2**62)
    meta.count(f"{what}: dropped, no valid timestamp or duration", int(bad.sum()))
    neg = ~bad & (dur < 0)
    meta.count(f"{what}: negative duration clamped to 0", int(neg.sum()))
    out = events.assign(orig_row=np.arange(len(events)))
    if bad.any():  # selecting rows copies every column: only when some go
        out = out.loc[~bad].copy()
    out[S.TS] = _exact_int64(events[S.TS], ts)[~bad]
    out[S.DUR] = np.maximum(_exact_int64(events[S.DUR], dur)[~bad], 0)
    return out.reset_index(drop=True)


def _as_float(col: pd.Series) -> np.ndarray:
    """The column as float64, NaN where missing or not a number. ``to_numeric`` leaves numeric
    columns as they are (it only rebuilds a nullable one): skipped for them."""
    if pd.api.types.is_numeric_dtype(col.dtype) and not isinstance(col.dtype, pd.ArrowDtype):
        return col.to_numpy(dtype="float64")
    return pd.to_numeric(col, errors="coerce").to_numpy(dtype="float64")


def _exact_int64(col: pd.Series, as_float: np.ndarray) -> np.ndarray:
    """Integer columns keep their exact values: float64 cannot hold ns timestamps beyond 2**53."""
    if pd.api.types.is_integer_dtype(col.dtype):
        return col.to_numpy(dtype="int64", na_value=0)
    return np.where(np.isfinite(as_float), as_float, 0).astype("int64")


def _intern_tracks(parts: list[RankPart]) -> tuple[pd.DataFrame, list[np.ndarray]]:
    columns: dict[str, list] = {
        c: [] for c in (S.RANK, S.TRACK_NAME, S.TRACK_KIND, S.ENGINE, S.DEVICE, S.CLOCK)
    }
    codes_per_part = []
    for part in parts:
        ev = part.events
        # factorize works on Categorical codes: no string per row is compared.
        codes, uniq = pd.factorize(ev[TRACK_LABEL], sort=True)
        if (codes < 0).any():
            raise S.SchemaError("events without a track label")
        first = pd.Series(np.arange(len(codes))).groupby(codes).min().to_numpy()
        base = len(columns[S.RANK])
        n = len(first)

        columns[S.RANK] += [part.meta.rank] * n
        columns[S.TRACK_NAME] += [str(label) for label in uniq]
        columns[S.TRACK_KIND] += ev[TRACK_KIND_COL].iloc[first].tolist()
        # Each track's values at its first row, one gather per column (not one per track).
        columns[S.ENGINE] += _at_rows(ev, TRACK_ENGINE, first, "")
        columns[S.DEVICE] += _at_rows(ev, TRACK_DEVICE, first, "")
        columns[S.CLOCK] += _at_rows(ev, TRACK_CLOCK, first, f"rank{part.meta.rank}")
        codes_per_part.append(codes.astype("int32") + base)
    tracks = pd.DataFrame(columns) if columns[S.RANK] else S.empty_frame(S.TRACK_COLUMNS)
    if len(tracks):
        tracks[S.TRACK_KIND] = pd.Categorical(tracks[S.TRACK_KIND], categories=S.TRACK_KINDS)
    return tracks, codes_per_part


def _at_rows(events: pd.DataFrame, column: str, rows: np.ndarray, default) -> list:
    """``events[column]`` at ``rows`` as Python values; ``default`` each when it is absent."""
    if column not in events:
        return [default] * len(rows)
    return events[column].iloc[rows].tolist()


def _number_collectives(coll: pd.DataFrame) -> pd.DataFrame:
    """Give every collective instance one ``coll_key``, equal across the ranks that share it."""
    if not len(coll):
        coll[S.COLL_KEY] = pd.Series(dtype="int64")
        return coll
    keys = coll[S.MATCH_KEY].astype(str)
    # Order instances by their earliest end so keys read in time order.
    first_end = coll.groupby(keys, sort=False)[S.END].transform("min")
    order = pd.DataFrame({"k": keys, "e": first_end}).drop_duplicates("k").sort_values(["e", "k"])
    numbering = pd.Series(np.arange(len(order), dtype="int64"), index=order["k"].to_numpy())
    coll[S.COLL_KEY] = numbering.reindex(keys.to_numpy()).to_numpy()
    return coll


def assemble(parts: list[RankPart], inputs: list[S.InputFile] | None = None) -> S.Trace:
    """Concatenate per-rank parts into one validated canonical trace."""
    parts = sorted(parts, key=lambda p: p.meta.rank)
    seen: set[int] = set()
    for p in parts:
        if p.meta.rank in seen:
            raise S.SchemaError(f"rank {p.meta.rank} given twice")
        seen.add(p.meta.rank)
    tracks, track_codes = _intern_tracks(parts)
    ed_frames, co_frames = [], []
    offset = 0
    for part in parts:
        if len(part.edges):
            ed = part.edges[[S.SRC, S.DST, S.EDGE_KIND]].copy()
            ed[S.SRC] = ed[S.SRC].astype("int64") + offset
            ed[S.DST] = ed[S.DST].astype("int64") + offset
            ed_frames.append(ed)
        if len(part.collectives):
            co = part.collectives.copy()
            co[S.EVENT] = co[S.EVENT].astype("int64") + offset
            co[S.RANK] = np.int32(part.meta.rank)
            co_frames.append(co)
        offset += len(part.events)
    events = _concat_events(parts, track_codes)
    if ed_frames:
        edges = pd.concat([f.drop(columns=S.EDGE_KIND) for f in ed_frames], ignore_index=True)
        edges[S.EDGE_KIND] = _edge_kinds([f[S.EDGE_KIND] for f in ed_frames])
    else:
        edges = S.empty_frame(S.EDGE_COLUMNS)
        edges[S.EDGE_KIND] = pd.Categorical(edges[S.EDGE_KIND].astype(str), categories=S.EDGE_KINDS)
    if co_frames:
        coll = pd.concat(co_frames, ignore_index=True)
        for col, dtype in S.COLLECTIVE_COLUMNS.items():
            if col not in coll and col != S.COLL_KEY:
                coll[col] = _default(dtype, len(coll))
        coll = bind_untriggered(coll, {p.meta.rank: p.meta for p in parts})
        coll = split_by_replica_group(coll)
        coll = _number_collectives(coll)
        coll = coll[list(S.COLLECTIVE_COLUMNS)]
    else:
        coll = S.empty_frame(S.COLLECTIVE_COLUMNS)
    events[S.COLL_KEY] = np.int64(-1)
    if len(coll):
        events.loc[coll[S.EVENT].to_numpy(), S.COLL_KEY] = coll[S.COLL_KEY].to_numpy()
    trace = S.Trace(
        events=events,
        tracks=tracks,
        edges=edges,
        collectives=coll,
        meta={p.meta.rank: p.meta for p in parts},
        inputs=inputs or [],
    )
    return S.validate(trace)


def _edge_kinds(kinds: list[pd.Series]) -> pd.Categorical:
    """The parts' edge kinds as one Categorical over :data:`S.EDGE_KINDS` (another kind:
    missing), recoded once per distinct kind rather than through a string per edge."""
    codes = []
    for kind in kinds:
        if isinstance(kind.dtype, pd.CategoricalDtype):
            known = [str(c) for c in kind.cat.categories]
            lookup = np.array(
                [S.EDGE_KINDS.index(k) if k in S.EDGE_KINDS else -1 for k in known] + [-1],
                dtype=np.int8,
            )
            codes.append(lookup[kind.cat.codes.to_numpy()])
        else:
            codes.append(pd.Categorical(kind.astype(str), categories=S.EDGE_KINDS).codes)
    return pd.Categorical.from_codes(np.concatenate(codes), categories=S.EDGE_KINDS)


def _default(dtype: str, n: int):
    if dtype.startswith("int"):
        return np.full(n, -1, dtype=dtype)
    if dtype.startswith("float"):
        return np.full(n, np.nan)
    return np.full(n, "", dtype=object)


#: Columns a part's events carry for assembly only (its tracks), not kept in the trace.
_PART_ONLY = {TRACK_LABEL, TRACK_KIND_COL, TRACK_ENGINE, TRACK_DEVICE, TRACK_CLOCK, "orig_row"}
_CATEGORICAL = {S.KIND, S.NAME, S.LAYER, S.OP, S.SOURCE, S.DTYPE}


def _concat_events(parts: list[RankPart], track_codes: list[np.ndarray]) -> pd.DataFrame:
    """The parts' events one after another, with ``rank`` and ``track`` first, unioning
    categories so categorical columns stay categorical. Each column is copied once, from the
    parts' own columns (no per-part frame in between), and the frame is built without
    consolidating same-dtype columns into blocks (a second copy of every column)."""
    if not parts:
        return S.empty_frame({**S.EVENT_REQUIRED})
    frames = [p.events for p in parts]
    cols = list(dict.fromkeys(c for f in frames for c in f.columns if c not in _PART_ONLY))
    out = {
        S.RANK: np.concatenate([np.full(len(p.events), p.meta.rank, np.int32) for p in parts]),
        S.TRACK: np.concatenate(track_codes),
    }
    for col in cols:
        pieces = [f[col] if col in f else _absent(col, len(f)) for f in frames]
        if col in _CATEGORICAL:
            cats = [
                p
                if isinstance(p.dtype, pd.CategoricalDtype)
                else p.astype(object).astype("category")
                for p in pieces
            ]
            # Categories are unioned, codes recoded: no Python string per row.
            out[col] = union_categoricals(
                [c.cat.set_categories(c.cat.categories.astype(object)) for c in cats],
                ignore_order=True,
            )
        elif all(isinstance(p.dtype, np.dtype) and p.dtype == pieces[0].dtype for p in pieces):
            arrays = [p.to_numpy() for p in pieces]
            # Parts an arena gathered lie one after another already: no copy (part_arena).
            joined = joined_view(arrays)
            out[col] = joined if joined is not None else np.concatenate(arrays)
        else:
            out[col] = pd.concat(pieces, ignore_index=True)
    return pd.DataFrame(out, copy=False)


def _absent(col: str, n: int) -> pd.Series:
    """A column missing throughout a part: no value (a category without any, NaN or -1)."""
    if col in _CATEGORICAL:
        return pd.Series(pd.Categorical.from_codes(np.full(n, -1), pd.Index([], dtype=object)))
    dtype = S.EVENT_OPTIONAL.get(col, "float64")
    fill = np.nan if dtype in ("float64", "category") else -1
    return pd.Series(np.full(n, fill), dtype="float64" if fill is np.nan else dtype)
