"""What the Perfetto reader restores from a trace our own export wrote (``tracediag export``,
:mod:`tracediag.export.perfetto_trace`), beyond what any Perfetto trace gives: the dependencies
with their kinds (``tracediag_dep_<kind>`` annotations; the critical path's flow arrows are
drawings, not dependencies, and are left out), the events' numeric format, transpose FLOPs and own tracks,
and each rank's meta (:mod:`tracediag.model.own_export`).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import orjson
import pandas as pd

from tracediag.model import own_export
from tracediag.model import schema as S
from tracediag.model.assembly import TRACK_LABEL
from tracediag.parsers import perfetto_events as E
from tracediag.parsers.perfetto_decode import Decoded

#: The annotation names the decoder must keep for our own traces.
WANTED = own_export.OWN_ANNOTATIONS


def without_path_flows(d: Decoded) -> Decoded:
    """The decoded trace less the critical path's flow points."""
    return dataclasses.replace(d, flows=d.flows[d.flows["id"].to_numpy() != own_export.PATH_FLOW])


def dependencies(ann: pd.DataFrame, src_id: np.ndarray, counts: dict[str, int]) -> pd.DataFrame:
    """Edges ``src -> dst`` (slice rows) of every kind, from the ``tracediag_dep_<kind>``
    annotations holding the id of the earlier event."""
    frames = []
    for kind in S.EDGE_KINDS:  # a loop over edge kinds
        sub = ann[ann["name"].to_numpy(dtype=object) == own_export.DEPENDENCY_PREFIX + kind]
        if len(sub):
            edges = E.dependency_edges(sub.assign(name="inst_dep_ids"), src_id, counts)
            frames.append(edges.assign(**{S.EDGE_KIND: kind}))
    return (
        pd.concat(frames, ignore_index=True)
        if frames
        else pd.DataFrame(
            {S.SRC: np.zeros(0, np.int64), S.DST: np.zeros(0, np.int64), S.EDGE_KIND: []}
        )
    )


#: The suffix of the thread our export moves an event to when it overlaps its neighbours only
#: partly (Perfetto slices must nest): the event's track is the thread's name without it.
_OVERLAP_LANE = r" \(overlap(?: \d+)?\)$"


def event_fields(events: pd.DataFrame, ann: pd.DataFrame) -> None:
    """The events' ``dtype``, ``transpose_flops`` and ``step`` from their annotations and their own track
    (not the overlap lane they were drawn on), in place."""
    labels = (
        events[TRACK_LABEL].cat.categories.astype(str).str.replace(_OVERLAP_LANE, "", regex=True)
    )
    events[TRACK_LABEL] = pd.Categorical(
        np.append(labels.to_numpy(dtype=object), None)[events[TRACK_LABEL].cat.codes.to_numpy()]
    )
    n = len(events)
    for name, column in (
        ("dtype", S.DTYPE), ("transpose_flops", S.TRANSPOSE_FLOPS), ("step", S.STEP),
    ):  # fmt: skip
        sub = ann[ann["name"].to_numpy(dtype=object) == name].drop_duplicates("slice", keep="last")
        values = pd.Series(sub["value"].to_numpy(dtype=object), index=sub["slice"].to_numpy())
        values = values.reindex(np.arange(n))
        if column == S.DTYPE:
            events[column] = pd.Categorical(values.to_numpy(dtype=object))
        else:
            events[column] = pd.to_numeric(values, errors="coerce").to_numpy(dtype=np.float64)


def rank_entries(d: Decoded) -> dict[str, dict]:
    """The per-rank entries of the export's metadata block ({} when absent or unreadable)."""
    a = d.annotations
    notes = a["value"].to_numpy(dtype=object)[
        a["name"].to_numpy(dtype=object) == own_export.META_ANNOTATION
    ]
    for text in notes[::-1]:  # the last block written wins (one in our files)
        try:
            ranks = own_export.ranks_of(orjson.loads(str(text)))
        except orjson.JSONDecodeError:
            continue
        if ranks is not None:
            return ranks
    return {}
