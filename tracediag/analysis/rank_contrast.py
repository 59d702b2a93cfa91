"""What a rank's CPU threads do differently from the other ranks', step by step.

A late rank's cause is what it spends more time on than its peers *in the same step*, on the
same thread, for the same thing: like with like. The things compared are the **top-level
items** of each CPU thread inside each step: its outermost ops (not nested in another op of
the thread; the step's own ``ProfilerStep#N`` range left out, since it holds them all) and the
**idle gaps** between them on the thread that holds the step's range (the main thread; a
worker thread idles until it is handed work), each named after the op it precedes (``idle
before DistributedDataParallel.forward``; the first runs from the step's start). Per (thread, item) the rank's ns in each step less the median of
the other ranks' ns in that step (0 where a rank has no such item in a step it runs), summed
over the rank's steps.

Why not per-op excesses summed: every op a rank runs a little longer adds up, while the ops it
runs shorter do not subtract, so on the real gloo alltoall job all four ranks "ran 58-97 ms
longer than the median rank". Why top-level: an op nested in another is counted in it; the
outer op that holds extra work names where it is (``aten::matmul`` at the top level of the
step, outside ``DistributedDataParallel.forward``, on ``straggler_compute``). Why gaps: a rank
that sleeps runs no op at all (80 ms before ``DistributedDataParallel.forward`` in every step
of ``straggler_sleep``), which no op's duration shows.

Collectives' own ranges are left out as causes (their length is the wait for the others,
which is the symptom), but they still bound the gaps around them.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracediag.model import schema as S

#: The range that opens a step on the host: it holds the step's work, so it is no item.
_STEP_RANGE = re.compile(r"^ProfilerStep\s*#\s*\d+$")
#: CPU-side ranges of collectives (``c10d::allreduce_``, ``gloo:broadcast``, ``nccl:all_reduce``,
#: ``record_param_comms``): their length is the wait for the other ranks, not the rank's work.
_COLLECTIVE_RANGE = re.compile(
    r"^(?:(?:nccl|rccl|gloo|c10d|mpi|ucc)\s*(?::{1,2}|_)|record_param_comms$)", re.IGNORECASE
)
IDLE = "idle before "


def items(trace: S.Trace, ranks: np.ndarray) -> pd.DataFrame:
    """Per top-level item of the CPU threads of ``ranks``, inside numbered steps: ``rank``,
    ``step``, ``thread`` (its name equal on every rank: :func:`peer_track_names`), ``item``
    (the op's name, or ``idle before <op>``), ``idle``, ``start_ns``, ``ns``; plus ``track``
    (the rank's own track id)."""
    from tracediag.analysis.peers import peer_track_names

    ev = trace.events
    cols = ["rank", "step", "thread", "item", "idle", "start_ns", "ns", "track"]
    if S.STEP not in ev or not len(ev):
        return pd.DataFrame(columns=cols)
    cpu_track = (trace.tracks[S.TRACK_KIND].astype(str) == "cpu_thread").to_numpy()
    track = ev[S.TRACK].to_numpy()
    step = ev[S.STEP].to_numpy(dtype=np.float64)
    keep = cpu_track[track] & np.isfinite(step) & np.isin(ev[S.RANK].to_numpy(), ranks)
    names, code = S.text_codes(ev[S.NAME])
    names = np.asarray(names, dtype=object)
    is_step = np.append(np.array([bool(_STEP_RANGE.match(str(n))) for n in names]), False)
    opener = keep & is_step[code]
    rows = np.flatnonzero(keep & ~is_step[code])
    if not len(rows):  # e.g. device ranks whose host threads hold only the step ranges
        return pd.DataFrame(columns=cols)
    ts, dur = ev[S.TS].to_numpy(), ev[S.DUR].to_numpy()
    # Per (track, step), in start order (the longer first on a tie, so it is the outer one).
    o = np.lexsort((-dur[rows], ts[rows], step[rows], track[rows]))
    rows = rows[o]
    key = track[rows].astype(np.int64) * (1 << 32) + step[rows].astype(np.int64)
    end = ts[rows] + dur[rows]
    new = np.r_[True, key[1:] != key[:-1]]
    # Nested: starts before the latest end of the earlier ops of its (track, step).
    run_max = pd.Series(end).groupby(np.cumsum(new)).cummax().to_numpy()
    before = np.r_[np.iinfo(np.int64).min, run_max[:-1]]
    before[new] = np.iinfo(np.int64).min
    top = ts[rows] >= before
    rows, key, end = rows[top], key[top], end[top]
    new = np.r_[True, key[1:] != key[:-1]]
    prev_end = np.r_[0, end[:-1]]
    # The first op of a thread holding the step's range: idle from the step's start.
    opens = np.flatnonzero(opener)
    open_key = track[opens].astype(np.int64) * (1 << 32) + step[opens].astype(np.int64)
    step_start = pd.Series(ts[opens], index=open_key).groupby(level=0).min()
    first_from = step_start.reindex(key)
    # Idle only on a thread that holds the step's range (the main thread): a worker thread
    # idles until the main thread hands it work, which is no cause of its own.
    main = np.isin(track[rows], np.unique(track[opens]))
    has_gap = main & (~new | first_from.notna().to_numpy())
    gap_from = np.where(new, first_from.fillna(0).to_numpy(dtype=np.int64), prev_end)
    gap = np.where(has_gap, np.maximum(ts[rows] - gap_from, 0), 0).astype(np.int64)
    op_names = names[code[rows]].astype(str)
    # By name, once per distinct name (not per event).
    coll_name = np.append(np.array([bool(_COLLECTIVE_RANGE.match(str(n))) for n in names]), False)
    collective = (ev[S.KIND].to_numpy()[rows] == "collective") | coll_name[code[rows]]
    peer = peer_track_names(trace)[track[rows]]
    base = {
        "rank": ev[S.RANK].to_numpy()[rows],
        "step": step[rows],
        "thread": peer,
        "track": track[rows],
    }
    ops = pd.DataFrame(
        {**base, "item": op_names, "idle": False, "start_ns": ts[rows], "ns": dur[rows]}
    )[~collective]
    gaps = pd.DataFrame(
        {
            **base,
            "item": np.char.add(IDLE, op_names.astype(str)),
            "idle": True,
            "start_ns": ts[rows] - gap,
            "ns": gap,
        }
    )[gap > 0]
    return pd.concat([ops, gaps], ignore_index=True)[cols]


def contrast(trace: S.Trace, rank: int, until: int | None = None) -> pd.DataFrame:
    """Per (thread, item) of ``rank``: ``excess_ns``, its ns over the median of the other ranks'
    in the same steps, summed over the steps it starts before ``until``; ``mine_ns`` and ``peers_ns``
    (its ns and the others' median, per step on average: ``excess_ns`` = ``steps`` x their
    difference), ``steps`` (those compared), ``track`` and
    ``start_ns`` (its first occurrence). Largest excess first; empty without other ranks."""
    all_ranks = np.unique(trace.events[S.RANK].to_numpy())
    it = items(trace, all_ranks)
    others = [int(r) for r in all_ranks if r != rank]
    cols = ["thread", "item", "excess_ns", "mine_ns", "peers_ns", "steps", "track", "start_ns"]
    if not len(it) or not others or not (it["rank"] == rank).any():
        return pd.DataFrame(columns=cols)
    # Whole steps, those the rank starts before ``until``: a step cut short would compare
    # part of the rank's step with the whole of the others'.
    first = it[it["rank"] == rank].groupby("step")["start_ns"].min()
    steps = first.index[first < until].to_numpy() if until is not None else first.index.to_numpy()
    it = it[it["step"].isin(steps)]
    per = it.groupby(["thread", "item", "step", "rank"])["ns"].sum()
    wide = per.unstack("rank")
    # A rank that runs the step but not the item: 0 for it there; one that lacks the step: none.
    present = it.groupby(["step", "rank"]).size().unstack("rank").notna()
    wide = wide.reindex(columns=[rank, *others])
    runs = present.reindex(index=wide.index.get_level_values("step"), columns=wide.columns)
    wide = wide.where(~runs.to_numpy() | wide.notna(), 0.0)
    mine = wide[rank].fillna(0.0)
    peers = wide[others].median(axis=1, skipna=True).fillna(0.0)
    by = ["thread", "item"]
    n = len(steps)  # a step where no rank has the item counts 0 for all
    g = pd.DataFrame(
        {
            "excess_ns": (mine - peers).groupby(level=by).sum(),
            "mine_ns": mine.groupby(level=by).sum() / n,
            "peers_ns": peers.groupby(level=by).sum() / n,
            "steps": n,
        }
    )
    own = (
        it[it["rank"] == rank]
        .groupby(["thread", "item"])
        .agg(track=("track", "first"), start_ns=("start_ns", "min"))
    )
    g = g.join(own, how="inner").reset_index()
    g["excess_ns"] = np.round(g["excess_ns"]).astype(np.int64)
    return g.sort_values("excess_ns", ascending=False, kind="stable", ignore_index=True)[cols]
