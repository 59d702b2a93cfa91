"""The analysed trace that rules read: graph, critical path, breakdowns, hardware, what-ifs.

Built once per diagnosis by :func:`analyse`; rules never recompute any of it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pandas as pd

from tracediag.analysis import hardware as hw
from tracediag.analysis.arrival_skew import lateness
from tracediag.analysis.bounds import bounds_table
from tracediag.analysis.dma import dma_frame
from tracediag.analysis.durations import layer_durations, op_durations
from tracediag.analysis.parallel_layout import Layout, infer_layout
from tracediag.analysis.peers import (
    event_ordinals,
    excess_over_peers,
    peer_gap_medians,
    peer_track_names,
    rank_track_label,
    track_labels,
)
from tracediag.analysis.step_windows import widen_host_window
from tracediag.analysis.steps import JobSteps, job_steps, per_rank_typical, rank_steps
from tracediag.analysis.temporal_breakdown import temporal_breakdown
from tracediag.graph.changes import WhatIf, joint
from tracediag.graph.critical_path import CriticalPath, node_categories, texts_by_code, walk
from tracediag.graph.dependencies import Graph, build_graph
from tracediag.graph.inferred_edges import infer_edges
from tracediag.graph.replay import replay
from tracediag.io.threads import map_in_threads, runs_in_threads
from tracediag.model import schema as S
from tracediag.model.findings import Finding, Severity
from tracediag.model.numeric_formats import MatmulWork, matmul_work
from tracediag.model.wording import share_of_path, share_of_steps


@dataclass
class Analysis:
    """Everything a rule may read. Times are aligned ns."""

    trace: S.Trace
    graph: Graph
    path: CriticalPath
    own_category: np.ndarray  # per node, index into CATEGORIES
    gap_category: np.ndarray
    breakdown: pd.DataFrame  # per rank: compute/communication/memory/idle ns and pct
    hardware: dict[int, hw.Hardware | None]
    step_ns: dict[int, int]  # per rank: its typical step, the median of its steps (steps.py)
    inferred: pd.DataFrame | None = None  # inferred dependencies + evidence (inferred_edges.py)
    window_ns: dict[int, int] | None = None  # per rank: first start to last end of its window
    steps: dict[int, int] | None = None  # per rank: steps in its window (1 without step numbers)
    rank_steps: pd.DataFrame | None = None  # per (rank, step): its interval (steps.rank_steps)
    # The change behind each finding's saving, by change_key(finding): what ``finding(...,
    # change=)`` was given. The report replays them all at once (joint_saving).
    changes: dict[tuple, WhatIf] = field(default_factory=dict)
    # Savings already replayed, by the change's content (:func:`_change_digest`): a change that
    # two rules (or one rule twice) ask for is replayed once.
    replayed: dict[bytes, int] = field(default_factory=dict, repr=False)

    @cached_property
    def segments(self) -> pd.DataFrame:
        """The path's segments with their event's fields (name, kind, layer, op, bytes, wait,
        track name). Built on first use: its text columns cost a string per segment, so rules
        that read only the path's own columns read ``path.segments``."""
        return _segments_with_events(self.path.segments, self.trace, self.track_labels)

    @cached_property
    def track_labels(self) -> np.ndarray:
        """Per track, the name every view shows (``peers.track_labels``)."""
        return track_labels(self.trace, self.peer_track_names)

    @cached_property
    def peer_track_names(self) -> np.ndarray:
        """Per track, its name on every rank (``peers.peer_track_names``), built once."""
        return peer_track_names(self.trace)

    @cached_property
    def job_steps(self) -> JobSteps:
        """The job's steps, each with its time, breakdown and critical path; the typical step
        (median), the spread and the outliers with their cause (``steps.job_steps``)."""
        by_rank = (
            self.rank_steps if self.rank_steps is not None else rank_steps(self.trace, self.graph)
        )
        return job_steps(self.trace, by_rank, self.path.segments)

    @cached_property
    def lateness(self) -> pd.DataFrame:
        """Per (collective instance, rank): arrival minus the other participants' median
        arrival (``arrival_skew.lateness``). COL201, the TUI heatmap and the HTML report read
        this one table, so they name the same late ranks."""
        return lateness(self.trace.collectives)

    @cached_property
    def layout(self) -> Layout:
        """The parallel layout, inferred unless the engine set an explicit one (layout.py)."""
        return infer_layout(self.trace)

    @cached_property
    def ordinals(self) -> np.ndarray:
        """Per event: its position in time order on its track (matches peers across ranks)."""
        return event_ordinals(self.trace)

    @cached_property
    def excess_over_peers(self) -> np.ndarray:
        """Per event: ns longer than the median of the same work on the other ranks."""
        return excess_over_peers(self.trace, self.ordinals)

    @cached_property
    def peer_gap_medians(self) -> tuple[np.ndarray, np.ndarray]:
        """Per node with a binding predecessor, its peers' median gap (pace.peer_gap_medians)."""
        return peer_gap_medians(self)

    @cached_property
    def matmul_work(self) -> MatmulWork:
        """The matmuls, every event's dtype and the matmuls' work per (rank, dtype)
        (``numeric_formats.matmul_work``): NUM701 and the report's ``precision`` read one."""
        return matmul_work(self.trace)

    @cached_property
    def bounds(self) -> pd.DataFrame:
        """Per rank over its device span: the performance bounds and their gaps
        (``bounds.bounds_table``), without the gaps' replayed savings (``Diagnosis.bounds_df``)."""
        return bounds_table(self.trace, self.hardware)

    @cached_property
    def durations(self) -> dict[str, list[dict]]:
        """The report's duration statistics: ``by_layer`` and ``by_op`` (``durations``)."""
        return _durations(self.trace)

    @cached_property
    def dma(self) -> pd.DataFrame:
        """DMA events with queue, bytes, bandwidth and the layer they feed (see peers.dma_frame)."""
        # The whole trace's ordinals when a rule built them already; else the DMA tracks' only.
        return dma_frame(self.trace, self.__dict__.get("ordinals"), self.inferred)

    @property
    def length_ns(self) -> int:
        """The critical path's length: the window's first start to its last end."""
        return self.path.length_ns

    def path_ns(self, *categories: str) -> int:
        """ns of the critical path in ``categories``. No finding's impact there exceeds it: a
        rule whose threshold even this misses stops before its per-event work."""
        seg = self.path.segments
        return int(seg["dur_ns"].to_numpy()[seg["category"].isin(categories).to_numpy()].sum())

    def what_if(self, change: WhatIf) -> int:
        """ns the window would be shorter with ``change``, by replay (never negative); the same
        change asked again reads the saving its replay gave."""
        key = _change_digest(change)
        if key not in self.replayed:
            self.replayed[key] = max(0, self.length_ns - replay(self.graph, change).length_ns)
        return self.replayed[key]

    def pct(self, ns: float) -> float:
        """``ns`` as a percentage of the critical path, rounded to 0.01."""
        return round(100.0 * ns / self.length_ns, 2) if self.length_ns else 0.0

    def cost_pct(self, ns: float) -> float:
        """``ns`` as a percentage of what the steps cost, for severities: of the steps the path
        runs through (the rank whose steps take longest) when they are longer than the path (a
        path that starts at the first launch leaves the step's CPU ops out: 263 µs of a 3.154 ms
        step), else of the path. Rounded to 0.01."""
        base = max(self.length_ns, self._steps_on_path_ns)
        return round(100.0 * ns / base, 2) if base else 0.0

    @property
    def _steps_on_path_ns(self) -> int:
        """The most any rank's steps that overlap the path's window take, summed (0 without)."""
        return self._steps_on_path[0]

    @cached_property
    def _steps_on_path(self) -> tuple[int, int]:
        """(ns, count) of the steps of the rank whose steps overlapping the path's window take
        longest; (0, 0) without steps."""
        rs, seg = self.rank_steps, self.path.segments
        if rs is None or not len(rs) or not len(seg):
            return 0, 0
        lo, hi = int(seg["start_ns"].min()), int(seg["end_ns"].max())
        on = (rs["end_ns"].to_numpy() > lo) & (rs["start_ns"].to_numpy() < hi)
        if not on.any():
            return 0, 0
        per_rank = rs.loc[on].groupby("rank")["step_ns"].agg(["sum", "size"])
        top = per_rank.loc[per_rank["sum"].idxmax()]
        return int(top["sum"]), int(top["size"])

    @property
    def n_steps(self) -> int:
        """Steps the critical path spans: the most steps any rank has in its window (1 when
        the trace numbers none)."""
        return max(self.steps.values(), default=1) if self.steps else 1

    def share(self, ns: float) -> str:
        """``ns`` as a share, for messages, of the same base as :meth:`cost_pct` (severities):
        of the steps the path runs through when they are longer than it (``"2.03% of the
        step"``: 64 µs of a 3.154 ms step whose path is 263 µs), else of what the path covers
        (``"12.5% of the step"``, ``"53.68% of the 5-step critical path"``; wording.py)."""
        steps_ns, count = self._steps_on_path
        if steps_ns > self.length_ns:
            return share_of_steps(self.cost_pct(ns), count)
        # a recorded step shorter than the path (qwen: 47.15 ms step, 49.65 ms path) is not
        # the base: the share is of the path, and says so
        return share_of_path(self.pct(ns), self.n_steps, 0 < steps_ns < self.length_ns)

    @cached_property
    def _body_node_by_event(self) -> np.ndarray:
        """Per event id: its body node (-1 for markers); built once, indexed by every lookup."""
        return _body_node_table(self.graph, len(self.trace.events))

    def nodes_of(self, event_ids) -> np.ndarray:
        """The body node of each event: the node that carries its duration (-1 for markers)."""
        events = np.asarray(event_ids, dtype=np.int64)
        table = self._body_node_by_event
        known = (events >= 0) & (events < len(table))
        out = np.full(len(events), -1, dtype=np.int64)
        out[known] = table[events[known]]
        return out

    def joint_saving(self, findings) -> int | None:
        """ns the window would be shorter with the changes of all ``findings`` made together, by
        one replay (:func:`~tracediag.graph.changes.joint`); None when a finding with a saving
        did not record its change (a third-party rule that passes no ``change=``)."""
        changes = []
        for f in findings:
            change = self.changes.get(change_key(f))
            if change is None:
                if f.saving_ns > 0:
                    return None
                continue
            changes.append(change)
        return self.what_if(joint(changes)) if changes else 0

    def finding(
        self, rule, *, severity: Severity | None = None, change: WhatIf | None = None, **fields
    ) -> Finding:
        """A Finding of ``rule`` with ``impact_pct`` filled from ``impact_ns``; ``change`` is the
        what-if its ``saving_ns`` was replayed with, kept for :meth:`joint_saving`."""
        impact = int(fields.pop("impact_ns", 0))
        ranks = fields.get("ranks", ())
        if fields.get("track") and len(ranks) == 1:
            # A rule may name the track by its peer name (the same on every rank, which is how
            # it compared ranks); the finding names the rank's own track, as every view does.
            fields["track"] = rank_track_label(
                self.trace,
                int(ranks[0]),
                str(fields["track"]),
                self.track_labels,
                self.peer_track_names,
            )
        f = Finding(
            code=rule.code,
            severity=severity if severity is not None else rule.severity,
            title=fields.pop("title", rule.title),
            impact_ns=impact,
            impact_pct=self.pct(impact),
            **fields,
        )
        if change is not None:
            self.changes[change_key(f)] = change
        return f

    def track_name(self, track: int) -> str:
        """The track's name as every view shows it (``track_labels``); "" for no track."""
        return str(self.track_labels[int(track)]) if track >= 0 else ""


def change_key(f: Finding) -> tuple:
    """What names a finding whatever its severity (configurations override that, making a new
    Finding): its code, where and when."""
    return (f.code, f.ranks, f.engine, f.track, f.layer, f.op, f.start_ns, f.end_ns, f.saving_ns)


def _change_digest(change: WhatIf) -> bytes:
    """A digest of what ``change`` sets: equal for changes that set the same nodes to the same
    values in the same order (a replay of one is a replay of the other)."""
    h = hashlib.blake2b(digest_size=16)
    parts = (change.dur_nodes, change.dur_values, change.gap_nodes, change.gap_values)
    for part in (*parts, change.release_nodes):
        a = np.zeros(0, dtype=np.int64) if part is None else np.ascontiguousarray(part, np.int64)
        h.update(len(a).to_bytes(8, "little"))
        h.update(a.tobytes())
    return h.digest()


def _body_node_table(graph: Graph, n_events: int) -> np.ndarray:
    body = np.flatnonzero(graph.role == 0)
    table = np.full(max(n_events, int(graph.event[body].max(initial=-1)) + 1), -1, dtype=np.int64)
    table[graph.event[body]] = body
    return table


def _segments_with_events(seg: pd.DataFrame, trace: S.Trace, labels: np.ndarray) -> pd.DataFrame:
    ev = trace.events
    has = seg["event"].to_numpy() >= 0
    idx = np.maximum(seg["event"].to_numpy(), 0)
    out = seg.copy()
    for col in (S.NAME, S.KIND, S.LAYER, S.OP):
        if col in ev:
            out[col] = _path_texts(ev[col], idx, has)
    for col in (S.BYTES, S.WAIT):
        if col in ev:
            out[col] = np.where(has, ev[col].to_numpy()[idx], np.nan)
    names = np.asarray(labels, dtype=object)
    tr = seg["track"].to_numpy()
    if len(seg):
        out["track_name"] = texts_by_code([*names, ""], np.where(tr >= 0, tr, len(names)))
    else:  # an empty frame keeps the object column it always had
        out["track_name"] = np.where(tr >= 0, names[np.maximum(tr, 0)] if len(names) else "", "")
    return out


def _path_texts(col: pd.Series, idx: np.ndarray, has: np.ndarray):
    """``col`` at rows ``idx``, missing where not ``has``: by category code for a categorical of
    strings (see texts_by_code), else (or when every row is missing, which pandas keeps as an
    object column) the values themselves."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        cats = col.cat.categories
        codes = np.where(has, col.cat.codes.to_numpy()[idx], -1)
        if (codes >= 0).any() and pd.api.types.infer_dtype(cats, skipna=False) == "string":
            return texts_by_code(cats, codes)
    vals = col.iloc[idx].astype(object).to_numpy()  # the path's rows only
    return np.where(has, vals, None)


def step_times(graph: Graph) -> dict[int, int]:
    """Per rank: first start to last end of its nodes in the window (its device work)."""
    ok = (graph.rank >= 0) & graph.window
    rank = graph.rank[ok]
    if not len(rank):
        return {}
    # Ranks are small integers: a min and a max per rank, without a frame or a sort.
    first = np.full(int(rank.max()) + 1, np.iinfo(np.int64).max)
    last = np.full(len(first), np.iinfo(np.int64).min)
    np.minimum.at(first, rank, graph.start[ok])
    np.maximum.at(last, rank, graph.end[ok])
    return {int(r): int(last[r] - first[r]) for r in np.flatnonzero(np.bincount(rank))}


#: The stages of :func:`analyse`, announced through its ``progress`` callback.
GRAPH_STAGE = "building the dependency graph"
PATH_STAGE = "walking the critical path"


def _in_threads(events: int, *pieces: Callable[[], object]) -> list:
    """Each piece's result, in threads on a trace of that many ``events`` when big."""
    return map_in_threads(lambda piece: piece(), pieces, events=events)


def analyse(
    trace: S.Trace,
    hardware_overrides: dict | None = None,
    progress: Callable[[str], None] | None = None,
) -> Analysis:
    """Build the graph, walk the critical path and compute breakdowns for ``trace``;
    ``progress`` is called with each stage's label as it starts."""
    announce = progress or (lambda _stage: None)
    announce(GRAPH_STAGE)

    def graph_of_trace():
        inferred = infer_edges(trace)
        graph = build_graph(trace, inferred)
        widen_host_window(trace, graph)
        return inferred, graph

    # Pieces that read only the trace, or the graph, run in threads on a big trace (see
    # tracediag.io.threads): on 4 x 1M the graph takes 4.2 s, the breakdown beside it 0.4 s,
    # and the path, the steps and the windows 0.1-0.6 s each.
    n = len(trace.events)
    hardware = hw.resolve_ranks(trace, hardware_overrides)
    (inferred, graph), breakdown, early = _in_threads(
        n,
        graph_of_trace,
        lambda: temporal_breakdown(trace),
        lambda: _trace_only_parts(trace, hardware) if runs_in_threads(n) else {},
    )
    own, gapc = node_categories(graph, trace)
    announce(PATH_STAGE)
    path, by_rank, window_ns = _in_threads(
        n,
        lambda: walk(graph, trace, (own, gapc)),
        lambda: rank_steps(trace, graph),
        lambda: step_times(graph),
    )
    step_ns, steps = per_rank_typical(by_rank)
    analysis = Analysis(
        trace=trace,
        graph=graph,
        path=path,
        own_category=own,
        gap_category=gapc,
        breakdown=breakdown,
        hardware=hardware,
        step_ns=step_ns,
        inferred=inferred,
        window_ns=window_ns,
        steps=steps,
        rank_steps=by_rank,
    )
    analysis.__dict__.update(early)  # the cached parts, as their properties would make them
    return analysis


def _durations(trace: S.Trace) -> dict[str, list[dict]]:
    return {"by_layer": layer_durations(trace), "by_op": op_durations(trace)}


def _trace_only_parts(trace: S.Trace, hardware: dict) -> dict[str, object]:
    """Cached parts of :class:`Analysis` that read only the trace (and the hardware), by their
    property's name: made beside the graph on a big trace, whose building keeps one thread busy
    several times longer than the breakdown keeps the other (64 ranks x 100k instructions of
    the clean-room writer: 6.5 s against 0.5 s). The report reads the bounds and the
    durations, COL201 and the report the lateness, NUM701 and the report the matmuls' work;
    each is what its property would make. (The ordinals and the excess over peers, COL201's,
    raised the 4 x 1M job's peak by 340 MB here and gained nothing: they stay with the rule.)"""
    return {
        "bounds": bounds_table(trace, hardware),
        "durations": _durations(trace),
        "matmul_work": matmul_work(trace),
        "lateness": lateness(trace.collectives),
    }
