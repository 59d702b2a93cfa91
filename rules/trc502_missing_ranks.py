"""TRC502: ranks that collectives or the job's size name but the inputs lack."""

from __future__ import annotations

from tracediag.engine.rule import Rule
from tracediag.model import schema as S
from tracediag.model.findings import Severity


def _members(group: str) -> set[int]:
    return {
        int(t)
        for t in group.replace("[", " ").replace("]", " ").replace(",", " ").split()
        if t.lstrip("-").isdigit()
    }


class MissingRanks(Rule):
    code = "TRC502"
    name = "missing-ranks"
    title = "Ranks of the job missing from the inputs"
    severity = Severity.WARNING
    options = {}
    doc = {
        "what it finds": "Ranks that belong to the job (members of the collectives' replica or "
        "process groups, or below the world size the trace declares) but whose profiles were not "
        "given.",
        "why it matters": "Skew and stragglers are measured among the ranks present: the real "
        "straggler may be one of the missing ranks, and clock alignment and the critical path see "
        "only part of the job.",
        "how to fix": "Pass every rank's profile (a parent directory with rank_<i>/ folders, or all "
        "per-rank files); when a full capture is too large, capture a sampled set that includes "
        "suspected stragglers.",
        "example": "`TRC502 warning: 126 of 128 ranks of the job are missing (world size 128, "
        "ranks given: 0, 1).`",
    }

    def check(self, ctx, opts):
        present = set(ctx.trace.ranks)
        expected: set[int] = set()
        groups = (
            ctx.trace.collectives[S.GROUP].astype(str).unique()
            if len(ctx.trace.collectives)
            else []
        )
        for g in groups:
            expected |= _members(g)
        world = [
            int(m.info["world_size"])
            for m in ctx.trace.meta.values()
            if str(m.info.get("world_size", "")).isdigit()
        ]
        if world:
            expected |= set(range(max(world)))
        missing = sorted(expected - present)
        if not missing:
            return
        shown = ", ".join(map(str, missing[:20])) + (" ..." if len(missing) > 20 else "")
        yield ctx.finding(
            self,
            message=(
                f"{len(missing)} rank{'s' if len(missing) > 1 else ''} of the job {'are' if len(missing) > 1 else 'is'} "
                f"missing from the inputs ({shown}); ranks given: {', '.join(map(str, sorted(present)))}. "
                "Skew is measured among the ranks present only."
            ),
            ranks=tuple(sorted(present)),
            suggestion="Pass every rank's profile, or a sample that includes the suspected stragglers.",
            evidence={
                "missing": missing[:1000],
                "expected": int(len(expected)),
                "present": sorted(present),
                "world_size": max(world) if world else None,
                "unmatched_instances": _unmatched(ctx),
            },
        )


def _unmatched(ctx) -> int:
    import numpy as np

    coll = ctx.trace.collectives
    if not len(coll):
        return 0
    n = coll.groupby(S.COLL_KEY)[S.RANK].nunique()
    return int(np.sum(n.to_numpy() < 2))
