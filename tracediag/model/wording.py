"""Words for messages, shared by rules, reports and front ends: plurals, rank lists, rates,
what moves a DMA's data."""

from __future__ import annotations

import math

from tracediag.model.units import fmt_bw


def plural(n: int, word: str, many: str | None = None) -> str:
    """``plural(1, "finding")`` -> ``"1 finding"``; ``plural(2, "finding")`` -> ``"2 findings"``;
    ``many`` for an irregular plural (``plural(2, "directory", "directories")``)."""
    return f"{n} {word}" if n == 1 else f"{n} {many or word + 's'}"


#: How messages name an engine that is not "<name> engine": a host thread, a whole GPU.
_ENGINE_NAMES = {
    "cpu": "host thread",
    "gpu": "GPU",
    "cc": "collective engine",
    "": "compute engine",
}


def engine_label(engine: str) -> str:
    """``"tensor"`` -> ``"tensor engine"``; ``"cpu"`` -> ``"host thread"``; ``"gpu"`` -> ``"GPU"``."""
    return _ENGINE_NAMES.get(engine, f"{engine} engine")


def ranks_label(ranks: list[int]) -> str:
    """``"rank 3"`` or ``"ranks 0-3,5"``."""
    return f"rank {ranks[0]}" if len(set(ranks)) == 1 else f"ranks {rank_list(ranks)}"


def rank_list(ranks: list[int]) -> str:
    """``[0, 1, 2, 3, 5]`` -> ``"0-3,5"`` (compact even for hundreds of ranks); ``"-"`` if none."""
    if not ranks:
        return "-"
    ordered = sorted(set(ranks))
    runs: list[str] = []
    first = prev = ordered[0]
    for r in ordered[1:] + [None]:
        if r is not None and r == prev + 1:
            prev = r
            continue
        runs.append(str(first) if first == prev else f"{first}-{prev}")
        if r is not None:
            first = prev = r
    return ",".join(runs)


def bus_bandwidth_text(busbw: float, link: float) -> str:
    """``" at X bus bandwidth (link Y)"``; without the link where none is known (NaN), and
    nothing without a bus bandwidth."""
    if not math.isfinite(busbw):
        return ""
    return f" at {fmt_bw(busbw)} bus bandwidth" + (
        f" (link {fmt_bw(link)})" if math.isfinite(link) else ""
    )


#: How messages name a GPU stream's copies of each direction (``tracediag.analysis.dma``).
DIRECTION_WORDS = {
    "HtoD": "host-to-device copies",
    "DtoH": "device-to-host copies",
    "DtoD": "device-to-device copies",
    "PtoP": "peer-to-peer copies",
}


def dma_source(queue: str, direction: str, on_stream: bool) -> str:
    """What moves the data: ``"DMA queue qSyncIO0"`` (a DMA engine's queue), or a GPU
    stream's copies of one direction, ``"device-to-device copies on stream 7"``."""
    if not on_stream:
        return f"DMA queue {queue}"
    return f"{DIRECTION_WORDS.get(direction, 'copies')} on {queue}"


def typical_pace(direction: str, on_stream: bool) -> str:
    """Whose usual bandwidth a what-if restores to: ``"the queue's typical bandwidth"`` (a
    DMA queue), ``"the stream's typical bandwidth for device-to-device copies"`` (a GPU stream
    runs host copies at PCIe speed and device copies at HBM speed: each has its own)."""
    if not on_stream:
        return "the queue's typical bandwidth"
    return f"the stream's typical bandwidth for {DIRECTION_WORDS.get(direction, 'copies')}"


def share_of_path(pct: float, n_steps: int, longer_than_step: bool = False) -> str:
    """``"12.5% of the step"`` when the critical path is one step; ``"53.68% of the 5-step
    critical path"`` when it spans several, where a share of "the step" would read as a share
    of one step's time and could pass 100% of it; ``"6.62% of the critical path"`` for one
    step the path outlasts (``longer_than_step``: the step is not the base)."""
    if n_steps > 1:
        return f"{pct}% of the {n_steps}-step critical path"
    return f"{pct}% of the critical path" if longer_than_step else f"{pct}% of the step"


def share_of_steps(pct: float, n_steps: int) -> str:
    """``"2.03% of the step"`` or ``"4.1% of the 5 steps"``: a share of the steps' own time
    (the critical path is shorter than them: it starts at the first launch)."""
    if n_steps > 1:
        return f"{pct}% of the {n_steps} steps"
    return f"{pct}% of the step"
