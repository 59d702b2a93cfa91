"""NUM703: spill reloads make up more than a quarter of the HBM reads."""

from __future__ import annotations

from tracediag.engine.rule import Rule, severity_by_saving
from tracediag.model import schema as S
from tracediag.model.findings import Severity
from tracediag.model.units import fmt_bytes, fmt_ns

#: DMA queues Neuron uses for spill reloads (``qScalarSpillReload0-Q1-E64``, ``qSyncSpillReload0``).
SPILL_RELOAD_QUEUE = r"spill\s*_?reload"


class SpillReloads(Rule):
    code = "NUM703"
    name = "spill-reloads"
    title = "Spill reloads make up a large share of the HBM reads"
    severity = Severity.WARNING
    options = {
        "max_reload_pct": 25.0,  # the Neuron profiler's own threshold
        "warn_saving_pct": 1.0,
        "error_saving_pct": 25.0,
    }
    doc = {
        "what it finds": "Ranks whose `spill_reload_bytes` exceed `max_reload_pct` of their "
        "`hbm_read_bytes` (Neuron `Summary`). The reload DMAs (queues named `*SpillReload*`) give "
        "the window, the queue and the time on the critical path; the what-if replays the step "
        "without them (the data kept on chip).",
        "why it matters": "A spill writes an intermediate that does not fit in SBUF to HBM and "
        "reads it back: the same bytes cross the HBM bus twice and the consumer waits for the "
        "reload. A quarter of the HBM reads spent on it means the tiling does not fit on chip.",
        "how to fix": "Shrink the working set: smaller tiles or micro-batches, recompute cheap "
        "activations instead of keeping them, reorder loops so a tile is consumed while it is "
        "resident, or check the compiler's `--optlevel` and the NKI kernel's buffer sizes.",
        "example": "`NUM703 warning rank 0 qScalarSpillReload0: 41% of HBM reads are spill "
        "reloads (1.2 GiB of 2.9 GiB); without them the step would be 0.6 ms shorter.`",
    }

    def check(self, ctx, opts):
        import numpy as np
        import pandas as pd

        from tracediag.analysis.vendor_summary import summary_total
        from tracediag.graph.changes import WhatIf

        trace = ctx.trace
        per_rank, flagged = {}, []
        for r in trace.ranks:  # a loop over ranks
            reload = summary_total(trace.meta[r], "spill_reload_bytes")
            reads = summary_total(trace.meta[r], "hbm_read_bytes")
            if not reload or not reads:
                continue
            pct = round(100.0 * reload / reads, 2)
            per_rank[r] = {"reload_pct": pct, "spill_reload_bytes": reload, "hbm_read_bytes": reads}
            if pct > opts["max_reload_pct"]:
                flagged.append(r)
        if not flagged:
            return
        ev = trace.events
        names = trace.tracks[S.TRACK_NAME].astype(str)
        reload_track = names.str.contains(SPILL_RELOAD_QUEUE, case=False, regex=True).to_numpy()
        track = ev[S.TRACK].to_numpy()
        rank = ev[S.RANK].to_numpy()
        ids = np.flatnonzero(
            (ev[S.KIND] == "dma").to_numpy(dtype=bool)
            & reload_track[track]
            & np.isin(rank, flagged)
        )
        saving, impact, queue, change = 0, 0, "", None
        window = ids if len(ids) else np.flatnonzero(np.isin(rank, flagged))
        if len(ids):
            nodes = ctx.nodes_of(ids)
            ok = nodes >= 0
            change = WhatIf.durations(nodes[ok], np.zeros(int(ok.sum()), np.int64))
            saving = ctx.what_if(change)
            seg = ctx.path.segments
            on_path = seg[seg["event"] >= 0].groupby("event")["dur_ns"].sum()
            impact = int(on_path.reindex(ids).fillna(0).sum())
            busiest = pd.Series(ev[S.DUR].to_numpy()[ids]).groupby(track[ids]).sum().idxmax()
            queue = ctx.track_name(int(busiest))
        worst = max(flagged, key=lambda r: per_rank[r]["reload_pct"])
        w = per_rank[worst]
        start = ev[S.TS].to_numpy()[window]
        end = start + ev[S.DUR].to_numpy()[window]
        what_if = (
            f"Without the reloads the step would be {fmt_ns(saving)} shorter."
            if len(ids)
            else "No spill-reload DMA queue in the trace: no what-if."
        )
        yield ctx.finding(
            self,
            severity=severity_by_saving(ctx.cost_pct(saving), opts, self.severity)
            if len(ids)
            else self.severity,
            message=(
                f"{w['reload_pct']}% of rank {worst}'s HBM reads are spill reloads "
                f"({fmt_bytes(w['spill_reload_bytes'])} of {fmt_bytes(w['hbm_read_bytes'])}; "
                f"threshold {opts['max_reload_pct']}%), on {len(flagged)} "
                f"rank{'s' if len(flagged) > 1 else ''} in all. {what_if}"
            ),
            ranks=tuple(flagged),
            engine="dma",
            track=queue,
            start_ns=int(start.min()) if len(start) else 0,
            end_ns=int(end.max()) if len(end) else 0,
            impact_ns=impact,
            saving_ns=int(saving),
            change=change,
            suggestion="Shrink the working set so intermediates stay in SBUF (smaller tiles, "
            "recomputation, loop order).",
            evidence={"by_rank": {str(r): per_rank[r] for r in flagged}, "reload_dmas": len(ids)},
        )
