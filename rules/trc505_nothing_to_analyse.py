"""TRC505: a trace whose events are all annotations: no work, so no step, path or finding."""

from __future__ import annotations

from tracediag.engine.rule import Rule
from tracediag.model import schema as S
from tracediag.model.findings import Severity


class NothingToAnalyse(Rule):
    code = "TRC505"
    name = "nothing-to-analyse"
    title = "No work in the trace: nothing to analyse"
    severity = Severity.WARNING
    options = {}
    doc = {
        "what it finds": "Traces in which no event is work: every event is an annotation or a "
        "marker (`ProfilerStep#N`, `record_function` ranges, instants), with no operator, kernel, "
        "copy, collective or engine instruction. Typical of a host-only PyTorch profile taken "
        "without CPU activity (`activities=[]`, or only `record_function` ranges recorded), or of "
        "a profile cut to a window where nothing ran.",
        "why it matters": "Step time, critical path and every other rule are computed on work: "
        "without any, the report would show a 0 ns step and no finding, which reads as a clean "
        "job. This finding says the trace, not the job, is empty.",
        "how to fix": "Profile with CPU activity (`torch.profiler.ProfilerActivity.CPU`, and "
        "`CUDA` or the device's activity on an accelerator job), over a window that holds whole "
        "steps (`schedule(wait, warmup, active)`), and pass every rank's trace.",
        "example": "`TRC505 warning ranks 0-3: no event is work (12 annotations, 2 instants on 4 "
        "ranks): no step time, critical path or finding can be computed.`",
    }

    def check(self, ctx, opts):
        import numpy as np

        ev = ctx.trace.events
        if len(ctx.graph) and (ev[S.KIND] != "marker").to_numpy(dtype=bool).any():
            return
        ranks = tuple(ctx.trace.ranks)
        if not ranks:
            return
        per_rank = np.bincount(ev[S.RANK].to_numpy(), minlength=max(ranks) + 1)
        names = ev[S.NAME].astype(str).value_counts().head(5) if len(ev) else None
        shown = ", ".join(f"{n} {k}" for k, n in names.items()) if names is not None else ""
        yield ctx.finding(
            self,
            message=(
                f"No event is work ({len(ev)} annotations and markers on {len(ranks)} "
                f"rank{'s' if len(ranks) != 1 else ''}{': ' + shown if shown else ''}): no step "
                "time, critical path or finding can be computed from this trace."
            ),
            ranks=ranks,
            suggestion="Profile with CPU (and device) activity over whole steps, on every rank.",
            evidence={
                "events": int(len(ev)),
                "events_per_rank": {int(r): int(per_rank[r]) for r in ranks},
                "most_frequent": {str(k): int(n) for k, n in names.items()}
                if names is not None
                else {},
            },
        )
