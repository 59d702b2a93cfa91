"""TRC506: the critical path is mostly time nothing in the trace explains, and why."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracediag.engine.rule import Rule
from tracediag.model import schema as S
from tracediag.model.findings import Severity
from tracediag.model.units import fmt_ns

if TYPE_CHECKING:
    import pandas as pd

#: The likely reasons, as evidence names them, and how the message says each.
NO_DEPENDENCIES = "format_without_dependencies"
MISSING_RECORDS = "missing_records"
UNRECORDED_WAIT = "unrecorded_dependency"


class MostlyGap(Rule):
    code = "TRC506"
    name = "mostly-gap"
    title = "The critical path is mostly unexplained gap"
    severity = Severity.WARNING
    options = {
        "min_gap_pct": 50.0,  # of the rank's own time on the critical path
        "min_impact_pct": 5.0,  # of the whole critical path
    }
    doc = {
        "what it finds": "Ranks whose stretch of the critical path is mostly `gap`: time between "
        "an event and the work it follows that no event, dependency or wait in the trace "
        "explains. It fires when gap makes up at least `min_gap_pct` of a rank's time on the path "
        "and at least `min_impact_pct` of the whole path, names the rank, how much, the track "
        "holding the largest part, and the likely reason, read from the trace itself: "
        "`format_without_dependencies` (the rank's format records no dependency between events "
        "and none could be inferred, so the path can only follow each track's own order); "
        "`missing_records` (the waiting events' only recorded predecessor is the previous event "
        "on their track: nothing says what started them, as in a sampled or truncated trace, a "
        "thread or stream that was not profiled, dropped events); `unrecorded_dependency` (they "
        "start after every recorded predecessor has ended: what they waited for, another "
        "stream's or thread's work, a sync, a transfer, is not in the trace).",
        "why it matters": "The critical path and every saving are computed from what the trace "
        "records. When most of the path is gap, the tool cannot say what the step waits for: the "
        "other findings cover only the explained part, and a clean report means little.",
        "how to fix": "Profile again with the records the reason points to: every thread and "
        "stream (PyTorch: `ProfilerActivity.CPU` and `CUDA`, no sampling of events), the "
        "format's dependency records (Neuron: the Flow table and `evt_wait_time`; Kineto: flows "
        "and `cuda_sync`), over whole steps; or read the trace in a format that keeps them.",
        "example": "`TRC506 warning rank 0: On rank 0, 180 µs of its 210 µs on the critical "
        "path (85.71% of the path) is gap nothing in the trace explains: the perfetto trace "
        "records no dependency between events and none could be inferred, so the path follows "
        "each track's own order and every idle stretch reads as gap.`",
    }

    def check(self, ctx, opts):
        import pandas as pd

        from tracediag.graph.inferred_edges import counts_by_rank

        seg = ctx.path.segments
        length = ctx.length_ns
        if not length or not len(seg):
            return
        rank = seg["rank"].to_numpy()
        on = rank >= 0
        is_gap = (seg["category"] == "gap").to_numpy() & on
        if ctx.pct(int(seg["dur_ns"].to_numpy()[is_gap].sum())) < opts["min_impact_pct"]:
            return
        dur = seg["dur_ns"].to_numpy()
        on_path = pd.Series(dur[on]).groupby(rank[on]).sum()
        gap = pd.Series(ctx.path.gap_by_rank())
        share = 100.0 * gap / on_path.reindex(gap.index)
        chosen = gap.index[
            (share >= opts["min_gap_pct"]) & (gap.map(ctx.pct) >= opts["min_impact_pct"])
        ]
        if not len(chosen):
            return
        ranked = _gap_by_cause(ctx, seg[is_gap])
        recorded = _recorded_edges_by_rank(ctx.trace)
        inferred = counts_by_rank(ctx.inferred)
        by_reason: dict[str, list[dict]] = {}
        for r in chosen.tolist():
            mine = ranked[ranked["rank"] == r]
            top = mine.iloc[0]
            n_recorded = int(recorded.get(r, 0))
            n_inferred = int(sum(inferred.get(r, {}).values()))
            if n_recorded == 0 and n_inferred == 0:
                reason = NO_DEPENDENCIES
            elif top["order_only"]:
                reason = MISSING_RECORDS
            else:
                reason = UNRECORDED_WAIT
            by_reason.setdefault(reason, []).append(
                {
                    "rank": int(r),
                    "gap_ns": int(gap[r]),
                    "path_ns": int(on_path[r]),
                    "gap_pct_of_path": ctx.pct(int(gap[r])),
                    "format": ctx.trace.meta[r].format if r in ctx.trace.meta else "",
                    "top_track": str(top["track_name"]),
                    "top_after": _after_name(int(top["code"])),
                    "top_gap_ns": int(top["dur_ns"]),
                    "recorded_edges": n_recorded,
                    "inferred_edges": n_inferred,
                }
            )
        for reason, rows in by_reason.items():
            yield self._finding(ctx, reason, rows, seg[is_gap])

    def _finding(self, ctx, reason: str, rows: list[dict], gaps: pd.DataFrame):
        ranks = tuple(r["rank"] for r in rows)
        total = sum(r["gap_ns"] for r in rows)
        mine = gaps[gaps["rank"].isin(ranks).to_numpy()]
        head = "; on ".join(
            f"rank {r['rank']}, {fmt_ns(r['gap_ns'])} of its {fmt_ns(r['path_ns'])} on the "
            f"critical path ({r['gap_pct_of_path']}% of the path)"
            for r in rows[:5]
        )
        more = f" and {len(rows) - 5} more ranks" if len(rows) > 5 else ""
        first = rows[0]
        if reason == NO_DEPENDENCIES:
            formats = sorted({r["format"] for r in rows if r["format"]})
            why = (
                f"the {', '.join(formats) or 'input'} trace records no dependency between events "
                "and none could be inferred, so the path follows each track's own order and "
                "every idle stretch reads as gap"
            )
            suggestion = (
                "Read the job in a format that records dependencies (flows, syncs, semaphore "
                "waits), or profile with them enabled."
            )
        elif reason == MISSING_RECORDS:
            why = (
                f"the largest part ({fmt_ns(first['top_gap_ns'])} on rank {first['rank']}) is idle "
                f"time on {first['top_track']} between consecutive events with nothing recorded "
                "in between: records are likely missing (a sampled or truncated trace, a thread "
                "or stream that was not profiled, dropped events)"
            )
            suggestion = "Profile every thread and stream over whole steps, without event sampling."
        else:
            why = (
                f"the largest part ({fmt_ns(first['top_gap_ns'])} on rank {first['rank']}) is "
                f"waiting on {first['top_track']} after every recorded predecessor (binding: "
                f"{first['top_after']}) has ended: a dependency the trace does not record "
                "(another stream's or thread's work, a sync, a transfer)"
            )
            suggestion = "Profile with the format's dependency records (flows, syncs, waits) on."
        return ctx.finding(
            self,
            message=(
                f"On {head}{more} is gap nothing in the trace explains: {why}. The critical "
                "path and every saving cover only the explained part."
            ),
            ranks=ranks,
            track=first["top_track"],
            start_ns=int(mine["start_ns"].min()),
            end_ns=int(mine["end_ns"].max()),
            impact_ns=int(total),
            saving_ns=0,
            suggestion=suggestion,
            evidence={"reason": reason, "ranks": rows},
        )


def _gap_by_cause(ctx, gaps: pd.DataFrame) -> pd.DataFrame:
    """The path's gap per (rank, track, binding edge code, ``order_only``), largest first within
    each rank. ``order_only``: the waiting event's one recorded predecessor is the previous event
    on its track, so nothing says what started it (missing records); otherwise everything it is
    known to wait for ended before it started (a dependency the trace does not record)."""
    import numpy as np
    import pandas as pd

    from tracediag.graph.dependencies import PROGRAM_ORDER

    nodes = gaps["node"].to_numpy()
    safe = np.maximum(nodes, 0)
    g = ctx.graph
    code = np.where(nodes >= 0, g.bind_code[safe], -1)
    n_pred = g.pred_ptr[safe + 1] - g.pred_ptr[safe]
    names = np.asarray(ctx.track_labels, dtype=object)  # as every view names the track
    track = gaps["track"].to_numpy()
    frame = pd.DataFrame(
        {
            "rank": gaps["rank"].to_numpy(),
            "track_name": np.where(track >= 0, names[np.maximum(track, 0)], ""),
            "code": code,
            "order_only": (code == PROGRAM_ORDER) & (n_pred == 1),
            "dur_ns": gaps["dur_ns"].to_numpy(),
        }
    )
    keys = ["rank", "track_name", "code", "order_only"]
    sums = frame.groupby(keys, as_index=False)["dur_ns"].sum()
    return sums.sort_values(["rank", "dur_ns"], ascending=[True, False], kind="stable")


def _recorded_edges_by_rank(trace: S.Trace) -> dict[int, int]:
    """Per rank: the recorded edges (of the format) whose successor is one of its events."""
    import numpy as np

    ed = trace.edges
    if not len(ed):
        return {}
    ranks = trace.events[S.RANK].to_numpy()[ed[S.DST].to_numpy()]
    counts = np.bincount(ranks)
    return {int(r): int(counts[r]) for r in np.flatnonzero(counts)}


def _after_name(code: int) -> str:
    from tracediag.graph.dependencies import EDGE_CODE_NAMES

    return EDGE_CODE_NAMES[code] if 0 <= code < len(EDGE_CODE_NAMES) else "no"
