"""HST401: the device idles on the critical path waiting for the host to launch work."""

from __future__ import annotations

import numpy as np

from tracediag import graph as G
from tracediag import schema as S
from tracediag.findings import Severity
from tracediag.replay import WhatIf
from tracediag.rule import Rule, severity_by_saving
from tracediag.units import fmt_ns


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
    }
    doc = {
        "what it finds": "Critical-path time spent on the host side: CPU time between kernel "
        "launches, launch latency, synchronisation calls. The what-if cuts host stalls (delays "
        "longer than `outlier_factor` times the job's typical one) back to the typical delay.",
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
        seg = ctx.segments
        host = seg[seg["category"].astype(str) == "host"]
        if not len(host):
            return
        by_rank = host.groupby("rank")["dur_ns"].sum()
        ranks = [
            int(r) for r, v in by_rank.items() if r >= 0 and ctx.pct(v) >= opts["min_impact_pct"]
        ]
        if not ranks:
            return
        change, stalls = _host_stall_change(ctx, opts["outlier_factor"])
        saving = ctx.what_if(change) if stalls else 0
        impact = int(by_rank.loc[ranks].sum())
        yield ctx.finding(
            self,
            severity=severity_by_saving(ctx.pct(saving), opts, self.severity),
            message=(
                f"The critical path spends {fmt_ns(impact)} ({ctx.pct(impact)}% of the step) on the host side "
                f"of rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))} (CPU time between launches, "
                f"launch latency, syncs) while the device waits. {stalls} host stalls longer than "
                f"{opts['outlier_factor']:g}x the typical delay; without them the step would be {fmt_ns(saving)} shorter."
            ),
            ranks=tuple(ranks),
            engine="cpu",
            start_ns=int(host[host["rank"].isin(ranks)]["start_ns"].min()),
            end_ns=int(host[host["rank"].isin(ranks)]["end_ns"].max()),
            impact_ns=impact,
            saving_ns=int(saving),
            suggestion="Remove syncs from the step, launch less (CUDA graphs, torch.compile), move data loading off the launch thread.",
            evidence={
                "host_ns_by_rank": {str(r): int(by_rank[r]) for r in ranks},
                "stalls": stalls,
            },
        )


def _host_stall_change(ctx, factor: float) -> tuple[WhatIf, int]:
    """Cut host-side gaps (between calls on a CPU thread, and from a launch to its kernel) that
    exceed ``factor`` times their typical value back to the typical value."""
    g = ctx.graph
    track_kind = ctx.trace.tracks[S.TRACK_KIND].astype(str).to_numpy()
    tk = np.where(g.track >= 0, track_kind[np.maximum(g.track, 0)], "")
    cpu_gap = (g.bind_code == G.PROGRAM_ORDER) & (tk == "cpu_thread")
    launch_gap = g.bind_code == G.LAUNCH
    nodes, values = [], []
    for sel in (cpu_gap, launch_gap):
        idx = np.flatnonzero(sel & (g.gap > 0))
        if not len(idx):
            continue
        typical = int(np.median(g.gap[np.flatnonzero(sel)]))
        stall = idx[g.gap[idx] > factor * max(typical, 1)]
        nodes.append(stall)
        values.append(np.full(len(stall), typical, dtype=np.int64))
    if not nodes:
        return WhatIf(), 0
    n = np.concatenate(nodes)
    return WhatIf.gaps(n, np.concatenate(values)), int(len(n))
