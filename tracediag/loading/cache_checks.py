"""What a cache entry's tables must hold before the tool uses them (and before one is written).

Decoding (:mod:`tracediag.loading.cache_frames`) already guarantees each column is of the dtype
its manifest names; these checks hold the decoded tables to what the code reading them relies
on, so that a malformed or planted entry is a miss rather than a crash or a wrong result:

- an assembled trace: the canonical schema's columns with their exact dtypes (so that
  :func:`~tracediag.model.schema.validate` would change nothing), event ids as the row numbers,
  known event kinds, no negative duration, every track, edge end and collective event in range,
  a :class:`~tracediag.model.schema.RankMeta` for every rank that has events;
- a reader's part: int64 times and durations, and edge and collective row references within
  its events.

Every check is a vectorised pass (min/max, distinct ranks), a few milliseconds on millions
of events.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracediag.loading.cache_manifest import ManifestError
from tracediag.model import schema as S
from tracediag.model.assembly import RankPart


def check_item(item: RankPart | S.Trace) -> None:
    """ManifestError unless ``item``'s tables are what the tool relies on (module docstring)."""
    if isinstance(item, S.Trace):
        _check_trace(item)
        return
    _check_dtypes(item.events, {S.TS: "int64", S.DUR: "int64"}, required=True)
    n = len(item.events)
    for df, col in ((item.edges, S.SRC), (item.edges, S.DST), (item.collectives, S.EVENT)):
        if col in df.columns:
            _check_rows(df[col].to_numpy(), n, col)


def _check_trace(trace: S.Trace) -> None:
    ev, tr = trace.events, trace.tracks
    for df, columns, required in (
        (ev, S.EVENT_REQUIRED, True),
        (ev, S.EVENT_OPTIONAL, False),
        (tr, S.TRACK_COLUMNS, True),
        (trace.edges, S.EDGE_COLUMNS, True),
        (trace.collectives, S.COLLECTIVE_COLUMNS, True),
    ):
        _check_dtypes(df, columns, required)
    if type(ev.index) is not pd.RangeIndex or ev.index.start != 0 or ev.index.step != 1:
        raise ManifestError("events not numbered by row")
    if not set(ev[S.KIND].cat.categories) <= set(S.KINDS):
        raise ManifestError("unknown event kinds")
    if len(ev) and ev[S.DUR].to_numpy().min() < 0:
        raise ManifestError("negative event durations")
    _check_rows(ev[S.TRACK].to_numpy(), len(tr), "events' tracks")
    _check_rows(trace.edges[S.SRC].to_numpy(), len(ev), "edge sources")
    _check_rows(trace.edges[S.DST].to_numpy(), len(ev), "edge targets")
    _check_rows(trace.collectives[S.EVENT].to_numpy(), len(ev), "collective events")
    if not _ranks_have_meta(ev[S.RANK].to_numpy(), set(trace.meta)):
        raise ManifestError("events of ranks without meta")


def _check_rows(rows: np.ndarray, n: int, what: str) -> None:
    # One pass: seen unsigned, a negative row is huge, so the largest is below n only when
    # every row is in [0, n).
    if len(rows) and _unsigned(rows).max() >= n:
        raise ManifestError(f"{what} out of range")


def _unsigned(values: np.ndarray) -> np.ndarray:
    """The same memory read as unsigned integers of its width (no copy) where it holds signed
    ones; other dtypes as they are."""
    if values.dtype.kind == "i":
        return values.view(values.dtype.str.replace("i", "u"))
    return values


def _ranks_have_meta(ranks: np.ndarray, meta: set[int]) -> bool:
    """Every rank of the events has meta: two reductions when the meta covers every rank
    between the lowest and the highest (the usual numbering), else the distinct ranks."""
    if not len(ranks):
        return True
    lo, hi = int(ranks.min()), int(ranks.max())
    if hi - lo < 1_000_000 and all(r in meta for r in range(lo, hi + 1)):
        return True
    return _ranks(ranks) <= meta


def _ranks(ranks: np.ndarray) -> set[int]:
    """The distinct ranks: where the rank changes when events come rank by rank (as assembly
    writes them; two comparisons, no hashing), else a hash pass."""
    if not len(ranks):
        return set()
    if not (ranks[1:] < ranks[:-1]).any():
        starts = np.flatnonzero(ranks[1:] != ranks[:-1]) + 1
        return {int(ranks[0]), *ranks[starts].tolist()}
    return set(pd.unique(ranks).tolist())


def _check_dtypes(df: pd.DataFrame, columns: dict[str, str], required: bool) -> None:
    dtypes = dict(zip(df.columns.tolist(), df.dtypes.tolist(), strict=True))
    if len(dtypes) != df.shape[1]:
        raise ManifestError("repeated column labels")
    for col, want in columns.items():
        dtype = dtypes.get(col)
        if dtype is None:
            if required:
                raise ManifestError(f"no column {col!r}")
            continue
        ok = (
            isinstance(dtype, pd.CategoricalDtype)
            if want == "category"
            else isinstance(dtype, np.dtype) and dtype == np.dtype(want)
        )
        if not ok:
            raise ManifestError(f"column {col!r} is {dtype}, not {want}")
