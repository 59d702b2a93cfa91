"""Performance bounds of each rank over a window: what it would take if one category of
overhead were gone, and the gaps between consecutive bounds (AWS's profile-querying method).

Three families, each a time in ns over the window ``[start, end)`` (intervals clipped to it):

- memory: ``memory_bound`` = DMA active time (the union of every DMA transfer's interval);
  ``memory_ideal`` = the DMA bytes (transfers of more than 4 bytes starting in the window) at
  the DMA peak; ``memory_necessary`` = the bytes of the kernel's IN/OUT tensors at that peak.
- compute: ``compute_bound`` = the matrix engine's active time (the tensor engine; a GPU's
  kernels); ``compute_ideal`` = all its FLOPs starting in the window at its peak (FLOPs of a
  slower format count at their slower rate); ``compute_useful`` = the same without transpose
  FLOPs.
- pipeline: ``pipeline_bound`` = the busiest engine's active time; that engine is the
  ``bottleneck``, and the family it belongs to is ``binding`` (``memory`` for DMA, ``compute``
  for the matrix engine, else ``pipeline``).

The gaps take AWS's names: DMA idle (window - memory_bound), DMA inefficiency (memory_bound -
memory_ideal), excess HBM traffic (memory_ideal - memory_necessary), TE idle (window -
compute_bound), TE underutilization (compute_bound - compute_ideal), transpose overhead
(compute_ideal - compute_useful) and serialization (window - pipeline_bound). They say where
the time goes, not what fixing it saves: the engines interact, so a saving needs a replay.

Peaks come from the profile's own Metadata when the reader kept it in ``meta.info``
(``dma_ddr_bandwidth``; ``tensor_engine_num_rows`` x ``tensor_engine_num_cols`` x 2 x
``tensor_engine_clock_freq``; each times the physical cores of the rank's logical core, two
with LNC=2), else from the rank's hardware profile; the table says which.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracediag.analysis.hardware import (
    Hardware,
    metadata_dma_peak,
    metadata_te_peak,
    physical_cores,
)
from tracediag.analysis.intervals import busy_ns_by_group
from tracediag.model import schema as S

#: The matrix engine of a rank, by the first of these engine names its tracks have.
MATRIX_ENGINES = ("tensor", "gpu")
DMA_ENGINE = "dma"
#: Transfers of at most this many bytes are semaphore and descriptor writes, not data (AWS
#: counts only ``transfer_bytes > 4``).
CONTROL_TRANSFER_BYTES = 4

#: The bounds in the order of their families.
BOUNDS = (
    "memory_bound",
    "memory_ideal",
    "memory_necessary",
    "compute_bound",
    "compute_ideal",
    "compute_useful",
    "pipeline_bound",
)
#: Each gap: its name, the larger and the smaller time it lies between ("total": the window).
GAPS = {
    "dma_idle": ("DMA idle", "total", "memory_bound"),
    "dma_inefficiency": ("DMA inefficiency", "memory_bound", "memory_ideal"),
    "excess_hbm_traffic": ("excess HBM traffic", "memory_ideal", "memory_necessary"),
    "te_idle": ("TE idle", "total", "compute_bound"),
    "te_underutilization": ("TE underutilization", "compute_bound", "compute_ideal"),
    "transpose_overhead": ("transpose overhead", "compute_ideal", "compute_useful"),
    "serialization": ("serialization", "total", "pipeline_bound"),
}
_DEVICE_KINDS = ("compute", "dma", "collective", "sync")
_ENGINE_TRACK_KINDS = ("compute_engine", "gpu_stream")


def bounds_table(
    trace: S.Trace,
    hardware: dict[int, Hardware | None] | None = None,
    window: tuple[int, int] | dict[int, tuple[int, int]] | None = None,
) -> pd.DataFrame:
    """One row per rank (index ``rank``): its window, the bounds (``<bound>_ns``), the gaps
    (``<gap>_ns``), ``bottleneck`` and ``binding``, each engine's active time (``busy_<engine>_ns``)
    and the inputs with where the peaks came from (``dma_peak_source``, ``te_peak_source``,
    ``necessary_source``). NaN where a quantity is unknown (no DMA in the trace, no peak).

    ``window``: None for each rank's own device span (first start to last end of its device
    events), one ``(start_ns, end_ns)`` for every rank, or one per rank (aligned ns).
    ``hardware``: the rank's peaks when its profile names none (``Analysis.hardware``).
    """
    hardware = hardware or {}
    ranks, engines, dma_code, code, pos, start, end, device, is_dma = _classify(trace)
    ev = trace.events
    t0, t1 = _windows(ranks, window, pos[device], start[device], end[device])

    # Engine active times: one group per (rank, engine), intervals clipped to the window.
    take = code >= 0
    s = np.maximum(start[take], t0[pos[take]])
    e = np.minimum(end[take], t1[pos[take]])
    inside = s < e
    group = pos[take] * len(engines) + code[take]
    busy = np.zeros((len(ranks), len(engines)))
    per_group = busy_ns_by_group(group[inside], s[inside], e[inside])
    busy.flat[per_group.index.to_numpy()] = per_group.to_numpy()
    counts = np.bincount(group, minlength=busy.size).reshape(busy.shape)  # events in the trace

    out = pd.DataFrame(index=pd.Index(ranks.astype(np.int32), name=S.RANK))
    out["start_ns"], out["end_ns"] = t0, t1
    out["total_ns"] = (t1 - t0).astype(np.float64)
    has_dma = counts[:, dma_code] > 0
    for j, name in enumerate(engines):
        out[f"busy_{name}_ns"] = (
            np.where(has_dma, busy[:, j], np.nan) if j == dma_code else busy[:, j]
        )

    began = (start >= t0[pos]) & (start < t1[pos])  # AWS counts bytes and FLOPs by start
    nbytes = _column(ev, S.BYTES)
    data = is_dma & began & (nbytes > CONTROL_TRANSFER_BYTES)
    out["dma_bytes"] = np.where(has_dma, np.bincount(pos[data], nbytes[data], len(ranks)), np.nan)
    _add_peaks(out, trace, hardware)
    _add_compute_inputs(out, trace, hardware, engines, counts, code, began, pos)
    _add_bounds(out, engines)
    return out


def _classify(trace: S.Trace):
    """Per event: its engine code (index into the sorted engine names, the DMA one of them; -1
    for events on no engine), its rank's position, start and end; the device and DMA masks."""
    ranks = np.asarray(trace.ranks, dtype=np.int64)
    ev, tracks = trace.events, trace.tracks
    track = ev[S.TRACK].to_numpy()
    kind_names, kind_code = S.text_codes(ev[S.KIND])

    def of_kind(*names: str) -> np.ndarray:
        return np.isin(kind_code, [i for i, k in enumerate(kind_names) if k in names])

    # Classify the few tracks, then index by each event's track: no string per event.
    track_kind = tracks[S.TRACK_KIND].astype(str).to_numpy()
    track_engine = tracks[S.ENGINE].astype(str).to_numpy()
    engine_track = np.isin(track_kind, _ENGINE_TRACK_KINDS)
    engines = np.unique(np.append(track_engine[engine_track], DMA_ENGINE))
    dma_code = int(np.searchsorted(engines, DMA_ENGINE))
    track_code = np.where(engine_track, np.searchsorted(engines, track_engine), -1)
    device = of_kind(*_DEVICE_KINDS) & (track_kind != "cpu_thread")[track]
    is_dma = device & of_kind("dma")
    is_engine = device & of_kind("compute") & engine_track[track]
    code = np.where(is_dma, dma_code, np.where(is_engine, track_code[track], -1))
    pos = np.searchsorted(ranks, ev[S.RANK].to_numpy())
    start = ev[S.TS].to_numpy()
    end = start + ev[S.DUR].to_numpy()
    return ranks, engines, dma_code, code, pos, start, end, device, is_dma


@dataclass
class EventClasses:
    """Per event, what the bounds counted it as (for the what-ifs that close their gaps)."""

    engines: np.ndarray  # the engine names, sorted (``dma`` among them)
    dma_code: int
    code: np.ndarray  # per event: index into ``engines``, -1 for no engine
    pos: np.ndarray  # per event: its rank's row in the table
    began: np.ndarray  # bool: starts in its rank's window
    nbytes: np.ndarray  # float, NaN where unknown
    flops: np.ndarray  # at the BF16 rate (a slower format's FLOPs count more), NaN unknown
    transpose_flops: np.ndarray  # as stated, NaN unknown


def classify_events(trace: S.Trace, table: pd.DataFrame, hardware: dict | None = None):
    """The :class:`EventClasses` of ``trace`` for the windows of ``table`` (a
    :func:`bounds_table` of the same trace, one row per rank)."""
    ranks, engines, dma_code, code, pos, start, *_ = _classify(trace)
    t0 = table["start_ns"].reindex(ranks).to_numpy(dtype=np.int64)
    t1 = table["end_ns"].reindex(ranks).to_numpy(dtype=np.int64)
    ev = trace.events
    raw = _column(ev, S.FLOPS)
    return EventClasses(
        engines=engines,
        dma_code=dma_code,
        code=code,
        pos=pos,
        began=(start >= t0[pos]) & (start < t1[pos]),
        nbytes=_column(ev, S.BYTES),
        flops=raw * _bf16_rate_factor(ev, pos, table, hardware or {}),
        transpose_flops=_column(ev, S.TRANSPOSE_FLOPS),
    )


def _windows(ranks, window, pos, start, end) -> tuple[np.ndarray, np.ndarray]:
    """Per rank position: the window's start and end."""
    first = np.full(len(ranks), np.iinfo(np.int64).max)
    last = np.full(len(ranks), np.iinfo(np.int64).min)
    np.minimum.at(first, pos, start)
    np.maximum.at(last, pos, end)
    none = first > last  # a rank without device events: an empty window
    first[none], last[none] = 0, 0
    if window is None:
        return first, last
    if isinstance(window, dict):
        given = [window.get(int(r)) for r in ranks]
        t0 = np.array([w[0] if w else f for w, f in zip(given, first, strict=True)], np.int64)
        t1 = np.array([w[1] if w else la for w, la in zip(given, last, strict=True)], np.int64)
    else:
        t0 = np.full(len(ranks), int(window[0]), dtype=np.int64)
        t1 = np.full(len(ranks), int(window[1]), dtype=np.int64)
    if (t1 < t0).any():
        raise ValueError("a bounds window ends before it starts")
    return t0, t1


def _column(ev: pd.DataFrame, name: str) -> np.ndarray:
    if name not in ev:
        return np.full(len(ev), np.nan)
    return ev[name].to_numpy(dtype=np.float64, na_value=np.nan)


def _positive(value) -> float | None:
    """A Metadata figure as a positive finite float, else None (missing, text, zero)."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) and x > 0 else None


def dma_peak(info: dict, hw: Hardware | None) -> tuple[float, str]:
    """The DMA peak (B/s) of one rank and where it came from: Metadata ``dma_ddr_bandwidth``
    (all DMA engines of a core) x its physical cores (:func:`hardware.metadata_dma_peak`), else
    the hardware profile's HBM."""
    bw = metadata_dma_peak(info)
    if bw == bw:
        return bw, "Metadata dma_ddr_bandwidth" + _cores_note(info)
    if hw is not None and hw.hbm_bw > 0:
        return hw.hbm_bw, f"{hw.name} HBM bandwidth (built-in)"
    return math.nan, "unknown"


def te_peak(info: dict, hw: Hardware | None) -> tuple[float, str]:
    """The matrix engine's BF16-rate peak (FLOP/s) and where it came from: Metadata rows x
    columns x 2 x clock x physical cores (:func:`hardware.metadata_te_peak`, the function the
    hardware profile uses too), else the hardware profile's BF16 peak."""
    te = metadata_te_peak(info)
    if te == te:
        return te, "Metadata tensor_engine rows x cols x 2 x clock" + _cores_note(info)
    if hw is not None and hw.peak_flops > 0:
        return hw.peak_flops, f"{hw.name} {hw.peak_label} (built-in)"
    return math.nan, "unknown"


def _cores_note(info: dict) -> str:
    n = physical_cores(info)
    return f" x {n} physical cores (LNC={n})" if n > 1 else ""


def necessary_bytes(meta: S.RankMeta) -> tuple[float, str]:
    """Bytes of the IN/OUT tensors (TensorInfo, as the reader sums them), else the Summary's
    ``inputs_outputs_weights_size_bytes``; NaN when neither is known."""
    io = _positive(meta.info.get("tensor_io_bytes"))
    if io:
        return io, "TensorInfo IN/OUT"
    total = _positive(meta.summary.get("inputs_outputs_weights_size_bytes"))
    if total:
        return total, "Summary inputs_outputs_weights_size_bytes"
    return math.nan, "unknown"


def _add_peaks(out: pd.DataFrame, trace: S.Trace, hardware: dict) -> None:
    rows = []
    for r in out.index:
        meta = trace.meta[int(r)]
        hw = hardware.get(int(r))
        rows.append((*dma_peak(meta.info, hw), *te_peak(meta.info, hw), *necessary_bytes(meta)))
    cols = ["dma_peak_Bps", "dma_peak_source", "te_peak_flops", "te_peak_source"]
    cols += ["necessary_bytes", "necessary_source"]
    for name, values in zip(cols, zip(*rows, strict=True), strict=True):
        out[name] = list(values) if values and isinstance(values[0], str) else np.array(values)


def _add_compute_inputs(out, trace, hardware, engines, counts, code, began, pos):
    """Per rank: its matrix engine (the first of MATRIX_ENGINES it has events on), the FLOPs
    that engine started in the window at the BF16 rate (``hw_flops``) and the transpose FLOPs
    among them."""
    n = len(out)
    matrix_code = np.full(n, -2)  # -2: none (-1 is the code of events on no engine)
    for m in MATRIX_ENGINES[::-1]:  # the first listed wins
        if m in engines:
            j = int(np.searchsorted(engines, m))
            matrix_code[counts[:, j] > 0] = j
    ev = trace.events
    mine = code == matrix_code[pos]
    on_matrix = mine & began
    raw = _column(ev, S.FLOPS)
    flops = np.nan_to_num(raw) * _bf16_rate_factor(ev, pos, out, hardware)
    transpose = np.nan_to_num(_column(ev, S.TRANSPOSE_FLOPS))
    # A matrix engine whose events state no FLOPs at all (a GPU trace without counters): the
    # ideal compute bounds are unknown, not zero.
    stated = mine & np.isfinite(raw)
    has_flops = np.bincount(pos[stated], minlength=n) > 0
    out["matrix_engine"] = np.where(matrix_code >= 0, engines[np.maximum(matrix_code, 0)], "")
    out["matrix_engine"] = out["matrix_engine"].astype(object)
    out["hw_flops"] = np.where(has_flops, np.bincount(pos[on_matrix], flops[on_matrix], n), np.nan)
    out["transpose_flops"] = np.where(
        has_flops, np.bincount(pos[on_matrix], transpose[on_matrix], n), np.nan
    )


def _bf16_rate_factor(ev: pd.DataFrame, pos: np.ndarray, out: pd.DataFrame, hardware: dict):
    """Per event: how many BF16-rate FLOPs one of its FLOPs costs (4 for FP32 on trn1), from
    the rank's hardware rates; 1 where the format or a rate is unknown."""
    if S.DTYPE not in ev:
        return np.ones(len(ev))
    names, code = S.text_codes(ev[S.DTYPE])
    table = np.ones((len(out), len(names) + 1))  # the last column: unknown format
    for i, r in enumerate(out.index):
        hw = hardware.get(int(r))
        for j, name in enumerate(names):
            ratio = hw.rate_ratio(name, "bf16") if hw is not None else None
            table[i, j] = 1.0 / ratio if ratio else 1.0
    return table[pos, code]


def _add_bounds(out: pd.DataFrame, engines: np.ndarray) -> None:
    ns = 1e9
    out["memory_bound_ns"] = out[f"busy_{DMA_ENGINE}_ns"]  # DMA is always one of the engines
    # A built-in figure below the bandwidth the DMA achieved cannot be this device's peak
    # (as hardware.credible_peak): no ideal memory bound rather than a negative gap.
    seen = out["dma_bytes"] / out["memory_bound_ns"] * ns
    built_in = out["dma_peak_source"].str.endswith("(built-in)")
    wrong = built_in & (seen > out["dma_peak_Bps"] * (1 + 1e-9))
    out.loc[wrong, "dma_peak_Bps"] = np.nan
    out.loc[wrong, "dma_peak_source"] = "built-in peak below the observed bandwidth: unknown"
    out["memory_ideal_ns"] = out["dma_bytes"] / out["dma_peak_Bps"] * ns
    out["memory_necessary_ns"] = out["necessary_bytes"] / out["dma_peak_Bps"] * ns
    matrix = out["matrix_engine"].to_numpy()
    busy = {name: out[f"busy_{name}_ns"].to_numpy() for name in engines}
    te = np.full(len(out), np.nan)
    for name in MATRIX_ENGINES:
        if name in busy:
            te = np.where(matrix == name, busy[name], te)
    out["compute_bound_ns"] = te
    out["compute_ideal_ns"] = out["hw_flops"] / out["te_peak_flops"] * ns
    out["compute_useful_ns"] = (
        (out["hw_flops"] - out["transpose_flops"]) / out["te_peak_flops"] * ns
    )
    table = np.column_stack([np.nan_to_num(busy[name], nan=-1.0) for name in engines])
    most = table.max(axis=1)
    out["pipeline_bound_ns"] = np.where(most > 0, most, np.nan)
    bottleneck = np.where(most > 0, engines[table.argmax(axis=1)].astype(object), "")
    out["bottleneck"] = bottleneck
    out["binding"] = np.where(
        bottleneck == DMA_ENGINE,
        "memory",
        np.where((bottleneck == matrix) & (bottleneck != ""), "compute", "pipeline"),
    )
    out.loc[bottleneck == "", "binding"] = ""
    times = {"total": out["total_ns"]} | {b: out[f"{b}_ns"] for b in BOUNDS}
    for gap, (_label, high, low) in GAPS.items():
        out[f"{gap}_ns"] = times[high] - times[low]


def bounds_records(table: pd.DataFrame) -> list[dict]:
    """The table as one JSON-ready dict per rank: window, bounds, gaps (each with its name),
    bottleneck, binding, engine active times, inputs and peaks with their sources; None where
    unknown. A diagnosis's table (:func:`tracediag.whatif.bound_gaps.with_gap_savings`) adds
    ``gap_savings_ns`` (each gap's replayed saving) and ``gap_savings_note``."""
    engines = [c[len("busy_") : -len("_ns")] for c in table.columns if c.startswith("busy_")]
    records = []
    for r, row in table.iterrows():  # one row per rank, not per event
        records.append(
            {
                "rank": int(r),
                "window": {k: int(row[k]) for k in ("start_ns", "end_ns")}
                | {"total_ns": _ns(row["total_ns"])},
                "bounds_ns": {b: _ns(row[f"{b}_ns"]) for b in BOUNDS},
                "gaps_ns": {g: _ns(row[f"{g}_ns"]) for g in GAPS},
                "bottleneck": row["bottleneck"] or None,
                "binding": row["binding"] or None,
                "matrix_engine": row["matrix_engine"] or None,
                "engine_busy_ns": {e: _ns(row[f"busy_{e}_ns"]) for e in engines},
                "inputs": {
                    "dma_bytes": _ns(row["dma_bytes"]),
                    "necessary_bytes": _ns(row["necessary_bytes"]),
                    "necessary_source": row["necessary_source"],
                    "hw_flops": _num(row["hw_flops"]),
                    "transpose_flops": _num(row["transpose_flops"]),
                    "dma_peak_Bps": _num(row["dma_peak_Bps"]),
                    "dma_peak_source": row["dma_peak_source"],
                    "te_peak_flops": _num(row["te_peak_flops"]),
                    "te_peak_source": row["te_peak_source"],
                },
            }
        )
        if "gap_savings_note" in table:  # a diagnosis's table: each gap closed and replayed
            records[-1]["gap_savings_ns"] = {g: _ns(row[f"{g}_saving_ns"]) for g in GAPS}
            records[-1]["gap_savings_note"] = row["gap_savings_note"]
    return records


def _ns(x) -> int | None:
    return None if x is None or not np.isfinite(x) else int(round(float(x)))


def _num(x) -> float | None:
    return None if x is None or not np.isfinite(x) else float(x)
