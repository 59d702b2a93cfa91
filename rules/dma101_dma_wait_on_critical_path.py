"""DMA101: an engine stalled on the critical path waiting for data a DMA queue brings."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracediag.engine.rule import Rule, severity_by_saving
from tracediag.model.findings import Severity
from tracediag.model.units import fmt_bw, fmt_bytes, fmt_ns
from tracediag.model.wording import dma_source, engine_label, plural, typical_pace

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd


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
        # A saving below this share of the step means the transfers already run at the queue's
        # typical pace: the message says so (and what the hardware's peak would give) instead.
        "at_pace_saving_pct": 0.1,
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
        import numpy as np

        from tracediag.analysis.dma import (
            MEMSET,
            QUEUE,
            direction_peak,
            transfer_count,
            typical_bandwidth,
        )
        from tracediag.analysis.hardware import credible_peak
        from tracediag.analysis.path_runs import runs
        from tracediag.whatif import dma_restore as dma_whatif
        from tracediag.whatif.saving_limit import limit_clause

        if ctx.pct(ctx.path_ns("dma_wait", "dma_transfer")) < opts["min_impact_pct"]:
            return
        # The path's own columns are all ``runs`` reads (a narrower frame to slice).
        dma_runs = runs(ctx.path.segments, {"dma_wait", "dma_transfer"})
        if not len(dma_runs):
            return
        seg = ctx.segments.reset_index(drop=True)
        typical = usual_wait = transfer = None  # computed for the first group reaching it
        dma_runs = _describe(dma_runs, seg, ctx.dma)
        # A memset writes memory and moves nothing: it is memory time, not a transfer to
        # compare with a queue's pace or a link's peak.
        dma_runs = dma_runs[(dma_runs["direction"] != MEMSET).to_numpy()]
        for (rank, queue, direction, layer), grp in dma_runs.groupby(
            ["rank", "queue", "direction", "layer"], dropna=False, sort=False
        ):
            impact = int(grp["ns"].sum())
            if ctx.pct(impact) < opts["min_impact_pct"]:
                continue
            if typical is None:
                # Per queue and direction: host copies and device copies of one GPU stream
                # run at PCIe and HBM speeds.
                typical = typical_bandwidth(ctx.dma, opts["min_bytes_typical"], by_direction=True)
                usual_wait = dma_whatif.typical_trigger_wait(ctx)
                transfer = _transfer_codes(ctx.dma)
            rows = _cause_rows(ctx, int(rank), queue, layer, grp)
            rows = rows[(rows["direction"] == direction).to_numpy()]
            # GPU copies below the size that sets the typical pace are latency-bound: each is
            # its own call with a fixed cost, a few hundred bytes never move at the stream's
            # typical bandwidth, and coalescing them is DMA102's fix. Restored here they would
            # claim its saving at a pace they cannot reach. (A DMA queue's small descriptors
            # are packets of one transfer and keep the queue's pace.)
            tiny = (rows["bytes"] < opts["min_bytes_typical"]).to_numpy() & (direction != QUEUE)
            all_tiny = bool(len(rows)) and bool(tiny.all())
            left_out = 0 if all_tiny else int(tiny.sum())
            if left_out:
                rows = rows[~tiny]
            typ = float(typical.get((queue, direction), np.nan))
            ranks = _affected_ranks(ctx, rows, typ, opts["slow_ratio"], int(rank), transfer)
            same = _same_transfers(ctx.dma, rows, transfer)
            fix_rows = ctx.dma[same & ctx.dma["rank"].isin(ranks)]
            if all_tiny:
                fix_rows = fix_rows.iloc[:0]  # no pace to restore them to
            change = dma_whatif.restore(ctx, fix_rows, typ, trigger_wait=usual_wait)
            saving = ctx.what_if(change)
            known = rows["bytes"].notna()
            achieved = (
                float(rows.loc[known, "bytes"].sum() / max(rows.loc[known, "dur"].sum(), 1) * 1e9)
                if known.any()
                else float("nan")
            )
            # The peak of the path these bytes take (PCIe, HBM, NVLink, the DMA queue), and
            # only where neither this transfer nor the queue's typical pace is above it.
            peak, peak_kind = direction_peak(ctx.hardware.get(int(rank)), direction)
            peak = credible_peak(peak, achieved, typ)
            peak_saving = (
                ctx.what_if(dma_whatif.restore(ctx, fix_rows, peak, trigger_wait=usual_wait))
                if np.isfinite(peak)
                else None
            )
            waiter = grp["waiter_engine"].mode()
            engine = str(waiter.iloc[0]) if len(waiter) else ""
            wait_ns = int(grp["ns_dma_wait"].sum())
            layer_txt = f" feeding {layer}" if isinstance(layer, str) and layer else ""
            # A GPU stream's copies of one direction, or a DMA engine's queue.
            on_stream = direction != QUEUE
            tensor = _slowest_tensor(rows)
            if tensor and not on_stream:  # a GPU copy's name is its kind, said in ``source``
                layer_txt += f" (tensor {tensor})"
            sev = severity_by_saving(ctx.cost_pct(saving), opts, self.severity)
            pace = typical_pace(direction, on_stream)
            rate = fmt_bw(achieved) if np.isfinite(achieved) else "an unknown rate"
            if not np.isfinite(typ):
                pace_txt = (
                    f"at {rate} (the sizes are not recorded, so no pace can be compared: "
                    "prefetching these transfers so they overlap compute is what would "
                    "shorten the step)."
                )
            elif all_tiny:
                pace_txt = (
                    f"at {rate}: all {plural(len(rows), 'transfer')} are under "
                    f"{fmt_bytes(opts['min_bytes_typical'])}, latency-bound, so no queue pace "
                    "applies; coalescing them (DMA102) or prefetching them so they overlap "
                    "compute is what would shorten the step."
                )
            else:
                small = ctx.pct(saving) < opts["at_pace_saving_pct"]
                # A group at or above the typical pace: only its slower transfers are restored.
                slow = _below(rows, typ) if achieved >= typ else None
                slow = slow if slow and slow[0] else None  # none slower: already at the pace
                at_pace = achieved >= opts["slow_ratio"] * typ
                # Slow transfers whose restoring saves little: the replay says what holds.
                why = (
                    limit_clause(ctx, change, int(saving), impact) if small and not at_pace else ""
                )
                pace_txt = f"at {rate}, {_against(achieved, typ, opts['slow_ratio'])} {pace} ({fmt_bw(typ)}). " + (
                    _what_if_text(
                        small, saving, peak, peak_saving, peak_kind,
                        pace=pace, slow=slow, at_pace=at_pace, why=why,
                    )
                )  # fmt: skip
            yield ctx.finding(
                self,
                severity=sev,
                message=(
                    f"The {engine_label(engine)} of rank {rank} waited {fmt_ns(impact)} "
                    f"({ctx.share(impact)}) on the critical path for "
                    f"{dma_source(queue, direction, on_stream)}{layer_txt}: "
                    f"{fmt_ns(wait_ns)} queued after its trigger and {fmt_ns(impact - wait_ns)} "
                    f"transferring {pace_txt}"
                    + (
                        f" {plural(left_out, 'transfer')} under {fmt_bytes(opts['min_bytes_typical'])} "
                        f"among them {'is' if left_out == 1 else 'are'} left out of the pace and "
                        "the saving: latency-bound, they are DMA102's."
                        if left_out
                        else ""
                    )
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
                change=change,
                suggestion="Prefetch this tensor earlier so its transfer overlaps compute, or split it over more DMA queues.",
                evidence={
                    "dma_wait_ns": wait_ns,
                    "dma_transfer_ns": impact - wait_ns,
                    "bytes": float(rows["bytes"].sum()) if known.any() else None,
                    "direction": direction,
                    "transfers": transfer_count(rows),
                    "packets": len(rows),
                    "tensor": tensor,
                    "achieved_bw": achieved,
                    "typical_bw": typ,
                    "peak_bw": peak if np.isfinite(peak) else None,
                    "peak_kind": peak_kind if np.isfinite(peak) else "",
                    "peak_saving_ns": peak_saving,
                    "events": rows["event"].head(20).tolist(),
                },
            )


def _against(achieved: float, typical: float, slow_ratio: float) -> str:
    """How the group's own bandwidth compares with the typical it would be restored to."""
    import numpy as np

    if not np.isfinite(achieved):
        return "against"
    if achieved >= typical:
        return "above" if achieved > typical else "at"
    return "close to" if achieved >= slow_ratio * typical else "below"


def _below(rows: pd.DataFrame, typical: float) -> tuple[int, int, float]:
    """Of ``rows``' transfers of known size: how many run below ``typical``, out of how many,
    and those slow ones' own bandwidth (their bytes over their time)."""
    import numpy as np

    known = rows[rows["bytes"].notna()]
    slow = known[(known["bw"] < typical).to_numpy()]
    bw = float(slow["bytes"].sum() / max(slow["dur"].sum(), 1) * 1e9) if len(slow) else np.nan
    return len(slow), len(known), bw


def _what_if_text(
    small: bool,
    saving: int,
    peak: float,
    peak_saving: int | None,
    peak_kind: str = "",
    *,
    pace: str = "the queue's typical bandwidth",
    slow: tuple[int, int, float] | None = None,
    at_pace: bool = True,
    why: str = "",
) -> str:
    """The what-if sentence, worded by what the figures say.

    ``small``: the saving at the typical pace (``pace``) is next to nothing, so the sentence
    also says what the hardware's peak would give and that prefetching is the fix. ``slow``:
    the group as a whole is at or above the typical pace, and some of its transfers are below
    it (their count, the group's count and their own bandwidth): only they are restored, and
    the figure shown is theirs. ``at_pace``: the group runs at the typical pace (not slow), so a small saving is
    no surprise; otherwise ``why`` (:func:`~tracediag.whatif.saving_limit.limit_clause`) says
    what holds the path instead.
    """
    import numpy as np

    at_peak = (
        f"; at the hardware's peak {fmt_bw(peak)}{f' ({peak_kind})' if peak_kind else ''} "
        f"the step would be {fmt_ns(peak_saving)} shorter"
        if small and peak_saving is not None and np.isfinite(peak)
        else ""
    )
    prefetch = "; prefetching them so they overlap compute is what would shorten the step"
    if slow is not None:
        n_slow, n, slow_bw = slow
        return (
            f"{n_slow} of its {n} transfers run below it (at {fmt_bw(slow_bw)}): restored to "
            f"it, with the usual queueing, the step would be {'only ' if small else ''}"
            f"{fmt_ns(saving)} shorter{why if small else ''}{at_peak}"
            f"{prefetch if small else ''}."
        )
    if not small:
        return (
            f"Restored to that bandwidth, queueing as usual, the step would be {fmt_ns(saving)} "
            "shorter."
        )
    if not at_pace:
        return (
            f"Restored to that bandwidth, queueing as usual, the step would be only "
            f"{fmt_ns(saving)} shorter{why}{at_peak}{prefetch}."
        )
    return (
        f"These transfers already run at {pace} and queueing, so restoring "
        f"them saves {'nothing' if saving == 0 else 'only ' + fmt_ns(saving)}{at_peak}{prefetch}."
    )


def _describe(dma_runs: pd.DataFrame, seg: pd.DataFrame, dma: pd.DataFrame) -> pd.DataFrame:
    """Add the queue and layer of each run and the engine/op of the work that waited for it."""
    import numpy as np
    import pandas as pd

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
        direction=np.where(has, at_first("direction"), ""),
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


def _transfer_codes(dma: pd.DataFrame) -> np.ndarray:
    """Per row of ``dma``: a code equal for the same transfer on any rank, the same k-th
    transfer of the same tensor on the same queue (rings are taken dynamically, so not the same
    ring). Computed once per check: each column factorized, no tuple per row."""
    from tracediag.analysis.group_codes import group_codes

    return group_codes(dma["queue"], dma["tensor"], dma["tensor_ordinal"].to_numpy())[0]


def _same_transfers(dma: pd.DataFrame, rows: pd.DataFrame, transfer: np.ndarray) -> np.ndarray:
    """Rows of ``dma`` that are the transfers ``rows`` (rows of ``dma``) on any rank, by their
    ``transfer`` codes (:func:`_transfer_codes`)."""
    import numpy as np

    # ``dma`` rows are in event order: a search finds each of ``rows``.
    at = np.searchsorted(dma["event"].to_numpy(), rows["event"].to_numpy())
    return np.isin(transfer, np.unique(transfer[at]))


def _slowest_tensor(rows: pd.DataFrame) -> str:
    """The tensor whose transfers among ``rows`` run at the lowest bandwidth ("" if none)."""
    named = rows[rows["tensor"].notna() & rows["bytes"].notna()]
    if not len(named):
        return ""
    per = named.groupby("tensor", observed=True).agg(b=("bytes", "sum"), d=("dur", "sum"))
    return str((per["b"] / per["d"].clip(lower=1)).idxmin())


def _affected_ranks(ctx, rows, typical, slow_ratio, rank, transfer) -> list[int]:
    """Ranks whose same transfers (queue, tensor and its ordinal) are slow too: the fix must
    reach them all, or the path merely moves to the next rank with the same slow DMA."""
    import numpy as np

    peers = ctx.dma[_same_transfers(ctx.dma, rows, transfer)]
    per_rank = peers.groupby("rank").agg(b=("bytes", "sum"), d=("dur", "sum"))
    bw = per_rank["b"] / per_rank["d"].clip(lower=1) * 1e9
    slow = bw.index[bw < slow_ratio * typical].tolist() if np.isfinite(typical) else []
    return sorted(set(int(r) for r in slow) | {rank})
