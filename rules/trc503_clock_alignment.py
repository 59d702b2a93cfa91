"""TRC503: ranks whose clocks could not be aligned, or only loosely."""

from __future__ import annotations

from tracediag.engine.rule import Rule
from tracediag.model.findings import Severity
from tracediag.model.units import fmt_ns


class ClockAlignment(Rule):
    code = "TRC503"
    name = "clock-alignment"
    title = "Rank clocks unaligned or loosely aligned"
    severity = Severity.WARNING
    options = {"max_residual_ns": 5000}  # spread of per-collective offset estimates tolerated
    doc = {
        "what it finds": "Ranks that share no synchronous collective with the others (their clock "
        "could not be aligned, so cross-rank times are not comparable), and ranks whose offset "
        "estimates disagree across collectives by more than `max_residual_ns` (median absolute "
        "deviation).",
        "why it matters": "Skew, stragglers and the cross-rank critical path compare times of "
        "different ranks: with misaligned clocks a rank looks late or early when it is not.",
        "how to fix": "Capture a window that includes collectives on every rank; on Neuron, "
        "capture device profiles of the same execution; check that the ranks ran the same program.",
        "example": "`TRC503 warning rank 5: no synchronous collective shared with the reference "
        "rank; its times are on its own clock.`",
    }

    def check(self, ctx, opts):
        for rank, meta in sorted(ctx.trace.meta.items()):
            status = meta.info.get("clock")
            residual = float(meta.info.get("clock_residual_ns", 0.0) or 0.0)
            if status == "unaligned":
                msg = (
                    f"Rank {rank} shares no synchronous collective with the reference rank: its clock "
                    "could not be aligned and its times are not comparable with the other ranks'."
                )
            elif status == "collectives" and residual > opts["max_residual_ns"]:
                msg = (
                    f"Rank {rank}'s clock offset ({fmt_ns(meta.clock_offset_ns)}) varies by {fmt_ns(residual)} "
                    "across collectives (median absolute deviation): cross-rank times are uncertain by that much."
                )
            else:
                continue
            yield ctx.finding(
                self,
                message=msg,
                ranks=(rank,),
                suggestion="Capture a window with collectives on every rank, from the same execution.",
                evidence={
                    "clock": status,
                    "clock_offset_ns": meta.clock_offset_ns,
                    "residual_ns": residual,
                },
            )
