"""Per-stage pipeline figures the PIP rules read: busy time, bubble, warm-up, cool-down, waits.

A rank's *busy* time is the union of its compute events inside the analysed window; its
*bubble* the rest of the window. Its *work* is the busy time less what its ops ran beyond
``STRETCH`` times their typical length (the median of the same op on the same rank): on a host
whose cores the ranks share (CPU training, 4 ranks on 2 cores), an op preempted midway lasts
several times its usual length, time the host took, not the stage's work (the last stage's
loss backward runs while every other stage computes, so its ops stretch most). A stage's
figures are the medians over its ranks. The number
of micro-batches is the number of forward Sends (towards a later stage) on a link, or without
Send/Recv sides half its transfers (one forward activation, one backward gradient each).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracediag.analysis.intervals import interval_overlap, uncovered_by_compute
from tracediag.analysis.parallel_layout import P2P_OPS, group_members
from tracediag.model import schema as S

#: An op longer than this many times the median of the same op on its rank was stretched by
#: something else (preempted on a shared host); what is beyond it does not count as work.
STRETCH = 2.0


def rank_busy(ctx, ranks) -> pd.DataFrame:
    """Per rank: busy ns, work ns (see the module docstring), first compute start and last
    compute end inside the window."""
    ev = ctx.trace.events
    lo, hi = ctx.path.start_ns, ctx.path.end_ns
    compute = ev[(ev[S.KIND] == "compute").to_numpy()]
    s_all = np.clip(compute[S.TS].to_numpy(), lo, hi)
    e_all = np.clip((compute[S.TS] + compute[S.DUR]).to_numpy(), lo, hi)
    share = _worked_share(compute, e_all - s_all, _on_host_thread(ctx.trace, compute))
    rows = []
    for rank in ranks:  # a loop over the ranks, not events
        mine = (compute[S.RANK] == rank).to_numpy()
        s, e = s_all[mine], e_all[mine]
        busy = int(interval_overlap(np.array([lo]), np.array([hi]), s, e)[0])
        first = int(s.min()) if len(s) else lo
        last = int(e.max()) if len(e) else hi
        rows.append(
            {
                "rank": int(rank),
                "busy_ns": busy,
                "work_ns": int(round(busy * share.get(int(rank), 1.0))),
                "first_ns": first,
                "last_ns": last,
            }
        )
    return pd.DataFrame(rows).set_index("rank")


def _on_host_thread(trace, events: pd.DataFrame) -> np.ndarray:
    """Per event: it sits on a host thread's track (CPU training's compute)."""
    kinds = trace.tracks[S.TRACK_KIND].astype(str).to_numpy() == "cpu_thread"
    track = events[S.TRACK].to_numpy()
    return np.append(kinds, False)[np.where((track >= 0) & (track < len(kinds)), track, -1)]


def _worked_share(compute: pd.DataFrame, dur: np.ndarray, host: np.ndarray) -> dict[int, float]:
    """Per rank, the share of its compute time (``dur``: in the window) within ``STRETCH``
    times the median length of the same op on that rank. Host threads only: a device's
    engine is not preempted, and one kernel or instruction name covers many sizes there."""
    if not len(compute) or not host.any():
        return {}
    rank = compute[S.RANK].to_numpy()
    name = compute[S.NAME].astype(str).to_numpy() if S.NAME in compute else np.zeros(len(rank))
    typical = pd.Series(dur).groupby([rank, name]).transform("median").to_numpy()
    worked = np.where(host, np.minimum(dur, STRETCH * typical), dur)
    total = pd.Series(dur).groupby(rank).sum()
    kept = pd.Series(worked).groupby(rank).sum()
    return {int(r): float(kept[r] / total[r]) if total[r] else 1.0 for r in total.index}


def recv_waits(ctx) -> pd.Series:
    """Per rank: ns its Recvs waited from their arrival until the transfer could start: the
    later of the recorded start and the Send side's arrival (a gloo Recv is posted, then waits
    in one range for the data, so its start is its arrival)."""
    coll = ctx.trace.collectives
    last = coll.groupby(S.COLL_KEY)[S.ARRIVAL].transform("max")
    recv = (coll[S.COLL_OP].astype(str).str.lower() == "recv").to_numpy()
    waited = np.maximum(coll[S.START], last)[recv] - coll[S.ARRIVAL][recv]
    return waited.clip(lower=0).groupby(coll[S.RANK][recv]).sum()


def p2p_transfer(ctx) -> pd.Series:
    """Per rank: ns its Recvs spent transferring with no compute of the rank beside them: from
    the later of the Recv's start and the matching Send's arrival (the data can only flow once
    both sides are in the call) to the Recv's end, clipped to the window. Time before that is
    waiting for the sender (``recv_waits``); a Send's own time is not counted, as its peer's
    Recv covers the same transfer."""
    coll = ctx.trace.collectives
    recv = (coll[S.COLL_OP].astype(str).str.lower() == "recv").to_numpy()
    if not recv.any():
        return pd.Series(dtype=np.int64)
    lo, hi = ctx.path.start_ns, ctx.path.end_ns
    last = coll.groupby(S.COLL_KEY)[S.ARRIVAL].transform("max").to_numpy()[recv]
    a = np.clip(np.maximum(coll[S.START].to_numpy()[recv], last), lo, hi)
    b = np.clip(coll[S.END].to_numpy()[recv], lo, hi)
    b = np.maximum(a, b)
    rank = coll[S.RANK].to_numpy()[recv]
    exposed = uncovered_by_compute(ctx.trace.events, rank, a, b)
    return pd.Series(exposed).groupby(rank).sum()


def micro_batches(ctx) -> int:
    """Micro-batches per step: the forward Sends (to a later stage) on the busiest link over the
    steps in the window; without Send/Recv sides, half the transfers on it (one forward, one
    backward per micro-batch)."""
    transfers = _transfers_per_link(ctx)
    return max(1, round(transfers / ctx.n_steps)) if transfers else 0


def _transfers_per_link(ctx) -> int:
    """The forward Sends on the busiest link in the window, else half its transfers."""
    coll = ctx.trace.collectives
    op = coll[S.COLL_OP].astype(str).str.lower()
    p2p = coll[op.isin(P2P_OPS)]
    if not len(p2p):
        return 0
    members = group_members(coll).loc[p2p.index].astype(str)
    sends = (op.loc[p2p.index] == "send").to_numpy()
    if sends.any():
        stage = ctx.layout.coords["pp"]
        # The peer of a two-sided transfer: the other participant of its instance.
        peer = p2p.groupby(S.COLL_KEY)[S.RANK].transform("sum") - p2p[S.RANK]
        paired = (p2p.groupby(S.COLL_KEY)[S.RANK].transform("size") == 2).to_numpy()
        rank = p2p[S.RANK].to_numpy()
        forward = sends & paired
        forward[forward] = (
            stage.reindex(peer.to_numpy()[forward]).to_numpy()
            > stage.reindex(rank[forward]).to_numpy()
        )
        if forward.any():
            fwd = p2p[forward]
            return int(fwd.groupby(members[forward])[S.COLL_KEY].nunique().max())
    per_link = p2p.groupby([members.astype(str), p2p[S.RANK]])[S.COLL_KEY].nunique()
    return int(per_link.max()) // 2


def stage_table(ctx) -> pd.DataFrame:
    """Per stage (index): ranks, busy, work, bubble and its share, warm-up, cool-down, Recv
    waits and exposed P2P transfer time (``p2p_transfer``)."""
    layout = ctx.layout
    length = ctx.length_ns
    per_rank = rank_busy(ctx, layout.coords.index)
    waits = recv_waits(ctx)
    transfer = p2p_transfer(ctx)
    rows = []
    for stage, ranks in layout.stages().items():
        mine = per_rank.loc[ranks]
        busy = int(mine["busy_ns"].median())
        rows.append(
            {
                "stage": stage,
                "ranks": tuple(ranks),
                "busy_ns": busy,
                "work_ns": int(mine["work_ns"].median()),
                "bubble_ns": length - busy,
                "bubble_pct": round(100.0 * (length - busy) / length, 2) if length else 0.0,
                "warmup_ns": int((mine["first_ns"] - ctx.path.start_ns).median()),
                "cooldown_ns": int((ctx.path.end_ns - mine["last_ns"]).median()),
                "recv_wait_ns": int(waits.reindex(ranks).fillna(0).median()),
                "p2p_transfer_ns": int(transfer.reindex(ranks).fillna(0).median()),
                "first_ns": int(mine["first_ns"].min()),
                "last_ns": int(mine["last_ns"].max()),
            }
        )
    return pd.DataFrame(rows).set_index("stage")


def ideal_bubble_pct(stages: int, micro: int) -> float:
    """The 1F1B/GPipe bubble share (p - 1) / (m + p - 1), in percent."""
    return 100.0 * (stages - 1) / (micro + stages - 1) if micro else 0.0
