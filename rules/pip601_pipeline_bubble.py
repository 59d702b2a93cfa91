"""PIP601: a pipeline stage idles in bubbles well beyond what its schedule needs."""

from __future__ import annotations

from tracediag.engine.rule import Rule
from tracediag.model.findings import Severity
from tracediag.model.units import fmt_ns


class PipelineBubble(Rule):
    code = "PIP601"
    name = "pipeline-bubble"
    title = "Pipeline bubble above the schedule's ideal"
    severity = Severity.WARNING
    options = {
        "min_excess_pct": 5.0,  # points of the step above the ideal share (less exposed P2P)
        "warn_excess_pct": 10.0,
    }
    doc = {
        "what it finds": "Per pipeline stage, the share of the step its ranks do not compute "
        "(the bubble) against the 1F1B/GPipe ideal (p-1)/(m+p-1) for p stages and m "
        "micro-batches (counted from the Send/Recv transfers), with the warm-up (window start to "
        "the stage's first compute), the cool-down (its last compute to the window's end) and "
        "the time its Recvs waited for the neighbouring stage as evidence. The impact is the "
        "bubble above the ideal less the stage's exposed P2P transfer time (a Recv from the "
        "later of its start and the matching Send's arrival to its end, with no compute beside "
        "it: communication, reported by COL202); the what-if saving of balancing the stages is "
        "PIP602's.",
        "why it matters": "The ideal bubble is the price of the schedule; anything above it is "
        "time the stage waits for a slow neighbour, for transfers, or for too few micro-batches "
        "to fill the pipeline.",
        "how to fix": "If one stage is slower (PIP602), rebalance the stages; otherwise raise the "
        "number of micro-batches, use an interleaved schedule, or overlap the Send/Recv "
        "transfers with compute.",
        "example": "`PIP601 warning ranks 0: stage 0 idles 42% of the step against the "
        "schedule's 27% (4 stages, 8 micro-batches): 1.2 ms above the ideal; its Recvs waited "
        "1.5 ms.`",
    }

    def check(self, ctx, opts):
        from tracediag.analysis.pipeline_stats import ideal_bubble_pct, micro_batches, stage_table

        layout = ctx.layout
        micro = micro_batches(ctx)
        if layout.pp < 2 or not micro:
            return
        ideal = ideal_bubble_pct(layout.pp, micro)
        for stage, row in stage_table(ctx).iterrows():
            above_all = int(row["bubble_ns"] - ideal / 100.0 * ctx.length_ns)
            # Time in exposed Recv transfers is communication (COL202's), not a schedule bubble
            # (the ideal share assumes free transfers): left out of the excess and the impact.
            p2p = int(min(max(above_all, 0), int(row["p2p_transfer_ns"])))
            above = above_all - p2p
            excess = 100.0 * above / ctx.length_ns
            if excess < opts["min_excess_pct"]:
                continue
            yield ctx.finding(
                self,
                severity=Severity.WARNING if excess >= opts["warn_excess_pct"] else Severity.INFO,
                message=(
                    f"Stage {stage} idles {row['bubble_pct']:.1f}% of the step against the "
                    f"schedule's {ideal:.1f}% ({layout.pp} stages, {micro} micro-batches): "
                    f"{fmt_ns(above_all)} above the ideal"
                    + (f", {fmt_ns(p2p)} of it in exposed P2P transfers (COL202)" if p2p else "")
                    + f"; warm-up {fmt_ns(int(row['warmup_ns']))}, "
                    f"cool-down {fmt_ns(int(row['cooldown_ns']))}, its Recvs waited "
                    f"{fmt_ns(int(row['recv_wait_ns']))}."
                ),
                ranks=tuple(row["ranks"]),
                start_ns=ctx.path.start_ns,
                end_ns=ctx.path.end_ns,
                impact_ns=above,
                suggestion="See PIP602 for a slow stage; else more micro-batches or an "
                "interleaved schedule shrink the bubble.",
                evidence={
                    "stage": int(stage),
                    "bubble_ns": int(row["bubble_ns"]),
                    "bubble_pct": float(row["bubble_pct"]),
                    "ideal_bubble_pct": round(ideal, 2),
                    "micro_batches": micro,
                    "stages": layout.pp,
                    "warmup_ns": int(row["warmup_ns"]),
                    "cooldown_ns": int(row["cooldown_ns"]),
                    "recv_wait_ns": int(row["recv_wait_ns"]),
                    "p2p_transfer_ns": p2p,
                    "excess_ns": above_all,
                },
            )
