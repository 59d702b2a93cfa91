"""DMA102: data moved in many transfers below the efficient size."""

from __future__ import annotations

from tracediag.analysis.dma import typical_bandwidth
from tracediag.engine.rule import Rule, severity_by_saving
from tracediag.model import schema as S
from tracediag.model.findings import Severity
from tracediag.model.units import fmt_bw, fmt_bytes, fmt_ns
from tracediag.whatif import dma_restore as dma_whatif


class SmallDmaTransfers(Rule):
    code = "DMA102"
    name = "small-dma-transfers"
    title = "Many DMA transfers below the efficient size"
    severity = Severity.WARNING
    options = {
        "max_bytes": 32768,  # the vendor's target average DMA size (32 KiB)
        "min_count": 16,  # fewer small transfers than this in a group are not a pattern
        "warn_saving_pct": 1.0,
        "error_saving_pct": 10.0,
    }
    doc = {
        "what it finds": "Groups of DMA transfers (per rank, queue and the layer they feed) whose "
        "size is below `max_bytes`, with their share of the critical path and what moving the same "
        "bytes in transfers of the queue's usual size would save.",
        "why it matters": "Every DMA descriptor pays a fixed cost; below a few tens of KiB that "
        "cost dominates and a queue reaches a fraction of its bandwidth. Fragmented transfers on "
        "the critical path stretch the step.",
        "how to fix": "Make the tensor contiguous in the source and destination layout (avoid "
        "strided or transposed DMA), coalesce small tensors, or change the tiling so each "
        "transfer moves at least 32 KiB.",
        "example": "`DMA102 warning rank 0 qSyncIO0 layer_1: 512 transfers averaging 4 KiB at "
        "3.1 GB/s (queue typical 24 GB/s) ... coalesced the step would be 610 µs shorter.`",
    }

    def check(self, ctx, opts):
        ev = ctx.trace.events
        # Tested on the events' own columns first: without a small transfer the DMA table (a
        # pass over every event) is not needed.
        if S.BYTES not in ev:
            return
        is_dma = (ev[S.KIND] == "dma").to_numpy()
        if not (is_dma & (ev[S.BYTES].to_numpy() < opts["max_bytes"])).any():
            return
        dma = ctx.dma
        small = dma[dma["bytes"] < opts["max_bytes"]]
        if not len(small):
            return
        typical = typical_bandwidth(dma, opts["max_bytes"])
        seg = ctx.path.segments
        path_ns = (
            seg[seg["category"].isin(["dma_wait", "dma_transfer"])].groupby("event")["dur_ns"].sum()
        )
        # One finding per queue and layer across ranks: the same fragmentation on every rank is
        # one cause, and fixing it on one rank only would move the path to a peer.
        for (queue, layer), grp in small.groupby(["queue", "layer"], dropna=False):
            n_ranks = grp["rank"].nunique()
            if len(grp) < opts["min_count"] * n_ranks:
                continue
            impact = int(path_ns.reindex(grp["event"]).fillna(0).sum())
            change = dma_whatif.restore(ctx, grp, typical, merge_packets=True)
            saving = ctx.what_if(change)
            if impact == 0 and saving == 0:
                sev = Severity.INFO
            else:
                sev = severity_by_saving(ctx.pct(saving), opts, self.severity)
            nbytes = float(grp["bytes"].sum())
            achieved = nbytes / max(int(grp["dur"].sum()), 1) * 1e9
            typ = float(typical.get(queue, float("nan")))
            layer_txt = f" feeding {layer}" if isinstance(layer, str) and layer else ""
            yield ctx.finding(
                self,
                severity=sev,
                message=(
                    f"{_ranks_txt(grp)} {fmt_bytes(nbytes / n_ranks)} per rank on queue {queue}{layer_txt} in "
                    f"{len(grp) // n_ranks} transfers "
                    f"averaging {fmt_bytes(nbytes / len(grp))} (below {fmt_bytes(opts['max_bytes'])}) at "
                    f"{fmt_bw(achieved)} against the queue's typical {fmt_bw(typ)}; they hold the critical path "
                    f"{fmt_ns(impact)} ({ctx.pct(impact)}% of the step). Moved as large transfers the step would "
                    f"be {fmt_ns(saving)} shorter."
                ),
                ranks=tuple(sorted(int(r) for r in grp["rank"].unique())),
                engine="dma",
                track=str(queue),
                layer=str(layer) if isinstance(layer, str) else "",
                start_ns=int(grp["ts"].min()),
                end_ns=int((grp["ts"] + grp["dur"]).max()),
                impact_ns=impact,
                saving_ns=int(saving),
                change=change,
                suggestion="Coalesce these transfers: contiguous layouts and tiles of at least 32 KiB per DMA.",
                evidence={
                    "transfers": len(grp),
                    "bytes": nbytes,
                    "average_bytes": nbytes / len(grp),
                    "achieved_bw": achieved,
                    "typical_bw": typ,
                    "events": grp["event"].head(20).tolist(),
                },
            )


def _ranks_txt(grp) -> str:
    ranks = sorted(int(r) for r in grp["rank"].unique())
    return (
        f"Rank {ranks[0]} moves" if len(ranks) == 1 else f"Ranks {', '.join(map(str, ranks))} move"
    )
