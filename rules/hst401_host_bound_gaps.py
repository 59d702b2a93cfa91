"""HST401: the device idles on the critical path waiting for the host to launch work."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracediag.analysis.intervals import interval_overlap
from tracediag.analysis.peers import device_ranks
from tracediag.engine.rule import Rule, severity_by_saving
from tracediag.graph import dependencies as G
from tracediag.graph.replay import WhatIf
from tracediag.model import schema as S
from tracediag.model.findings import Severity
from tracediag.model.units import fmt_ns


class HostBoundGaps(Rule):
    code = "HST401"
    name = "host-bound-gaps"
    title = "Device idle on the critical path waiting for the host"
    severity = Severity.WARNING
    options = {
        "min_impact_pct": 2.0,
        "outlier_factor": 2.0,  # a host delay this many times the typical one is a stall
        "warn_saving_pct": 2.0,
        "error_saving_pct": 20.0,
        "max_findings": 10,
        # A rank is named in a pause only when its stalls there add up to this share of the
        # rank that stalls most: one rank's pause overlaps the others' ordinary launch gaps.
        "min_rank_share": 0.25,
    }
    doc = {
        "what it finds": "Critical-path time spent on the host side: CPU time between kernel "
        "launches, launch latency, synchronisation calls. The what-if cuts host stalls (delays "
        "longer than `outlier_factor` times the job's typical one) back to the typical delay. Stalls "
        "that overlap in time form one pause, named on the ranks that carry it (their stalls add "
        "up to at least `min_rank_share` of the most stalled rank's): one rank's sleep overlaps "
        "the others' ordinary launch gaps, which hold nothing up.",
        "why it matters": "When the device waits for the CPU to issue work, faster kernels do not "
        "help: the step is host-bound. HTA counts this as idle time of the GPU; here it is also "
        "placed on the critical path and priced.",
        "how to fix": "Remove synchronisations from the step (`.item()`, `.cpu()`, blocking "
        "copies), use CUDA graphs or torch.compile to cut launch overhead, move data loading and "
        "logging off the training thread, pin memory for host-to-device copies.",
        "example": "`HST401 warning ranks 0, 1: the critical path spends 3.4 ms (27% of the step) "
        "on the host; without host stalls the step would be 2.9 ms shorter.`",
    }

    def check(self, ctx, opts):
        seg = ctx.path.segments
        on_host = (seg["category"] == "host").to_numpy()
        if not on_host.any():  # before the events are scanned for device ranks
            return
        # host time on the path of a rank without a device is its work, not a device's wait
        devices = list(device_ranks(ctx.trace))
        host = seg[on_host & seg["rank"].isin(devices).to_numpy()]
        if not len(host) or ctx.pct(host["dur_ns"].sum()) < opts["min_impact_pct"]:
            return
        nodes, typical = _host_stalls(ctx, opts["outlier_factor"])
        g = ctx.graph
        hs, he = host["start_ns"].to_numpy(), host["end_ns"].to_numpy()
        found = 0
        for members in _clusters(g.start[nodes] - g.gap[nodes], g.start[nodes])[
            : opts["max_findings"]
        ]:
            members = members[
                _carrying(g, nodes[members], typical[members], opts["min_rank_share"])
            ]
            n = nodes[members]
            lo, hi = int((g.start[n] - g.gap[n]).min()), int(g.start[n].max())
            impact = int(interval_overlap(np.array([lo]), np.array([hi]), hs, he)[0])
            change = WhatIf.gaps(n, typical[members])
            saving = ctx.what_if(change)
            if max(ctx.pct(impact), ctx.pct(saving)) < opts["min_impact_pct"]:
                continue
            found += 1
            ranks = tuple(sorted({int(r) for r in g.rank[n]}))
            layer = _launched_layer(ctx, n)
            yield ctx.finding(
                self,
                severity=severity_by_saving(ctx.pct(saving), opts, self.severity),
                message=(
                    f"The host of rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))} stalls "
                    f"{fmt_ns(int(g.gap[n].max()))} before launching more work{f' ({layer})' if layer else ''} "
                    f"while the device idles; the critical path spends {fmt_ns(impact)} on the host there "
                    f"({ctx.pct(impact)}% of the step). With the host's typical delay the step would be "
                    f"{fmt_ns(saving)} shorter."
                ),
                ranks=ranks,
                engine="cpu",
                layer=layer,
                start_ns=lo,
                end_ns=hi,
                impact_ns=impact,
                saving_ns=int(saving),
                change=change,
                suggestion="Find what the launch thread does here (data loading, a sync such as .item(), logging) and move it off the step.",
                evidence={
                    "stalls": len(n),
                    "max_stall_ns": int(g.gap[n].max()),
                    "typical_ns": int(typical[members].max()),
                },
            )
        if not found:
            impact = int(host["dur_ns"].sum())
            yield ctx.finding(
                self,
                severity=Severity.INFO,
                message=(
                    f"The critical path spends {fmt_ns(impact)} ({ctx.pct(impact)}% of the step) on the host side "
                    "(launch calls, launch latency, CPU time between launches, syncs), evenly: no single stall "
                    "stands out, so the step is launch-bound rather than stalled."
                ),
                ranks=tuple(sorted(int(r) for r in host["rank"].unique() if r >= 0)),
                engine="cpu",
                start_ns=int(hs.min()),
                end_ns=int(he.max()),
                impact_ns=impact,
                saving_ns=0,
                suggestion="Launch less: CUDA graphs, torch.compile, larger fused kernels.",
                evidence={"host_ns": impact},
            )


def _host_stalls(ctx, factor: float) -> tuple[np.ndarray, np.ndarray]:
    """Nodes whose host-side gap (after the previous call on a CPU thread, or from a launch to
    its kernel) exceeds ``factor`` times the typical one, and that typical value for each."""
    g = ctx.graph
    track_kind = ctx.trace.tracks[S.TRACK_KIND].astype(str).to_numpy()
    tk = np.where(g.track >= 0, track_kind[np.maximum(g.track, 0)], "")
    nodes, values = [], []
    for sel in ((g.bind_code == G.PROGRAM_ORDER) & (tk == "cpu_thread"), g.bind_code == G.LAUNCH):
        idx = np.flatnonzero(sel)
        if not len(idx):
            continue
        typical = int(np.median(g.gap[idx]))
        stall = idx[g.gap[idx] > factor * max(typical, 1)]
        nodes.append(stall)
        values.append(np.full(len(stall), typical, dtype=np.int64))
    if not nodes:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(nodes), np.concatenate(values)


def _carrying(g, nodes: np.ndarray, typical: np.ndarray, share: float) -> np.ndarray:
    """Mask of the stalls of a cluster on the ranks that carry it: those whose stalls beyond the
    typical delay add up to at least ``share`` of the largest rank's. A rank that sleeps 5 ms
    while the others launch as usual is its own pause, not theirs (their usual launch gaps
    overlap it in time but hold nothing up)."""
    rank = g.rank[nodes].astype(np.int64)
    per_rank = np.bincount(rank, weights=np.maximum(g.gap[nodes] - typical, 0))
    return per_rank[rank] >= share * per_rank.max()


def _clusters(lo: np.ndarray, hi: np.ndarray) -> list[np.ndarray]:
    """Stalls whose windows overlap (the same pause seen on several ranks) form one cluster;
    largest total stall first."""
    if not len(lo):
        return []
    o = np.argsort(lo, kind="stable")
    run_end = np.maximum.accumulate(hi[o])
    new = np.r_[True, lo[o][1:] > run_end[:-1]]
    groups = np.split(o, np.flatnonzero(new)[1:])
    return sorted(groups, key=lambda m: -int((hi[m] - lo[m]).sum()))


def _launched_layer(ctx, nodes: np.ndarray) -> str:
    """The layer of the device work the stalled calls launch, else of the calls themselves
    (a stream wait launches nothing), else their op, when the trace says."""
    ev = ctx.trace.events
    ed = ctx.trace.edges
    events = ctx.graph.event[nodes]
    launched = ed.loc[ed[S.SRC].isin(events), S.DST].to_numpy()
    for col, rows in ((S.LAYER, launched), (S.LAYER, events), (S.OP, launched)):
        if col in ev and len(rows):
            vals = S.strings(ev[col])[rows]
            vals = vals[vals != None]  # noqa: E711 (object array of str or None)
            if len(vals):
                return str(pd.Series(vals).mode().iloc[0])
    return ""
