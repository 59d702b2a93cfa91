"""Clock alignment across ranks from synchronous collectives.

Every rank's clock differs (a device clock per NeuronCore, a host clock per machine). A
synchronous collective instance ends at one true instant on every participant, so for two ranks
sharing instances the offset between their clocks is the median, over shared instances, of the
difference of their end times (the median resists the few instances whose end is skewed).
The lowest rank is the reference; ranks are solved outward from it through shared instances. Skew
is then measured on *arrivals*, which alignment does not use. A rank that shares no synchronous
collective with a solved rank (a pipeline stage: its neighbours reach it only by point-to-point
transfers) is bounded by causality instead: a transfer's target cannot finish receiving before
its source started sending. Transfers both ways between two ranks (activations forward,
gradients back) bound their offset from both sides; the midpoint of the interval is the estimate
and its half-width the residual. Ranks a reader puts in one clock
domain (``meta.info['clock_domain']``: the processes of one host, on its system clock) need no
estimate among themselves: they keep one offset.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracediag.model import schema as S
from tracediag.model.collective_ops import POINT_TO_POINT_OPS, one_sided_sources


def _sync_instances(coll: pd.DataFrame) -> pd.DataFrame:
    ops = coll[S.COLL_OP].astype(str).str.lower()
    # point-to-point operations end at different instants on the two sides: not usable here
    usable = coll.loc[~ops.isin(POINT_TO_POINT_OPS), [S.COLL_KEY, S.RANK, S.END]]
    # A rank recorded twice in one instance (duplicate rows): its first end speaks for it.
    usable = usable.drop_duplicates([S.COLL_KEY, S.RANK])
    counts = usable.groupby(S.COLL_KEY)[S.RANK].transform("nunique")
    return usable.loc[counts >= 2]


def transfer_bounds(coll: pd.DataFrame) -> dict[tuple[int, int], tuple[float, float]]:
    """Per ordered rank pair (a, b): the interval that causality leaves for ``offset[b] -
    offset[a]`` from their point-to-point transfers (``-inf``/``inf`` for an open side).

    A transfer from source s to target t bounds ``offset[t] - offset[s] >= start_s - end_t``
    (the target's side ends after the source's side started). Sides: ``Send``/``Recv`` by
    name, one-sided transfers (``CollectivePermute``) by their ``source,target`` group.
    """
    ops = coll[S.COLL_OP].astype(str).str.lower()
    p2p = coll.loc[ops.isin(POINT_TO_POINT_OPS).to_numpy()]
    if not len(p2p):
        return {}
    op = ops.loc[p2p.index].to_numpy()
    side = one_sided_sources(op, p2p[S.GROUP].to_numpy(), p2p[S.RANK].to_numpy())
    side = np.where(op == "send", 1, np.where(op == "recv", 0, side))
    two = p2p.groupby(S.COLL_KEY)[S.RANK].transform("size").to_numpy() == 2
    rows = pd.DataFrame(
        {"key": p2p[S.COLL_KEY].to_numpy(), "rank": p2p[S.RANK].to_numpy(),
         "start": p2p[S.START].to_numpy(), "end": p2p[S.END].to_numpy()}
    )  # fmt: skip
    src = rows[two & (side == 1)].drop_duplicates("key").set_index("key").add_suffix("_s")
    dst = rows[two & (side == 0)].drop_duplicates("key").set_index("key").add_suffix("_t")
    both = src.join(dst, how="inner")
    both = both[both["rank_s"] != both["rank_t"]]
    if not len(both):
        return {}
    low = (both["start_s"] - both["end_t"]).groupby([both["rank_s"], both["rank_t"]]).max()
    lows = {(int(a), int(b)): float(v) for (a, b), v in low.items()}  # one per linked pair
    return {
        (a, b): (lows.get((a, b), -np.inf), -lows.get((b, a), -np.inf))
        for a, b in {*lows, *((b, a) for a, b in lows)}
    }


def _bounded_offset(r, offsets, bounds):
    """``r``'s offset and half-width from a solved rank that transfers with it both ways (the
    narrowest interval); None when no solved rank bounds it from both sides."""
    best = None
    for s, off_s in offsets.items():
        lo, hi = bounds.get((s, r), (-np.inf, np.inf))
        if np.isfinite(lo) and np.isfinite(hi):
            half = abs(hi - lo) / 2.0
            if best is None or half < best[1]:
                best = (int(round(off_s + (lo + hi) / 2.0)), half)
    return best


def estimate_offsets(
    coll: pd.DataFrame, ranks: list[int]
) -> tuple[dict[int, int], dict[int, float], set[int]]:
    """Offsets (ns to add to each rank's times), the spread of the residuals per rank, and the
    ranks whose offset comes from point-to-point transfer bounds (see the module docstring):
    those that share no synchronous collective with an already solved rank. Ranks neither
    reaches get no entry.
    """
    inst = _sync_instances(coll)
    if not ranks:
        return {}, {}, set()
    bounds: dict | None = None
    by_transfers: set[int] = set()
    by_rank = {r: g.set_index(S.COLL_KEY)[S.END] for r, g in inst.groupby(S.RANK)}
    ref = min(ranks)
    offsets: dict[int, int] = {ref: 0}
    spread: dict[int, float] = {ref: 0.0}
    pending = [r for r in sorted(ranks) if r != ref]
    progress = True
    while pending and progress:
        progress = False
        for r in list(pending):
            ends_r = by_rank.get(r)
            if ends_r is None:
                continue
            diffs = []
            for s, off_s in offsets.items():
                ends_s = by_rank.get(s)
                if ends_s is None:
                    continue
                shared = ends_r.index.intersection(ends_s.index)
                if len(shared):
                    diffs.append(
                        ends_s.loc[shared].to_numpy() + off_s - ends_r.loc[shared].to_numpy()
                    )
            if not diffs:
                continue
            d = np.concatenate(diffs)
            med = int(np.median(d))
            offsets[r] = med
            spread[r] = float(np.median(np.abs(d - med)))
            pending.remove(r)
            progress = True
        if progress or not pending:
            continue
        # No synchronous collective reaches the rest: bound them by their transfers.
        bounds = transfer_bounds(coll) if bounds is None else bounds
        for r in list(pending):
            got = _bounded_offset(r, offsets, bounds)
            if got is not None:
                offsets[r], spread[r] = got
                by_transfers.add(r)
                pending.remove(r)
                progress = True
                break  # a newly solved rank may reach the others by collectives
    return offsets, spread, by_transfers


#: ``meta.info['clock']`` of a rank on the reference rank's own clock (one host's clock).
SHARED = "shared host clock"


def _shared_clocks(
    meta: dict[int, S.RankMeta], ref: int, offsets: dict[int, int], spread: dict[int, float]
) -> set[int]:
    """Ranks that share one clock (the same ``meta.info['clock_domain']``, e.g. processes of one
    host on its system clock) take one offset, in place: 0 with the reference rank, else the
    median of their estimates (each estimate alone carries the completion jitter of its ends).
    Returns the ranks found on the reference rank's clock this way."""
    domains: dict[str, list[int]] = {}
    for r, m in meta.items():
        domain = m.info.get("clock_domain")
        if isinstance(domain, str) and domain:
            domains.setdefault(domain, []).append(r)
    on_ref: set[int] = set()
    for members in domains.values():
        if len(members) < 2:
            continue
        if ref in members:
            for r in members:
                offsets[r], spread[r] = 0, 0.0
            on_ref |= set(members) - {ref}
            continue
        known = [r for r in members if r in offsets]
        if known:
            common = int(np.median([offsets[r] for r in known]))
            residual = float(np.median([spread[r] for r in known]))
            for r in members:
                offsets[r], spread[r] = common, residual
    return on_ref


def align_clocks(trace: S.Trace) -> S.Trace:
    """Shift every rank's times onto the reference rank's clock, in place, and record it in meta.

    ``meta.clock_offset_ns`` is the offset added; ``meta.info['clock']`` says how it was found:
    ``reference``, ``collectives`` (with ``clock_residual_ns``, the median absolute deviation of
    the per-instance estimates), ``transfers`` (bounded by point-to-point transfers; the
    residual is the half-width of the interval), ``shared host clock`` (the reference rank's clock domain, as the
    reader states it: no offset) or ``unaligned`` (no shared synchronous collective).
    """
    ranks = trace.ranks
    if len(ranks) < 2:
        for m in trace.meta.values():
            m.info["clock"] = "reference"
        return trace
    offsets, spread, by_transfers = estimate_offsets(trace.collectives, ranks)
    ref = min(ranks)
    shared = _shared_clocks(trace.meta, ref, offsets, spread)
    for r, m in trace.meta.items():
        if r in shared:
            m.clock_offset_ns = int(offsets[r])
            m.info["clock"] = SHARED
            m.info["clock_residual_ns"] = 0.0
        elif r in offsets:
            m.clock_offset_ns = int(offsets[r])
            m.info["clock"] = (
                "reference" if r == ref else "transfers" if r in by_transfers else "collectives"
            )
            m.info["clock_residual_ns"] = spread.get(r, 0.0)
        else:
            m.clock_offset_ns = 0
            m.info["clock"] = "unaligned"
    # Offsets by position in the sorted ranks (rank numbers may be sparse and large).
    known = np.asarray(ranks, dtype=np.int64)
    shift = np.array([offsets.get(r, 0) for r in ranks], dtype="int64")
    ev = trace.events
    ev[S.TS] = ev[S.TS].to_numpy() + shift[np.searchsorted(known, ev[S.RANK].to_numpy())]
    co = trace.collectives
    if len(co):
        s = shift[np.searchsorted(known, co[S.RANK].to_numpy())]
        for col in (S.ARRIVAL, S.START, S.END):
            co[col] = co[col].to_numpy() + s
    return trace
