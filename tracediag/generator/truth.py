"""Ground truth: what was injected, where, when, and what removing it saves (by re-simulation).

``saving_ns`` of a fault = the step time with every fault minus the step time re-simulated with
that one fault removed (the others kept): never a formula. Windows are true times expressed on
rank 0's trace clock (``true + offset[0]``), whichever rank the fault hit, so they can be
compared with a diagnosis aligned to rank 0.

Each section names places as a reader of its files sees them: the device section in engines and
DMA queues, the chrome section in CUDA streams (``stream <id>``: the queue of a DMA fault is its
memcpy stream, engines are the streams running their work, tracks the streams or ``cpu``).
"""

from __future__ import annotations

import numpy as np

from tracediag.generator.faults import Fault, layer_name, node_mask
from tracediag.generator.gpu_flavour import (
    KERNEL,
    MEMCPY,
    STALL,
    STREAM_IDS,
    GpuRun,
    gpu_stream,
    run_gpu,
)
from tracediag.generator.program import WorkloadShape
from tracediag.generator.simulate import DeviceRun, run_device


def _window(
    start: np.ndarray, end: np.ndarray, mask: np.ndarray, ranks: np.ndarray, offset0: int
) -> list[int]:
    rows = np.flatnonzero(mask)
    if len(rows) == 0:
        return []
    return [
        int(start[np.ix_(rows, ranks)].min()) + offset0,
        int(end[np.ix_(rows, ranks)].max()) + offset0,
    ]


def _params(fault: Fault) -> dict:
    if fault.kind == "slow_dma":
        return {"bandwidth_fraction": fault.factor}
    if fault.kind == "fragmented_dma":
        return {"transfer_bytes": fault.transfer_bytes}
    if fault.kind == "host_gaps":
        return {"stall_ns": fault.stall_ns}
    if fault.kind == "numerical_error":
        return {"error": "numerical_err"}
    return {"slowdown": fault.factor}


def _fault_entry(
    fault: Fault,
    hit: np.ndarray,
    saving: int,
    window: list[int],
    tracks: list[str],
    engines: list[str],
    queue: str | None,
) -> dict:
    return {
        "kind": fault.kind,
        "family": fault.family,
        "ranks": hit.tolist(),
        "all_ranks": fault.ranks is None,
        "layers": [layer_name(i) for i in fault.layers],
        "phase": fault.phase or None,
        "engines": engines,
        "queue": queue,
        "tracks": tracks,
        "window_ns": window,
        "saving_ns": saving,
        "params": _params(fault),
    }


def _without(faults: list[Fault], index: int) -> list[Fault]:
    return faults[:index] + faults[index + 1 :]


def device_truth(
    shape: WorkloadShape, faults: list[Fault], run: DeviceRun, seed: int, offsets: np.ndarray
) -> dict:
    """Truth of the device flavour (Parquet and legacy JSON)."""
    ranks = run.ranks
    step = run.schedule.step_ns
    entries = []
    for index, fault in enumerate(faults):
        if not fault.device_visible:
            continue
        rest = _without(faults, index)
        saving = step - run_device(shape, rest, ranks, seed).schedule.step_ns
        mask = node_mask(fault, run.program)
        hit = np.flatnonzero(fault.rank_mask(ranks))
        window = _window(run.schedule.start, run.schedule.end, mask, hit, int(offsets[0]))
        track = sorted(set(run.program.engine[mask].tolist()))
        entry = _fault_entry(fault, hit, saving, window, track, list(fault.engines), fault.queue)
        entries.append(entry)
    clean = run_device(shape, [], ranks, seed).schedule.step_ns
    return _section(offsets, step, clean, entries)


def gpu_truth(
    shape: WorkloadShape, faults: list[Fault], run: GpuRun, seed: int, offsets: np.ndarray
) -> dict:
    """Truth of the GPU flavour (Chrome/Kineto JSON)."""
    ranks = run.device.ranks
    step = run.schedule.step_ns
    entries = []
    for index, fault in enumerate(faults):
        rest = _without(faults, index)
        again = run_gpu(run_device(shape, rest, ranks, seed), rest, seed)
        saving = step - again.schedule.step_ns
        on_device = node_mask(fault, run.device.program)
        mask = np.isin(run.role, [KERNEL, MEMCPY]) & (run.origin >= 0)
        mask &= on_device[np.maximum(run.origin, 0)]
        mask |= (run.role == STALL) & (run.stall_fault == index)
        hit = np.flatnonzero(fault.rank_mask(ranks))
        window = _window(run.schedule.start, run.schedule.end, mask, hit, int(offsets[0]))
        streams = STREAM_IDS[run.resource[mask]]
        track = sorted({f"stream {s}" if s >= 0 else "cpu" for s in streams.tolist()})
        engines = sorted({gpu_stream(e) for e in fault.engines})
        copies = STREAM_IDS[run.resource[mask & (run.role == MEMCPY)]]
        queue = f"stream {copies[0]}" if fault.family == "dma" else None
        entries.append(_fault_entry(fault, hit, saving, window, track, engines, queue))
    clean = run_gpu(run_device(shape, [], ranks, seed), [], seed).schedule.step_ns
    return _section(offsets, step, clean, entries)


def _section(offsets: np.ndarray, step: int, clean: int, entries: list[dict]) -> dict:
    return {
        "clock_offset_ns": [int(o) for o in offsets],
        # Add to a rank's timestamps to put them on rank 0's clock.
        "align_to_rank0_ns": [int(offsets[0] - o) for o in offsets],
        "step_time_ns": int(step),
        "step_time_without_faults_ns": int(clean),
        "faults": entries,
    }
