"""TRC507: what a profile says about its own quality, and what the reader left out."""

from __future__ import annotations

from tracediag.engine.rule import Rule
from tracediag.model.findings import Severity

#: Readers' note severities -> finding severities.
_SEVERITY = {"warning": Severity.WARNING, "info": Severity.INFO}


class ProfilerWarnings(Rule):
    code = "TRC507"
    name = "profiler-warnings"
    title = "The profile's own data-quality warnings"
    severity = Severity.WARNING
    options = {}
    doc = {
        "what it finds": "The notes a Neuron Explorer profile carries about itself and what the "
        "reader could not use: the rows of the profile's `Warning` table (`Missing Data: DMA "
        "results may not be accurate: DGE notifications were not collected`, `Current NEFF is "
        "missing compiler metrics`); DMA tables (`DmaPacket`, `DmaPacketAggregated`) absent or "
        "empty, which makes every DMA analysis (DMA101, DMA102, DMA103, DMA what-ifs, DMA "
        "efficiency per transfer) unavailable on those ranks; a `Metadata.profile_schema_version` "
        "whose major this tool has not seen (it knows 7.x and 12.x), with the fields it looked "
        "for and did not find; profiles of a data path skipped as another job or another "
        "compiled model (a model is not a rank); a Kineto trace that is a sampled subset of "
        "what the profiler recorded (its operators' `External id`s skip most numbers), whose "
        "gaps hold missing events. One finding per distinct note, with the ranks "
        "it concerns; a capture without DMA transfers is one finding at info, with the "
        "profiler's own warning about it, since every other finding stands. (Where the "
        "hardware peaks came from, the profile's `Metadata` or the built-in table, is in the "
        "report's ranks, `hardware_peaks`.)",
        "why it matters": "A diagnosis is only as good as the capture: without DGE notifications "
        "no DMA transfer is seen, so a DMA-bound kernel looks compute-bound and no DMA rule can "
        "fire; a renamed field silently empties a column. These notes say what the findings "
        "cannot see, instead of a clean report that reads as a healthy job.",
        "how to fix": "Analyse the profiler's whole trace, not a sampled copy. "
        "Recapture with `NEURON_RT_ENABLE_DGE_NOTIFICATIONS=1` (or "
        "`--enable-dge-notifs`) for DMA tables; recompile with the current compiler for compiler "
        "metrics; process the capture with a `neuron-explorer` whose schema this tool knows, or "
        "report the missing fields; pass a skipped profile's folder alone to analyse it.",
        "example": "`TRC507 warning ranks 0-1: Missing Data: DMA results may not be accurate: DGE "
        "notifications were not collected. Recapture with --enable-dge-notifs for accurate DMA "
        "metrics.`",
    }

    def check(self, ctx, opts):
        notes: dict[tuple[str, str, str], list[int]] = {}
        for rank, meta in sorted(ctx.trace.meta.items()):
            for note in meta.info.get("profile_notes", []) or []:
                key = (note.get("kind", ""), note.get("severity", "warning"), note["message"])
                notes.setdefault(key, []).append(int(rank))
        dma = {k: v for k, v in notes.items() if _about_missing_dma(k)}
        if any(k[0] == DMA_MISSING for k in dma):
            yield _missing_dma(self, ctx, dma)
            notes = {k: v for k, v in notes.items() if k not in dma}
        for (kind, severity, message), ranks in notes.items():
            yield ctx.finding(
                self,
                severity=_SEVERITY.get(severity, Severity.WARNING),
                message=f"{_ranks_txt(ranks)}: {message}",
                ranks=tuple(ranks),
                suggestion=_SUGGESTION.get(kind, "See the profile's notes."),
                evidence={"kind": kind, "note": message},
            )


DMA_MISSING = "dma tables missing"


def _about_missing_dma(key: tuple[str, str, str]) -> bool:
    """The reader's note that DMA tables are absent or empty, or the profiler's own warning
    that DGE notifications were not collected (the same cause, said twice)."""
    kind, _, message = key
    return kind == DMA_MISSING or (kind == "profiler warning" and "DGE" in message)


def _missing_dma(rule, ctx, notes: dict[tuple[str, str, str], list[int]]):
    """One finding for a capture without DMA transfers, at info: the rest of the analysis
    stands; the DMA rules could not run on those ranks, which the finding names."""
    ours = {k: v for k, v in notes.items() if k[0] == DMA_MISSING}
    ranks = sorted({r for v in ours.values() for r in v})
    per_state = "; ".join(
        f"{_ranks_txt(v).lower()}: {message.split(':', 1)[0]}"
        for (_, _, message), v in ours.items()
    )
    said = [f"'{m}'" for (k, _, m) in notes if k != DMA_MISSING]
    profiler = f" The profile says so too: {'; '.join(said)}" if said else ""
    return ctx.finding(
        rule,
        severity=Severity.INFO,
        message=(
            f"{_ranks_txt(ranks)}: no DMA transfers recorded ({per_state}): the capture had no "
            "DGE notifications. Unavailable on these ranks: DMA101, DMA102, DMA103, DMA "
            f"what-ifs, DMA efficiency per transfer; every other finding stands.{profiler}"
        ),
        ranks=tuple(ranks),
        suggestion=_SUGGESTION[DMA_MISSING],
        evidence={"kind": DMA_MISSING, "notes": [m for (_, _, m) in notes]},
    )


_SUGGESTION = {
    "profiler warning": "Address the profiler's warning and recapture.",
    DMA_MISSING: "Recapture with NEURON_RT_ENABLE_DGE_NOTIFICATIONS=1.",
    "unknown schema version": "Process the capture with a neuron-explorer this tool knows.",
    "profiles skipped": "Pass a skipped profile's folder alone to analyse it.",
    "sampled trace": "Analyse the whole trace the profiler wrote, not a sampled or filtered copy.",
}


def _ranks_txt(ranks: list[int]) -> str:
    if len(ranks) == 1:
        return f"Rank {ranks[0]}"
    return f"Ranks {', '.join(map(str, ranks))}"
