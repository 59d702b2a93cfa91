"""Binding the untriggered collective instances of a profile to the transfers they received.

A one-sided transfer (a ``CollectivePermute``) is triggered by its source only. Where the
profile has no collective table (a CSV export), the target's record of it is CC-core work that
no instruction of its own triggered: it names neither the operation nor the peer. The senders'
triggers do: their ``source,target`` pair says which rank received each transfer. So a target's
untriggered instances are the transfers sent to it, and binding them is a matter of which
sender's which transfer each one is:

- from one sender only: the k-th untriggered instance (in start order) is the k-th transfer
  sent (the counts must agree);
- from several: a sender whose clock is already related to the target's (through transfers
  bound before) claims, for each of its transfers, the untriggered instance overlapping the
  transfer's time on the target's clock and ending nearest to it; what is left, from the one
  sender left, binds in order.

Two sides of one transfer end at one instant (the last bytes land), so a bound pair's ends
relate the two clocks: the median over the pair's bound transfers is the offset used. This
only relates clocks to bind; clock alignment proper runs later on the bound transfers.

A bound instance takes the transfer's key, operation, group (``source,target``) and size; an
instance nothing binds keeps its rank-local key and counts as unbound on its rank.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracediag.model import schema as S
from tracediag.model.collective_ops import one_sided_sources

#: The reader's column marking untriggered CC-core instances, with the cores they ran on.
UNTRIGGERED_CORES = "untriggered_cores"
_PREFIX = "untriggered|"


def untriggered_key(rank: int, cores: np.ndarray, ordinal: np.ndarray) -> np.ndarray:
    """Rank-local match keys of untriggered instances (never equal across ranks)."""
    cores = np.asarray(cores, dtype=object)
    return _PREFIX + f"r{rank}|" + cores + "|" + np.asarray(ordinal).astype(str).astype(object)


def bind_untriggered(coll: pd.DataFrame, metas: dict[int, S.RankMeta]) -> pd.DataFrame:
    """``coll`` (rank-local times) with its untriggered instances bound to the one-sided
    transfers that reached them (see the module); counts go to the target ranks' ``metas``."""
    keys = coll[S.MATCH_KEY].astype(str)
    anon = keys.str.startswith(_PREFIX).to_numpy()
    if not anon.any():
        return coll
    ops = coll[S.COLL_OP].astype(str).str.lower().to_numpy()
    rank = coll[S.RANK].to_numpy()
    side = one_sided_sources(ops, coll[S.GROUP].to_numpy(), rank)
    send = np.flatnonzero(side == 1)
    pair = pd.Series(coll[S.GROUP].to_numpy()[send], dtype=object).astype(str)
    target = pd.to_numeric(pair.str.split(",").str[1], errors="coerce").to_numpy()
    start, end = coll[S.START].to_numpy(), coll[S.END].to_numpy()
    binder = _Binder(start, end, rank)
    for t in np.unique(rank[anon]):
        binder.add_target(int(t), np.flatnonzero(anon & (rank == t)), send[target == t])
    bound = binder.run()
    coll = coll.copy()
    if bound:
        a = np.fromiter(bound.keys(), dtype=np.int64)
        s = np.fromiter(bound.values(), dtype=np.int64)
        for col in (S.MATCH_KEY, S.COLL_OP, S.GROUP, S.BYTES, S.DTYPE):
            values = coll[col].to_numpy().copy()
            values[a] = values[s]
            coll[col] = values
    was_bound = np.zeros(len(coll), dtype=bool)
    was_bound[list(bound)] = True
    for t in np.unique(rank[anon]):
        mine = anon & (rank == t)
        meta = metas.get(int(t))
        if meta is not None:
            n_bound = int((mine & was_bound).sum())
            meta.info["untriggered_instances_bound"] = n_bound
            meta.count(
                "collectives: untriggered CC-core work bound to no sender",
                int(mine.sum()) - n_bound,
            )
    return coll


class _Binder:
    """The binding state: per target, its unbound instances and the transfers sent to it."""

    def __init__(self, start: np.ndarray, end: np.ndarray, rank: np.ndarray):
        self.start, self.end, self.rank = start, end, rank
        self.anon: dict[int, list[int]] = {}  # target -> unbound instance rows, start order
        self.sent: dict[int, dict[int, list[int]]] = {}  # target -> source -> unbound sends
        self.offset: dict[tuple[int, int], float] = {}  # (a, b): clock b minus clock a
        self.bound: dict[int, int] = {}  # instance row -> send row

    def add_target(self, t: int, anon: np.ndarray, sends: np.ndarray) -> None:
        self.anon[t] = sorted(anon.tolist(), key=lambda i: (self.start[i], i))
        by_source: dict[int, list[int]] = {}
        for i in sorted(sends.tolist(), key=lambda i: (self.start[i], i)):
            by_source.setdefault(int(self.rank[i]), []).append(i)
        self.sent[t] = by_source

    def run(self) -> dict[int, int]:
        progress = True
        while progress:
            progress = False
            for t in self.anon:
                progress |= self._bind_target(t)
        return self.bound

    def _bind_target(self, t: int) -> bool:
        """Bind what can be bound at target ``t`` now; True when anything was."""
        sources = {s: v for s, v in self.sent[t].items() if v}
        if not sources or not self.anon[t]:
            return False
        done = False
        for s, sends in sources.items():
            d = self._offset(s, t)
            if d is not None:
                done |= self._bind_by_time(t, s, sends, d)
        left = {s: v for s, v in self.sent[t].items() if v}
        if len(left) == 1:
            ((s, sends),) = left.items()
            if len(sends) == len(self.anon[t]):
                self._bind_pairs(t, s, list(self.anon[t]), list(sends))
                done = True
        return done

    def _bind_by_time(self, t: int, s: int, sends: list[int], d: float) -> bool:
        anon = np.array(self.anon[t], dtype=np.int64)
        sent = np.array(sends, dtype=np.int64)
        lo, hi = self.start[sent] + d, self.end[sent] + d  # the transfers on t's clock
        by_end = np.argsort(self.end[anon], kind="stable")
        a_end = self.end[anon][by_end]
        # Each transfer's candidates: the instances ending just before and just after it.
        at = np.searchsorted(a_end, hi)
        cands = np.stack([np.clip(at - 1, 0, len(anon) - 1), np.clip(at, 0, len(anon) - 1)])
        rows = by_end[cands]
        overlap = (self.start[anon][rows] <= hi) & (self.end[anon][rows] >= lo)
        miss = np.where(overlap, np.abs(self.end[anon][rows] - hi), np.inf)
        pick = np.argmin(miss, axis=0)
        best = rows[pick, np.arange(len(sent))]
        ok = np.isfinite(miss[pick, np.arange(len(sent))])
        # An instance claimed twice goes to the transfer that ends nearest to it.
        claim = pd.DataFrame({"a": best[ok], "i": sent[ok], "miss": miss.min(axis=0)[ok]})
        claim = claim.sort_values(["miss", "i"], kind="stable").drop_duplicates("a")
        if not len(claim):
            return False
        self._bind_pairs(t, s, anon[claim["a"].to_numpy()].tolist(), claim["i"].tolist())
        return True

    def _bind_pairs(self, t: int, s: int, anon: list[int], sends: list[int]) -> None:
        for a, i in zip(anon, sends, strict=True):
            self.bound[a] = i
        gone_a, gone_s = set(anon), set(sends)
        self.anon[t] = [a for a in self.anon[t] if a not in gone_a]
        self.sent[t][s] = [i for i in self.sent[t][s] if i not in gone_s]
        diff = np.median(self.end[np.array(anon)] - self.end[np.array(sends)])
        self.offset.setdefault((s, t), float(diff))
        self.offset.setdefault((t, s), -float(diff))

    def _offset(self, a: int, b: int) -> float | None:
        """Clock ``b`` minus clock ``a`` through the offsets known so far (breadth first)."""
        if (a, b) in self.offset:
            return self.offset[(a, b)]
        seen, frontier = {a: 0.0}, [a]
        while frontier:
            nxt = []
            for x in frontier:
                for (p, q), d in self.offset.items():
                    if p == x and q not in seen:
                        seen[q] = seen[x] + d
                        nxt.append(q)
            if b in seen:
                return seen[b]
            frontier = nxt
        return None
