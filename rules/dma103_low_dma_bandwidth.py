"""DMA103: a DMA queue moves data far below the hardware's bandwidth."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracediag.analysis.dma import queue_busy_ns
from tracediag.analysis.hardware import credible_peak
from tracediag.engine.rule import Rule
from tracediag.model.findings import Severity
from tracediag.model.units import fmt_bw, fmt_bytes, fmt_ns
from tracediag.whatif import dma_restore as dma_whatif


class LowDmaBandwidth(Rule):
    code = "DMA103"
    name = "low-dma-bandwidth"
    title = "DMA queue far below the hardware's bandwidth"
    severity = Severity.INFO
    options = {
        "max_ratio": 0.3,  # report queues achieving less than this share of the peak
        "min_bytes": 1 << 20,  # queues moving less than this per rank are not worth it
    }
    doc = {
        "what it finds": "DMA queues (or GPU copy streams) whose achieved bandwidth while busy, "
        "bytes moved over the union of their transfer time, stays below `max_ratio` of the "
        "hardware's per-queue peak, with what the critical path would gain if they ran at the "
        "peak. This is the gap to the hardware, reported for information: the what-ifs of "
        "DMA101/DMA102 restore a transfer to what its peers achieve, never to the peak.",
        "why it matters": "A queue that is slow everywhere has no slow peer to compare with: "
        "fragmentation, strided access patterns, small descriptors or a shared DMA engine keep "
        "every transfer slow, and only the hardware's figure shows the headroom.",
        "how to fix": "Look at the transfers' sizes and access patterns (contiguous, at least "
        "32 KiB), spread traffic over more queues and DMA engines, and check the peak used "
        "(`[tool.tracediag.hardware] dma_queue_bw`) matches your instance.",
        "example": "`DMA103 info qSyncIO0: ranks 0-3 move 512 MiB per rank at 6.1 GB/s while "
        "busy, 23% of the 27 GB/s queue peak; at the peak the step would be 1.9 ms shorter.`",
    }

    def check(self, ctx, opts):
        # Only a queue peak makes a finding: without one on any rank, no queue can.
        if not any(h is not None and h.dma_queue_bw for h in ctx.hardware.values()):
            return
        dma = ctx.dma
        if dma["bytes"].isna().any():  # filtered only when needed: a copy of millions of rows
            dma = dma[dma["bytes"].notna()]
        if not len(dma):
            return
        # Per rank and queue: a queue's rings overlap, so its busy time is their union.
        per_track = dma.groupby(["rank", "queue"]).agg(b=("bytes", "sum")).reset_index()
        busy = queue_busy_ns(dma)
        per_track["busy"] = busy.reindex(
            pd.MultiIndex.from_frame(per_track[["rank", "queue"]])
        ).to_numpy()
        seg = ctx.path.segments
        on_path = seg[seg["category"].isin(["dma_wait", "dma_transfer"])]
        for queue, grp in per_track.groupby("queue"):
            peaks = [ctx.hardware.get(int(r)) for r in grp["rank"]]
            peak = min(
                (h.dma_queue_bw for h in peaks if h is not None and h.dma_queue_bw), default=0.0
            )
            per_rank_bytes = float(grp["b"].mean())
            if not peak or per_rank_bytes < opts["min_bytes"]:
                continue
            achieved = float(grp["b"].sum() / max(grp["busy"].sum(), 1) * 1e9)
            # A queue above the built-in peak says the figure is not this device's: no finding.
            if not np.isfinite(credible_peak(peak, achieved)):
                continue
            if achieved >= opts["max_ratio"] * peak:
                continue
            rows = dma[dma["queue"] == queue]
            impact = int(on_path.loc[on_path["event"].isin(rows["event"]), "dur_ns"].sum())
            peak_saving = ctx.what_if(dma_whatif.restore(ctx, rows, peak)) if impact else 0
            ranks = tuple(sorted(int(r) for r in grp["rank"].unique()))
            yield ctx.finding(
                self,
                message=(
                    f"Queue {queue} moves {fmt_bytes(per_rank_bytes)} per rank at {fmt_bw(achieved)} while busy, "
                    f"{100 * achieved / peak:.0f}% of the {fmt_bw(peak)} peak; it holds the critical path "
                    f"{fmt_ns(impact)} ({ctx.pct(impact)}% of the step), and at the peak the step would be "
                    f"{fmt_ns(peak_saving)} shorter (the gap to the hardware, not a peer what-if)."
                ),
                ranks=ranks,
                engine="dma",
                track=str(queue),
                start_ns=int(rows["ts"].min()),
                end_ns=int((rows["ts"] + rows["dur"]).max()),
                impact_ns=impact,
                saving_ns=0,
                suggestion="Check transfer sizes and access patterns, and spread traffic over more queues.",
                evidence={
                    "achieved_bw": achieved,
                    "peak_bw": peak,
                    "bytes_per_rank": per_rank_bytes,
                    "busy_ns": int(grp["busy"].sum()),
                    "peak_saving_ns": int(peak_saving),
                    "transfers": int(len(rows)),
                    "ratio": float(np.round(achieved / peak, 4)),
                },
            )
