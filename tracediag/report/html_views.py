"""What the HTML report draws from the trace itself, beyond the JSON report: the arrival skew
per (collective instance x rank), each rank's mean arrival lateness (the Ranks table's shading)
and the events of the worst finding's window on the ranks the critical path runs on there.

All of it reads ``Analysis.lateness`` and ``Analysis.segments``, the tables COL201 and the TUI
read, so the pictures name the same ranks as the findings.

Computed from a :class:`~tracediag.engine.diagnose.Diagnosis`; a report rendered from a saved JSON report
has no trace and draws without them. Everything is vectorised and capped, so the page stays
small whatever the trace's size.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracediag.analysis.arrival_skew import LatenessGrid, colour_scale_ns, lateness_grid
from tracediag.model import schema as S
from tracediag.report.svg import CATEGORY_COLORS

#: At most this many collective instances (columns of the skew heatmap): the latest-arriving.
MAX_INSTANCES = 120
#: At most this many cells in the skew heatmap (each is an SVG rect with a tooltip).
MAX_CELLS = 12_000
#: At most this many lanes (tracks) in the worst window's timeline: the path's, then the busiest.
MAX_LANES = 24
#: At most this many ranks in the worst window: those the critical path spends most time on.
MAX_WINDOW_RANKS = 4
#: Horizontal resolution of the window timeline: events closer than a pixel merge into one bar.
PLOT_PX = 640
#: Context drawn on each side of the worst finding's window, as a fraction of its length.
PAD = 0.15

ENGINE_COLORS = {
    "dma": CATEGORY_COLORS["dma_transfer"],
    "cc": CATEGORY_COLORS["collective_transfer"],
    "cpu": CATEGORY_COLORS["host"],
}


@dataclass
class Lane:
    """One track in the window: merged bars ``[x0, x1)`` in pixels, on-path bars beside."""

    label: str
    color: str
    bars: np.ndarray  # int [n, 2] pixel spans of (merged) events
    path_bars: np.ndarray  # int [m, 2] pixel spans of critical-path events
    names: list[str]  # per bar: the event's name when the bar is one event, else "n events"


@dataclass
class WindowView:
    """The worst finding's window with its ranks' busiest tracks."""

    code: str
    start_ns: int
    end_ns: int
    finding_start_ns: int
    finding_end_ns: int
    lanes: list[Lane]
    ranks: list[int]  # the ranks drawn: where the critical path runs in the window


@dataclass
class RankLateness:
    """Per rank: mean arrival lateness at collectives (ns) and the lateness the darkest shade
    stands for (the same scale as the skew grid's)."""

    mean_ns: dict[int, float]
    scale_ns: float


@dataclass
class HtmlViews:
    skew: LatenessGrid | None
    window: WindowView | None
    rank_lateness: RankLateness | None = None


def html_views(diagnosis) -> HtmlViews:
    """The skew grid, the worst window and the ranks' lateness of ``diagnosis`` (each may be
    ``None``)."""
    return HtmlViews(_skew(diagnosis), _window(diagnosis), _rank_lateness(diagnosis))


def _lateness(diagnosis) -> pd.DataFrame | None:
    trace = diagnosis.trace
    if trace.collectives is None or not len(trace.collectives):
        return None
    late = diagnosis.analysis.lateness
    return late if len(late) else None


def _rank_lateness(diagnosis) -> RankLateness | None:
    late = _lateness(diagnosis)
    if late is None:
        return None
    mean = late.groupby(S.RANK)["late_ns"].mean()
    scale = colour_scale_ns(mean.rename("late_ns").to_frame(), diagnosis.analysis.length_ns)
    return RankLateness({int(r): float(v) for r, v in mean.items()}, scale)


def _skew(diagnosis) -> LatenessGrid | None:
    late = _lateness(diagnosis)
    if late is None:
        return None
    scale = colour_scale_ns(late, diagnosis.analysis.length_ns)
    worst = late.groupby(S.COLL_KEY)["late_ns"].max()
    cap = min(MAX_INSTANCES, max(8, MAX_CELLS // late[S.RANK].nunique()))
    if len(worst) > cap:
        keep = worst.nlargest(cap).index
        late = late[late[S.COLL_KEY].isin(keep)]
    return lateness_grid(late, scale)


def _merge(x0: np.ndarray, x1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge pixel spans sorted by ``x0`` that touch into runs: (spans [k, 2], events per run)."""
    if not len(x0):
        return np.empty((0, 2), dtype=np.int64), np.empty(0, dtype=np.int64)
    reach = np.maximum.accumulate(x1)
    new_run = np.ones(len(x0), dtype=bool)
    new_run[1:] = x0[1:] > reach[:-1]
    first = np.flatnonzero(new_run)
    last = np.r_[first[1:], len(x0)] - 1
    return np.stack([x0[first], reach[last]], axis=1), last - first + 1


def _path_ranks(seg: pd.DataFrame, t0: int, t1: int) -> list[int]:
    """The ranks the critical path runs on in ``[t0, t1)``, most path time first (capped)."""
    start = np.maximum(seg["start_ns"].to_numpy(), t0)
    end = np.minimum(seg["end_ns"].to_numpy(), t1)
    rank = seg["rank"].to_numpy()
    inside = (end > start) & (rank >= 0)
    if not inside.any():
        return []
    ns = pd.Series((end - start)[inside]).groupby(rank[inside]).sum()
    ns = ns.sort_values(ascending=False, kind="stable")
    return [int(r) for r in ns.index[:MAX_WINDOW_RANKS]]


def _window(diagnosis) -> WindowView | None:
    timed = [f for f in diagnosis.findings if f.end_ns > f.start_ns]
    if not timed:
        return None
    worst = timed[0]
    trace = diagnosis.trace
    pad = int((worst.end_ns - worst.start_ns) * PAD)
    seg = diagnosis.analysis.segments
    # context on both sides, but not beyond the critical path (the step)
    t0 = max(worst.start_ns - pad, int(seg["start_ns"].min()))
    t1 = min(worst.end_ns + pad, int(seg["end_ns"].max()))
    ranks = _path_ranks(seg, t0, t1) or list(worst.ranks)[:MAX_WINDOW_RANKS]
    ranks = ranks or list(trace.ranks)[:MAX_WINDOW_RANKS]
    ev = trace.events
    ts = ev[S.TS].to_numpy()
    end = ts + ev[S.DUR].to_numpy()
    graph_kind = (ev[S.KIND] != "marker").to_numpy()  # by category code, not a str per event
    inside = (end > t0) & (ts < t1) & np.isin(ev[S.RANK].to_numpy(), ranks) & graph_kind
    rows = np.flatnonzero(inside)
    if not len(rows):
        return None
    on_path = np.zeros(len(ev), dtype=bool)
    seg_events = seg["event"].to_numpy()
    on_path[seg_events[seg_events >= 0]] = True

    track = ev[S.TRACK].to_numpy()[rows]
    span = max(t1 - t0, 1)
    x0 = np.floor((np.clip(ts[rows], t0, t1) - t0) * PLOT_PX / span).astype(np.int64)
    x1 = np.maximum(np.ceil((np.clip(end[rows], t0, t1) - t0) * PLOT_PX / span), x0 + 1)
    x1 = x1.astype(np.int64)
    busy = np.bincount(track, weights=(x1 - x0), minlength=len(trace.tracks))
    # the tracks the path runs on come first, then the busiest
    path_tracks = np.unique(track[on_path[rows]])
    busy[path_tracks] += busy.sum() + 1
    lanes_tracks = [int(t) for t in np.argsort(-busy, kind="stable")[:MAX_LANES] if busy[t] > 0]
    tracks = trace.tracks
    track_labels = diagnosis.analysis.track_labels  # the names every view shows
    names = ev[S.NAME].iloc[rows].to_numpy()  # the window's rows only
    lanes = []
    for t in sorted(lanes_tracks, key=lambda t: (int(tracks.at[t, S.RANK]), t)):
        mine = np.flatnonzero(track == t)
        mine = mine[np.argsort(x0[mine], kind="stable")]
        bars, counts = _merge(x0[mine], x1[mine])
        starts = np.r_[0, np.cumsum(counts)[:-1]]
        labels = [
            str(names[mine[s]]) if n == 1 else f"{n} events"
            for s, n in zip(starts, counts, strict=True)  # a loop over bars (<= PLOT_PX)
        ]
        path = mine[on_path[rows[mine]]]
        path_bars, _ = _merge(x0[path], x1[path])
        engine = str(tracks.at[t, S.ENGINE])
        lanes.append(
            Lane(
                f"rank {int(tracks.at[t, S.RANK])} {track_labels[t]}",
                ENGINE_COLORS.get(engine, CATEGORY_COLORS["compute"]),
                bars,
                path_bars,
                labels,
            )
        )
    return WindowView(worst.code, t0, t1, worst.start_ns, worst.end_ns, lanes, ranks)
