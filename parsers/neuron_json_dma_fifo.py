"""Legacy JSON: which trigger instruction issued each DMA transfer, from bytes and queue order.

The JSON names no trigger, but it carries what ties one to its transfers:

- a trigger instruction's ``hbm_read_bytes`` + ``hbm_write_bytes`` are the bytes of the data
  transfers it issued (AWS counts DMA bytes without instruction queues and packets of 4 bytes or
  less, and so do the instructions' byte fields);
- a queue serves its descriptors in order (FIFO): the transfers of one queue (and physical core),
  in start order, use up its triggers' bytes one trigger after the other;
- a queue is named after the engine whose instruction queue triggers it (``qSync...`` -> Sync),
  and a transfer starts only after its trigger ended;
- a transfer that starts while its queue is idle (every earlier packet of the queue has ended)
  starts a new trigger's transfers: nothing issued earlier was still waiting.

So each trigger goes to the queue of its engine where a run of transfers, starting after it
ended (among the first :data:`RUN_DEPTH`) and crossing no idle start, sums to exactly its bytes;
where several queues fit, the one whose run starts first; a tie leaves it unassigned (counted in
``info["dma_trigger_queue_ambiguous"]``). Then per queue the cumulative bytes of its triggers and
of its transfers give each transfer its trigger (``np.searchsorted``). A transfer none fits (no
bytes on its trigger, an instruction queue, or a match that would start before its trigger
ended) is left to the caller's time-only inference.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

#: How many transfers after a trigger's end a run of its bytes may start at (a busy queue still
#: serves the previous triggers' transfers for a while): a few triggers' worth, not hundreds.
RUN_DEPTH = 8


def queue_order(transfers: pd.DataFrame) -> pd.DataFrame:
    """``transfers`` (columns ``key`` queue+core code, ``s`` start, ``e`` end, ``block``, ``bytes``)
    in FIFO order per queue with ``before`` (bytes of the queue's earlier transfers), ``after``
    (``before`` + own bytes) and ``idle_starts`` (running count of transfers that start with the
    queue idle: a run of one trigger never crosses one)."""
    t = transfers.sort_values(["key", "s", "block"], kind="stable").reset_index(drop=True)
    key = t["key"].to_numpy()
    first = np.r_[True, key[1:] != key[:-1]]
    after = t.groupby("key", sort=False)["bytes"].cumsum().to_numpy(dtype=np.int64)
    reach = t.groupby("key", sort=False)["e"].cummax().shift().to_numpy(dtype=np.float64)
    idle = first | (t["s"].to_numpy(dtype=np.float64) > reach)
    return t.assign(
        before=after - t["bytes"].to_numpy(dtype=np.int64),
        after=after,
        idle_starts=np.cumsum(idle),
    )


def _keyed(key: np.ndarray, value: np.ndarray, span: int) -> np.ndarray:
    """One sortable int64 per (queue key, value): searchsorted then stays inside one queue."""
    return key.astype(np.int64) * span + value.astype(np.int64)


def assign_queues(trig: pd.DataFrame, fifo: pd.DataFrame, queues: pd.DataFrame) -> np.ndarray:
    """Per trigger (``eng``, ``p``, ``end``, ``bytes``): the queue key whose run fits it first
    (see the module), -1 where none fits, -2 where two queues fit equally early."""
    out = np.full(len(trig), -1, dtype=np.int64)
    pairs = trig.reset_index(drop=True).reset_index(names="t").merge(queues, on=["eng", "p"])
    if not len(pairs) or not len(fifo):
        return out
    key, s = fifo["key"].to_numpy(), fifo["s"].to_numpy(dtype=np.int64)
    base = int(min(s.min(), pairs["end"].min()))
    span_s = int(max(s.max(), pairs["end"].max()) - base) + 2
    span_b = int(fifo["after"].max() + pairs["bytes"].max()) + 2
    by_start = _keyed(key, s - base, span_s)
    by_bytes = _keyed(key, fifo["after"].to_numpy(), span_b)
    before, idle = fifo["before"].to_numpy(), fifo["idle_starts"].to_numpy()
    qk = pairs["key"].to_numpy()
    k0 = np.searchsorted(by_start, _keyed(qk, pairs["end"].to_numpy() - base, span_s), "left")
    found = np.full(len(pairs), np.iinfo(np.int64).max, dtype=np.int64)
    for d in range(RUN_DEPTH):
        k = k0 + d
        ok = k < len(fifo)
        kk = np.minimum(k, len(fifo) - 1)
        ok &= key[kk] == qk
        want = _keyed(qk, before[kk] + pairs["bytes"].to_numpy(), span_b)
        k2 = np.minimum(np.searchsorted(by_bytes, want, "left"), len(fifo) - 1)
        # The run k..k2 holds exactly the trigger's bytes and no transfer in it after the
        # first starts with the queue idle.
        ok &= (by_bytes[k2] == want) & (idle[k2] == idle[kk])
        found = np.where(ok & (found == np.iinfo(np.int64).max), s[kk], found)
    pairs["at"] = found
    fit = pairs[found < np.iinfo(np.int64).max]
    if not len(fit):
        return out
    best = fit.groupby("t")["at"].transform("min").to_numpy()
    first = fit[fit["at"].to_numpy() == best]
    ties = first.groupby("t")["key"].transform("size").to_numpy() > 1
    t_idx = first["t"].to_numpy()
    out[t_idx] = np.where(ties, -2, first["key"].to_numpy())
    return out


def match(trig: pd.DataFrame, fifo: pd.DataFrame) -> pd.DataFrame:
    """Per transfer of ``fifo`` (FIFO order) the trigger row (``src``) whose bytes it uses up:
    triggers (``key`` >= 0, ``end``, ``bytes``, ``src``) in issue order per queue; a transfer
    past its queue's triggers' bytes or starting before its trigger ended gets none (NaN)."""
    mine = trig[trig["key"] >= 0].sort_values(["key", "end", "src"], kind="stable")
    src = np.full(len(fifo), np.nan)
    if not len(mine) or not len(fifo):
        return fifo.assign(src=src)
    tkey = mine["key"].to_numpy()
    used = mine.groupby("key", sort=False)["bytes"].cumsum().to_numpy(dtype=np.int64)
    span = int(max(used.max(), fifo["after"].max())) + 2
    j = np.searchsorted(
        _keyed(tkey, used, span), _keyed(fifo["key"].to_numpy(), fifo["before"].to_numpy(), span),
        side="right",
    )  # fmt: skip
    jj = np.minimum(j, len(mine) - 1)
    ok = (j < len(mine)) & (tkey[jj] == fifo["key"].to_numpy())
    ok &= mine["end"].to_numpy()[jj] <= fifo["s"].to_numpy()  # causal, else the bytes drifted
    src[ok] = mine["src"].to_numpy(dtype=np.float64)[jj[ok]]
    return fifo.assign(src=src)
