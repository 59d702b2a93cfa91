"""Your own what-if questions: scale some work or remove some waits, replay, read the saving.

A change selects events (every filter given must hold; a filter takes one value or a list of
them) and says what happens to them:

- :class:`Scale`: their durations times ``factor`` (0.8: 20% faster; 1.5: 50% slower);
- :class:`RemoveWait`: they start as soon as what they depend on ends (the latency before
  them that no dependency in the trace explains, e.g. DMA queueing or launch gaps, becomes 0).

:func:`what_if` replays the job's dependency graph with the changes (the replay that computes
the rules' savings; see ``tracediag/graph/replay.py``) and returns the step's old and new length::

    >>> r = tracediag.what_if(job, tracediag.Scale(rank=1, factor=0.8))  # doctest: +SKIP
    >>> r.saving_ns, r.new_step_ns                                       # doctest: +SKIP
    >>> tracediag.what_if(job, [                                         # doctest: +SKIP
    ...     tracediag.Scale(queue="qSyncIO0", layer="layer_1", factor=0.25),
    ...     tracediag.RemoveWait(kind="dma", after="dma_trigger"),
    ... ])
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import TypeAlias

import numpy as np

from tracediag.analysis.context import Analysis, analyse
from tracediag.analysis.peers import peer_track_names
from tracediag.graph.changes import WhatIf
from tracediag.graph.dependencies import EDGE_CODE_NAMES
from tracediag.graph.replay import replay
from tracediag.model import schema as S
from tracediag.model.dma_rings import split_ring_names

Names: TypeAlias = str | Sequence[str] | None
Ranks: TypeAlias = int | Sequence[int] | None
_SELECTORS = ("rank", "engine", "queue", "track", "layer", "kind", "op")
#: How error messages name a filter's values (None: a fixed list, not the job's).
_PLURALS = {
    "rank": "ranks",
    "engine": "engines",
    "queue": "DMA queues",
    "track": "tracks",
    "layer": "layers",
    "kind": None,
    "op": "ops",
    "after": None,
}
_GRAPH_KINDS = tuple(k for k in S.KINDS if k != "marker")


def _as_tuple(name: str, value: object, item_type: type) -> tuple | None:
    """A filter's value as a tuple of ints (ranks) or strings; None stays None (no filter)."""
    if value is None:
        return None
    items = (value,) if isinstance(value, str | int | np.integer) else tuple(value)  # type: ignore[arg-type]
    if not items:
        raise ValueError(f"{name}: an empty list selects nothing (leave it out to select all)")
    ok = (int, np.integer) if item_type is int else (str,)
    for v in items:
        if isinstance(v, bool) or not isinstance(v, ok):
            raise TypeError(f"{name} takes {item_type.__name__} values, not {v!r}")
    return tuple(int(v) for v in items) if item_type is int else items


@dataclass(frozen=True, kw_only=True)
class Selection:
    """Which events a change applies to: every filter given must hold (all events if none).

    ``rank``: rank numbers; ``engine``: normalised engines (tensor, vector, scalar, gpsimd,
    sync, dma, cc, gpu, cpu); ``queue``: DMA queue names (qSyncIO0); ``track``: track names,
    as on every rank (tensor, qSyncIO0, stream 7, cpu thread #0), or one rank's track as the
    reports name it (gpu1/stream 7, cpu 1234/5678 (thread #3)); ``layer``: model layers (a DMA
    without its own layer counts for the layer it feeds); ``kind``: compute, dma, collective,
    sync, host; ``op``: operators (HLO instruction, kernel). Markers are never selected.
    """

    rank: Ranks = None
    engine: Names = None
    queue: Names = None
    track: Names = None
    layer: Names = None
    kind: Names = None
    op: Names = None

    def __post_init__(self) -> None:
        for name in _SELECTORS:
            value = _as_tuple(name, getattr(self, name), int if name == "rank" else str)
            object.__setattr__(self, name, value)

    def __repr__(self) -> str:
        given = [
            f"{f.name}={v[0] if isinstance(v, tuple) and len(v) == 1 else v!r}"
            for f in fields(self)
            if (v := getattr(self, f.name)) is not None
        ]
        return f"{type(self).__name__}({', '.join(given)})"


@dataclass(frozen=True, kw_only=True, repr=False)
class Scale(Selection):
    """The selected events take ``factor`` times as long (0 <= factor; 1 changes nothing).

    >>> tracediag.Scale(rank=1, engine=["tensor", "vector"], factor=1 / 1.5)  # doctest: +SKIP
    >>> tracediag.Scale(queue="qSyncIO0", layer="layer_1", factor=0.25)       # doctest: +SKIP
    """

    factor: float

    def __post_init__(self) -> None:
        super().__post_init__()
        if isinstance(self.factor, bool) or not isinstance(self.factor, int | float):
            raise TypeError(f"factor must be a number, not {self.factor!r}")
        if not math.isfinite(self.factor) or self.factor < 0:
            raise ValueError(f"factor must be a finite number >= 0, not {self.factor}")


@dataclass(frozen=True, kw_only=True, repr=False)
class RemoveWait(Selection):
    """The selected events start as soon as the work they depend on ends.

    ``after`` limits it to waits after one kind of dependency: ``program_order`` (the previous
    event on the same track), ``dependency``, ``dma_trigger`` (DMA queueing), ``launch``
    (GPU launch latency), ``flow``, ``sync``, ``collective_arrival``, ``collective_start``,
    ``sync_completion``. A collective's wait for its last participant is not removed this way:
    scale or unblock that participant's work instead.

    >>> tracediag.RemoveWait(kind="dma", after="dma_trigger")  # doctest: +SKIP
    """

    after: Names = None

    def __post_init__(self) -> None:
        super().__post_init__()
        after = _as_tuple("after", self.after, str)
        object.__setattr__(self, "after", after)
        if after is not None:
            _check_known("after", after, EDGE_CODE_NAMES)


#: What :func:`what_if` takes: one change or a list of them, applied in order.
Change: TypeAlias = Scale | RemoveWait | Sequence[Scale | RemoveWait]


@dataclass(frozen=True)
class WhatIfResult:
    """The step's length before and after a change (ns). ``saving_ns`` is negative when the
    change makes the step longer; ``events`` counts the events the change selected."""

    saving_ns: int
    old_step_ns: int
    new_step_ns: int
    events: int

    @property
    def saving_pct(self) -> float:
        """The saving as a percentage of the old step, rounded to 0.01."""
        return round(100.0 * self.saving_ns / self.old_step_ns, 2) if self.old_step_ns else 0.0


def what_if(target: object, change: Change) -> WhatIfResult:
    """Replay ``target`` (a Job, a Diagnosis or a Trace) with ``change`` and return the saving.

    Raises ValueError naming the known values for an unknown rank, engine, queue, track,
    layer, kind or op, or for a change that selects no event; TypeError for anything that is
    not a change.

    >>> tracediag.what_if(job, tracediag.Scale(rank=1, factor=0.8)).saving_ns  # doctest: +SKIP
    """
    ctx = _analysis_of(target)
    if isinstance(change, Selection):
        changes = [change]
    elif isinstance(change, Sequence) and not isinstance(change, str):
        changes = list(change)
    else:
        raise TypeError(f"a change is a Scale, a RemoveWait or a list of them, not {change!r}")
    if not changes:
        raise ValueError("what_if needs a change: a Scale, a RemoveWait or a list of them")
    graph = ctx.graph
    dur, gap = graph.dur.copy(), graph.gap.copy()
    dur_set = np.zeros(len(graph), dtype=bool)
    gap_set = np.zeros(len(graph), dtype=bool)
    selected = np.zeros(len(ctx.trace.events), dtype=bool)
    for c in changes:
        if not isinstance(c, Scale | RemoveWait):
            raise TypeError(f"a change is a Scale or a RemoveWait, not {type(c).__name__}")
        ids = select_events(ctx, c)
        selected[ids] = True
        body = ctx.nodes_of(ids)
        if isinstance(c, Scale):
            nodes = body[body >= 0]
            dur[nodes] = np.rint(dur[nodes] * c.factor).astype(np.int64)
            dur_set[nodes] = True
            continue
        nodes = np.unique(np.concatenate([body, graph.event_in_node[ids]]))
        nodes = nodes[nodes >= 0]
        if c.after is not None:
            codes = [EDGE_CODE_NAMES.index(a) for a in c.after]
            nodes = nodes[np.isin(graph.bind_code[nodes], codes)]
        gap[nodes] = 0
        gap_set[nodes] = True
    dn, gn = np.flatnonzero(dur_set), np.flatnonzero(gap_set)
    new = replay(graph, WhatIf(dn, dur[dn], gn, gap[gn])).length_ns
    old = ctx.length_ns
    return WhatIfResult(int(old - new), int(old), int(new), int(selected.sum()))


def _analysis_of(target: object) -> Analysis:
    # A Job (the API's, above this layer) and a Diagnosis both carry their analysis.
    if isinstance(getattr(target, "analysis", None), Analysis):
        return target.analysis
    if isinstance(target, S.Trace):
        return analyse(target)
    raise TypeError(
        f"what_if needs a Job (tracediag.load) or a Diagnosis, not {type(target).__name__}"
    )


def select_events(ctx: Analysis, sel: Selection) -> np.ndarray:
    """Ids of the (non-marker) events ``sel`` selects; ValueError for unknown names or none."""
    trace = ctx.trace
    ev, tr = trace.events, trace.tracks
    mask = np.array(ev[S.KIND] != "marker", dtype=bool)  # a writable copy
    if sel.rank is not None:
        _check_known("rank", sel.rank, trace.ranks)
        mask &= np.isin(ev[S.RANK].to_numpy(), sel.rank)
    on_track = np.ones(len(tr), dtype=bool)
    if sel.engine is not None:
        engines = tr[S.ENGINE].astype(str).to_numpy()
        _check_known("engine", sel.engine, engines, hint="select a stream or thread with track=")
        on_track &= np.isin(engines, sel.engine)
    names = tr[S.TRACK_NAME].astype(str).to_numpy()
    if sel.queue is not None:
        is_queue = (tr[S.TRACK_KIND].astype(str) == "dma_queue").to_numpy()
        queues = split_ring_names(names)[0]  # a queue's rings, or one of its rings by name
        _check_known("queue", sel.queue, np.union1d(queues[is_queue], names[is_queue]))
        on_track &= is_queue & (np.isin(queues, sel.queue) | np.isin(names, sel.queue))
    if sel.track is not None:
        peers = peer_track_names(trace).astype(str)
        labels = np.asarray(ctx.track_labels, dtype=str)  # as the reports name a track
        _check_known("track", sel.track, np.union1d(np.union1d(peers, names), labels), shown=peers)
        on_track &= (
            np.isin(peers, sel.track) | np.isin(names, sel.track) | np.isin(labels, sel.track)
        )
    if len(tr):
        mask &= on_track[ev[S.TRACK].to_numpy()]
    if sel.kind is not None:
        _check_known("kind", sel.kind, _GRAPH_KINDS)
        mask &= ev[S.KIND].isin(sel.kind).to_numpy()
    if sel.layer is not None:
        mask &= _layer_mask(ctx, sel.layer)
    if sel.op is not None:
        ops = ev[S.OP].cat.categories.astype(str) if S.OP in ev else []
        _check_known("op", sel.op, ops)
        mask &= ev[S.OP].isin(sel.op).to_numpy()
    ids = np.flatnonzero(mask)
    if not len(ids):
        raise ValueError(f"{sel!r} selects no event of this job")
    return ids


def _layer_mask(ctx: Analysis, layers: tuple[str, ...]) -> np.ndarray:
    """Events of ``layers``: their own layer, or for a DMA without one the layer it feeds."""
    ev = ctx.trace.events
    own = ev.get(S.LAYER)
    dma = ctx.dma
    known = set(dma["layer"].dropna().astype(str))
    if own is not None:
        known |= set(own.cat.categories.astype(str))
    _check_known("layer", layers, sorted(known))
    mask = np.array(own.isin(layers), dtype=bool) if own is not None else np.zeros(len(ev), bool)
    mask[dma["event"].to_numpy()[dma["layer"].isin(layers).to_numpy()]] = True
    return mask


def _check_known(what: str, values, known, *, hint: str = "", shown=None) -> None:
    """ValueError naming ``what``'s known values (and the closest one) for an unknown value.

    ``shown``: the values to list, when fewer than those accepted (track names as on every
    rank, not each rank's own)."""
    known_set = {k for k in np.asarray(known).tolist() if k != ""}
    unknown = [v for v in values if v not in known_set]
    if not unknown:
        return
    listed = sorted({k for k in np.asarray(known if shown is None else shown).tolist() if k != ""})
    close = difflib.get_close_matches(str(unknown[0]), [str(k) for k in listed], n=1, cutoff=0.5)
    message = f"unknown {what} {unknown[0]!r}"
    if close:
        message += f" (did you mean {close[0]!r}?)"
    plural = _PLURALS.get(what)
    more = f" ... ({len(listed)} in all)" if len(listed) > 20 else ""
    if plural is None:
        message += f"; choose from {', '.join(map(str, listed))}"
    elif listed:
        message += f"; this job's {plural}: {', '.join(map(str, listed[:20]))}{more}"
    else:
        message += f"; this job has no {plural}"
    raise ValueError(message + (f" ({hint})" if hint else ""))
