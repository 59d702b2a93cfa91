"""What a collective operation is, by its name: point-to-point or synchronous, and its bus factor.

Clock alignment, arrival skew and the communication rules read these, so the semantics of an
operation name are decided in one place.
"""

from __future__ import annotations

#: Operations that do not synchronise the group: their ends are not one instant on every rank.
POINT_TO_POINT_OPS = frozenset({"send", "recv", "sendrecv", "send_recv"})


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
