"""Arrival skew at collectives: who arrives late, by how much, against the others' median."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracediag import schema as S
from tracediag.align import _NOT_SYNCHRONOUS
from tracediag.peers import median_of_others


def lateness(coll: pd.DataFrame) -> pd.DataFrame:
    """Per (instance, rank): ``late_ns`` = arrival minus the median arrival of the *other*
    participants (positive = later than them), ``last`` = this rank arrived last.

    Instances with a single participant are left out; point-to-point operations are kept
    (a late sender stalls its receiver just the same).
    """
    cols = [S.COLL_KEY, S.RANK, S.EVENT, S.COLL_OP, S.ARRIVAL, S.START, S.END, S.BYTES]
    c = coll[cols].copy()
    n = c.groupby(S.COLL_KEY)[S.RANK].transform("size")
    c = c.loc[n >= 2].copy()
    if not len(c):
        return c.assign(late_ns=pd.Series(dtype="int64"), last=pd.Series(dtype=bool))
    med_other = median_of_others(c[S.COLL_KEY].to_numpy(), c[S.ARRIVAL].to_numpy())
    c["late_ns"] = (c[S.ARRIVAL].to_numpy() - med_other).round().astype(np.int64)
    last_arrival = c.groupby(S.COLL_KEY)[S.ARRIVAL].transform("max").to_numpy()
    c["last"] = c[S.ARRIVAL].to_numpy() == last_arrival
    c["synchronous"] = ~c[S.COLL_OP].astype(str).str.lower().isin(_NOT_SYNCHRONOUS)
    return c
