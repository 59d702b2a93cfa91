"""Where the timeline opens: on a finding, a critical-path segment, a collective, or the step."""

from __future__ import annotations

import numpy as np

from tracediag.model import schema as S
from tracediag.model.findings import Finding
from tracediag.tui.session import Session
from tracediag.tui.timeline_state import MIN_SPAN_NS, TimelineTarget


def _padded(t0: int, t1: int, frac: float = 0.1) -> tuple[int, int]:
    pad = max(int((t1 - t0) * frac), MIN_SPAN_NS)
    return t0 - pad, t1 + pad


def for_step(session: Session) -> TimelineTarget:
    """The whole analysed window on every rank, starting at the path's last segment."""
    path = session.diagnosis.analysis.path
    idx = session.timeline
    last = int(np.flatnonzero(idx.seg_track >= 0)[-1]) if (idx.seg_track >= 0).any() else -1
    return TimelineTarget(
        path.start_ns,
        path.end_ns,
        tuple(session.trace.ranks),
        segment=last,
        title="the whole step",
    )


def for_finding(session: Session, finding: Finding) -> TimelineTarget:
    """The finding's window on its ranks (every rank for a collective finding, so the ones
    waiting show beside the late one), with its longest critical-path segment selected."""
    path = session.diagnosis.analysis.path
    s, e = finding.start_ns, finding.end_ns
    stall = (s, e) if e > s else None
    if stall is None:
        s, e = path.start_ns, path.end_ns
    ranks = tuple(finding.ranks) or tuple(session.trace.ranks)
    if finding.family == "collective":
        ranks = tuple(session.trace.ranks)
    idx = session.timeline
    overlap = (idx.seg_track >= 0) & (idx.seg_end > s) & (idx.seg_start < e)
    if finding.ranks:
        overlap &= np.isin(idx.seg_rank, finding.ranks)
    segment = -1
    if overlap.any():
        cand = np.flatnonzero(overlap)
        segment = int(cand[np.argmax(idx.seg_end[cand] - idx.seg_start[cand])])
    t0, t1 = _padded(s, e, 0.05)
    return TimelineTarget(
        t0, t1, ranks, stall=stall, segment=segment, title=f"{finding.code} {finding.title}"
    )


def for_segment(session: Session, segment: int) -> TimelineTarget:
    """A critical-path segment (chronological index) with some context on both sides."""
    idx = session.timeline
    s, e = int(idx.seg_start[segment]), int(idx.seg_end[segment])
    t0, t1 = _padded(s, e, 1.0)
    rank = int(idx.seg_rank[segment])
    ranks = (rank,) if rank >= 0 else tuple(session.trace.ranks)
    return TimelineTarget(
        t0, t1, ranks, segment=segment, title=f"critical path segment {segment + 1}"
    )


def for_collective(session: Session, coll_key: int, rank: int) -> TimelineTarget:
    """One collective instance on all its participants, ``rank``'s part selected."""
    c = session.trace.collectives
    rows = c[c[S.COLL_KEY].to_numpy() == coll_key]
    t0 = int(min(rows[S.ARRIVAL].min(), rows[S.START].min()))
    t1 = int(rows[S.END].max())
    mine = rows[rows[S.RANK].to_numpy() == rank]
    event = int(mine[S.EVENT].iat[0]) if len(mine) else -1
    arrivals = rows[S.ARRIVAL].to_numpy()
    stall = (int(np.median(arrivals)), int(arrivals.max())) if len(rows) > 1 else None
    lo, hi = _padded(t0, t1, 0.2)
    op = str(rows[S.COLL_OP].iat[0]) if len(rows) else "collective"
    return TimelineTarget(
        lo,
        hi,
        tuple(sorted(rows[S.RANK].unique().tolist())),
        stall=stall,
        event=event,
        title=f"{op} #{coll_key}",
    )
