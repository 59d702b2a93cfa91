"""DMA104: DMA transfers far slower than transfers of their size achieve."""

from __future__ import annotations

from tracediag.engine.rule import Rule, severity_by_saving
from tracediag.model.findings import Severity
from tracediag.model.units import fmt_bw, fmt_bytes, fmt_ns


class DmaTransferEfficiency(Rule):
    code = "DMA104"
    name = "dma-transfer-efficiency"
    title = "DMA transfers far below the bandwidth of their size class"
    severity = Severity.WARNING
    options = {
        "max_ratio": 0.5,  # flag transfers below this share of their size class's reference
        "reference_quantile": 0.9,  # a class's reference: what its faster transfers achieve
        "min_bytes": 32768,  # smaller transfers are DMA102's (fragmentation)
        "min_count": 8,  # fewer slow transfers from one source line are not a pattern
        "warn_saving_pct": 1.0,
        "error_saving_pct": 10.0,
    }
    doc = {
        "what it finds": "DMA transfers (a transfer's packets together: its bytes over the span "
        "from its first packet's start to its last one's end) of at least `min_bytes` whose "
        "bandwidth is below "
        "`max_ratio` of what transfers of the same size class (a power of two of bytes, per "
        "direction) achieve in the trace (their `reference_quantile`), grouped by the source "
        "line of the instruction that triggers them; the what-if moves each at its class's "
        "reference bandwidth and replays. Transfers of one size pay the same fixed cost per "
        "transfer, so a slow one loses time to its descriptors: small descriptors (a strided "
        "or transposed layout, a narrow free dimension), as AWS's DMA-efficiency "
        "investigation finds them. Only transfers whose triggering instruction states its source "
        "line (`bir_debug_info_source_location`) are grouped. Distinct from DMA102 (transfers below `min_bytes`, "
        "restored to the queue's large-transfer bandwidth) and DMA103 (a whole queue against "
        "the hardware's peak, no what-if).",
        "why it matters": "A transfer with small descriptors moves its bytes at a fraction of "
        "the bandwidth a contiguous transfer of the same size reaches; on a DMA-bound kernel "
        "that fraction is the kernel's speed.",
        "how to fix": "Make each descriptor at least a few KiB: load contiguous rows (widen the "
        "free dimension of the `dma_copy`), keep the layout the consumer reads instead of a "
        "strided or transposing DMA, or transpose on chip once.",
        "example": "`DMA104 warning rank 0 qSyncIO0: 64 transfers of 32 KiB from "
        "matmul_kernel.py:21 at 44 GB/s, 40% of the 111 GB/s transfers of their size reach; at "
        "that bandwidth the kernel would be 7.2 µs shorter.`",
    }

    def check(self, ctx, opts):
        import numpy as np
        import pandas as pd

        from tracediag.analysis.dma import MEMSET, per_transfer
        from tracediag.analysis.group_codes import group_codes
        from tracediag.analysis.source_lines import (
            event_sources,
            lines_text,
            on_path_ns,
            short_line,
        )
        from tracediag.graph.changes import WhatIf

        dma = ctx.dma
        # Per transfer, not per packet: the size class and the 32 KiB floor are a transfer's, and
        # a transfer served by several rings moves its packets in parallel (its span is its time).
        transfers, packet_of = per_transfer(dma)
        keep = (transfers["bytes"] >= opts["min_bytes"]).to_numpy() & (
            transfers["direction"] != MEMSET
        ).to_numpy()
        d = transfers[keep]
        if len(d) < opts["min_count"]:
            return
        size_class = np.floor(np.log2(d["bytes"].to_numpy())).astype(np.int64)
        code = group_codes(d["direction"], size_class)[0]  # no tuple per row
        bw = d["bw"].to_numpy()
        reference = pd.Series(bw).groupby(code).quantile(opts["reference_quantile"])
        ref = reference.reindex(code).to_numpy()
        slow = bw < opts["max_ratio"] * ref
        if slow.sum() < opts["min_count"]:
            return
        s = d[slow].assign(ref=ref[slow])
        s["line"] = event_sources(ctx.trace, s["event"].to_numpy())
        # Per source line (the dma_copy call): without lines, a slow transfer among fast ones
        # of its queue is DMA101's (restored to the queue's typical bandwidth).
        s = s[(s["line"] != "").to_numpy()]
        event = dma["event"].to_numpy()
        for line, grp in s.groupby("line", sort=True):
            if len(grp) < opts["min_count"]:
                continue
            # The transfers' packets, each shortened by its transfer's factor: at the reference
            # bandwidth the span is bytes / reference.
            want = np.ceil(grp["bytes"].to_numpy() / grp["ref"].to_numpy() * 1e9)
            factor = pd.Series(want / np.maximum(grp["dur"].to_numpy(), 1), index=grp.index)
            rows = np.flatnonzero(np.isin(packet_of, grp.index.to_numpy()))
            ids = event[rows]
            nodes = ctx.nodes_of(ids)
            ok = nodes >= 0
            dur = ctx.graph.dur[nodes[ok]]
            scaled = np.ceil(dur * factor.reindex(packet_of[rows[ok]]).to_numpy())
            single = pd.Series(want, index=grp.index).reindex(packet_of[rows[ok]]).to_numpy()
            alone = transfers["packets"].to_numpy()[packet_of[rows[ok]]] == 1
            # A transfer of one packet takes bytes / reference exactly (no rounding of a ratio).
            new = np.minimum(dur, np.where(alone, single, scaled).astype(np.int64))
            change = WhatIf.durations(nodes[ok], new)
            saving = ctx.what_if(change)
            impact = int(on_path_ns(ctx, ids, "dma_transfer").sum())
            nbytes = float(grp["bytes"].sum())
            achieved = nbytes / max(int(grp["dur"].sum()), 1) * 1e9
            typical = float(nbytes / (grp["bytes"] / grp["ref"]).sum())
            queue = str(grp["queue"].value_counts().idxmax())
            ranks = tuple(sorted(int(r) for r in grp["rank"].unique()))
            src = f" from {lines_text(grp['line'])}"
            yield ctx.finding(
                self,
                severity=severity_by_saving(ctx.cost_pct(saving), opts, self.severity),
                message=(
                    f"{len(grp)} transfers of {fmt_bytes(nbytes / len(grp))} on average on "
                    f"{_ranks(ranks)} ({queue}){src} move at {fmt_bw(achieved)}, "
                    f"{100 * achieved / typical:.0f}% of the {fmt_bw(typical)} transfers of their "
                    f"size reach in this trace; they hold the critical path {fmt_ns(impact)} "
                    f"({ctx.share(impact)}). At that bandwidth the step would be "
                    f"{fmt_ns(saving)} shorter."
                ),
                ranks=ranks,
                engine="dma",
                track=queue,
                op=short_line(line),
                start_ns=int(grp["ts"].min()),
                end_ns=int((grp["ts"] + grp["dur"]).max()),
                impact_ns=impact,
                saving_ns=int(saving),
                change=change,
                suggestion="Make each DMA descriptor a few KiB: contiguous rows, a wider free "
                "dimension, no strided or transposing DMA.",
                evidence={
                    "transfers": int(len(grp)),
                    "packets": int(len(rows)),
                    "bytes": nbytes,
                    "achieved_bw": achieved,
                    "typical_bw": typical,
                    "ratio": round(achieved / typical, 4),
                    "source_line": str(line),
                    "events": ids[:20].tolist(),
                },
            )


def _ranks(ranks: tuple[int, ...]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"
