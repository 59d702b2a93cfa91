"""Model FLOPs utilisation (MFU) per rank, for the report and the CI budgets.

MFU = FLOPs of the rank's main compute unit / (its step time x the hardware's BF16 peak). The
main unit is the tensor engine on a NeuronCore (the matmul engine, where the model's FLOPs are)
and every compute kernel on a GPU, as rule CMP301 counts them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracediag import hardware as hw
from tracediag import schema as S


def mfu_by_rank(
    trace: S.Trace, step_ns: dict[int, int], hardware: dict[int, hw.Hardware | None]
) -> dict[int, float | None]:
    """Per rank: MFU in percent, or None when the trace records no FLOPs or the peak is unknown."""
    out: dict[int, float | None] = {r: None for r in trace.ranks}
    ev = trace.events
    if S.FLOPS not in ev or not len(ev):
        return out
    flops = ev[S.FLOPS].to_numpy(dtype=np.float64)
    engine = trace.tracks[S.ENGINE].astype(str).to_numpy()[ev[S.TRACK].to_numpy()]
    compute = (S.strings(ev[S.KIND]) == "compute") & np.isfinite(flops)
    frame = pd.DataFrame(
        {
            "rank": ev[S.RANK].to_numpy(),
            "tensor": engine == "tensor",
            "flops": np.where(compute, flops, 0.0),
            "tensor_flops": np.where(compute & (engine == "tensor"), flops, 0.0),
            "has_tensor": compute & (engine == "tensor"),
        }
    )
    per_rank = frame.groupby("rank").agg(
        flops=("flops", "sum"),
        tensor_flops=("tensor_flops", "sum"),
        has_tensor=("has_tensor", "any"),
    )
    for rank, row in per_rank.iterrows():  # one row per rank
        main = row.tensor_flops if row.has_tensor else row.flops
        peak = hardware.get(int(rank)).peak_flops if hardware.get(int(rank)) else 0.0
        step = step_ns.get(int(rank), 0)
        if main > 0 and peak > 0 and step > 0:
            out[int(rank)] = round(100.0 * main / (step * 1e-9 * peak), 2)
    return out
