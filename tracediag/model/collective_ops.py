"""What a collective operation is, by its name: point-to-point or synchronous, and its bus factor.

Clock alignment, arrival skew and the communication rules read these, so the semantics of an
operation name are decided in one place.
"""

from __future__ import annotations

#: Operations that do not synchronise the group: their ends are not one instant on every rank.
POINT_TO_POINT_OPS = frozenset(
    {"send", "recv", "sendrecv", "send_recv", "collectivepermute", "collective_permute"}
)

#: Point-to-point operations whose target posts nothing the source waits for: the transfer
#: starts when the source triggers it (Neuron's ``CollectivePermute``: the receiving side has no
#: trigger instruction). Their rows carry the pair in source, target order in ``group``.
ONE_SIDED_OPS = frozenset({"collectivepermute", "collective_permute"})


def one_sided_sources(ops, groups, ranks):
    """Per collective row: 1 where it is the source of a one-sided transfer (its rank is the
    first of its ``source,target`` group), 0 where it is the target, -1 for any other operation
    or a group that is not one pair holding the rank."""
    import numpy as np
    import pandas as pd

    ops = pd.Series(ops, dtype=object).astype(str).str.lower().to_numpy()
    codes, pairs = pd.factorize(pd.Series(groups, dtype=object).astype(str).to_numpy())
    ends = np.full((len(pairs) + 1, 2), -1, dtype=np.int64)  # per distinct group: its pair
    for i, text in enumerate(pairs):  # the few distinct groups, not the rows
        parts = text.split(",")
        if len(parts) == 2 and all(p.strip().lstrip("-").isdigit() for p in parts):
            ends[i] = [int(parts[0]), int(parts[1])]
    src, dst = ends[codes, 0], ends[codes, 1]
    ranks = np.asarray(ranks, dtype=np.int64)
    out = np.where(ranks == src, 1, np.where(ranks == dst, 0, -1)).astype(np.int8)
    out[(src < 0) | (src == dst) | ~np.isin(ops, list(ONE_SIDED_OPS))] = -1
    return out


def bus_factor(op: str, n: int) -> float:
    """nccl-tests' bus bandwidth factor: busbw = algbw * factor, for ``n`` participants."""
    o = op.lower().replace("_", "")
    if n <= 1:
        return 1.0
    if o == "allreduce":
        return 2.0 * (n - 1) / n
    if o in ("allgather", "reducescatter", "alltoall"):
        return (n - 1) / n
    return 1.0
