"""The fields of one selected event, its binding predecessor and its place on the critical path.

Reads the trace, the graph's binding edges and the path segments; computes nothing new.
"""

from __future__ import annotations

import math

import numpy as np

from tracediag.graph import dependencies as G
from tracediag.model import schema as S
from tracediag.model.units import fmt_bytes, fmt_ns
from tracediag.tui.session import Session

#: How the event panel names each edge code of the graph (``G.EDGE_CODE_NAMES``).
EDGE_WORDS = {
    "program_order": "the order of its track",
    "dependency": "a dependency the trace records",
    "dma_trigger": "the DMA it triggered",
    "launch": "its launch",
    "flow": "a flow arrow of the trace",
    "sync": "a stream or event wait",
    "collective_arrival": "its arrival at the collective",
    "collective_start": "the collective's start",
    "sync_completion": "the completion it waited for",
    "stream_wait": "an inferred stream wait",
    "thread_handoff": "an inferred hand-off between threads",
    "device_wait": "an inferred wait for the device",
    "dispatch_wait": "an inferred dispatch by the host",
    "receive_use": "an inferred read of a received buffer",
    "queue_wait": "an inferred wait for its DMA queue",
    "weight_read": "an inferred read of a layer's weights",
}


def _field(ev, col: str, event: int):
    if col not in ev:
        return None
    value = ev[col].iat[event]
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return value


def event_label(session: Session, event: int) -> str:
    """``"MATMUL (rank 1, tensor)"``."""
    ev = session.trace.events
    track = int(ev[S.TRACK].iat[event])
    return f"{ev[S.NAME].iat[event]} (rank {ev[S.RANK].iat[event]}, {session.track_names[track]})"


def bound_by(session: Session, event: int) -> str:
    """What started ``event``: its binding predecessor in the graph, the edge and the gap."""
    analysis = session.diagnosis.analysis
    graph = analysis.graph
    node = int(session.body_node[event])
    if node < 0:
        return "not in the dependency graph (a marker)"
    pred = int(graph.bind[node])
    if pred < 0:
        return "nothing (it starts a chain)"
    code = int(graph.bind_code[node])
    gap = int(graph.gap[node])
    if graph.role[pred] == G.INSTANCE:  # a collective waits for its last participant
        last = int(graph.bind[pred])
        if last >= 0 and graph.event[last] >= 0:
            return (
                f"the last arrival at this collective: {event_label(session, int(graph.event[last]))}"
                f", gap {fmt_ns(gap)}"
            )
        return f"the collective's instance, gap {fmt_ns(gap)}"
    pe = int(graph.event[pred])
    what = event_label(session, pe) if pe >= 0 else "a helper node"
    name = G.EDGE_CODE_NAMES[code]
    return f"{what} via {EDGE_WORDS.get(name, name.replace('_', ' '))}, gap {fmt_ns(gap)}"


def describe(session: Session, event: int, segment: int = -1) -> list[tuple[str, str]]:
    """(label, value) rows for the event panel; ``segment`` is the path segment jumped to."""
    ev = session.trace.events
    base = session.path_start
    ts = int(ev[S.TS].iat[event])
    dur = int(ev[S.DUR].iat[event])
    track = int(ev[S.TRACK].iat[event])
    what = [f"{ev[S.KIND].iat[event]}", f"rank {ev[S.RANK].iat[event]}"]
    what.append(f"track {session.track_names[track]}")
    for col in (S.OP, S.LAYER):
        value = _field(ev, col, event)
        if value is not None:
            what.append(f"{col} {value}")
    times = [f"start {fmt_ns(ts - base)}", f"dur {fmt_ns(dur)}", f"end {fmt_ns(ts + dur - base)}"]
    nbytes = _field(ev, S.BYTES, event)
    if nbytes:
        times.append(f"bytes {fmt_bytes(nbytes)}")
    wait = _field(ev, S.WAIT, event)
    if wait:
        times.append(f"wait {fmt_ns(wait)}")
    rows = [
        ("event", str(ev[S.NAME].iat[event])),  # not our row number: it names nothing the user has
        ("where", "  ".join(what)),
        ("time", "  ".join(times)),
    ]
    source = _source(session, event)
    if source:  # on the event's own row: the timeline's pane has six rows
        rows[0] = ("event", f"{rows[0][1]}  at {source}")
    rows += _on_path(session, event, segment)
    rows.append(("bound by", bound_by(session, event)))
    return rows


def _source(session: Session, event: int) -> str:
    """The event's source line (a DMA transfer: its triggering instruction's, said so)."""
    from tracediag.analysis.source_lines import event_sources

    line = str(event_sources(session.trace, np.array([event]))[0])
    if not line:
        return ""
    own = _field(session.trace.events, S.SOURCE, event)
    return line if own is not None and str(own) else f"{line} (its trigger's line)"


def _on_path(session: Session, event: int, segment: int) -> list[tuple[str, str]]:
    """The event's share of the critical path and the segment before it on the path."""
    idx = session.timeline
    segs = idx.segments_of(event)
    if not len(segs):
        return [("path", "not on the critical path")]
    here = segment if segment in set(segs.tolist()) else int(segs[0])
    cats: dict[str, int] = {}
    for s in segs:  # the few segments of one event
        cat = str(idx.seg_category[s])
        cats[cat] = cats.get(cat, 0) + int(idx.seg_end[s] - idx.seg_start[s])
    parts = ", ".join(f"{c} {fmt_ns(ns)}" for c, ns in cats.items())
    rows = [("path", f"segment {here + 1} of {len(idx.seg_start)}: {parts}")]
    before = np.flatnonzero(idx.seg_event[:here] != event)
    if len(before):
        prev = int(before[-1])
        pe = int(idx.seg_event[prev])
        who = event_label(session, pe) if pe >= 0 else "no event"
        rows.append(("path before", f"{idx.seg_category[prev]}: {who}"))
    return rows
