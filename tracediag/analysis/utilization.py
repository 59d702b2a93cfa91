"""Model FLOPs utilisation (MFU) per rank, for the report and the CI budgets.

MFU = FLOPs of the rank's main compute unit / (its step time x the hardware's BF16 peak). The
main unit is the tensor engine on a NeuronCore (the matmul engine, where the model's FLOPs are)
and every compute kernel on a GPU, as rule CMP301 counts them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracediag.analysis import hardware as hw
from tracediag.model import schema as S


def mfu_by_rank(
    trace: S.Trace, step_ns: dict[int, int], hardware: dict[int, hw.Hardware | None]
) -> dict[int, float | None]:
    """Per rank: MFU in percent, or None when the trace records no FLOPs or the peak is unknown."""
    out: dict[int, float | None] = {r: None for r in trace.ranks}
    ev = trace.events
    if S.FLOPS not in ev or not len(ev):
        return out
    flops = ev[S.FLOPS].to_numpy(dtype=np.float64)
    # Per track, then per event by the track's index: no engine or kind string per event.
    tensor_track = trace.tracks[S.ENGINE].astype(str).to_numpy() == "tensor"
    tensor = tensor_track[ev[S.TRACK].to_numpy()]
    compute = _equals(ev[S.KIND], "compute") & np.isfinite(flops)
    rank = ev[S.RANK].to_numpy()
    frame = pd.DataFrame(
        {
            "flops": np.where(compute, flops, 0.0),
            "tensor_flops": np.where(compute & tensor, flops, 0.0),
        }
    )
    per_rank = frame.groupby(rank).sum()
    has_tensor = set(np.unique(rank[compute & tensor]).tolist())
    columns = zip(
        per_rank.index.tolist(),
        per_rank["flops"].tolist(),
        per_rank["tensor_flops"].tolist(),
        strict=True,
    )
    for r, all_flops, tensor_flops in columns:  # one row per rank
        main = tensor_flops if r in has_tensor else all_flops
        peak = hardware.get(r).peak_flops if hardware.get(r) else 0.0
        step = step_ns.get(r, 0)
        if main > 0 and peak > 0 and step > 0:
            out[r] = round(100.0 * main / (step * 1e-9 * peak), 2)
    return out


def _equals(col: pd.Series, text: str) -> np.ndarray:
    """Per row: is the value ``text``? Tested per distinct value, then indexed by code."""
    texts, codes = S.text_codes(col)
    return np.append(np.asarray(texts, dtype=object) == text, False)[codes]  # -1: False
