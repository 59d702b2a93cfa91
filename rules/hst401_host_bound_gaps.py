"""HST401: the device idles on the critical path waiting for the host to launch work."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracediag.engine.rule import Rule, severity_by_saving
from tracediag.model import schema as S
from tracediag.model.findings import Severity
from tracediag.model.units import fmt_ns

if TYPE_CHECKING:
    import numpy as np


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
        "longer than `outlier_factor` times the job's typical one) back to the typical delay. A "
        "stall is a gap on the critical path, counted from when the device last worked on what was "
        "queued before it (until then the host may wait for the device, which no host change "
        "removes); ranks whose trace is a sampled subset (TRC507) have no stalls to price. Stalls "
        "that overlap in time form one pause, named on the ranks that carry it (their stalls add "
        "up to at least `min_rank_share` of the most stalled rank's): one rank's sleep overlaps "
        "the others' ordinary launch gaps, which hold nothing up. The ordinary launch gaps in "
        "which the device drains its queue and then idles, longer than one launch call takes "
        "(median), until the next launch (per-op dispatch from Python, a launch-bound loop) "
        "are one more finding, weighed against the "
        "step: how often and how long the device idles, the ops the host dispatches meanwhile "
        "(the outermost host event that begins in the gap and issues the launch), and what "
        "issuing each launch as much earlier as the device idled before it would save.",
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
        import numpy as np

        from tracediag.analysis.host_launches import (
            FED_SHARE,
            device_busy_until,
            device_busy_within,
            launch_span_within,
            launch_tracks,
            launched_layer,
        )
        from tracediag.analysis.intervals import interval_overlap
        from tracediag.analysis.peers import device_ranks
        from tracediag.graph.changes import WhatIf
        from tracediag.rules.hst402_host_device_syncs import warmup_note
        from tracediag.whatif.saving_limit import limit_clause, most_saved_ns

        seg = ctx.path.segments
        on_host = (seg["category"] == "host").to_numpy()
        if not on_host.any():  # before the events are scanned for device ranks
            return
        # host time on the path of a rank without a device is its work, not a device's wait;
        # on a sampled subset of a trace (TRC507) gaps hold events the file does not: no stall
        devices = [
            r for r in device_ranks(ctx.trace) if not ctx.trace.meta[r].info.get("sampled_subset")
        ]
        host = seg[on_host & seg["rank"].isin(devices).to_numpy()]
        if not len(host) or ctx.pct(host["dur_ns"].sum()) < opts["min_impact_pct"]:
            return
        nodes, typical = _host_stalls(ctx, opts["outlier_factor"])
        # The stalls the path waits on, and on the ranks it does not run through the stalls of
        # their launch threads (one pause seen on every rank is cut on every rank); a callback
        # or pool thread's silence, or a launch line the path does not wait for, holds nothing.
        g = ctx.graph
        on_path = np.isin(nodes, host["node"].to_numpy())
        tr = g.track[nodes]
        launching = launch_tracks(ctx)[np.where(tr >= 0, tr, len(ctx.trace.tracks))]
        peer = launching & ~np.isin(g.rank[nodes], g.rank[nodes[on_path]])
        keep = on_path | peer
        nodes, typical, on_path = nodes[keep], typical[keep], on_path[keep]
        # A stall is the gap's tail from when the rank's devices last worked: until then the
        # host may have waited for them (a sync the trace does not show), which no host change
        # removes; the what-if resumes the host at that instant at the earliest.
        lo_n = g.start[nodes] - g.gap[nodes]
        busy = device_busy_until(ctx, g.rank[nodes], lo_n, g.start[nodes]) - lo_n
        stalled = g.gap[nodes] - busy > opts["outlier_factor"] * np.maximum(typical, 1)
        nodes, typical, busy = nodes[stalled], typical[stalled], busy[stalled]
        on_path = on_path[stalled]
        idle_lo = g.start[nodes] - g.gap[nodes] + busy  # where each stall's idle tail begins
        # A thread silent while another thread of its rank launches device work through most
        # of the silence waits for that thread (the main thread in backward() while the
        # autograd thread launches the backward's kernels): no host stopped feeding the device.
        # (One copy launched by another thread in the middle of a stall leaves it a stall.)
        fed = launch_span_within(ctx, g.rank[nodes], idle_lo, g.start[nodes])
        quiet = fed < FED_SHARE * (g.start[nodes] - idle_lo)
        nodes, typical, busy = nodes[quiet], typical[quiet], busy[quiet]
        on_path, idle_lo = on_path[quiet], idle_lo[quiet]
        # What the device still runs in each stall (work queued before it), for the words.
        device_works = device_busy_within(ctx, g.rank[nodes], idle_lo, g.start[nodes])
        hs, he = host["start_ns"].to_numpy(), host["end_ns"].to_numpy()
        # A stalled thread's stretch with nothing recorded is a ``gap`` on the path (an idle
        # thread, graph.path_idle), still the stall's time on the path: the alexnet warm-up's
        # 269.5 ms inside aten::cudnn_convolution between two cudaFree calls was "0 ns on the
        # host" when only ``host`` segments counted.
        silent = seg[(seg["category"] == "gap").to_numpy() & seg["node"].isin(nodes).to_numpy()]
        ss, se = silent["start_ns"].to_numpy(), silent["end_ns"].to_numpy()
        doing = _host_doing(ctx, nodes, idle_lo, g.start[nodes])
        found = 0
        for group in _by_cause(
            _clusters(g.start[nodes] - g.gap[nodes], g.start[nodes]), on_path, doing, ctx
        )[: opts["max_findings"]]:
            # One cause (the same host op filling the stalls, once per step) is one finding.
            members = np.concatenate(
                [m[_carrying(g, nodes[m], typical[m], opts["min_rank_share"])] for m in group]
            )
            n = nodes[members]
            lo, hi = int(idle_lo[members].min()), int(g.start[n].max())
            # the path's time at the stalls' idle tails (their union: ranks overlap): its host
            # time there and the stalled threads' silences (nothing recorded) in them
            tails = idle_lo[members], g.start[n]
            unrecorded = int(interval_overlap(ss, se, *tails).sum())
            impact = int(interval_overlap(hs, he, *tails).sum()) + unrecorded
            inside = (
                _open_around(ctx, n, *tails, interval_overlap(*tails, ss, se)) if unrecorded else ""
            )
            # The host resumes when the device work it may wait for ends (``busy`` into the
            # gap), then takes its typical delay: the change removes the stall's excess over
            # the typical delay and no more (the wait is kept, not traded for the delay).
            change = WhatIf.gaps(n, busy[members] + typical[members])
            if max(ctx.pct(impact), ctx.pct(most_saved_ns(g, change))) < opts["min_impact_pct"]:
                continue  # below the threshold whatever the replay says: not replayed
            saving = ctx.what_if(change)
            if max(ctx.pct(impact), ctx.pct(saving)) < opts["min_impact_pct"]:
                continue
            # A saving far below the stall: the replay says what holds the path instead.
            why = limit_clause(ctx, change, int(saving), impact)
            found += 1
            ranks = tuple(sorted({int(r) for r in g.rank[n]}))
            layer = launched_layer(ctx, n)
            stall = g.gap[n] - busy[members]
            op, op_ns = _cause_of(ctx, doing[0][members], doing[1][members])
            yield ctx.finding(
                self,
                severity=severity_by_saving(ctx.cost_pct(saving), opts, self.severity),
                message=_message(
                    ranks,
                    stall,
                    len(group),
                    op,
                    op_ns,
                    layer,
                    impact,
                    ctx.share(impact),
                    int(device_works[members].sum()),
                    unrecorded,
                    inside,
                )
                + f" With the host's typical delay the step would be {fmt_ns(saving)} shorter{why}."
                + warmup_note(ctx, ranks, lo, hi),
                ranks=ranks,
                engine="cpu",
                layer=layer,
                op=op,
                start_ns=lo,
                end_ns=hi,
                impact_ns=impact,
                saving_ns=int(saving),
                change=change,
                suggestion="Find what the launch thread does here (data loading, a sync such as .item(), logging) and move it off the step.",
                evidence={
                    "stalls": len(n),
                    "instances": len(group),
                    "max_stall_ns": int(stall.max()),
                    "typical_ns": int(typical[members].max()),
                    # the device's work inside the stalls (queued before them)
                    "device_busy_in_stalls_ns": int(device_works[members].sum()),
                    # left out of the stalls: the gaps' heads while the device finished the
                    # run in progress, which the host may have waited for
                    "host_may_wait_for_device_ns": int(busy[members].sum()),
                    # of the impact, the stretches the stalled threads recorded nothing in
                    "unrecorded_ns": unrecorded,
                    **({"host_op": op, "host_op_ns": op_ns} if op else {}),
                },
            )
        # The ordinary launch gaps the device idles in (no stall among them): one pattern.
        found += yield from self._dispatch_gaps(ctx, opts, host, nodes)
        if not found:
            impact = int(host["dur_ns"].sum())
            # host time blocked in calls that wait for the device is HST402's, not launching
            from tracediag.rules.hst402_host_device_syncs import HostDeviceSyncs, blocking_syncs

            _, s_lo, s_hi = blocking_syncs(ctx, HostDeviceSyncs.options["min_call_ns"])
            synced = int(interval_overlap(s_lo, s_hi, hs, he).sum()) if len(s_lo) else 0
            rest = (
                f"; {fmt_ns(synced)} of it blocked in calls that wait for the device (HST402), "
                f"the other {fmt_ns(impact - synced)} evenly"
                if synced
                else ", evenly"
            )
            yield ctx.finding(
                self,
                severity=Severity.INFO,
                message=(
                    f"The critical path spends {fmt_ns(impact)} ({ctx.share(impact)}) on the host side "
                    f"(launch calls, launch latency, CPU time between launches, syncs){rest}: no single "
                    "gap between launches stands out as a stall."
                    + ("" if synced else " The step is launch-bound rather than stalled.")
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

    def _dispatch_gaps(self, ctx, opts, host, stalls):
        """One finding for the launch gaps on the path, other than ``stalls``, in which the
        devices drain what was queued and then idle until the host issues its next launch
        (per-op dispatch from Python, a launch-bound loop: each gap ordinary, together much of
        the step). Priced by issuing each launch as much earlier as the devices idled before
        it: the host then keeps up with the device. Returns how many findings it yielded."""
        import numpy as np

        from tracediag.analysis.host_launches import (
            FED_SHARE,
            device_busy_until,
            device_busy_within,
            dispatching,
            launch_call_ns,
            launch_span_within,
            launch_tracks,
            launched_layer,
        )
        from tracediag.analysis.intervals import interval_overlap
        from tracediag.graph import dependencies as G
        from tracediag.graph.changes import WhatIf
        from tracediag.whatif.saving_limit import limit_clause

        g = ctx.graph
        n = np.unique(host["node"].to_numpy())
        tr = np.where(g.track[n] >= 0, g.track[n], len(ctx.trace.tracks))
        cpu = np.append(S.strings(ctx.trace.tracks[S.TRACK_KIND]) == "cpu_thread", False)
        # the thread resumes after its previous call, or after the device work it waited for
        resumes = np.isin(g.bind_code[n], (G.PROGRAM_ORDER, G.DEVICE_WAIT))
        n = n[cpu[tr] & launch_tracks(ctx)[tr] & resumes & ~np.isin(n, stalls) & (g.gap[n] > 0)]
        lo, hi = g.start[n] - g.gap[n], g.start[n]
        drained = device_busy_until(ctx, g.rank[n], lo, hi, woken=False)
        idle = hi - drained - device_busy_within(ctx, g.rank[n], drained, hi)
        # a gap another thread of the rank launches through is a wait for it (as for stalls)
        fed = launch_span_within(ctx, g.rank[n], drained, hi)
        # an idle no longer than one launch call takes is the launch loop's own pace (a host
        # issuing back to back idles the device that long): the even launch-bound step that
        # the INFO finding below names; a longer one, the host is late dispatching
        floor = launch_call_ns(ctx)[g.rank[n]]
        keep = (idle > floor) & (fed < FED_SHARE * (hi - drained))
        n, lo, drained, hi, idle = n[keep], lo[keep], drained[keep], hi[keep], idle[keep]
        if not len(n):
            return 0
        hs, he = host["start_ns"].to_numpy(), host["end_ns"].to_numpy()
        impact = int(interval_overlap(hs, he, drained, hi).sum())
        # each launch goes out as much earlier as the device idled before it, no more (work
        # queued before that still runs in the gap: the host is not moved ahead of it)
        change = WhatIf.gaps(n, hi - lo - idle)
        saving = int(ctx.what_if(change))
        # a pattern of many small gaps is weighed against the step (the event_sync sample's
        # two gaps, 8 µs, are 3% of its 263 µs path but 0.25% of its 3.154 ms step)
        if max(ctx.cost_pct(impact), ctx.cost_pct(saving)) < opts["min_impact_pct"]:
            return 0
        ops = _dispatched_ops(ctx, dispatching(ctx, n, lo, hi), idle)
        op, op_gaps, op_idle = ops[0] if ops else ("", 0, 0)
        ranks = tuple(sorted({int(r) for r in g.rank[n]}))
        layer = launched_layer(ctx, n)
        why = limit_clause(ctx, change, saving, impact)
        yield ctx.finding(
            self,
            severity=severity_by_saving(ctx.cost_pct(saving), opts, self.severity),
            message=_dispatch_message(ranks, idle, ops, layer)
            + f"; the critical path spends {fmt_ns(impact)} on the host there "
            f"({ctx.share(impact)}). With each launch issued as much earlier as the device "
            f"idled before it, the step would be {fmt_ns(saving)} shorter{why}.",
            ranks=ranks,
            engine="cpu",
            layer=layer,
            op=op,
            start_ns=int(drained.min()),
            end_ns=int(hi.max()),
            impact_ns=impact,
            saving_ns=saving,
            change=change,
            suggestion="Dispatch ahead of the device: compile the loop into fewer launches "
            "(jax.jit around the whole step, lax.scan or fori_loop; torch.compile, CUDA graphs) "
            "and keep blocking reads (block_until_ready, .item(), .cpu()) out of it, so the "
            "host queues work while the device runs.",
            evidence={
                "gaps": len(n),
                "device_idle_ns": int(idle.sum()),
                "max_idle_ns": int(idle.max()),
                "typical_gap_ns": int(np.median(hi - lo)),
                **(
                    {"host_op": op, "host_op_gaps": op_gaps, "host_op_idle_ns": op_idle}
                    if op
                    else {}
                ),
            },
        )
        return 1


def _dispatch_message(ranks, idle, ops, layer) -> str:
    """How often and how long the device idles for the host's next launch, and the ops the
    host is dispatching in that time (the first three by idle time)."""
    who = f"The device of rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"
    launched = f" ({layer})" if layer else ""
    n = len(idle)
    each = f", {fmt_ns(int(idle.min()))} to {fmt_ns(int(idle.max()))} each" if n > 1 else ""
    what = (
        f"{who} idles {n} time{'s' if n > 1 else ''} for {fmt_ns(int(idle.sum()))} in all{each}, "
        f"waiting for the host to dispatch its next launch{launched}"
    )
    if not ops:
        return what
    named = ", ".join(
        f"{op} in {k} gap{'s' if k > 1 else ''} ({fmt_ns(ns)})" for op, k, ns in ops[:3]
    )
    return f"{what}: the host is dispatching {named}"


def _dispatched_ops(ctx, event: np.ndarray, idle: np.ndarray) -> list[tuple[str, int, int]]:
    """The ops dispatched in the gaps (``event``, -1 for none): (name, gaps, their idle ns),
    most idle time first."""
    import numpy as np

    from tracediag.analysis.host_launches import event_names

    names = event_names(ctx, event)
    named = names != ""
    if not named.any():
        return []
    keys, inv = np.unique(names[named], return_inverse=True)
    ns = np.bincount(inv, weights=idle[named]).astype(np.int64)
    count = np.bincount(inv)
    return [(str(keys[k]), int(count[k]), int(ns[k])) for k in np.argsort(-ns, kind="stable")]


def _message(
    ranks, stall, instances, op, op_ns, layer, impact, share, device_ns=0, unrecorded=0, inside=""
) -> str:
    """What the host does in its stalls, once or ``instances`` times (one cause), and what the
    device does meanwhile: the ``device_ns`` of work queued before them, then nothing; the
    ``unrecorded`` ns of the path there the stalled thread recorded nothing in (``inside`` the
    op it was in, when one was open)."""
    who = f"The host of rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"
    launched = f" ({layer})" if layer else ""
    total = int(stall.sum())
    them = "those stalls" if instances > 1 else "the stall"
    device = (
        f"; the device runs work queued before for {fmt_ns(device_ns)} of {them}, then idles"
        if device_ns > 0
        else " while the device idles"
    )
    if instances > 1:
        what = (
            f"{who} stalls {instances} times, {fmt_ns(int(stall.min()))} to "
            f"{fmt_ns(int(stall.max()))} each ({fmt_ns(total)} in all), before launching more "
            f"work{launched}{device}"
        )
        doing = f"; it runs {op} for {fmt_ns(op_ns)} of those stalls" if op else ""
    else:
        what = (
            f"{who} stalls {fmt_ns(int(stall.max()))} before launching more work{launched}{device}"
        )
        doing = f"; it runs {op} for {fmt_ns(op_ns)} of it" if op else ""
    if not unrecorded:
        return (
            f"{what}{doing}; the critical path spends {fmt_ns(impact)} on the host there ({share})."
        )
    within = f" (inside {inside})" if inside else ""
    silent = "all of it" if unrecorded >= impact else f"{fmt_ns(unrecorded)} of it"
    return (
        f"{what}{doing}; the critical path spends {fmt_ns(impact)} on the host there ({share}), "
        f"{silent} with nothing recorded on the thread{within}."
    )


def _open_around(ctx, nodes: np.ndarray, lo: np.ndarray, hi: np.ndarray, silent: np.ndarray) -> str:
    """The name of the innermost event still open on the stalled thread over the stall with the
    most ``silent`` ns (the op whose untraced work that is: cuDNN's inside
    ``aten::cudnn_convolution``); "" when none is."""
    import numpy as np

    i = int(np.argmax(silent))
    ev = ctx.trace.events
    ts = ev[S.TS].to_numpy()
    around = np.flatnonzero(
        (ev[S.TRACK].to_numpy() == ctx.graph.track[nodes[i]])
        & (ev[S.RANK].to_numpy() == ctx.graph.rank[nodes[i]])
        & (ts <= lo[i])
        & (ts + ev[S.DUR].to_numpy() >= hi[i])
    )
    if not len(around):
        return ""
    return str(ev[S.NAME].iloc[around[np.argmax(ts[around])]])


#: A host op names a stall when it fills at least this share of the stall's idle tail; below,
#: the host did many small things (a Python dispatch loop) and no one op is the cause.
_CAUSE_SHARE = 0.5


def _host_doing(ctx, nodes: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple:
    """Per stall ``[lo, hi]`` before node ``nodes[i]``: the event the host of its rank ran there
    (on a CPU thread, ended by the time the stalled call began, overlapping the stall the most:
    the outermost op that filled it, not a ``ProfilerStep#N`` or script range still open) and
    the ns it covers; (-1, 0) where none covers :data:`_CAUSE_SHARE` of the stall."""
    import numpy as np

    from tracediag.analysis.intervals import overlap_pairs

    g, ev = ctx.graph, ctx.trace.events
    event = np.full(len(nodes), -1, np.int64)
    covered = np.zeros(len(nodes), np.int64)
    if not len(nodes):
        return event, covered
    track = ev[S.TRACK].to_numpy()
    on_cpu = np.append(ctx.trace.tracks[S.TRACK_KIND].astype(str).to_numpy() == "cpu_thread", False)
    cand = np.flatnonzero(on_cpu[np.where(track >= 0, track, len(on_cpu) - 1)])
    ts = ev[S.TS].to_numpy()[cand]
    stop = ts + ev[S.DUR].to_numpy()[cand]
    rank = ev[S.RANK].to_numpy()[cand]
    o = np.argsort(lo, kind="stable")
    item, win, a, b = overlap_pairs(ts, stop, lo[o], hi[o])
    win = o[win]  # back to the stalls' order
    keep = (rank[item] == g.rank[nodes[win]]) & (stop[item] <= g.start[nodes[win]])
    item, win, ov = item[keep], win[keep], (b - a)[keep]
    best = np.lexsort((-ov, win))  # per stall, largest overlap first
    first = best[np.r_[True, win[best][1:] != win[best][:-1]]] if len(best) else best
    enough = ov[first] >= _CAUSE_SHARE * (hi - lo)[win[first]]
    event[win[first][enough]] = cand[item[first][enough]]
    covered[win[first][enough]] = ov[first][enough]
    return event, covered


def _by_cause(clusters, on_path, doing, ctx) -> list[list]:
    """The clusters the path waits on, those whose largest stall the same host op fills (one
    DataLoader ``__next__`` per step) grouped as one cause; largest total stall first (the
    clusters' order), a cluster without a named op alone."""
    import numpy as np

    from tracediag.analysis.host_launches import event_names

    if not clusters:
        return []
    event, covered = doing
    names = event_names(ctx, event)
    # Per cluster at once (a trace may have thousands): whether the path waits on one of its
    # stalls, and its stall of most ``covered`` ns (the first of them, as np.argmax picks).
    sizes = np.fromiter(map(len, clusters), np.int64, len(clusters))
    members = np.concatenate(clusters)
    starts = np.r_[0, np.cumsum(sizes)[:-1]]
    waited = np.logical_or.reduceat(on_path[members], starts)
    cluster = np.repeat(np.arange(len(clusters)), sizes)
    cover = covered[members]
    hits = np.flatnonzero(cover == np.maximum.reduceat(cover, starts)[cluster])
    largest = members[hits[np.r_[True, cluster[hits][1:] != cluster[hits][:-1]]]]
    groups: dict = {}
    for i in np.flatnonzero(waited).tolist():  # other ranks' stalls alone: not this path's pause
        groups.setdefault(names[largest[i]] or i, []).append(clusters[i])
    return list(groups.values())


def _cause_of(ctx, event: np.ndarray, covered: np.ndarray) -> tuple[str, int]:
    """The host op that fills most of these stalls (by the ns it covers) and those ns."""
    import numpy as np

    from tracediag.analysis.host_launches import event_names

    names = event_names(ctx, event)
    if not (names != "").any():
        return "", 0
    keys, inv = np.unique(names, return_inverse=True)
    weight = np.bincount(inv, weights=np.where(names != "", covered, 0))
    k = int(np.argmax(weight))
    return str(keys[k]), int(weight[k])


def _host_stalls(ctx, factor: float) -> tuple[np.ndarray, np.ndarray]:
    """Nodes whose host-side gap (after the previous call on a CPU thread that launches device
    work, or from a launch to its kernel) exceeds ``factor`` times the typical one, and that typical value for each."""
    import numpy as np

    from tracediag.analysis.host_launches import launch_tracks
    from tracediag.graph import dependencies as G

    g = ctx.graph
    track_kind = ctx.trace.tracks[S.TRACK_KIND].astype(str).to_numpy()
    tk = np.where(g.track >= 0, track_kind[np.maximum(g.track, 0)], "")
    # The typical delay is the launch threads' (those with a recorded launch), when the trace
    # records launches: a Python tracer's line (JAX's ``python`` thread: thousands of nested
    # frames 130 ns apart) or a pool thread would set a "typical" no launch ever takes.
    on_cpu = tk == "cpu_thread"
    launching = on_cpu & launch_tracks(ctx)[np.where(g.track >= 0, g.track, len(track_kind))]
    nodes, values = [], []
    for sel, pool in (
        (on_cpu, launching if launching.any() else on_cpu),
        (np.ones(len(tk), bool), None),
    ):
        code = G.PROGRAM_ORDER if pool is not None else G.LAUNCH
        idx = np.flatnonzero(sel & (g.bind_code == code))
        if not len(idx):
            continue
        ref = idx if pool is None else np.flatnonzero(pool & (g.bind_code == code))
        typical = int(np.median(g.gap[ref]))
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
    import numpy as np

    rank = g.rank[nodes].astype(np.int64)
    per_rank = np.bincount(rank, weights=np.maximum(g.gap[nodes] - typical, 0))
    return per_rank[rank] >= share * per_rank.max()


def _clusters(lo: np.ndarray, hi: np.ndarray) -> list[np.ndarray]:
    """Stalls whose windows overlap (the same pause seen on several ranks) form one cluster;
    largest total stall first."""
    import numpy as np

    if not len(lo):
        return []
    o = np.argsort(lo, kind="stable")
    run_end = np.maximum.accumulate(hi[o])
    starts = np.flatnonzero(np.r_[True, lo[o][1:] > run_end[:-1]])
    groups = np.split(o, starts[1:])
    total = np.add.reduceat((hi - lo)[o], starts)  # each cluster's stall ns, summed at once
    return [groups[i] for i in np.argsort(-total, kind="stable").tolist()]
