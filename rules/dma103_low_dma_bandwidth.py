"""DMA103: a DMA queue moves data far below the hardware's bandwidth."""

from __future__ import annotations

from tracediag.engine.rule import Rule
from tracediag.model.findings import Severity
from tracediag.model.units import fmt_bw, fmt_bytes, fmt_ns
from tracediag.model.wording import dma_source, plural


class LowDmaBandwidth(Rule):
    code = "DMA103"
    name = "low-dma-bandwidth"
    title = "DMA queue far below the hardware's bandwidth"
    severity = Severity.INFO
    options = {
        "max_ratio": 0.3,  # report queues achieving less than this share of the peak
        "min_bytes": 1 << 20,  # queues moving less than this per rank are not worth it
        # GPU copies under this size are latency-bound (a fixed cost per call): their rate says
        # nothing of bandwidth and no peak shortens them; coalescing them is DMA102's fix.
        "min_bytes_transfer": 32768,
    }
    doc = {
        "what it finds": "DMA queues, or a GPU stream's copies of one direction, whose achieved "
        "bandwidth while busy, bytes moved over the union of their transfer time, stays below "
        "`max_ratio` of the peak of the path the bytes take (a DMA queue's figure; for GPU copies "
        "the host link for host copies, half the HBM bandwidth for device-to-device copies, the "
        "device link for peer copies), with what the critical path would gain at that peak. "
        "Memsets move no data and are left out, and so are GPU copies under `min_bytes_transfer` "
        "(latency-bound: DMA102's). This is the gap to the hardware, reported for "
        "information: the what-ifs of DMA101/DMA102 restore a transfer to what its peers achieve, "
        "never to the peak.",
        "why it matters": "A queue that is slow everywhere has no slow peer to compare with: "
        "fragmentation, strided access patterns, small descriptors, pageable host memory or a "
        "shared DMA engine keep every transfer slow, and only the hardware's figure shows the "
        "headroom.",
        "how to fix": "Look at the transfers' sizes and access patterns (contiguous, at least "
        "32 KiB), spread traffic over more queues and DMA engines, pin host memory for host "
        "copies, and check the peak used (`[tool.tracediag.hardware] dma_queue_bw`) matches your "
        "instance.",
        "example": "`DMA103 info qSyncIO0: ranks 0-3 move 512 MiB per rank at 6.1 GB/s while "
        "busy, 23% of the 27 GB/s queue peak; at the peak the step would be 1.9 ms shorter.`",
    }

    def check(self, ctx, opts):
        import numpy as np

        from tracediag.analysis.dma import MEMSET, QUEUE, direction_peak
        from tracediag.analysis.hardware import credible_peak
        from tracediag.whatif import dma_restore as dma_whatif
        from tracediag.whatif.saving_limit import limit_clause

        if all(h is None for h in ctx.hardware.values()):
            return
        dma = ctx.dma
        # Sizes not recorded move nothing we can count; a memset writes, it transfers nothing.
        keep = (dma["bytes"].notna() & (dma["direction"] != MEMSET)).to_numpy()
        # A GPU copy of a few hundred bytes takes its call's fixed cost at any bandwidth: it
        # is left out of the rate, the impact and the what-if (DMA102 prices it). A DMA queue's
        # small descriptors are packets of one transfer and keep the queue's pace.
        tiny = (
            keep
            & (dma["bytes"] < opts["min_bytes_transfer"]).to_numpy()
            & (dma["direction"] != QUEUE).to_numpy()
        )
        keep = keep & ~tiny
        small = dma[tiny].groupby(["queue", "direction"], sort=False).size() if tiny.any() else {}
        if not keep.all():  # filtered only when needed: a copy of millions of rows
            dma = dma[keep]
        if not len(dma):
            return
        lanes = _lanes(dma)
        seg = ctx.path.segments
        on_path = seg[seg["category"].isin(["dma_wait", "dma_transfer"])]
        # Per queue and direction: a GPU stream's host copies take PCIe and its device copies
        # HBM; a DMA engine's queue (direction "queue") has one peak.
        for (queue, direction), grp in lanes.groupby(["queue", "direction"], sort=True):
            peaks = [direction_peak(ctx.hardware.get(int(r)), direction) for r in grp["rank"]]
            known = [p for p in peaks if np.isfinite(p[0])]
            per_rank_bytes = float(grp["b"].mean())
            if not known or per_rank_bytes < opts["min_bytes"]:
                continue
            peak, peak_kind = min(known)
            achieved = float(grp["b"].sum() / max(grp["busy"].sum(), 1) * 1e9)
            # A lane above the built-in peak says the figure is not this device's: no finding.
            if not np.isfinite(credible_peak(peak, achieved)):
                continue
            if achieved >= opts["max_ratio"] * peak:
                continue
            rows = dma[((dma["queue"] == queue) & (dma["direction"] == direction)).to_numpy()]
            impact = int(on_path.loc[on_path["event"].isin(rows["event"]), "dur_ns"].sum())
            at_peak = dma_whatif.restore(ctx, rows, peak)
            peak_saving = ctx.what_if(at_peak) if impact else 0
            # Far less than the path time it holds: the replay says what holds the path then.
            why = limit_clause(ctx, at_peak, int(peak_saving), impact)
            ranks = tuple(sorted(int(r) for r in grp["rank"].unique()))
            on_stream = direction != QUEUE
            yield ctx.finding(
                self,
                message=(
                    f"{_subject(queue, direction, on_stream)} {fmt_bytes(per_rank_bytes)} per rank "
                    f"at {fmt_bw(achieved)} while busy, {100 * achieved / peak:.0f}% of the "
                    f"{fmt_bw(peak)} {_peak_name(peak_kind, on_stream)}; "
                    f"{'they hold' if on_stream else 'it holds'} the critical path "
                    f"{fmt_ns(impact)} ({ctx.share(impact)}), and at the peak the step "
                    f"would be {fmt_ns(peak_saving)} shorter (the gap to the hardware, not a peer "
                    f"what-if){why}."
                    + _left_out(int(small.get((queue, direction), 0)), opts["min_bytes_transfer"])
                ),
                ranks=ranks,
                engine="dma",
                track=str(queue),
                start_ns=int(rows["ts"].min()),
                end_ns=int((rows["ts"] + rows["dur"]).max()),
                impact_ns=impact,
                saving_ns=0,
                suggestion=_suggestion(rows, on_stream),
                evidence={
                    "achieved_bw": achieved,
                    "peak_bw": peak,
                    "peak_kind": peak_kind,
                    "direction": direction,
                    "bytes_per_rank": per_rank_bytes,
                    "busy_ns": int(grp["busy"].sum()),
                    "peak_saving_ns": int(peak_saving),
                    "transfers": int(len(rows)),
                    "small_transfers_left_out": int(small.get((queue, direction), 0)),
                    "ratio": float(np.round(achieved / peak, 4)),
                },
            )


def _lanes(dma):
    """Per rank, queue and direction: the bytes moved (``b``) and the time the lane is busy
    (``busy``, the union of its transfers: a queue's rings overlap)."""
    import numpy as np

    from tracediag.analysis.group_codes import group_codes
    from tracediag.analysis.intervals import busy_ns_by_group

    # Lanes numbered by first appearance; each lane's key read off its first row.
    code, first = group_codes(dma["rank"].to_numpy(), dma["queue"], dma["direction"])
    lanes = np.arange(len(first))
    out = dma[["rank", "queue", "direction"]].iloc[first].reset_index(drop=True)
    ts = dma["ts"].to_numpy()
    busy = busy_ns_by_group(code, ts, ts + dma["dur"].to_numpy())
    out["b"] = np.bincount(code, weights=dma["bytes"].to_numpy(), minlength=len(lanes))
    out["busy"] = busy.reindex(lanes).fillna(0).to_numpy(dtype=np.int64)
    return out


def _left_out(n: int, min_bytes: int) -> str:
    """The sentence naming the latency-bound copies left out of the lane, or ``""``."""
    if not n:
        return ""
    return (
        f" {plural(n, 'copy', 'copies')} under {fmt_bytes(min_bytes)} on this stream {'is' if n == 1 else 'are'} "
        "left out: latency-bound, no peak shortens them (DMA102)."
    )


def _subject(queue, direction: str, on_stream: bool) -> str:
    """``"Queue qSyncIO0 moves"`` or ``"Host-to-device copies on stream 7 move"``."""
    if not on_stream:
        return f"Queue {queue} moves"
    what = dma_source(queue, direction, on_stream)
    return f"{what[0].upper()}{what[1:]} move"


def _peak_name(peak_kind: str, on_stream: bool) -> str:
    """``"peak"`` for a DMA queue (its figure is the queue's), ``"host link peak"`` for a copy."""
    return f"{peak_kind} peak" if on_stream and peak_kind else "peak"


def _suggestion(rows, on_stream: bool) -> str:
    """What to look at; host copies from pageable memory go through a staging buffer first."""
    if on_stream and rows["tensor"].astype(str).str.contains("Pageable", regex=False).any():
        return (
            "Pin the host memory of these copies (pin_memory=True, non_blocking=True): pageable "
            "copies are staged through a bounce buffer and reach a fraction of the host link."
        )
    return "Check transfer sizes and access patterns, and spread traffic over more queues."
