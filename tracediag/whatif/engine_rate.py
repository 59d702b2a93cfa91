"""What a slow elementwise engine would take at its own rate, from the trace's figures.

A vector, scalar or GpSimd instruction streams its elements through the engine's lanes, one
element per lane per cycle: ``elements / (lanes x clock)``, plus a fixed cost per instruction
(issue, semaphore check, pipeline fill). The lanes and clock are the profile's Metadata
(``<engine>_engine_num_channels``, ``<engine>_engine_clock_freq``); the elements are the
instruction's operands (:data:`tracediag.model.schema.ELEMENTS`); the fixed cost is what an
instruction that streams nothing takes: the shortest instruction of the rank's other compute
engines (a DMA trigger, a semaphore update). An engine whose instructions take much longer than
that runs below its rate (a slow mode, a wrong data type, a throttled engine): running them at
the rate is what the fix would do.
"""

from __future__ import annotations

import numpy as np

from tracediag.model import schema as S


def element_rate(info: dict, engine: str) -> float:
    """Elements per ns the engine of a rank streams (lanes x clock in GHz), from its Metadata;
    NaN when Metadata lacks either."""
    try:
        lanes = float(info.get(f"{engine}_engine_num_channels"))
        clock = float(info.get(f"{engine}_engine_clock_freq"))
    except (TypeError, ValueError):
        return float("nan")
    clock = clock if clock < 1e3 else clock / 1e3 if clock < 1e6 else clock / 1e9  # GHz
    rate = lanes * clock
    return rate if np.isfinite(rate) and rate > 0 else float("nan")


def instruction_overhead_ns(trace: S.Trace, others: np.ndarray) -> dict[int, int]:
    """Per rank: the shortest instruction (positive duration) among the events of mask
    ``others`` (the rank's compute instructions on engines other than the one under test): the
    fixed cost one instruction pays whatever it streams."""
    ev = trace.events
    dur = ev[S.DUR].to_numpy()
    keep = others & (dur > 0)
    rank, dur = ev[S.RANK].to_numpy()[keep], dur[keep]
    order = np.lexsort((dur, rank))
    rank, dur = rank[order], dur[order]
    first = np.r_[0, np.flatnonzero(np.diff(rank)) + 1] if len(rank) else np.zeros(0, int)
    return {int(r): int(d) for r, d in zip(rank[first], dur[first], strict=True)}


def at_engine_rate(ctx, ids: np.ndarray, engine: str, overhead: dict) -> tuple[np.ndarray, dict]:
    """Durations (ns) of events ``ids`` (one engine's instructions) at the engine's rate plus
    each rank's ``overhead``, never longer than they are; NaN where the element count, the rate
    or the overhead is unknown. Also the figures used, per rank: ``{rank: (rate, overhead)}``."""
    ev = ctx.trace.events
    if S.ELEMENTS not in ev or not len(ids):
        return np.full(len(ids), np.nan), {}
    rank = ev[S.RANK].to_numpy()[ids]
    ranks = np.unique(rank)
    figures = {
        int(r): (element_rate(ctx.trace.meta[int(r)].info, engine), overhead.get(int(r), np.nan))
        for r in ranks
    }  # per rank, not per event
    table = np.array([figures[int(r)] for r in ranks], dtype=np.float64)
    rate, fixed = table[np.searchsorted(ranks, rank)].T
    elements = ev[S.ELEMENTS].to_numpy(dtype=np.float64)[ids]
    dur = ev[S.DUR].to_numpy()[ids].astype(np.float64)
    return np.minimum(dur, np.ceil(elements / rate + fixed)), figures
