"""CcOp rows before they become collectives: replica groups the UI shows as ``[]``, and the
``stream_index`` of ops whose row lacks it (from ``CcStream``).

A CcOp's ``replica_group`` can be empty (``Replica group: []`` in the UI) while other ops of
the rank name theirs. An empty group takes the group the rank's ops of the same kind (operation
and sizes) on the same stream name: the same collective of the program (without a stream, as in
legacy JSON ``cc_ops``, of the same kind alone). Else it takes the group its stream's other ops
name, marked as inferred: a stream can serve ops of several groups, and assembly prefers the
groups other ranks state for the op (:mod:`tracediag.model.replica_groups`). The stream is
``stream_id``, unique within the profile (``stream_index`` is relative to the execution). An
empty group nothing names stays empty and is counted.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracediag.model import schema as S
from tracediag.model.replica_groups import GROUPS_INFERRED
from tracediag.parsers.neuron_common import column, ints


def _is_empty(groups: pd.Series) -> np.ndarray:
    """Groups written as ``[]`` (a missing group is not given at all: it stays missing)."""
    text = groups.astype("string")
    flat = text.str.replace(r"[\s\[\]]", "", regex=True)
    return (text.notna() & (flat == "")).to_numpy(dtype=bool)


def fill_empty_groups(cc: pd.DataFrame, meta: S.RankMeta) -> pd.DataFrame:
    """``cc`` with empty replica groups filled from the rank's other ops (see module)."""
    groups = column(cc, "replica_group")
    if groups is None or not len(cc):
        return cc
    empty = _is_empty(groups)
    if not empty.any():
        return cc
    # stream_id is unique within the profile (stream_index repeats in every execution).
    stream, valid = ints(column(cc, "stream_id"), len(cc))
    kind = _kinds(cc)
    text = groups.astype("string")
    # First from the ops of the same kind (operation and sizes) on the stream: the same
    # collective of the program; then from the stream's other ops, which may serve another
    # group (marked as inferred: assembly prefers the groups other ranks state).
    by_kind = np.where(valid, stream, -1) * (int(kind.max()) + 1) + kind
    fill, filled_kind = _fill_from(text, empty, by_kind)
    fill_stream, filled_stream = _fill_from(text, empty & ~filled_kind & valid, stream)
    fill[filled_stream] = fill_stream[filled_stream]
    filled = filled_kind | filled_stream
    out = text.to_numpy(dtype=object)
    out[filled] = fill[filled]
    cc = cc.copy()
    cc["replica_group"] = pd.Categorical(out)
    cc[GROUPS_INFERRED] = filled_stream
    meta.count("CcOp: empty replica group taken from its stream's other ops", int(filled.sum()))
    meta.count(
        "CcOp: empty replica group, no op of its stream names one", int((empty & ~filled).sum())
    )
    return cc


def _fill_from(text: pd.Series, empty: np.ndarray, key: np.ndarray):
    """Per row: the group most rows of its ``key`` name (None where none does), and where an
    ``empty`` row takes one."""
    naming = ~empty & ~_is_empty(text) & text.notna().to_numpy()
    named = pd.Series(text[naming].to_numpy(), index=key[naming])
    common = (
        named.groupby(level=0).agg(lambda g: g.value_counts().index[0]) if len(named) else named
    )
    fill = pd.Series(key).map(common).to_numpy(dtype=object)
    return fill, empty & pd.notna(fill)


def _kinds(cc: pd.DataFrame) -> np.ndarray:
    """A code per (operation, input_size, output_size) of each row."""
    parts = [column(cc, c) for c in ("operation", "input_size", "output_size")]
    frame = pd.DataFrame({i: p.astype(str) for i, p in enumerate(parts) if p is not None})
    if frame.empty:
        return np.zeros(len(cc), dtype=np.int64)
    return frame.groupby(list(frame.columns), sort=False).ngroup().to_numpy(dtype=np.int64)


def stream_indices(
    cc: pd.DataFrame, streams: pd.DataFrame | None, meta: S.RankMeta
) -> pd.DataFrame:
    """``cc`` with ``stream_index`` taken from ``CcStream`` (``stream_id`` -> ``stream_index``)
    where a row lacks it: the index, relative to the execution, is what matches an op across
    ranks; the profile-wide ``stream_id`` need not be equal on every rank."""
    if streams is None or not {"stream_id", "stream_index"} <= set(streams.columns):
        return cc
    index, ivalid = ints(column(cc, "stream_index"), len(cc))
    if ivalid.all():
        return cc
    sid, svalid = ints(streams["stream_id"], len(streams))
    sidx, xvalid = ints(streams["stream_index"], len(streams))
    table = pd.Series(sidx[svalid & xvalid], index=sid[svalid & xvalid])
    table = table[~table.index.duplicated()]
    stream, valid = ints(column(cc, "stream_id"), len(cc))
    found = pd.Series(stream).map(table).to_numpy(dtype=np.float64, na_value=np.nan)
    take = ~ivalid & valid & np.isfinite(found)
    if not take.any():
        return cc
    cc = cc.copy()
    filled = np.where(take, found, index).astype(np.int64)
    cc["stream_index"] = pd.arrays.IntegerArray(filled, ~(ivalid | take))
    meta.count("CcOp: stream_index taken from CcStream", int(take.sum()))
    return cc
