"""Weight transfers bound to the Tensor-engine instructions that read them: ``weight_read`` edges.

A layer's weights reach SBUF by DMA, often well before the layer runs (a prefetch), and its
Tensor-engine instructions read them (weights are loaded into the engine's array). A Parquet
profile with a Flow table records which instruction reads which transfer; a legacy JSON profile
and the CSV export do not, and weights that landed early leave no stall to infer an edge from.
Then a what-if that speeds up whatever precedes a layer runs its matmuls before their weights
arrive: on the clean-room tensor-parallel job (tests/cleanroom/neuron_device_writer.py,
``tp_exposed_allreduce``, seeds 0-5) the exposed all-reduces' saving read 9-21% over the
re-simulated truth in JSON and CSV without these edges, 4-18% with them (Parquet: -8..+5%).

On a rank that records no edge from a DMA transfer to an instruction, a layer's weight
transfers (DMA of a tensor whose name says ``weight``, layer from the tensor's name) are read by
the Tensor-engine instructions of the first run of that layer whose last instruction starts
after they landed (a run: consecutive instructions of one layer on one engine; a prefetch lands
before its run, a layer's later weights during it; a 1F1B stage's later micro-batches reuse what
the first one read). Within a run the transfers are taken in the order they landed, each bound
to the instruction at its share of the run's weight bytes: the transfer after C of the run's T
bytes to instruction ceil(C / T * n) of the run's n. Landing order, not issue order: the engine
reads in program order, so when it has read k transfers' worth, k transfers have landed,
whichever they are (blocks issued together land in any order). Kept only where the transfer
ended before that instruction started: one that ended later was not what it read.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracediag.graph.sort_orders import stable_order_by
from tracediag.graph.wait_evidence import empty_evidence_frame, evidence_frame, search_pairs
from tracediag.model import schema as S

WEIGHT_READ = "weight_read"

#: ``weight`` as a word of a tensor's name (``layers.0.mlp.weight``, ``fc1_weights``), not a
#: part of one (``weightless``).
_WEIGHT = r"(?:^|[^a-z])weights?(?:$|[^a-z])"


def weight_read_edges(trace: S.Trace) -> pd.DataFrame:
    """``weight_read`` edges (transfer's last packet -> its reader) with their evidence (see the
    module docstring)."""
    ev = trace.events
    if not len(ev) or S.LAYER not in ev:
        return empty_evidence_frame()
    is_dma = (ev[S.KIND] == "dma").to_numpy(dtype=bool)  # compares the categorical's codes
    weight = is_dma & _names_weight(ev[S.NAME])
    if not weight.any():
        return empty_evidence_frame()
    rank = ev[S.RANK].to_numpy(dtype=np.int64)
    layer = ev[S.LAYER].cat.codes.to_numpy(dtype=np.int64)
    weight &= (layer >= 0) & ~np.isin(rank, _ranks_recording_dma_reads(trace, is_dma))
    if not weight.any():
        return empty_evidence_frame()
    track = ev[S.TRACK].to_numpy(dtype=np.int64)
    on_tensor = (S.strings(trace.tracks[S.ENGINE]) == "tensor")[track]
    is_compute = (ev[S.KIND] == "compute").to_numpy(dtype=bool)
    readers = np.flatnonzero(on_tensor & is_compute & (layer >= 0))
    if not len(readers):
        return empty_evidence_frame()
    ts = ev[S.TS].to_numpy(dtype=np.int64)
    end = ts + ev[S.DUR].to_numpy(dtype=np.int64)
    runs = _runs(readers, track, layer, ts, rank)
    tr = _transfers(np.flatnonzero(weight), ev, rank, layer, end)
    # Each transfer's run: the first of its rank and layer whose last instruction starts after
    # the transfer ended (a prefetch lands before its run; a layer's later weights mid-run).
    key_runs = runs["rank"] * (layer.max() + 1) + runs["layer"]
    key_tr = tr["rank"] * (layer.max() + 1) + tr["layer"]
    o = stable_order_by(key_runs, runs["last_start"])
    at = search_pairs(key_runs[o], runs["last_start"][o], key_tr, tr["end"], side="left")
    ok = at < len(o)
    ok[ok] = key_runs[o][at[ok]] == key_tr[ok]
    run_of = np.where(ok, o[np.minimum(at, len(o) - 1)], -1)
    tr = {k: v[ok] for k, v in tr.items()}
    run_of = run_of[ok]
    if not len(run_of):
        return empty_evidence_frame()
    # Bytes landed before each transfer within its run, in the order they landed.
    order = stable_order_by(run_of, tr["end"])
    run_of, tr = run_of[order], {k: v[order] for k, v in tr.items()}
    first = np.r_[True, run_of[1:] != run_of[:-1]]
    cum = np.cumsum(tr["bytes"])
    before = cum - tr["bytes"] - np.maximum.accumulate(np.where(first, cum - tr["bytes"], 0))
    total = np.bincount(run_of, weights=tr["bytes"], minlength=len(runs["n"]))[run_of]
    n = runs["n"][run_of]
    # ceil(before / total * n) in integers: a float's last bit must not move a read by one.
    whole = np.maximum(np.rint(total).astype(np.int64), 1)
    pos = np.minimum(-(-np.rint(before).astype(np.int64) * n // whole), n - 1)
    reader = runs["members"][runs["first"][run_of] + pos]
    keep = tr["end"] <= ts[reader]
    src, dst = tr["last_packet"][keep], reader[keep]
    gap = ts[dst] - end[src]
    none = np.full(len(src), -1, dtype=np.int64)
    return evidence_frame(src, dst, rank[dst], gap, gap, none, none, none, kind=WEIGHT_READ)


def _names_weight(names: pd.Series) -> np.ndarray:
    """Per event: its name (a DMA's tensor) says it is a weight (``layers.0.mlp.weight``)."""
    says = pd.Series(names.cat.categories.astype(str)).str.contains(_WEIGHT, case=False)
    return np.r_[says.to_numpy(dtype=bool), False][names.cat.codes.to_numpy()]


def _ranks_recording_dma_reads(trace: S.Trace, is_dma: np.ndarray) -> np.ndarray:
    """Ranks with at least one recorded edge from a DMA event into a non-DMA event."""
    src = trace.edges[S.SRC].to_numpy(dtype=np.int64)
    dst = trace.edges[S.DST].to_numpy(dtype=np.int64)
    reads = is_dma[src] & ~is_dma[dst]
    return np.unique(trace.events[S.RANK].to_numpy(dtype=np.int64)[dst[reads]])


def _runs(readers, track, layer, ts, rank) -> dict:
    """Runs of consecutive Tensor-engine instructions of one layer on one track: their rank,
    layer, last member's start, size, and where their members begin in ``members`` (readers in
    track order)."""
    members = readers[stable_order_by(track[readers], ts[readers])]
    t, lay = track[members], layer[members]
    starts = np.flatnonzero(np.r_[True, (t[1:] != t[:-1]) | (lay[1:] != lay[:-1])])
    return {
        "members": members,
        "first": starts,
        "n": np.diff(np.r_[starts, len(members)]),
        "rank": rank[members[starts]],
        "layer": lay[starts],
        "last_start": ts[members[np.r_[starts[1:], len(members)] - 1]],
    }


def _transfers(packets, ev, rank, layer, end) -> dict:
    """One row per weight transfer (packets of one transfer id on one rank): its rank, layer,
    end, bytes and the packet that ended last."""
    transfer = (
        ev[S.TRANSFER].to_numpy(dtype=np.int64)[packets]
        if S.TRANSFER in ev
        else np.full(len(packets), -1, dtype=np.int64)
    )
    # A packet without a transfer id is a transfer of its own (a negative key of its own, as
    # analysis.dma.per_transfer keys it).
    key = np.where(transfer >= 0, transfer, -1 - packets)
    group = pd.factorize(pd.MultiIndex.from_arrays([rank[packets], key]))[0]
    by_end = stable_order_by(group, end[packets])
    last = packets[by_end][np.r_[np.diff(group[by_end]) != 0, True]]
    nbytes = (
        ev[S.BYTES].to_numpy(dtype=np.float64)[packets]
        if S.BYTES in ev
        else np.full(len(packets), np.nan)
    )
    size = np.bincount(group, weights=np.nan_to_num(nbytes))
    if not (np.isfinite(nbytes) & (nbytes > 0)).all():
        size = np.ones(group.max() + 1)  # without sizes, each transfer an equal share
    return {
        "rank": rank[last],
        "layer": layer[last],
        "end": end[last],
        "bytes": size,
        "last_packet": last,
    }
