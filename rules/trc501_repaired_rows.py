"""TRC501: rows the readers had to repair or drop."""

from __future__ import annotations

from tracediag.engine.rule import Rule
from tracediag.model.findings import Severity
from tracediag.model.wording import plural, ranks_label


class RepairedRows(Rule):
    code = "TRC501"
    name = "repaired-rows"
    title = "Trace rows repaired or dropped while reading"
    severity = Severity.WARNING
    options = {}
    doc = {
        "what it finds": "Once for the job, the rows the readers repaired (negative durations "
        "clamped, types coerced, unmatched begin/end closed) or dropped (no usable timestamp, "
        "references to nothing), by reason, summed over the ranks as the readers counted them; "
        "each rank's own counts are in the evidence (`by_rank`).",
        "why it matters": "Nothing is dropped silently: a diagnosis of a damaged trace is only as "
        "good as what survived reading. Dropped rows can hide stalls; repaired ones can shift them.",
        "how to fix": "Re-export the profile with the vendor tool; check the profiler's buffer "
        "settings (dropped events), and that files were copied completely.",
        "example": "`TRC501 warning ranks 0-3 (most on rank 2): 15 rows repaired or dropped (events: dropped, no valid timestamp or "
        "duration: 13), 2 repaired.`",
    }

    def check(self, ctx, opts):
        # One finding for the job: the same repair on every rank is one fact about the export,
        # not one finding per rank; each rank's own counts stay in the evidence.
        by_rank = {r: dict(m.repairs) for r, m in sorted(ctx.trace.meta.items()) if m.repairs}
        if not by_rank:
            return
        totals: dict[str, int] = {}
        for repairs in by_rank.values():
            for reason, n in repairs.items():
                totals[reason] = totals.get(reason, 0) + n
        dropped = sum(n for reason, n in totals.items() if _is_loss(reason))
        detail = "; ".join(f"{reason}: {n}" for reason, n in sorted(totals.items()))
        ranks = list(by_rank)
        if len(ranks) == 1:
            meta = ctx.trace.meta[ranks[0]]
            who = f"Rank {ranks[0]} ({', '.join(meta.sources) or meta.format})"
        else:
            most = max(ranks, key=lambda r: sum(by_rank[r].values()))
            who = f"{ranks_label(ranks).capitalize()} (most on rank {most})"
        yield ctx.finding(
            self,
            severity=Severity.WARNING if dropped else Severity.INFO,
            message=f"{who}: {plural(sum(totals.values()), 'row')} repaired or dropped ({detail}).",
            ranks=tuple(ranks),
            suggestion="Re-export the profile, or check that the files are complete.",
            evidence={
                "repairs": totals,
                "by_rank": {str(r): repairs for r, repairs in by_rank.items()},
                "dropped": dropped,
            },
        )


#: Words of the readers' reasons that mean data was lost or may be misread, not just repaired.
_LOSS_WORDS = (
    "drop",
    "matches no",
    "no event",
    "skipped",
    "unknown",
    "unmatched",
    "not read",
    "unbound",
)


def _is_loss(reason: str) -> bool:
    return any(w in reason for w in _LOSS_WORDS)
