"""Check that the ranks' rows of one collective instance really are one instance.

Readers match instances by keys (replica group, stream and op id; process group and sequence
number; else the ordinal on the stream). An ordinal key goes wrong as soon as one rank's profile
misses an instance (sampled traces, a window cut differently): from there on it pairs unrelated
operations. One instance ends at about one true instant on every participant, so after clock
alignment a participant whose end is far from the others' is not part of it: it is split off as
an unmatched instance of its own, and counted.
"""

from __future__ import annotations

import numpy as np

from tracediag.model import schema as S

#: Ends this close are the same instant (clock residuals, completion jitter).
MIN_TOLERANCE_NS = 50_000
#: ...or within this share of the instance's median duration, for long collectives.
DURATION_SHARE = 0.25


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
