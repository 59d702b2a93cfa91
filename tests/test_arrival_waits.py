"""Waits for the last rank beside the waiting ranks' own work, against a nanosecond grid."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tracediag.analysis.arrival_skew import waits_beside_own_work, waits_for_last
from tracediag.model import schema as S

T = 3000  # every time below lies in [0, T)


def _case(rng, dtype):
    n_ranks, n_coll, n_ev = int(rng.integers(2, 5)), int(rng.integers(1, 12)), 400
    keys = np.repeat(np.arange(n_coll), n_ranks)
    ranks = np.tile(np.arange(n_ranks), n_coll).astype(dtype)
    arrival = np.repeat(rng.integers(0, T - 400, n_coll), n_ranks) + rng.integers(0, 300, len(keys))
    late = pd.DataFrame({S.COLL_KEY: keys, S.RANK: ranks, S.ARRIVAL: arrival})
    late["last"] = late[S.ARRIVAL] == late.groupby(S.COLL_KEY)[S.ARRIVAL].transform("max")
    late["late_ns"] = rng.integers(-50, 200, len(late))
    ts = rng.integers(0, T - 100, n_ev)
    dur = rng.integers(0, 100, n_ev) * (rng.random(n_ev) < 0.9)  # some of no length
    events = pd.DataFrame(
        {S.RANK: rng.integers(0, n_ranks, n_ev).astype(dtype), S.TS: ts, S.DUR: dur}
    )
    return late, events, rng.random(n_ev) < 0.6


def _grid_overlap(late, events, work, rank, min_late):
    """Per waiting rank: ns covered both by a wait for ``rank`` and by its own work."""
    mine = late[(late[S.RANK] == rank) & late["last"] & (late["late_ns"] > min_late)]
    out = {}
    for key, row in mine.groupby(S.COLL_KEY)[S.ARRIVAL].max().items():
        others = late[(late[S.COLL_KEY] == key) & (late[S.RANK] != rank)]
        for r, a in zip(others[S.RANK], others[S.ARRIVAL], strict=True):
            out.setdefault(int(r), np.zeros(T, bool))[a:row] = True
    result = {}
    for r, waiting in out.items():
        busy = np.zeros(T, bool)
        ev = events[work & (events[S.RANK] == r).to_numpy()]
        for t0, d in zip(ev[S.TS], ev[S.DUR], strict=True):
            busy[t0 : t0 + d] = True
        result[r] = int((waiting & busy).sum())
    return result


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_waits_beside_own_work_match_the_grid(dtype):
    overlaps = 0
    for seed in range(12):
        rng = np.random.default_rng(seed)
        late, events, work = _case(rng, dtype)
        for rank in range(4):
            for min_late in (0, 100):
                got = waits_beside_own_work(late, rank, events, work, min_late)
                want = _grid_overlap(late, events, work, rank, min_late)
                assert got.to_dict() == want, (seed, rank, min_late)
                assert list(got.index) == list(waits_for_last(late, rank, min_late).index)
                overlaps += sum(v > 0 for v in want.values())
    assert overlaps > 20  # the cases do hold waits that work runs beside
