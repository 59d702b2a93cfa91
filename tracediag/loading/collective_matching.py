"""Check that the ranks' rows of one collective instance really are one instance.

Readers match instances by keys (replica group, stream and op id; process group and sequence
number; else the ordinal on the stream). An ordinal key goes wrong as soon as one rank's profile
misses an instance (sampled traces, a window cut differently): from there on it pairs unrelated
operations. One instance ends at about one true instant on every participant, so after clock
alignment a participant whose end is far from the others', and whose span misses one of theirs,
is not part of it: it is split off as an unmatched instance of its own, and counted. Rooted operations
(broadcast, reduce) are left alone: their participants end at different instants by design; those
that ended before the last participant arrived did not wait for it and become instances of their
own (:func:`separate_early_finishers`).
"""

from __future__ import annotations

import numpy as np

from tracediag.model import schema as S

#: Ends this close are the same instant (clock residuals, completion jitter).
MIN_TOLERANCE_NS = 50_000
#: ...or within this share of the instance's median duration, for long collectives.
DURATION_SHARE = 0.25


#: Rooted operations end when their part of the tree is done: a leaf that arrives late ends
#: late, the root and other branches early (gloo's broadcast on 4 ranks), so their ends differ.
ROOTED = {"broadcast", "reduce", "scatter", "gather"}


def _overlaps_the_others(co, key) -> np.ndarray:
    """Per row: its [arrival, end] overlaps every other participant's, as every participant of
    one synchronous instance does however its completion jitters (nobody finishes before the
    last one arrives; processes sharing a few cores finish an all-reduce milliseconds apart).
    A row that misses one of them cannot be part of the instance."""
    arrival = co[S.ARRIVAL].astype("float64")
    end = co[S.END].astype("float64")
    a, e = arrival.to_numpy(), end.to_numpy()
    first_end = end.groupby(key).transform("min").to_numpy()
    last_arrival = arrival.groupby(key).transform("max").to_numpy()
    # Against the others only: a row's own arrival and end do not count.
    others_first_end = np.where(e == first_end, _second(end, key, "min"), first_end)
    others_last_arrival = np.where(a == last_arrival, _second(arrival, key, "max"), last_arrival)
    return (a <= others_first_end) & (e >= others_last_arrival)


def _second(values, key, which: str) -> np.ndarray:
    """Per row: the second smallest (``min``) or largest (``max``) value of its group."""
    ranked = values.groupby(key).rank(method="first", ascending=which == "min")
    pick = values.where(ranked == 2)
    return pick.groupby(key).transform("max" if which == "max" else "min").to_numpy()


def split_mismatched(trace: S.Trace) -> int:
    """Give participants whose end disagrees with their instance's median end their own key.

    Returns how many rows were split off; each is counted in its rank's ``meta.repairs``.
    """
    co = trace.collectives
    if not len(co):
        return 0
    key = co[S.COLL_KEY]
    end = co[S.END].astype("float64")
    med_end = end.groupby(key).transform("median").to_numpy()
    dur = (co[S.END] - co[S.START]).astype("float64").groupby(key).transform("median").to_numpy()
    size = co.groupby(S.COLL_KEY)[S.RANK].transform("size").to_numpy()
    tol = np.maximum(MIN_TOLERANCE_NS, DURATION_SHARE * dur)
    off = (size >= 2) & (np.abs(end.to_numpy() - med_end) > tol)
    off &= ~_overlaps_the_others(co, key) & ~co[S.COLL_OP].astype(str).str.lower().isin(ROOTED)
    if not off.any():
        return 0
    new_keys = int(key.max()) + 1 + np.arange(int(off.sum()))
    co.loc[off, S.COLL_KEY] = new_keys
    trace.events.loc[co.loc[off, S.EVENT].to_numpy(), S.COLL_KEY] = new_keys
    for rank, n in co.loc[off, S.RANK].value_counts().items():
        trace.meta[int(rank)].count(
            "collectives: unmatched across ranks (end far from the other participants')", int(n)
        )
    return int(off.sum())


def separate_early_finishers(trace: S.Trace) -> int:
    """Participants of a rooted operation that ended before its last participant arrived did not
    wait for it (another branch of the tree: gloo's broadcast lets the root and one branch finish
    while a late leaf holds up only its parent): each becomes an instance of its own, so that
    neither the graph nor the lateness makes it wait for the late rank. Not a repair (the row is
    the same instance in the job), so not counted as one; returns how many rows."""
    co = trace.collectives
    if not len(co):
        return 0
    key = co[S.COLL_KEY]
    rooted = co[S.COLL_OP].astype(str).str.lower().isin(ROOTED).to_numpy()
    last_arrival = co[S.ARRIVAL].groupby(key).transform("max").to_numpy()
    early = rooted & (co[S.END].to_numpy() < last_arrival)
    if not early.any():
        return 0
    new_keys = int(key.max()) + 1 + np.arange(int(early.sum()))
    co.loc[early, S.COLL_KEY] = new_keys
    trace.events.loc[co.loc[early, S.EVENT].to_numpy(), S.COLL_KEY] = new_keys
    return int(early.sum())
