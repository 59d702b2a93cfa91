"""TRC501: rows the readers had to repair or drop."""

from __future__ import annotations

from tracediag.engine.rule import Rule
from tracediag.model.findings import Severity


class RepairedRows(Rule):
    code = "TRC501"
    name = "repaired-rows"
    title = "Trace rows repaired or dropped while reading"
    severity = Severity.WARNING
    options = {}
    doc = {
        "what it finds": "Per rank, the rows a reader repaired (negative durations clamped, types "
        "coerced, unmatched begin/end closed) or dropped (no usable timestamp, references to "
        "nothing), by reason, as the readers counted them.",
        "why it matters": "Nothing is dropped silently: a diagnosis of a damaged trace is only as "
        "good as what survived reading. Dropped rows can hide stalls; repaired ones can shift them.",
        "how to fix": "Re-export the profile with the vendor tool; check the profiler's buffer "
        "settings (dropped events), and that files were copied completely.",
        "example": "`TRC501 warning rank 2: 13 rows dropped (events: dropped, no valid timestamp or "
        "duration: 13), 2 repaired.`",
    }

    def check(self, ctx, opts):
        for rank, meta in sorted(ctx.trace.meta.items()):
            if not meta.repairs:
                continue
            dropped = sum(n for reason, n in meta.repairs.items() if _is_loss(reason))
            total = sum(meta.repairs.values())
            detail = "; ".join(f"{reason}: {n}" for reason, n in sorted(meta.repairs.items()))
            yield ctx.finding(
                self,
                severity=Severity.WARNING if dropped else Severity.INFO,
                message=f"Rank {rank} ({', '.join(meta.sources) or meta.format}): {total} rows repaired or dropped ({detail}).",
                ranks=(rank,),
                suggestion="Re-export the profile, or check that the files are complete.",
                evidence={"repairs": dict(meta.repairs), "dropped": dropped},
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
