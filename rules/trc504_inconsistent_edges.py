"""TRC504: dependencies the graph could not use (against time, or in cycles)."""

from __future__ import annotations

from tracediag.engine.rule import Rule
from tracediag.model.findings import Severity


class InconsistentEdges(Rule):
    code = "TRC504"
    name = "inconsistent-edges"
    title = "Dependencies the graph had to ignore"
    severity = Severity.INFO
    options = {"warn_fraction": 0.01}
    doc = {
        "what it finds": "Dependencies recorded by the format that the dependency graph could not "
        "use: a successor that starts before its predecessor, edges in cycles, edges touching "
        "annotation-only events, counted by reason.",
        "why it matters": "Ignored edges can reroute the critical path; many of them point to "
        "clock trouble or a damaged export.",
        "how to fix": "Re-export the profile; if edges go against time across ranks, check clock "
        "alignment (TRC503).",
        "example": "`TRC504 info: 12 edges against time (successor starts before its predecessor).`",
    }

    def check(self, ctx, opts):
        dropped = {k: v for k, v in ctx.graph.dropped_edges.items() if "annotation" not in k}
        if not dropped:
            return
        total = sum(dropped.values())
        n_edges = max(len(ctx.trace.edges), 1)
        yield ctx.finding(
            self,
            severity=Severity.WARNING
            if total / n_edges >= opts["warn_fraction"]
            else Severity.INFO,
            message="The dependency graph ignored "
            + "; ".join(f"{v} {k}" for k, v in dropped.items())
            + ".",
            ranks=tuple(ctx.trace.ranks),
            suggestion="Re-export the profile; check clock alignment if edges cross ranks.",
            evidence={"dropped_edges": dropped, "edges": len(ctx.trace.edges)},
        )
