"""The display rows of one Neuron engine or DMA engine put back together where they hold one
serial stream.

A Neuron device trace draws each engine (``Tensor Engine``, ``DMA Engine 69``, ``qSyncIO0``) as
rows (``... - Row <k>``), and the reader keeps each row its own track (``tensor/row2``,
:mod:`perfetto_tracks`) because rows may hold slices that overlap. How the profiler fills its
rows is not documented: the first free row (overlapping slices only are moved down) or round
robin whatever the overlap. Split round robin, one engine's serial instruction stream becomes
several tracks, none ordered after the others, and the path waits on an "unexplained gap" where
the engine was simply running the previous instruction on another row. So the rows of an engine
whose slices never overlap (on that rank) are one track again, the engine's own label (row 0's);
an engine whose slices do overlap keeps its rows.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracediag.model import schema as S
from tracediag.model.assembly import TRACK_LABEL

#: An engine row's suffix (`/row<k>`), or a DMA queue row's (its ring, `/ring<k>`).
ROW_SUFFIX = r"/(?:row|ring)\d+$"
#: Kinds of work an engine row holds (instants and annotations are markers).
_WORK = ("compute", "dma")


def merge_serial_rows(events: pd.DataFrame, rank: np.ndarray) -> int:
    """Relabel, in place, the slices on the rows of an engine that never overlap on their rank
    with the engine's own label; returns how many slices moved."""
    labels = events[TRACK_LABEL].cat.categories.astype(str)
    base = labels.str.replace(ROW_SUFFIX, "", regex=True)
    if (base == labels).all():
        return 0
    base_code, bases = pd.factorize(base)
    is_row = np.asarray(base != labels)  # per label: a row k > 0 of its engine
    code = events[TRACK_LABEL].cat.codes.to_numpy()
    work = np.isin(events[S.KIND].to_numpy(dtype=object), _WORK) & (code >= 0)
    rows = np.flatnonzero(work)
    engine = base_code[code[rows]]
    key = pd.factorize(rank[rows])[0].astype(np.int64) * len(bases) + engine  # rank x engine
    ts = events[S.TS].to_numpy()[rows]
    end = ts + events[S.DUR].to_numpy()[rows]
    order = np.lexsort((ts, key))
    k, s, e = key[order], ts[order], end[order]
    # A slice overlaps when it starts before an earlier slice of its engine (and rank) ended.
    before = pd.Series(e).groupby(k).cummax().groupby(k).shift().to_numpy(dtype=np.float64)
    overlaps = np.zeros(int(k.max(initial=-1)) + 1, dtype=bool)
    np.logical_or.at(overlaps, k, s < np.nan_to_num(before, nan=-np.inf))
    moved = is_row[code[rows]] & ~overlaps[key]
    if not moved.any():
        return 0
    cats = pd.Index(labels)
    absent = np.unique(engine[moved][cats.get_indexer(bases[engine[moved]]) < 0])
    if len(absent):  # an engine seen only on rows k > 0: its own label is added
        cats = cats.append(pd.Index(bases[absent]))
    new_code = code.copy()
    new_code[rows[moved]] = cats.get_indexer(bases[engine[moved]])
    events[TRACK_LABEL] = pd.Categorical.from_codes(new_code, cats)
    return int(moved.sum())


def name_engine_queues(events: pd.DataFrame, rank: np.ndarray, queue: np.ndarray) -> int:
    """Relabel, in place, the DMA slices of a ``dma engine <n>`` track with the queue they name
    (``queue``: per slice, its queue annotation, None where absent), as the other Neuron
    readers label a ring's transfers: ``<queue>/ring<n>`` when several engines serve the queue
    on that rank, the queue alone when one does. Only an engine whose every slice names one
    and the same queue is relabelled (an engine serving several queues stays one serial
    track). Returns how many slices were relabelled."""
    labels = events[TRACK_LABEL].cat.categories.astype(str)
    number = pd.to_numeric(labels.str.extract(r"^dma engine (\d+)$")[0], errors="coerce")
    code = events[TRACK_LABEL].cat.codes.to_numpy()
    is_dma = (events[S.KIND] == "dma").to_numpy(dtype=bool) & (code >= 0)
    on_engine = is_dma & np.isfinite(number.to_numpy(dtype=np.float64))[np.maximum(code, 0)]
    rows = np.flatnonzero(on_engine)
    if not len(rows):
        return 0
    q = pd.Series(queue[rows], dtype=object)
    slices = pd.DataFrame({"rank": rank[rows], "engine": code[rows], "queue": q})
    per = slices.groupby(["rank", "engine"])["queue"].agg(["nunique", "count", "size", "first"])
    one = per[(per["nunique"] == 1) & (per["count"] == per["size"])].reset_index()
    if not len(one):
        return 0
    served = one.groupby(["rank", "first"])["engine"].transform("size").to_numpy()
    ring = number.to_numpy()[one["engine"].to_numpy()].astype(np.int64)
    one["label"] = np.where(
        served > 1, one["first"] + "/ring" + ring.astype(str).astype(object), one["first"]
    )
    # (rank, engine) as one integer per slice: no tuple per row.
    rank_code, ranks = pd.factorize(rank[rows])
    width = len(labels)
    per_slice = rank_code.astype(np.int64) * width + code[rows]
    per_engine = pd.Index(ranks).get_indexer(one["rank"]).astype(np.int64) * width + one["engine"]
    at = pd.Index(per_engine.to_numpy()).get_indexer(per_slice)
    hit = at >= 0
    new = pd.Index(one["label"].unique())
    cats = labels.append(new[~new.isin(labels)])
    new_code = code.copy()
    new_code[rows[hit]] = cats.get_indexer(one["label"].to_numpy()[at[hit]])
    events[TRACK_LABEL] = pd.Categorical.from_codes(new_code, cats)
    return int(hit.sum())
