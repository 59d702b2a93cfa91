"""PIP602: one pipeline stage computes longer than the others; every other stage idles for it."""

from __future__ import annotations

from tracediag.engine.rule import Rule, severity_by_saving
from tracediag.model import schema as S
from tracediag.model.findings import Severity
from tracediag.model.units import fmt_ns


class StageImbalance(Rule):
    code = "PIP602"
    name = "pipeline-stage-imbalance"
    title = "Slow pipeline stage: the other stages wait for it in bubbles"
    severity = Severity.WARNING
    options = {
        "min_imbalance_pct": 10.0,  # busy time above the median stage's
        "warn_saving_pct": 3.0,
        "error_saving_pct": 10.0,
    }
    doc = {
        "what it finds": "The pipeline stage whose compute work exceeds the median stage's, with "
        "the bubble it costs every other stage and the what-if of balanced stages: the slow "
        "stage's compute shortened by its excess work, replayed. Work is the busy time less "
        "what ops ran beyond twice the median of the same op on their rank (preempted on a host "
        "whose cores the ranks share: time the host took, which balancing would not give "
        "back).",
        "why it matters": "In a pipeline every micro-batch passes every stage: the slowest stage "
        "sets the pace, and the others wait for it (their bubbles grow by the same amount each). "
        "A stage 20% slower than the rest can cost more than 10% of the step on every stage.",
        "how to fix": "Rebalance the layers across stages (fewer layers, or cheaper ones such as "
        "the embedding or the loss, on the slow stage); check that stage's ranks for a slower "
        "device or a heavier kernel; with interleaved schedules, split the slow stage's layers "
        "over more virtual stages.",
        "example": "`PIP602 error ranks 2: stage 2 computes 7.7 ms against the median stage's "
        "5.5 ms (+40%); the other stages idle 1.8 ms more in bubbles. Balanced, the step would "
        "be 1.8 ms (19%) shorter.`",
    }

    def check(self, ctx, opts):
        import numpy as np

        from tracediag.analysis.pipeline_stats import stage_table
        from tracediag.engine.saving_bound import impact_covering_saving
        from tracediag.graph.changes import WhatIf

        if ctx.layout.pp < 2:
            return
        stages = stage_table(ctx)
        # Judged on work: an op preempted on a shared host is no imbalance of the layers.
        median = float(np.median(stages["work_ns"]))
        slow = int(stages["work_ns"].idxmax())
        busy = int(stages.at[slow, "busy_ns"])
        work = int(stages.at[slow, "work_ns"])
        excess_pct = 100.0 * (work / median - 1.0) if median else 0.0
        if excess_pct < opts["min_imbalance_pct"]:
            return
        ranks = list(stages.at[slow, "ranks"])
        ev = ctx.trace.events
        compute = np.flatnonzero(
            (ev[S.KIND] == "compute").to_numpy() & ev[S.RANK].isin(ranks).to_numpy()
        )
        nodes = ctx.nodes_of(compute)
        nodes = nodes[nodes >= 0]
        # Balanced, the stage does the median stage's work: its excess work comes off its compute
        # (spread over its ops); the time the host took from it stays.
        scale = max(0.0, 1.0 - (work - median) / busy) if busy else 1.0
        change = WhatIf.durations(nodes, np.rint(ctx.graph.dur[nodes] * scale).astype(np.int64))
        saving = ctx.what_if(change)
        seg = ctx.path.segments
        # The stage's time on the path: its compute, and the skew others wait at its Sends
        # for (which is its compute too, seen from the collective).
        mine = seg["category"].isin(["compute", "collective_skew"])
        on_path = seg[mine & seg["rank"].isin(ranks)]
        # The stage's compute the scaling shortens on the path, before the window's start too.
        impact = impact_covering_saving(
            ctx, change, int(on_path["dur_ns"].sum() * (1.0 - scale)), int(saving)
        )
        others = stages.drop(index=slow)
        layer = ev.loc[compute, S.LAYER] if S.LAYER in ev else None
        layers = (
            sorted({x for x in layer.dropna().astype(str) if x.startswith("layer")})
            if layer is not None
            else []
        )
        yield ctx.finding(
            self,
            severity=severity_by_saving(ctx.cost_pct(saving), opts, self.severity),
            message=(
                f"Stage {slow} (ranks {', '.join(map(str, ranks))}) computes {fmt_ns(busy)} "
                f"({fmt_ns(work)} of work) against the median stage's {fmt_ns(median)} of work "
                f"(+{excess_pct:.0f}%); the other "
                f"stages idle in bubbles for {fmt_ns(int(others['bubble_ns'].median()))} "
                f"({others['bubble_pct'].median():.1f}% of the step). With balanced stages the "
                f"step would be {fmt_ns(saving)} ({ctx.pct(saving)}%) shorter, the bubble cost "
                f"of this stage on every other stage."
            ),
            ranks=tuple(ranks),
            layer=",".join(layers),
            start_ns=int(stages.at[slow, "first_ns"]),
            end_ns=int(stages.at[slow, "last_ns"]),
            impact_ns=impact,
            saving_ns=int(saving),
            change=change,
            suggestion="Move layers off this stage (or make them cheaper) until the stages' "
            "compute times match.",
            evidence={
                "stage": slow,
                "busy_ns": busy,
                "work_ns": work,
                "median_stage_busy_ns": int(np.median(stages["busy_ns"])),
                "median_stage_work_ns": int(median),
                "imbalance_pct": round(excess_pct, 2),
                "bubble_cost_ns": int(saving),
                "stage_busy_ns": {int(s): int(b) for s, b in stages["busy_ns"].items()},
                "stage_work_ns": {int(s): int(b) for s, b in stages["work_ns"].items()},
                "stage_bubble_pct": {int(s): float(b) for s, b in stages["bubble_pct"].items()},
            },
        )
