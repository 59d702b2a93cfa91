"""Two test-double rules over the worked example, so CLI and report tests control the findings.

``COL990`` (warning) reports the example's collective skew (150 ns, rank 1); ``DMA990`` (info)
its DMA wait (15 ns). Both read the analysis like real rules; ``count`` repeats COL990.
"""

from __future__ import annotations

from tracediag.engine.rule import DOC_SECTIONS, Rule
from tracediag.model.findings import Severity


def _segment(ctx, category: str):
    seg = ctx.segments[ctx.segments["category"].astype(str) == category]
    return seg.iloc[0]


class SkewProbe(Rule):
    code = "COL990"
    name = "skew-probe"
    title = "Probe | skew on the critical path"  # the pipe tests Markdown escaping
    severity = Severity.WARNING
    options = {"count": 1}
    doc = {s: f"Test double ({s})." for s in DOC_SECTIONS}

    def check(self, ctx, opts):
        s = _segment(ctx, "collective_skew")
        for i in range(opts["count"]):
            yield ctx.finding(
                self,
                message=f"rank {int(s['rank'])} arrives late",
                ranks=(int(s["rank"]),),
                engine="cc",
                start_ns=int(s["start_ns"]),
                end_ns=int(s["end_ns"]),
                impact_ns=int(s["dur_ns"]),
                saving_ns=int(s["dur_ns"]) - i,
                suggestion="balance the ranks",
                evidence={"copy": i},
            )


class DmaWaitProbe(Rule):
    code = "DMA990"
    name = "dma-wait-probe"
    title = "Probe: DMA queued on the critical path"
    severity = Severity.INFO
    doc = {s: f"Test double ({s})." for s in DOC_SECTIONS}

    def check(self, ctx, opts):
        s = _segment(ctx, "dma_wait")
        yield ctx.finding(
            self,
            message="DMA waited in its queue",
            ranks=(int(s["rank"]),),
            engine="dma",
            start_ns=int(s["start_ns"]),
            end_ns=int(s["end_ns"]),
            impact_ns=int(s["dur_ns"]),
        )


PROBES = {"COL990": SkewProbe, "DMA990": DmaWaitProbe}


def use_probe_rules(monkeypatch) -> None:
    """Make the registry hold only the probes (the engine and the CLI both ask it)."""
    # Import the engine first: imported while the registry is patched, it would bind the probes
    # for good, and monkeypatch would "restore" them after the test.
    import tracediag.engine.diagnose  # noqa: F401

    monkeypatch.setattr("tracediag.engine.rule.all_rules", lambda: dict(PROBES))
    monkeypatch.setattr("tracediag.engine.diagnose.all_rules", lambda: dict(PROBES))
