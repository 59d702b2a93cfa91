"""Semaphore waits of a Neuron Perfetto device trace as ``dependency`` edges, by the Parquet rules.

What the trace holds (neuron-formats.md section 3; the official screenshot
``neuron-profiler2-perfetto-device.png``): the instruction fields as debug annotations of each
slice, among them ``operands`` (``S[5] (Tensor)++@complete ...``, and the waits,
``S[5] (Tensor)>=1``); one track per semaphore, named ``S[<n>] (<owner>)``, holding one
instant per update. The screenshot does not show an update's arguments; where an instant carries
``value`` (and ``update_source``), as the ``SemaphoreUpdate`` row it stands for does, that is
its value, else the k-th instant of a track is taken to set it to k (every update there is an
increment, ``sem_inc``: an inference). A DMA slice's ``semaphore_id`` annotation names the
semaphore its completion increments; a DMA slice without one (the screenshot's DMA arguments are
the legacy JSON row's: queue, size, times) increments the semaphore whose track is named after its
queue, ``S[10] (qSyncIO0)`` for a ``qSyncIO0`` transfer, where the rank has exactly one such
track: a DMA block's ``semaphore_id`` names its queue as the owner (``S[10] (qGpSimdPIO0)``,
profile-schema-reference ``DmaPacketAggregated``), an inference from that spelling.

These become the tables :func:`neuron_semaphores.semaphore_edges` reads for Parquet
(instructions with their text columns, DMA transfers with ``semaphore_id``, collectives, and the
instants as ``SemaphoreUpdate`` rows), one rank at a time, so both formats give the same edges.
The tracks are ``partial``: a semaphore with no track (the tool may show only some) is counted
from the increments the trace names, as a profile without a ``SemaphoreUpdate`` table is.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracediag.model import schema as S
from tracediag.parsers.neuron_semaphores import TEXT_COLUMNS
from tracediag.parsers.neuron_semaphores import semaphore_edges as table_edges
from tracediag.parsers.perfetto_annotations import index_of
from tracediag.parsers.perfetto_decode import (
    TYPE_COMPLETE,
    TYPE_INSTANT,
    TYPE_SLICE_BEGIN,
    Decoded,
)
from tracediag.parsers.perfetto_device import QUEUE_FIELDS, annotations, queue_names

#: Why :mod:`perfetto_tracks` skips a semaphore track's events (they are state, not work).
SEMAPHORE_TRACK = "semaphore track events"
#: The annotation names read here (the decoder keeps only wanted names).
WANTED = frozenset({*TEXT_COLUMNS, "semaphore_id", "value", "update_source", "trigger_start_ts"})
#: A semaphore named after a DMA queue (``S[10] (qSyncIO0)``): the owner is the queue.
_QUEUE_OWNED = r"^\s*\$?S\[\d+\]\s*\((q[^)]*)\)\s*$"
_EMPTY = pd.DataFrame(
    {S.SRC: np.zeros(0, np.int64), S.DST: np.zeros(0, np.int64), S.EDGE_KIND: "dependency"}
)


def semaphore_edges(
    d: Decoded,
    ts: np.ndarray,
    ann: pd.DataFrame,
    events: pd.DataFrame,
    rank: np.ndarray,
    per_event: pd.DataFrame,
) -> tuple[pd.DataFrame, dict[int, dict]]:
    """Edges producer -> waiter between slice rows (all ranks), and per rank the
    ``semaphore_waits`` counts (read, edges, unexplained). ``ts``: every decoded event's time on
    the trace clock; ``ann``: the slices' annotations; ``events``/``rank``: the slices'
    canonical columns and ranks; ``per_event``: each decoded event's track row (``skip``,
    ``rank``)."""
    if not index_of(ann).has(TEXT_COLUMNS):
        return _EMPTY, {}  # no operand text: no wait can be read
    n = len(events)
    texts = {c: _text(ann, c, n) for c in (*TEXT_COLUMNS, "semaphore_id", "trigger_start_ts")}
    # The collective a trigger instruction started: its increment is the collective's.
    trigger = pd.to_numeric(pd.Series(texts["trigger_start_ts"]), errors="coerce").to_numpy()
    updates = _updates(d, ts, per_event)
    queues = annotations(ann, QUEUE_FIELDS, n)
    kind = events[S.KIND].to_numpy(dtype=object)
    start = events[S.TS].to_numpy(dtype=np.int64)
    dur = events[S.DUR].to_numpy(dtype=np.int64)
    frames, waits = [], {}
    for r in np.unique(rank):  # a loop over ranks
        rows = {
            t: np.flatnonzero((kind == k) & (rank == r))
            for t, k in (("instruction", "compute"), ("dma", "dma"), ("cc", "collective"))
        }
        tables = {
            t: pd.DataFrame({"start_ts": start[i], "duration_ns": dur[i]}) for t, i in rows.items()
        }
        for c in TEXT_COLUMNS:
            tables["instruction"][c] = texts[c][rows["instruction"]]
        mine = None if updates is None else updates[updates["rank"].to_numpy() == r]
        named = texts["semaphore_id"][rows["dma"]]
        if mine is not None and pd.isna(named).any():
            named = _queue_semaphores(named, queue_names(events, queues, rows["dma"]), mine)
        tables["dma"]["semaphore_id"] = named
        tables["cc"]["trigger_start_ts"] = trigger[rows["cc"]]
        sizes = np.cumsum([0] + [len(i) for i in rows.values()])
        first = dict(zip(rows, sizes[:-1].tolist(), strict=True))
        glob = np.concatenate(list(rows.values()))
        meta = S.RankMeta(rank=int(r))
        e = table_edges(tables, first, mine, meta, partial=True)
        frames.append(e.assign(**{S.SRC: glob[e[S.SRC]], S.DST: glob[e[S.DST]]}))
        if "semaphore_waits" in meta.info:
            waits[int(r)] = meta.info["semaphore_waits"]
    return pd.concat([_EMPTY, *frames], ignore_index=True), waits


def _queue_semaphores(
    named: pd.Categorical, queue: pd.Series, updates: pd.DataFrame
) -> pd.Categorical:
    """DMA slices' ``semaphore_id`` where missing: the one semaphore track of the rank whose
    owner is the slice's queue (see the module)."""
    tracks = pd.Series(pd.unique(updates["id"].astype(object).dropna()), dtype=object)
    owner = tracks.astype(str).str.extract(_QUEUE_OWNED, expand=False)
    unique = owner.notna() & ~owner.duplicated(keep=False)
    by_queue = pd.Series(tracks[unique].to_numpy(), index=owner[unique].to_numpy())
    filled = pd.Series(np.asarray(named, dtype=object)).fillna(
        pd.Series(by_queue.reindex(queue.to_numpy()).to_numpy(dtype=object))
    )
    return pd.Categorical(filled)


def _text(ann: pd.DataFrame, name: str, n: int) -> pd.Categorical:
    """Annotation ``name`` per slice as a Categorical (NaN where absent)."""
    index = index_of(ann)
    rows = index.last(name)
    codes = np.full(n, -1, dtype=np.int64)
    if not len(rows):
        return pd.Categorical.from_codes(codes, pd.Index([], dtype="str"))
    cat = pd.Categorical(pd.Series(index.value[rows]).astype("str"))
    codes[index.key[rows]] = cat.codes
    return pd.Categorical.from_codes(codes, cat.categories)


def _updates(d: Decoded, ts: np.ndarray, per_event: pd.DataFrame) -> pd.DataFrame | None:
    """The semaphore tracks' instants as ``SemaphoreUpdate`` rows (``timestamp``, ``id``: the
    track name, ``value``, ``update_source``) plus ``rank``; None when the trace has none."""
    typ = d.events["type"].to_numpy()
    point = np.isin(typ, (TYPE_INSTANT, TYPE_SLICE_BEGIN, TYPE_COMPLETE))
    rows = np.flatnonzero((per_event["skip"].to_numpy(dtype=object) == SEMAPHORE_TRACK) & point)
    if not len(rows):
        return None
    track = d.events["track"].to_numpy()[rows]
    # A track's name is its descriptor's ``name``, else its thread's (ThreadDescriptor
    # ``thread_name``: both spellings occur, protobuf-formats.md).
    named = d.tracks["name"].where(d.tracks["name"] != "", d.tracks["thread"])
    names = pd.Series(named.to_numpy(dtype=object), index=d.tracks["uuid"].to_numpy())
    a = index_of(d.annotations, "ev")
    out = pd.DataFrame(
        {
            "timestamp": ts[rows],
            "id": pd.Categorical(names.reindex(track).to_numpy(dtype=object)),
            "rank": per_event["rank"].to_numpy()[rows],
        }
    )
    for field in ("value", "update_source"):
        hit = a.positions(field)  # those on the instants (rows): their positions there
        at = np.searchsorted(rows, a.key[hit])
        on = (at < len(rows)) & (rows[np.minimum(at, len(rows) - 1)] == a.key[hit])
        values = pd.Series(a.value[hit][on], index=at[on])
        out[field] = values[~values.index.duplicated(keep="last")].reindex(np.arange(len(rows)))
    out["value"] = pd.to_numeric(out["value"], errors="coerce")
    # A track whose instants carry no value: the k-th update sets k (sem_inc).
    counted = out.groupby(track, sort=False)["value"].transform("count").to_numpy() == 0
    order = np.lexsort((out["timestamp"].to_numpy(), track))
    k = np.empty(len(rows), dtype=np.float64)
    k[order] = pd.Series(track[order]).groupby(track[order]).cumcount().to_numpy() + 1
    out.loc[counted, "value"] = k[counted]
    out["update_source"] = pd.Categorical(out["update_source"])
    return out
