"""COL202: collective transfers on the critical path that no compute overlaps."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from tracediag.engine.rule import Rule, severity_by_saving
from tracediag.model import schema as S
from tracediag.model.collective_ops import bus_factor
from tracediag.model.findings import Severity
from tracediag.model.units import fmt_ns
from tracediag.model.wording import bus_bandwidth_text, plural, ranks_label

if TYPE_CHECKING:
    import pandas as pd

    from tracediag.graph.changes import WhatIf


class ExposedCommunication(Rule):
    code = "COL202"
    name = "exposed-communication"
    title = "Collective transfer on the critical path not overlapped by compute"
    severity = Severity.WARNING
    options = {
        "min_impact_pct": 1.0,
        "warn_saving_pct": 10.0,  # some exposed communication is inherent to a data-parallel step
        "error_saving_pct": 25.0,
    }
    doc = {
        "what it finds": "Time on the critical path where a collective moves data (after every "
        "participant arrived) while no compute runs on that rank, grouped by rank and operation, "
        "with the achieved algorithm and bus bandwidth against the link's. Transfers that every "
        "participant in the inputs leaves as exposed (no compute on it for at least half that "
        "time) are the job's: one finding names all their ranks, not the one the path happens "
        "to cross.",
        "why it matters": "Communication that compute does not hide adds directly to the step. "
        "Either the transfer is slow for its size (bus bandwidth far below the link's) or it is "
        "scheduled where nothing can overlap it.",
        "how to fix": "Overlap: bucket gradients and start their all-reduce while the backward "
        "pass continues; prefetch all-gathers one layer ahead; reduce bytes (lower-precision "
        "gradients, larger buckets for fewer latency-bound ops); check the collective algorithm "
        "and topology when bus bandwidth is far below the link's.",
        "example": "`COL202 warning rank 0: 4 AllReduce transfers with no compute beside them "
        "take 1.2 ms (18% of the step) at 41 GB/s bus bandwidth (link 96 GB/s); perfectly "
        "overlapped the step would be 1.1 ms shorter.`",
    }

    def check(self, ctx, opts):
        import numpy as np
        import pandas as pd

        from tracediag.analysis.hardware import credible_peak
        from tracediag.analysis.intervals import uncovered_by_compute
        from tracediag.engine.saving_bound import impact_covering_saving

        seg = ctx.path.segments
        tr = seg[(seg["category"] == "collective_transfer") & (seg["event"] >= 0)]
        if not len(tr):
            return
        from tracediag.analysis.tensor_parallel import tp_collective_mask

        every = ctx.trace.collectives
        # Tensor-parallel collectives are COL203's: one exposed transfer, one finding.
        coll = every[~tp_collective_mask(every, ctx.layout)].set_index(S.EVENT)
        tr = tr[tr["event"].isin(coll.index)]
        tr = tr.assign(
            exposed=uncovered_by_compute(
                ctx.trace.events,
                tr["rank"].to_numpy(),
                tr["start_ns"].to_numpy(),
                tr["end_ns"].to_numpy(),
            ),
            coll_key=coll.loc[tr["event"], S.COLL_KEY].to_numpy(),
            op=coll.loc[tr["event"], S.COLL_OP].astype(str).to_numpy(),
        )
        tr = tr[tr["exposed"] > 0]
        if not len(tr):
            return
        # A transfer every participant leaves as exposed is the job's, not the rank the path
        # happens to cross (the one ending last): one finding names them all.
        tr = tr.assign(who=np.where(_exposed_alike(ctx, tr), -1, tr["rank"].to_numpy()))
        sizes = every.groupby(S.COLL_KEY)[S.RANK].nunique()
        keys = pd.MultiIndex.from_arrays([every[S.COLL_KEY], every[S.RANK]])
        for (who, op), grp in tr.groupby(["who", "op"]):
            rank = int(grp["rank"].iloc[0])
            impact = int(grp["exposed"].sum())
            if ctx.pct(impact) < opts["min_impact_pct"]:
                continue
            change = _overlap_change(ctx, grp)
            saving = ctx.what_if(change)
            # What the change also takes off the path beyond the exposed transfer (its gaps).
            exposed = impact
            impact = impact_covering_saving(ctx, change, exposed, int(saving))
            in_grp = every[S.COLL_KEY].isin(grp["coll_key"]).to_numpy()
            ranks = (
                (rank,)
                if who >= 0
                else tuple(int(r) for r in np.unique(every[S.RANK].to_numpy()[in_grp]))
            )
            # The bandwidth of the transfers the path runs through (one rank's each).
            body = every[keys.isin(pd.MultiIndex.from_arrays([grp["coll_key"], grp["rank"]]))]
            nbytes = float(body[S.BYTES].sum())
            t_ns = float(ctx.graph.dur[ctx.nodes_of(body[S.EVENT].to_numpy())].sum())
            algbw = nbytes / t_ns * 1e9 if t_ns > 0 and nbytes > 0 else float("nan")
            n = int(sizes.reindex(grp["coll_key"]).median())
            # Without a listed group, the job's world size (a rank's trace may state it) bounds it.
            group = _listed_size(body) or _world_size(ctx, int(rank))
            hwp = ctx.hardware.get(int(rank))
            link = hwp.link_bw if hwp is not None else float("nan")
            severity = severity_by_saving(ctx.cost_pct(saving), opts, self.severity)
            if not group and n == 1:
                # A collective with one participant in the inputs and no group or world size in
                # the trace: the others are unknown, so is how much of this is waiting for them.
                busbw, bw_txt = float("nan"), ""
                severity = min(severity, Severity.INFO)
                partial = (
                    " The trace names neither the collective's group nor the job's world size and "
                    "no other participant is in the inputs: this time may be waiting for them, "
                    "which overlap would not remove."
                )
            elif group > n:
                # Participants missing from the inputs: their arrival is unknown, so part of
                # this time may be waiting for them (skew), not transfer; no bus bandwidth
                # either. Not an error, whose saving is sure; but not info: the rank spends it
                # on the critical path with nothing beside it, which on
                # kineto_mi300_resnet_act_checkpoint (1 of 8 ranks) is 64% of the window.
                busbw, bw_txt = float("nan"), ""
                severity = min(severity, Severity.WARNING)
                partial = (
                    f" Only {n} of the group's {group} ranks {'is' if n == 1 else 'are'} in the inputs: part of "
                    "this time may be waiting for the missing ones, which overlap would not remove."
                )
            else:
                busbw = algbw * bus_factor(op, n)
                link = credible_peak(link, busbw)  # a link slower than the transfer is not its link
                bw_txt = bus_bandwidth_text(busbw, link)
                partial = ""
            n_inst = int(grp["coll_key"].nunique())
            kind, op_name = _kind_words(ctx, op, body, n_inst)
            yield ctx.finding(
                self,
                severity=severity,
                message=(
                    f"On {_whose(ranks, who)}, {kind} {'runs' if n_inst == 1 else 'run'} on the critical path "
                    f"with no compute beside {'it' if n_inst == 1 else 'them'}{'' if who >= 0 else ' on any of them'} for {fmt_ns(exposed)} ({ctx.share(exposed)}){bw_txt}. "
                    f"Fully overlapped with compute the step would be {fmt_ns(saving)} shorter.{partial}"
                ),
                ranks=ranks,
                engine="cc",
                op=op_name,
                start_ns=int(grp["start_ns"].min()),
                end_ns=int(grp["end_ns"].max()),
                impact_ns=impact,
                saving_ns=int(saving),
                change=change,
                suggestion="Start these collectives earlier (bucketing, prefetch) so compute overlaps them, or move fewer bytes.",
                evidence={
                    "instances": int(grp["coll_key"].nunique()),
                    "bytes": nbytes,
                    "algbw": algbw,
                    "busbw": busbw,
                    "link_bw": link,
                    "group_size": n,
                    "listed_group_size": group,
                    "coll_keys": grp["coll_key"].head(20).astype(int).tolist(),
                },
            )


#: A participant leaves a transfer exposed alike when this share of the time the path's rank
#: leaves exposed has no compute on it either.
ALIKE_SHARE = 0.5


def _exposed_alike(ctx, tr: pd.DataFrame):
    """Per path transfer: whether every other participant in the inputs (at least one) also
    runs no compute for :data:`ALIKE_SHARE` of its exposed time, over the same interval."""
    import numpy as np
    import pandas as pd

    from tracediag.analysis.intervals import uncovered_by_compute

    coll = ctx.trace.collectives
    rows = coll[coll[S.COLL_KEY].isin(tr["coll_key"])]
    seg = pd.DataFrame({"coll_key": tr["coll_key"].to_numpy(), "seg": np.arange(len(tr))})
    pairs = seg.merge(
        pd.DataFrame({"coll_key": rows[S.COLL_KEY].to_numpy(), "peer": rows[S.RANK].to_numpy()}),
        on="coll_key",
    )
    i = pairs["seg"].to_numpy()
    pairs = pairs[pairs["peer"].to_numpy() != tr["rank"].to_numpy()[i]]
    i, peer = pairs["seg"].to_numpy(), pairs["peer"].to_numpy()
    lo, hi = tr["start_ns"].to_numpy()[i], tr["end_ns"].to_numpy()[i]
    left = uncovered_by_compute(ctx.trace.events, peer, lo, hi)
    alike = left >= ALIKE_SHARE * tr["exposed"].to_numpy()[i]
    n_peers = np.bincount(i, minlength=len(tr))
    return (n_peers > 0) & (np.bincount(i[~alike], minlength=len(tr)) == 0)


def _whose(ranks: tuple[int, ...], who: int) -> str:
    """``"rank 2"``; ``"ranks 0-3 (every participant)"`` for a job-wide finding."""
    return ranks_label(list(ranks)) + ("" if who >= 0 else " (every participant)")


def _kind_words(ctx, op: str, body: pd.DataFrame, n_inst: int) -> tuple[str, str]:
    """How the message counts the transfers and the finding's ``op``: ``"3 AllReduce
    transfers"``, ``"AllReduce"``; when the trace names no operation (the reader's
    ``"Unknown"``: a generic kernel such as ``ncclDevKernel_Generic`` with no collective name
    beside it), ``"3 collective transfers of unknown kind (kernel ncclDevKernel_Generic)"`` and
    the kernel's name, which a user can search the trace for."""
    import numpy as np

    if op != "Unknown":
        return plural(n_inst, f"{op} transfer"), op
    names = ctx.trace.events[S.NAME].iloc[body[S.EVENT].to_numpy()].astype(str)
    # The name less its argument list (``ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)``).
    kernel = names.mode().iat[0].split("(", 1)[0] if len(names) else ""
    words = plural(n_inst, "collective transfer") + " of unknown kind"
    # The reader names a generic kernel from the CPU-side collective that launched it; where
    # no launch of it is in the trace (queued before profiling began: the first three
    # ncclDevKernel_Generic of kineto_mi300_resnet_act_checkpoint), nothing can, and the user
    # should know why rather than look for the op on the CPU side.
    edges = ctx.trace.edges
    launched = edges[S.DST][(edges[S.EDGE_KIND] == "launch").to_numpy()].to_numpy()
    why = ""
    if not np.isin(body[S.EVENT].to_numpy(), launched).any():
        them = "it" if n_inst == 1 else "them"
        why = f", launched before the trace began: no CPU-side op in it names {them}"
    if not kernel:
        return (f"{words} ({why[2:]})" if why else words), op
    return f"{words} (kernel {kernel}{why})", kernel


def _listed_size(body: pd.DataFrame) -> int:
    """The largest group the format lists for these rows (``Process Group Ranks``, replica
    groups: ``0,1,...``); 0 where none is listed."""
    import pandas as pd

    groups = pd.unique(body[S.GROUP].astype(str))  # the few distinct groups
    sizes = [len(g.split(",")) for g in groups if _MEMBERS.fullmatch(g)]
    return max(sizes, default=0)


_MEMBERS = re.compile(r"-?\d+(?:,-?\d+)*")


def _world_size(ctx, rank: int) -> int:
    """The job's world size as ``rank``'s trace states it (Kineto ``distributedInfo``); 0 if none."""
    size = str(ctx.trace.meta[rank].info.get("world_size", ""))
    return int(size) if size.isdigit() else 0


def _overlap_change(ctx, grp: pd.DataFrame) -> WhatIf:
    """Every participant's transfer of these instances shortened by the exposed time."""
    from tracediag.graph.changes import WhatIf

    per_key = grp.groupby("coll_key")["exposed"].max()
    coll = ctx.trace.collectives
    rows = coll[coll[S.COLL_KEY].isin(per_key.index)]
    nodes = ctx.nodes_of(rows[S.EVENT].to_numpy())
    cut = per_key.reindex(rows[S.COLL_KEY]).to_numpy()
    ok = nodes >= 0
    return WhatIf.durations(nodes[ok], ctx.graph.dur[nodes[ok]] - cut[ok])
