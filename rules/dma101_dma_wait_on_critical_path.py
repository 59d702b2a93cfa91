"""DMA101: an engine stalled on the critical path waiting for data a DMA queue brings."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracediag.analysis.path_runs import runs
from tracediag.analysis.peers import typical_bandwidth
from tracediag.engine.rule import Rule, severity_by_saving
from tracediag.model.findings import Severity
from tracediag.model.units import fmt_bw, fmt_ns
from tracediag.whatif import dma_restore as dma_whatif


class DmaWaitOnCriticalPath(Rule):
    code = "DMA101"
    name = "dma-wait-on-critical-path"
    title = "Engine stalled on the critical path waiting for a DMA"
    severity = Severity.WARNING
    options = {
        "min_impact_pct": 0.5,  # report waits of at least this share of the step
        "warn_saving_pct": 1.0,  # warning when fixing would save this share of the step
        "error_saving_pct": 10.0,
        "slow_ratio": 0.7,  # a transfer below this fraction of the queue's typical bandwidth is slow
        "min_bytes_typical": 32768,  # transfers that define a queue's typical bandwidth
    }
    doc = {
        "what it finds": "Stretches of the critical path where a compute engine waited for data "
        "a DMA queue was bringing: the time the DMA sat queued after its trigger (`dma_wait`) and "
        "the transfer itself (`dma_transfer`), grouped by rank, queue and the layer it fed.",
        "why it matters": "While the path waits for a DMA no engine does useful work on the step's "
        "longest chain: the step is as slow as the data movement. A transfer slower than its "
        "queue usually runs, or queued longer than usual, is time the step loses for nothing.",
        "how to fix": "Prefetch the tensor earlier (software pipelining) so the transfer overlaps "
        "compute; spread transfers over more queues; make transfers large and contiguous; check "
        "that no other traffic (spills, other queues on the same DMA engine) competes.",
        "example": "`DMA101 warning rank 0 qSyncIO0 layer_2: the tensor engine waited 310 µs "
        "(12% of the step) for DMA ... at its queue's typical 24 GB/s the step would be 240 µs "
        "shorter.`",
    }

    def check(self, ctx, opts):
        # A finding's impact is part of the path's DMA time: when all of it is below the
        # threshold, no group of runs reaches it (and no DMA table is needed).
        if ctx.pct(ctx.path_ns("dma_wait", "dma_transfer")) < opts["min_impact_pct"]:
            return
        # The path's own columns are all ``runs`` reads (a narrower frame to slice).
        dma_runs = runs(ctx.path.segments, {"dma_wait", "dma_transfer"})
        if not len(dma_runs):
            return
        seg = ctx.segments.reset_index(drop=True)
        typical = usual_wait = None  # computed for the first group that reaches the threshold
        dma_runs = _describe(dma_runs, seg, ctx.dma)
        for (rank, queue, layer), grp in dma_runs.groupby(
            ["rank", "queue", "layer"], dropna=False, sort=False
        ):
            impact = int(grp["ns"].sum())
            if ctx.pct(impact) < opts["min_impact_pct"]:
                continue
            if typical is None:
                typical = typical_bandwidth(ctx.dma, opts["min_bytes_typical"])
                usual_wait = dma_whatif.typical_trigger_wait(ctx)
            rows = _cause_rows(ctx, int(rank), queue, layer, grp)
            typ = float(typical.get(queue, np.nan))
            ranks = _affected_ranks(ctx, rows, typ, opts["slow_ratio"], int(rank))
            fix_rows = ctx.dma[
                ctx.dma["queue"].eq(queue)
                & ctx.dma["rank"].isin(ranks)
                & ctx.dma["ordinal"].isin(rows["ordinal"])
            ]
            saving = ctx.what_if(
                dma_whatif.restore(ctx, fix_rows, typical, trigger_wait=usual_wait)
            )
            hwp = ctx.hardware.get(int(rank))
            peak_saving = (
                ctx.what_if(
                    dma_whatif.restore(ctx, fix_rows, hwp.dma_queue_bw, trigger_wait=usual_wait)
                )
                if hwp is not None and hwp.dma_queue_bw
                else None
            )
            known = rows["bytes"].notna()
            achieved = (
                float(rows.loc[known, "bytes"].sum() / max(rows.loc[known, "dur"].sum(), 1) * 1e9)
                if known.any()
                else float("nan")
            )
            waiter = grp["waiter_engine"].mode()
            engine = str(waiter.iloc[0]) if len(waiter) else ""
            wait_ns = int(grp["ns_dma_wait"].sum())
            layer_txt = f" feeding {layer}" if isinstance(layer, str) and layer else ""
            sev = severity_by_saving(ctx.pct(saving), opts, self.severity)
            yield ctx.finding(
                self,
                severity=sev,
                message=(
                    f"The {engine or 'compute'} engine of rank {rank} waited {fmt_ns(impact)} "
                    f"({ctx.pct(impact)}% of the step) on the critical path for DMA queue {queue}{layer_txt}: "
                    f"{fmt_ns(wait_ns)} queued after its trigger and {fmt_ns(impact - wait_ns)} transferring "
                    f"at {fmt_bw(achieved) if np.isfinite(achieved) else 'an unknown rate'} "
                    f"(the queue's typical {fmt_bw(typ) if np.isfinite(typ) else 'unknown'}). "
                    f"Restored to the queue's typical bandwidth and queueing the step would be "
                    f"{fmt_ns(saving)} shorter."
                ),
                ranks=tuple(ranks),
                engine=engine,
                track=str(queue),
                layer=str(layer) if isinstance(layer, str) else "",
                op=str(grp["waiter_op"].dropna().iloc[0]) if grp["waiter_op"].notna().any() else "",
                start_ns=int(grp["start_ns"].min()),
                end_ns=int(grp["end_ns"].max()),
                impact_ns=impact,
                saving_ns=int(saving),
                suggestion="Prefetch this tensor earlier so its transfer overlaps compute, or split it over more DMA queues.",
                evidence={
                    "dma_wait_ns": wait_ns,
                    "dma_transfer_ns": impact - wait_ns,
                    "bytes": float(rows["bytes"].sum()),
                    "transfers": len(rows),
                    "achieved_bw": achieved,
                    "typical_bw": typ,
                    "peak_bw": hwp.dma_queue_bw if hwp is not None else None,
                    "peak_saving_ns": peak_saving,
                    "events": rows["event"].head(20).tolist(),
                },
            )


def _describe(dma_runs: pd.DataFrame, seg: pd.DataFrame, dma: pd.DataFrame) -> pd.DataFrame:
    """Add the queue and layer of each run and the engine/op of the work that waited for it."""
    ev_first = seg["event"].to_numpy()[dma_runs["first"].to_numpy()]
    # ``dma`` rows are in event order: a search finds each run's first DMA (no index of every
    # transfer built for a few runs).
    dma_events = dma["event"].to_numpy()
    row = np.searchsorted(dma_events, ev_first)
    has = row < len(dma_events)
    has[has] = dma_events[row[has]] == ev_first[has]
    row = np.where(has, row, 0)

    def at_first(col: str) -> np.ndarray:
        if not len(dma):
            return np.full(len(ev_first), np.nan, dtype=object)
        return dma[col].iloc[row].to_numpy()

    waiter = dma_runs["waiter"].to_numpy()
    w_ok = waiter >= 0
    w = np.maximum(waiter, 0)

    def at_waiter(col: str) -> np.ndarray:  # the waiters' rows only, not a whole column
        return seg[col].iloc[w].to_numpy()

    out = dma_runs.assign(
        queue=np.where(has, at_first("queue"), ""),
        layer=np.where(has, at_first("layer"), None),
        waiter_engine=np.where(w_ok, at_waiter("engine"), ""),
        waiter_op=np.where(w_ok, at_waiter("op") if "op" in seg else None, None),
    )
    waiter_layer = np.where(w_ok, at_waiter("layer") if "layer" in seg else None, None)
    out["layer"] = np.where(pd.isna(out["layer"].to_numpy()), waiter_layer, out["layer"].to_numpy())
    return out


def _cause_rows(ctx, rank, queue, layer, grp) -> pd.DataFrame:
    """The DMA transfers behind the runs: those of the same rank, queue and layer when the layer
    is known, else the transfers of the queue inside the runs' window."""
    on_rank = ctx.dma[(ctx.dma["rank"] == rank) & (ctx.dma["queue"] == queue)]
    if isinstance(layer, str) and layer:
        same_layer = on_rank[on_rank["layer"] == layer]
        if len(same_layer):
            return same_layer
    lo, hi = int(grp["start_ns"].min()), int(grp["end_ns"].max())
    end = on_rank["ts"] + on_rank["dur"]
    return on_rank[(end > lo) & (on_rank["ts"] < hi)]


def _affected_ranks(ctx, rows, typical, slow_ratio, rank) -> list[int]:
    """Ranks whose same transfers (queue and ordinal) are slow too: the fix must reach them all,
    or the path merely moves to the next rank with the same slow DMA."""
    peers = ctx.dma[
        ctx.dma["queue"].isin(rows["queue"].unique()) & ctx.dma["ordinal"].isin(rows["ordinal"])
    ]
    per_rank = peers.groupby("rank").agg(b=("bytes", "sum"), d=("dur", "sum"))
    bw = per_rank["b"] / per_rank["d"].clip(lower=1) * 1e9
    slow = bw.index[bw < slow_ratio * typical].tolist() if np.isfinite(typical) else []
    return sorted(set(int(r) for r in slow) | {rank})
