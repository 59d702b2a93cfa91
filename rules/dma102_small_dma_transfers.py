"""DMA102: data moved in many transfers below the efficient size."""

from __future__ import annotations

from tracediag.engine.rule import Rule, severity_by_saving
from tracediag.model import schema as S
from tracediag.model.findings import Severity
from tracediag.model.units import fmt_bw, fmt_bytes, fmt_ns
from tracediag.model.wording import dma_source


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
        "size (a transfer's packets together) is below `max_bytes`, with their share of the "
        "critical path and what moving the same bytes in transfers of the queue's usual size "
        "would save.",
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
        from tracediag.analysis.dma import (
            MEMSET,
            QUEUE,
            per_transfer,
            transfer_count,
            typical_bandwidth,
        )
        from tracediag.whatif import dma_restore as dma_whatif

        ev = ctx.trace.events
        # Tested on the events' own columns first: without a small transfer the DMA table (a
        # pass over every event) is not needed.
        if S.BYTES not in ev:
            return
        is_dma = (ev[S.KIND] == "dma").to_numpy()
        if not (is_dma & (ev[S.BYTES].to_numpy() < opts["max_bytes"])).any():
            return
        dma = ctx.dma
        # A transfer is small, not a packet: the packets of a large transfer served by several
        # rings are each small, and the 32 KiB target is per transfer.
        transfers, packet_of = per_transfer(dma)
        transfer_bytes = transfers["bytes"].to_numpy()[packet_of]
        # Sizes the trace does not record (NaN) are not small; a memset moves nothing, whatever
        # its size.
        small = dma[(transfer_bytes < opts["max_bytes"]) & (dma["direction"] != MEMSET).to_numpy()]
        if not len(small):
            return
        # Per queue and direction: a GPU stream's host copies and device copies run at PCIe
        # and HBM speeds. The typical pace is that of the packets of large transfers.
        typical = typical_bandwidth(
            dma.assign(bytes=transfer_bytes), opts["max_bytes"], by_direction=True
        )
        seg = ctx.path.segments
        path_ns = (
            seg[seg["category"].isin(["dma_wait", "dma_transfer"])].groupby("event")["dur_ns"].sum()
        )
        # The path's gaps before each transfer: merging removes their setup part too.
        path_gap = seg[seg["category"] == "gap"].groupby("event")["dur_ns"].sum()
        # One finding per queue and layer across ranks: the same fragmentation on every rank is
        # one cause, and fixing it on one rank only would move the path to a peer.
        for (queue, direction, layer), grp in small.groupby(
            ["queue", "direction", "layer"], dropna=False
        ):
            n_ranks = grp["rank"].nunique()
            n_transfers = transfer_count(grp)
            if n_transfers < opts["min_count"] * n_ranks:
                continue
            moving = int(path_ns.reindex(grp["event"]).fillna(0).sum())
            typ = float(typical.get((queue, direction), float("nan")))
            change = dma_whatif.restore(ctx, grp, typ, merge_packets=True)
            setup = _setup_on_path(ctx, grp, change, path_gap)
            # The impact is the path time the change acts on: the transfers and the setup gaps
            # between them that moving the bytes as one transfer removes.
            impact = moving + setup
            saving = ctx.what_if(change)
            if impact == 0 and saving == 0:
                sev = Severity.INFO
            else:
                sev = severity_by_saving(ctx.cost_pct(saving), opts, self.severity)
            nbytes = float(grp["bytes"].sum())
            achieved = nbytes / max(int(grp["dur"].sum()), 1) * 1e9
            layer_txt = f" feeding {layer}" if isinstance(layer, str) and layer else ""
            # A GPU stream's copies of one direction, or a DMA engine's queue.
            on_stream = direction != QUEUE
            where = (
                f"as {dma_source(queue, direction, on_stream)}"
                if on_stream
                else f"on queue {queue}"
            )
            yield ctx.finding(
                self,
                severity=sev,
                message=(
                    f"{_ranks_txt(grp)} {fmt_bytes(nbytes / n_ranks)} per rank {where}{layer_txt} in "
                    f"{n_transfers // n_ranks} transfers averaging {fmt_bytes(nbytes / n_transfers)} (below "
                    f"{fmt_bytes(opts['max_bytes'])}) at {fmt_bw(achieved)}"
                    + (f" against their typical {fmt_bw(typ)}" if typ == typ else "")
                    + f"; they hold the critical path {fmt_ns(impact)} ({ctx.share(impact)})"
                    + (
                        f": {fmt_ns(moving)} transferring and {fmt_ns(setup)} in the setup gaps "
                        "between them"
                        if setup
                        else ""
                    )
                    + f". Moved as large transfers the step would be {fmt_ns(saving)} shorter."
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
                    "transfers": n_transfers,
                    "packets": len(grp),
                    "bytes": nbytes,
                    "average_bytes": nbytes / n_transfers,
                    "achieved_bw": achieved,
                    "typical_bw": typ if typ == typ else None,
                    "direction": direction,
                    "path_transfer_ns": moving,
                    "path_setup_gap_ns": setup,
                    "events": grp["event"].head(20).tolist(),
                },
            )


def _setup_on_path(ctx, grp, change, path_gap) -> int:
    """Path time in the gaps before ``grp``'s transfers that ``change`` removes (each node's
    gap on the path, up to the setup the merge cuts from it)."""
    import numpy as np
    import pandas as pd

    if change.gap_nodes is None or not len(change.gap_nodes):
        return 0
    cut = pd.Series(ctx.graph.gap[change.gap_nodes] - change.gap_values, index=change.gap_nodes)
    cut = cut.groupby(level=0).max()
    nodes = ctx.nodes_of(grp["event"].to_numpy())
    removed = cut.reindex(nodes).fillna(0).to_numpy()
    on_path = path_gap.reindex(grp["event"]).fillna(0).to_numpy()
    return int(np.minimum(removed, on_path).clip(min=0).sum())


def _ranks_txt(grp) -> str:
    ranks = sorted(int(r) for r in grp["rank"].unique())
    return (
        f"Rank {ranks[0]} moves" if len(ranks) == 1 else f"Ranks {', '.join(map(str, ranks))} move"
    )
