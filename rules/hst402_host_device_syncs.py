"""HST402: the host blocks on the critical path in a call that waits for the device."""

from __future__ import annotations

import re

from tracediag.engine.rule import Rule, severity_by_saving
from tracediag.model import schema as S
from tracediag.model.findings import Severity
from tracediag.model.units import fmt_bytes, fmt_ns

#: Runtime calls that return only when the device has reached them: synchronisations, and copies
#: (a copy to or from pageable host memory is synchronous even when called ``...Async``).
SYNC_CALL = re.compile(
    r"^(?:cuda|hip)(?:DeviceSynchronize|StreamSynchronize|EventSynchronize|"
    r"Memcpy(?:2D|3D)?(?:Async)?|MemcpyDtoH(?:Async)?|Free|Malloc|"
    r"LaunchKernel|ModuleLaunchKernel)$"
)

#: Why a call of this kind blocks, for the message (a copy says so from its device event).
_WHY = (
    (re.compile(r"Free$"), "freeing device memory synchronises the device"),
    (re.compile(r"Malloc$"), "the allocator grows its pool from the driver"),
    (
        re.compile(r"LaunchKernel$"),
        "a first launch loads the kernel's module, once: profile after a warm-up step",
    ),
)

#: Calls whose long instances are one-off costs (a kernel's module loads at its first launch).
_ONE_OFF = re.compile(r"LaunchKernel$")

#: An annotation naming a warm-up iteration (``...|warmup|forward]``, ``warmup_step``).
_WARMUP = re.compile(r"warm[-_ ]?up", re.IGNORECASE)


def warmup_note(ctx, ranks, lo: int, hi: int) -> str:
    """``" The profiled iteration is a warm-up (`NAME`): ..."`` when an annotation whose name
    says warm-up covers part of ``[lo, hi]`` on one of ``ranks``; "" otherwise."""
    import numpy as np

    ev = ctx.trace.events
    ts = ev[S.TS].to_numpy()
    over = (ts < hi) & (ts + ev[S.DUR].to_numpy() > lo) & np.isin(ev[S.RANK].to_numpy(), ranks)
    # The distinct names are searched, not the overlapping rows' (often most of the trace).
    texts, codes = S.text_codes(ev[S.NAME])
    says_warmup = np.array([_WARMUP.search(t) is not None for t in texts] + [False])
    warm = np.flatnonzero(over & says_warmup[codes])  # (code -1, no name: the trailing False)
    if not len(warm):
        return ""
    return (
        f" The profiled iteration is a warm-up (`{texts[codes[warm[0]]]}`): allocations and first "
        "launches are one-off costs, so these figures are not the steady state."
    )


#: A copy's device event names its direction and host memory kind (Kineto's words).
_COPY = re.compile(r"Memcpy (?P<dir>[A-Za-z]+) \((?P<src>\w+) -> (?P<dst>\w+)\)")
_DIRECTION = {"DtoH": "device-to-host", "HtoD": "host-to-device", "DtoD": "device-to-device"}


def blocking_syncs(ctx, min_call_ns: int):
    """The host calls of :data:`SYNC_CALL` lasting at least ``min_call_ns`` on the ranks with a
    device: (event ids, their start, end), one vectorised pass over the event names."""
    import numpy as np

    ev = ctx.trace.events
    kind = S.strings(ctx.trace.tracks[S.TRACK_KIND])
    on_cpu = np.append(kind == "cpu_thread", False)
    track = ev[S.TRACK].to_numpy()
    long = np.flatnonzero(
        (ev[S.DUR].to_numpy() >= min_call_ns) & on_cpu[np.where(track >= 0, track, len(kind))]
    )
    names = ev[S.NAME].iloc[long].astype(str)
    ids = long[names.str.match(SYNC_CALL).to_numpy(bool)]
    ts = ev[S.TS].to_numpy()[ids]
    return ids, ts, ts + ev[S.DUR].to_numpy()[ids]


class HostDeviceSyncs(Rule):
    code = "HST402"
    name = "host-device-syncs"
    title = "Host blocked waiting for the device on the critical path"
    severity = Severity.WARNING
    options = {
        "min_call_ns": 1_000_000,  # a sync call shorter than this is ordinary overhead
        "min_impact_pct": 2.0,
        "warn_saving_pct": 2.0,
        "error_saving_pct": 20.0,
        "max_findings": 5,
    }
    doc = {
        "what it finds": "Critical-path host time inside calls that return only when the device "
        "has got there: `cudaDeviceSynchronize`, `cudaStreamSynchronize`, `cudaEventSynchronize`, "
        "`cudaMemcpy` and a `cudaMemcpyAsync` to or from pageable memory (synchronous whatever "
        "its name; `.item()`, `.cpu()`, `.to('cpu')` issue one), and their HIP twins, lasting "
        "at least `min_call_ns`. Calls of one name under one layer and op are one cause. The "
        "what-if lets each call block only as long as the device works during it (the union "
        "of the rank's device work inside the call): the rest of the wait is the device itself "
        "waiting (on another stream, a peer, the host) while the host can do nothing. A call "
        "whose return the graph binds to the device work it waited for (a recorded "
        "synchronize, or one inferred: it returned just after the device went idle) is "
        "released from that work in the what-if, and the critical path's time inside it counts "
        "whatever runs there: the path then goes through the device work, and the saving says "
        "how much returning earlier would gain.",
        "why it matters": "While the host blocks it launches nothing: once the device has "
        "drained what was queued before the sync, it idles until the host resumes and queues "
        "more. HTA counts such calls among CPU-GPU synchronisation; here the time is placed on "
        "the critical path and priced.",
        "how to fix": "Copy into pinned memory with `non_blocking=True` and read the result a "
        "step later (or after an event), or move the `.item()`/`.cpu()`/synchronize out of the "
        "loop; keep tensors such as split sizes on the device.",
        "example": "`HST402 error rank 0: the host blocks 5 times in cudaMemcpyAsync "
        "(## sparse_data_dist ##, aten::copy_), 138.8 ms to 146.9 ms each (724.6 ms in all)...`",
    }

    def check(self, ctx, opts):
        import numpy as np
        import pandas as pd

        from tracediag.analysis.intervals import interval_overlap
        from tracediag.engine.saving_bound import binding_chain_of
        from tracediag.graph.changes import WhatIf
        from tracediag.graph.device_waits import device_busy_runs
        from tracediag.whatif.saving_limit import limit_clause

        ids, lo, hi = blocking_syncs(ctx, opts["min_call_ns"])
        if not len(ids):
            return
        waits = _completions(ctx, ids)
        seg = ctx.path.segments
        ss, se = seg["start_ns"].to_numpy(), seg["end_ns"].to_numpy()
        host = (seg["category"] == "host").to_numpy()
        # The path's time inside each call: its host time, or all of it where the call returns
        # on the path when the device work it waits for ends (the path runs through that work).
        on_chain = np.zeros(len(ids), bool)
        on_chain[waits >= 0] = binding_chain_of(ctx)[waits[waits >= 0]]
        on_path = np.where(
            on_chain, interval_overlap(lo, hi, ss, se), interval_overlap(lo, hi, ss[host], se[host])
        )
        if not (on_path > 0).any():
            return
        ev = ctx.trace.events
        rank = ev[S.RANK].to_numpy()[ids]
        runs = device_busy_runs(ctx.trace)
        busy = np.zeros(len(ids), np.int64)
        for r in np.unique(rank):  # per rank (a few), one vectorised overlap each
            mine, on = rank == r, runs.rank == r
            busy[mine] = interval_overlap(lo[mine], hi[mine], runs.start[on], runs.end[on])
        copy = _copies(ctx, ids)
        cause = pd.DataFrame(
            {
                "name": ev[S.NAME].iloc[ids].astype(str).to_numpy(),
                "layer": _text(ev, S.LAYER, ids),
                "op": _text(ev, S.OP, ids),
            }
        )
        groups = cause.groupby(["name", "layer", "op"], sort=False).indices
        ranked = sorted(groups.values(), key=lambda m: -int(on_path[m].sum()))
        for m in ranked[: opts["max_findings"]]:
            # every call of the cause is counted and changed, the path's share in the impact
            impact = int(on_path[m].sum())
            if ctx.pct(impact) < opts["min_impact_pct"]:
                continue
            nodes, comp = ctx.nodes_of(ids[m]), waits[m]
            ok, freed = (nodes >= 0) & (comp < 0), comp >= 0
            # each call blocks only while the device works inside it: a call that returns when
            # device work ends no longer waits for it, but for that long after it began
            change = WhatIf.durations(nodes[ok], busy[m][ok]) + WhatIf.released(
                comp[freed], busy[m][freed]
            )
            saving = int(ctx.what_if(change))
            why = limit_clause(ctx, change, saving, impact)  # what holds the path instead
            dur = hi[m] - lo[m]
            name, layer, op = cause.iloc[m[0]]
            ranks = tuple(sorted({int(r) for r in rank[m]}))
            yield ctx.finding(
                self,
                # a slow launch is a module load, once per kernel: not a cost of the steady
                # state (the mi250 toy's 6.5 ms first hipLaunchKernel), so no more than info
                severity=Severity.INFO
                if _ONE_OFF.search(name)
                else severity_by_saving(ctx.cost_pct(saving), opts, self.severity),
                message=_message(ranks, name, layer, op, dur, copy.iloc[m], busy[m], impact, ctx)
                + f" If the host blocked only while the device works, the step would be "
                f"{fmt_ns(saving)} shorter{why}."
                + warmup_note(ctx, ranks, int(lo[m].min()), int(hi[m].max())),
                ranks=ranks,
                engine="cpu",
                layer=layer,
                op=op or name,
                start_ns=int(lo[m].min()),
                end_ns=int(hi[m].max()),
                impact_ns=impact,
                saving_ns=saving,
                change=change,
                suggestion=_suggestion(copy.iloc[m]),
                evidence={
                    "call": name,
                    "calls": len(m),
                    "call_ns": int(dur.sum()),
                    "max_call_ns": int(dur.max()),
                    "device_busy_in_calls_ns": int(busy[m].sum()),
                    **_copy_evidence(copy.iloc[m]),
                },
            )


def _completions(ctx, ids):
    """Per call: its completion node when device work binds its return (a recorded
    synchronize's ``sync`` edge, an inferred ``device_wait``), else -1."""
    import numpy as np

    from tracediag.graph.dependencies import COMPLETION, DEVICE_WAIT, SYNC

    g = ctx.graph
    out = g.event_node[ids]
    node = np.maximum(out, 0)
    waits = (
        (out >= 0) & (g.role[node] == COMPLETION) & np.isin(g.bind_code[node], (SYNC, DEVICE_WAIT))
    )
    return np.where(waits, out, -1)


def _text(ev, col, rows):
    """Column ``col`` of these rows as text, "" where missing."""
    import numpy as np

    if col not in ev:
        return np.full(len(rows), "", dtype=object)
    vals = S.strings(ev[col])[rows]
    return np.array(["" if v is None else str(v) for v in vals], dtype=object)


def _copies(ctx, ids):
    """Per call: the device copy it launched (``launch`` edge): name, bytes, stream name."""
    import pandas as pd

    ev, ed = ctx.trace.events, ctx.trace.edges
    launch = ed[(ed[S.EDGE_KIND] == "launch").to_numpy()]
    dst = pd.Series(launch[S.DST].to_numpy(), index=launch[S.SRC].to_numpy())
    dst = dst[~dst.index.duplicated()].reindex(ids)
    out = pd.DataFrame({"name": "", "bytes": 0, "stream": ""}, index=range(len(ids)))
    has = dst.notna().to_numpy()
    rows = dst.to_numpy()[has].astype("int64")
    out.loc[has, "name"] = ev[S.NAME].iloc[rows].astype(str).to_numpy()
    if S.BYTES in ev:
        out.loc[has, "bytes"] = ev[S.BYTES].iloc[rows].fillna(0).astype("int64").to_numpy()
    out.loc[has, "stream"] = [ctx.track_name(int(t)) for t in ev[S.TRACK].iloc[rows].to_numpy()]
    parts = out["name"].str.extract(_COPY)
    out["direction"] = parts["dir"].map(_DIRECTION).fillna("")
    out["pageable"] = (parts["src"] == "Pageable") | (parts["dst"] == "Pageable")
    return out


def _copy_evidence(copy) -> dict:
    """The copies the calls made, for the evidence (none for a synchronize)."""
    made = copy[copy["direction"] != ""]
    if not len(made):
        return {}
    return {
        "copy": str(made["name"].mode().iloc[0]),
        "copy_bytes": int(made["bytes"].median()),
        "copy_stream": str(made["stream"].mode().iloc[0]),
        "pageable": bool(made["pageable"].all()),
    }


def _message(ranks, name, layer, op, dur, copy, busy, impact, ctx) -> str:
    """What the host blocks in, how often and how long, what for, and what the device does."""
    who = f"The host of rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"
    where = ", ".join(x for x in (layer, op) if x)
    where = f" ({where})" if where else ""
    n, total = len(dur), int(dur.sum())
    if n > 1:
        what = (
            f"{who} blocks {n} times in {name}{where}, {fmt_ns(int(dur.min()))} to "
            f"{fmt_ns(int(dur.max()))} each ({fmt_ns(total)} in all)"
        )
    else:
        what = f"{who} blocks {fmt_ns(total)} in {name}{where}"
    ev = _copy_evidence(copy)
    if ev:
        each = "each " if n > 1 else ""
        kind = (
            "pageable host memory makes the copy synchronous"
            if ev["pageable"]
            else "the call waits for the copy"
        )
        what += (
            f": {each}waits for a {fmt_bytes(ev['copy_bytes'])} "
            f"{_direction_words(copy)} copy on {ev['copy_stream']} ({kind})"
        )
    else:
        cause = next((words for pat, words in _WHY if pat.search(name)), "")
        what += f" ({cause})" if cause else ""
    them = "those waits" if n > 1 else "the wait"
    device = (
        f"; the device works {fmt_ns(int(busy.sum()))} of {them} and idles the rest"
        if busy.sum() > 0
        else f"; the device idles through {them}"
    )
    return f"{what}{device}; the critical path spends {fmt_ns(impact)} there ({ctx.share(impact)})."


def _direction_words(copy) -> str:
    """``device-to-pageable-host`` and the like, from the copies' own names."""
    made = copy[copy["direction"] != ""]
    direction = str(made["direction"].mode().iloc[0])
    if made["pageable"].all():
        return direction.replace("-host", "-pageable-host")
    return direction


def _suggestion(copy) -> str:
    """The fix: pinned memory for a pageable copy, else moving the sync out of the loop."""
    if len(copy) and bool(copy["pageable"].any()):
        return (
            "Copy into pinned memory with non_blocking=True (tensor.pin_memory(), "
            "x.to('cpu', non_blocking=True)) and wait on an event only where the value is used, "
            "or keep the value on the device; move .item()/.cpu() out of the loop."
        )
    return (
        "Move the synchronize/.item()/.cpu() out of the step loop, or wait on an event "
        "recorded where the result is ready, a step later."
    )
