"""COL201: a rank arrives late at collectives and every other rank waits for it.

Impact: the time the other ranks wait for the late rank, measured on arrivals at the
collectives where it arrives last: each other participant waits from its own arrival to the late
rank's (a job timing its collectives calls this the wait for the last); a rank's waits are merged
over the collectives, so the part of the wait at DDP's second bucket that lies within the wait at
the first counts once; the impact is the median of the other ranks' merged waits (the typical
rank's time lost, in the same time as the step, not summed over ranks). It does not depend on
where the critical path runs: a path that crosses the late rank's own delay (its sleep as a gap)
instead of the others' waits shows the same straggler. The saving is the replay's, with the rank
at its peers' median pace (:func:`straggler_change`); it can exceed the impact by the rank's own
extra work and idle time the pace change removes, which the message then explains. It can also
be less: an asynchronous collective waits while its rank computes on (DDP's bucket all-reduces
during the backward, Neuron's collectives beside the next layer), and the message says how much
of the wait the waiting ranks' own work runs beside (``wait_beside_own_work_ns``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tracediag.engine.rule import Rule, severity_by_saving
from tracediag.model import schema as S
from tracediag.model.findings import Severity
from tracediag.model.units import fmt_ns

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from tracediag.graph.changes import WhatIf


class CollectiveStraggler(Rule):
    code = "COL201"
    name = "collective-straggler"
    title = "Straggler rank: others wait for it at collectives"
    severity = Severity.WARNING
    options = {
        "min_late_ns": 0,  # ignore lateness below this (raise it when clocks are noisy)
        "min_impact_pct": 0.5,
        # Ranks of one job on identical hardware differ in pace by a percent or two (clock,
        # thermals, placement): on the clean-room writer's clean jobs, whose ranks draw a 0.5%
        # pace jitter, the rank arriving last prices at 0.03-1.8% of the step over seeds 0-5.
        # Below 3% a late rank is that variance, not a straggler to chase: info.
        "warn_saving_pct": 3.0,
        "error_saving_pct": 10.0,
        # Last in fewer than this share of any operation's instances: the lateness moves between
        # ranks (scheduling noise on shared cores), no one rank holds the job: info at most.
        "min_last_share": 0.5,
        # ... or last so often with more than this chance among ranks arriving in random order
        # (a few instances: on 4 ranks, one is last at 2 of 3 of an op's with a 62% chance, at
        # 3 of 3 with 6%).
        "max_chance": 0.1,
    }
    doc = {
        "what it finds": "Ranks that arrive at collective operations after the other participants, "
        "measured on arrivals (the trigger of a Neuron collective, the start of an NCCL kernel or "
        "of a gloo range) after clock alignment, against the median arrival of the *other* "
        "participants. A rank last at fewer than `min_last_share` of any operation's instances is "
        "reported as info at most: when the last place moves between ranks, it is noise. So is a "
        "rank last too few times to tell from chance: were the participants' arrival order random, "
        "one of them would come last at least as often (over all its instances, or its most "
        "telling operation's) with a chance above `max_chance` (binomial), and late by less "
        "than three times the median lateness of the ranks last at its other collectives. The "
        "impact is the time the other ranks wait for it, from arrivals and wherever the critical "
        "path runs: at each collective where it arrives last, each other participant waits from "
        "its own arrival to the late rank's; a rank's waits are merged over the collectives (the "
        "wait at a second collective that lies within the wait at the first counts once), and the "
        "impact is the median over the other ranks. The saving is the replay with the rank at "
        "the median pace of its peers. Where that saving is larger than the wait (the step runs "
        "through the late rank's own slower work, not only through the others' wait), the impact "
        "is the time the pace change takes off today's critical path instead, so no saving "
        "exceeds its impact.",
        "why it matters": "A synchronous collective cannot finish before its last participant "
        "arrives: every other rank idles for the straggler, so one slow rank sets the pace of the "
        "whole job. The critical path shows it as `collective_skew`.",
        "how to fix": "Look at what the late rank does before the collective (the evidence names "
        "the engines on its part of the critical path): uneven data or sequence lengths, a slower "
        "or throttled device, host interference (data loading, logging, garbage collection), or a "
        "different program (recompilation) on that rank.",
        "example": "`COL201 warning rank 3: arrives last at 12 of 12 AllReduce, 180 µs after the "
        "median of the others on average; at the median rank's pace the step would be 2.1 ms "
        "shorter.`",
    }

    def check(self, ctx, opts):
        import numpy as np

        from tracediag.analysis.arrival_skew import waits_beside_own_work, waits_for_last
        from tracediag.engine.saving_bound import change_effect
        from tracediag.whatif.straggler_pace import DURATION_KINDS

        late = ctx.lateness
        # A stage waiting at a Recv is the pipeline's bubble: PIP601/PIP602 report those.
        late = late[late["synchronous"]]
        if not len(late):
            return
        seg = ctx.path.segments
        skew = seg[seg["category"] == "collective_skew"]
        graph = ctx.graph
        arrival_of = _arrival_nodes(graph, len(ctx.trace.events))
        work = ctx.trace.events[S.KIND].isin(DURATION_KINDS).to_numpy()
        for rank, rows in late.groupby(S.RANK):
            late_rows = rows[(rows["late_ns"] > opts["min_late_ns"])]
            last_rows = late_rows[late_rows["last"]]
            if not len(last_rows):
                continue
            # Today's cost: the others' waits for this rank, from arrivals, wherever the path
            # runs (it may cross the rank's own delay instead); the path's share is said apart.
            waits = waits_for_last(late, int(rank), opts["min_late_ns"])
            wait = int(round(float(np.median(waits)))) if len(waits) else 0
            path_wait = int(skew.loc[skew["rank"] == rank, "dur_ns"].sum())
            beside = waits_beside_own_work(
                late, int(rank), ctx.trace.events, work, opts["min_late_ns"]
            )
            wait_steps = _steps_of(ctx, last_rows)
            nodes = arrival_of[late_rows[S.EVENT].to_numpy(dtype=np.int64)]
            ok = nodes >= 0
            change = straggler_change(
                ctx, int(rank), nodes[ok], late_rows["late_ns"].to_numpy(dtype=np.int64)[ok]
            )
            saving = ctx.what_if(change)
            # The impact is the others' wait; where the replay gains more than that, the step
            # runs through the late rank's own excess (its slower work and idle gaps on today's
            # path), and that excess is the cost: it bounds the saving (engine/saving_bound.py).
            own_on_path = change_effect(ctx, change).removed_on_path_ns
            impact = max(wait, own_on_path) if saving > wait else wait
            if (
                ctx.pct(impact) < opts["min_impact_pct"]
                and ctx.pct(saving) < opts["min_impact_pct"]
            ):
                continue
            n_inst = int(rows[S.COLL_KEY].nunique())
            ops = last_rows[S.COLL_OP].astype(str).value_counts()
            worst = last_rows.nlargest(5, "late_ns")
            mean_late = float(last_rows["late_ns"].mean())
            slow = _slower_than_peers(ctx, int(rank), int(last_rows[S.ARRIVAL].max()))
            engines, layers = slow.by_engine, slow.layers
            cause = ""
            if len(engines):
                cause = f" Its {engines.index[0]} work runs {fmt_ns(engines.iloc[0])} longer than the median rank's"
                cause += f", most in {', '.join(layers)}." if layers else "."
            if not len(engines) or str(engines.index[0]) == "cpu":
                # CPU threads: what differs step by step, op by op and idle gap by idle gap,
                # not a sum of per-op excesses (module rank_contrast).
                host = _host_difference(ctx, int(rank), int(last_rows[S.ARRIVAL].max()))
                if host is not None:
                    cause, slow = host.text, host.slow
                    layers = slow.layers
            first_wait = int((last_rows[S.ARRIVAL] - last_rows["late_ns"]).min())
            share = _last_share(rows)
            chance = _chance_of_lastness(rows, late)
            severity = severity_by_saving(ctx.cost_pct(saving), opts, self.severity)
            rotating = ""
            if share < opts["min_last_share"]:
                severity = min(severity, Severity.INFO)
                rotating = (
                    f" It is last at no more than {share:.0%} of any operation's instances: the "
                    "lateness moves between ranks (noise), no single rank holds the job up."
                )
            elif chance > opts["max_chance"] and _like_the_others(rows, late, mean_late):
                severity = min(severity, Severity.INFO)
                rotating = (
                    f" Among {_participants(rows, late)} ranks arriving in random order, one of "
                    f"them would come last this often with a chance of {chance:.0%}, and as late "
                    "as the last ranks of its other collectives: too few instances to tell a "
                    "straggler from noise."
                )
            own_ops, own_gaps = _own_cut(ctx, change)
            clocks = ""
            uncertainty = _clock_uncertainty(ctx, int(rank))
            if uncertainty and mean_late <= uncertainty:
                severity = min(severity, Severity.INFO)
                clocks = (
                    f" Its lateness ({fmt_ns(mean_late)} on average) is within the uncertainty of "
                    f"the clocks between it and the other ranks ({fmt_ns(uncertainty)}, TRC503): "
                    "the clocks' misalignment may explain it, so it is no more than info."
                )
            yield ctx.finding(
                self,
                severity=severity,
                message=(
                    f"Rank {rank} arrives last at {len(last_rows)} of {n_inst} collectives "
                    f"({', '.join(f'{n} {op}' for op, n in ops.items())}), on average {fmt_ns(mean_late)} "
                    f"after the median of the other participants; "
                    f"{_wait_text(ctx, wait, waits, path_wait, wait_steps)}"
                    f"{_beside_text(wait, beside)} "
                    f"Arriving with the median rank, the step would be {fmt_ns(saving)} shorter."
                    f"{_beyond_wait(ctx, wait, int(saving), own_ops, own_gaps, own_on_path)}"
                    f"{cause}{rotating}{clocks}"
                ),
                ranks=(int(rank),),
                # The cause, not the symptom: the engine and layers where it is slower than its
                # peers, from the first of that slow work to its last late arrival.
                engine=str(slow.by_engine.index[0]) if len(slow.by_engine) else "cc",
                track=str(slow.by_track.index[0]) if len(slow.by_track) else "",
                layer=", ".join(layers),
                op=str(ops.index[0]),
                start_ns=min(first_wait, slow.start_ns)
                if slow.start_ns is not None
                else first_wait,
                end_ns=int(last_rows[S.ARRIVAL].max()),
                impact_ns=impact,
                saving_ns=int(saving),
                change=change,
                suggestion="Find what delays this rank before the collectives (see its engines on the path) and even it out.",
                evidence={
                    "late_instances": len(last_rows),
                    "instances": n_inst,
                    "mean_late_ns": mean_late,
                    "max_late_ns": int(last_rows["late_ns"].max()),
                    "total_late_ns": int(late_rows["late_ns"].sum()),
                    "wait_by_rank_ns": {str(r): int(v) for r, v in waits.items()},
                    "wait_ns": wait,
                    "own_on_path_ns": int(own_on_path),
                    "path_wait_ns": path_wait,
                    "wait_beside_own_work_ns": {str(r): int(v) for r, v in beside.items()},
                    "wait_steps": wait_steps,
                    "worst": [
                        {"coll_key": int(k), "op": str(o), "late_ns": int(v), "arrival_ns": int(a)}
                        for k, o, v, a in zip(
                            worst[S.COLL_KEY],
                            worst[S.COLL_OP],
                            worst["late_ns"],
                            worst[S.ARRIVAL],
                            strict=True,
                        )
                    ],
                    "last_share": round(share, 4),
                    "clock_uncertainty_ns": int(uncertainty),
                    "own_work_cut_ns": own_ops,
                    "own_gap_cut_ns": own_gaps,
                    "excess_over_peers_by_engine_ns": {str(k): int(v) for k, v in engines.items()},
                    "slowest_layers": layers,
                },
            )


def straggler_change(ctx, rank: int, nodes: np.ndarray, late_ns: np.ndarray) -> WhatIf:
    """The change COL201 prices: ``rank``'s work at its peers' pace (straggler_pace), and its
    arrival ``nodes`` moved up by their lateness ``late_ns`` where a gap before them is left.

    An arrival's gap is cut to ``gap - late`` but never below 0: an arrival cannot come before
    the work it follows ends. (Cutting by the whole lateness on top of the pace change, which
    already moves that work up, once gave gaps of -70 ms: arrivals, and so the step's start,
    before the first event.) Where the pace change already sets a smaller gap, that one stays.
    """
    import numpy as np

    from tracediag.graph.changes import WhatIf
    from tracediag.whatif.straggler_pace import peer_pace_change

    gap = ctx.graph.gap
    pace = peer_pace_change(ctx, [rank])
    new_gap = gap.copy()
    if pace.gap_nodes is not None and len(pace.gap_nodes):
        new_gap[pace.gap_nodes] = pace.gap_values
    new_gap[nodes] = np.minimum(new_gap[nodes], np.maximum(gap[nodes] - late_ns, 0))
    changed = np.flatnonzero(new_gap != gap)
    return WhatIf(pace.dur_nodes, pace.dur_values, changed, new_gap[changed])


def _arrival_nodes(graph, n_events: int) -> np.ndarray:
    """Per event id: the node of its arrival at a collective (-1 for other events)."""
    import numpy as np

    from tracediag.graph.dependencies import ARRIVAL

    arrivals = np.flatnonzero(graph.role == ARRIVAL)
    events = graph.event[arrivals]
    table = np.full(max(n_events, int(events.max(initial=-1)) + 1), -1, dtype=np.int64)
    table[events] = arrivals
    return table


def _clock_uncertainty(ctx, rank: int) -> float:
    """ns by which ``rank``'s times may be off from the other ranks' after clock alignment: its
    residual plus the largest other rank's (``clock_residual_ns``, what TRC503 reports; 0 on a
    shared or reference clock)."""
    res = {int(r): float(m.info.get("clock_residual_ns") or 0.0) for r, m in ctx.trace.meta.items()}
    others = max((v for r, v in res.items() if r != rank), default=0.0)
    return res.get(rank, 0.0) + others


def _own_cut(ctx, change: WhatIf) -> tuple[int, int]:
    """ns the change takes off the rank's own work (durations) and the idle gaps before that
    work, in all. Gaps before collective arrivals (a gloo thread idle until the next call) are
    left out: they are the rank's wait for its own work, counted once in that work."""
    import numpy as np

    from tracediag.whatif.straggler_pace import DURATION_KINDS

    g = ctx.graph
    ops = gaps = 0
    if change.dur_nodes is not None and len(change.dur_nodes):
        ops = int(np.sum(g.dur[change.dur_nodes] - np.maximum(change.dur_values, 0)))
    if change.gap_nodes is not None and len(change.gap_nodes):
        work = ctx.trace.events[S.KIND].isin(DURATION_KINDS).to_numpy()
        ev = g.event[change.gap_nodes]
        on_work = (ev >= 0) & work[np.maximum(ev, 0)]
        gaps = int(np.sum((g.gap[change.gap_nodes] - change.gap_values)[on_work]))
    return ops, gaps


#: A saving this share over the wait is worth explaining; less is the replay's rounding.
_BEYOND_WAIT_SHARE = 0.05


def _beyond_wait(ctx, wait: int, saving: int, own_ops: int, own_gaps: int, own_on_path: int) -> str:
    """Why a saving exceeds the others' wait for the rank: the pace change also shortens the
    late rank's own work and idle time, which the step runs through as well (before the first
    wait, between the collectives, after the last); that time on today's path is then the
    impact."""
    text = ""
    if saving - wait > _BEYOND_WAIT_SHARE * wait:  # more than the replay's rounding
        more = f"That is {fmt_ns(saving - wait)} more than the wait: the" if wait else "The"
        text = (
            f" {more} saving includes the late rank's own extra work and idle time (at the "
            f"median pace its ops take {fmt_ns(own_ops)} less and the idle gaps before them "
            f"{fmt_ns(own_gaps)} less), on the path beyond the others' wait."
        )
    if saving > wait and own_on_path > wait:
        text += (
            f" The impact is the late rank's excess on today's critical path, "
            f"{fmt_ns(own_on_path)} ({ctx.share(own_on_path)}), which the pace change takes off it."
        )
    return text


def _wait_text(ctx, impact: int, waits: pd.Series, path_wait: int, steps: int) -> str:
    """The others' wait for the rank (the impact, ``waits`` per waiting rank) and how much of it
    today's critical path runs through (none: the path crosses other work, the rank's own delay
    for one; more: the path follows the ranks that wait longest)."""
    per_step = f"{fmt_ns(impact / steps)} per step in {steps} steps, " if steps > 1 else ""
    if len(waits) == 1:
        who, how = f"rank {waits.index[0]} waits", "from its own arrival to the late rank's"
    else:
        who, how = (
            "the other ranks wait",
            "the median over them of the time from their own arrival to its",
        )
    text = f"{who} {fmt_ns(impact)} for it ({ctx.share(impact)}): {per_step}{how}"
    if not path_wait:
        return f"{text}; today's critical path does not run through those waits."
    if path_wait <= impact:
        return f"{text}; {fmt_ns(path_wait)} of it is on today's critical path."
    return (
        f"{text}; today's critical path runs through {fmt_ns(path_wait)} of waits for it, "
        f"following the ranks that wait longest (up to {fmt_ns(int(waits.max()))})."
    )


def _beside_text(impact: int, beside: pd.Series) -> str:
    """That the waiting ranks' own work runs beside part of their wait (median over them): they
    idle for less than the wait. Nothing where that part is within rounding."""
    import numpy as np

    part = int(round(float(np.median(beside)))) if len(beside) else 0
    if part <= _BEYOND_WAIT_SHARE * impact:
        return ""
    whose = "its" if len(beside) == 1 else "their"
    return (
        f" {whose.capitalize()} own work runs beside {fmt_ns(part)} of that wait (the "
        f"collectives run asynchronously), idle for the rest."
    )


def _steps_of(ctx, rows: pd.DataFrame) -> int:
    """How many steps hold the rank's arrivals of ``rows`` (0 where the trace has no steps)."""
    import numpy as np

    ev = ctx.trace.events
    if S.STEP not in ev:
        return 0
    step = ev[S.STEP].to_numpy(dtype=np.float64)[rows[S.EVENT].to_numpy(dtype=np.int64)]
    return int(len(np.unique(step[~np.isnan(step)])))


def _last_share(rows: pd.DataFrame) -> float:
    """The largest share, over operations, of a rank's instances of it where it came last."""
    per_op = rows.groupby(rows[S.COLL_OP].astype(str))
    return float((per_op["last"].sum() / per_op[S.COLL_KEY].nunique()).max())


def _participants(rows: pd.DataFrame, late: pd.DataFrame) -> int:
    """The median number of ranks in the rank's collective instances."""
    import numpy as np

    sizes = late.groupby(S.COLL_KEY).size()
    return int(np.median(sizes.reindex(rows[S.COLL_KEY].unique()).to_numpy()))


def _chance_of_lastness(rows: pd.DataFrame, late: pd.DataFrame) -> float:
    """The chance that any one of the participants comes last at least as often as this rank,
    were the arrival order random: the binomial tail of its count of last arrivals, over all
    its instances or its most telling operation's (the smaller), times the participants."""
    ranks = _participants(rows, late)
    if ranks < 2:
        return 0.0
    counts = [(int(rows["last"].sum()), int(rows[S.COLL_KEY].nunique()))]
    per_op = rows.groupby(rows[S.COLL_OP].astype(str))
    counts += list(zip(per_op["last"].sum().astype(int), per_op[S.COLL_KEY].nunique(), strict=True))
    tails = [_binomial_tail(k, n, 1.0 / ranks) for k, n in counts]
    return min(1.0, ranks * min(tails))


def _like_the_others(rows: pd.DataFrame, late: pd.DataFrame, mean_late: float) -> bool:
    """Whether the rank's mean lateness where it is last is within 3x the median lateness of the
    ranks last at its other collectives (scheduling jitter); False when it is last at all."""
    import numpy as np

    others = rows.loc[~rows["last"].to_numpy(dtype=bool), S.COLL_KEY]
    last = late[late["last"].to_numpy(dtype=bool) & late[S.COLL_KEY].isin(others).to_numpy()]
    if not len(last):
        return False
    return mean_late < 3 * float(np.median(last["late_ns"].to_numpy(dtype=np.float64)))


def _binomial_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p), in log space (n may be thousands of instances)."""
    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    if k <= n * p:  # at or below the expected count: no evidence at all
        return 1.0
    log_p, log_q = math.log(p), math.log1p(-p)
    terms = [
        math.lgamma(n + 1)
        - math.lgamma(i + 1)
        - math.lgamma(n - i + 1)
        + i * log_p
        + (n - i) * log_q
        for i in range(k, min(n, k + 400) + 1)  # the terms shrink fast above the mean
    ]
    top = max(terms)
    return math.exp(top) * sum(math.exp(t - top) for t in terms)


@dataclass
class HostDifference:
    """COL201's cause on CPU threads: its sentence and where it is (as :class:`SlowWork`)."""

    text: str
    slow: SlowWork


def _host_difference(ctx, rank: int, until: int, share: float = 0.25) -> HostDifference | None:
    """What ``rank``'s CPU threads do longer than the median of the other ranks in the same
    steps (:func:`tracediag.analysis.rank_contrast.contrast`): the item with the most excess
    and those with at least ``share`` of it; None when nothing runs longer."""
    import pandas as pd

    from tracediag.analysis.peers import track_labels
    from tracediag.analysis.rank_contrast import IDLE, contrast

    c = contrast(ctx.trace, rank, until)
    c = c[c["excess_ns"] > 0]
    if not len(c):
        return None
    c = c[c["excess_ns"] >= share * c["excess_ns"].iat[0]].head(3)
    labels = track_labels(ctx.trace)
    parts = []
    for row in c.itertuples(index=False):  # at most three items
        per_step = f"{fmt_ns(row.mine_ns)} per step against {fmt_ns(row.peers_ns)}"
        if row.item.startswith(IDLE):
            what = f"idle (no op) before {row.item[len(IDLE) :]}"
        else:
            what = f"top-level op {row.item} (inside no other op)"
        parts.append(
            f"{what} on {labels[int(row.track)]}, {per_step} (+{fmt_ns(row.excess_ns)} over "
            f"{int(row.steps)} {'step' if row.steps == 1 else 'steps'})"
        )
    text = (
        " What it does longer than the median of the other ranks, step by step: "
        + "; then ".join(parts)
        + "."
    )
    items = [str(x) for x in c["item"]]
    first = c.iloc[0]
    slow = SlowWork(
        by_engine=pd.Series({"cpu": int(c["excess_ns"].sum())}),
        by_track=pd.Series({str(first["thread"]): int(first["excess_ns"])}),
        layers=items,
        start_ns=int(c["start_ns"].min()),
        end_ns=until,
    )
    return HostDifference(text, slow)


@dataclass
class SlowWork:
    """Where a rank spends more time than its peers before its late arrivals."""

    by_engine: pd.Series  # excess ns per engine, largest first
    by_track: pd.Series  # excess ns per track (by its name on every rank), largest first
    layers: list[str]  # layers holding most of the excess
    start_ns: int | None
    end_ns: int | None


def _slower_than_peers(ctx, rank: int, until: int, share: float = 0.25) -> SlowWork:
    """Excess over peers per engine, and the layers (and their time window) whose excess is at
    least ``share`` of the largest layer's."""
    import numpy as np
    import pandas as pd

    from tracediag.analysis.peers import peer_track_names
    from tracediag.whatif.straggler_pace import DURATION_KINDS, pace_excess

    ev = ctx.trace.events
    excess = pace_excess(ctx)  # what the replay prices, so the cause and the saving agree
    mine = (ev[S.RANK].to_numpy() == rank) & (ev[S.TS].to_numpy() < until) & (excess > 0)
    # A collective's extra length is its wait for others, not work of its own.
    mine &= ev[S.KIND].isin(DURATION_KINDS).to_numpy(dtype=bool)
    ids = np.flatnonzero(mine)
    # Summed per track first (by its number), then over the tracks of each engine and of each
    # peer track name: the same integer sums as grouping every event by its engine's text.
    per_track = pd.Series(excess[ids]).groupby(ev[S.TRACK].to_numpy()[ids]).sum()
    track_ids, track_sums = per_track.index.to_numpy(), per_track.to_numpy()
    engines = ctx.trace.tracks[S.ENGINE].astype(str).to_numpy()[track_ids]
    by_engine = pd.Series(track_sums).groupby(engines).sum().sort_values(ascending=False)
    tracks = peer_track_names(ctx.trace)[track_ids]
    by_track = pd.Series(track_sums).groupby(tracks).sum().sort_values(ascending=False)
    layers: list[str] = []
    chosen = ids
    if S.LAYER in ev and len(ids):
        lay = S.strings(ev[S.LAYER].iloc[ids])  # the rows asked for, not a text per event
        ok = ~pd.isna(lay)
        if ok.any():
            top = pd.Series(excess[ids][ok]).groupby(lay[ok]).sum().sort_values(ascending=False)
            layers = [str(x) for x, v in top.items() if v >= share * top.iloc[0]]
            chosen = ids[ok & np.isin(lay, layers)]
    if not len(chosen):
        return SlowWork(by_engine, by_track, layers, None, None)
    start = ev[S.TS].to_numpy()[chosen]
    return SlowWork(
        by_engine,
        by_track,
        layers,
        int(start.min()),
        int((start + ev[S.DUR].to_numpy()[chosen]).max()),
    )
