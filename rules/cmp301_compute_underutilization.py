"""CMP301: the tensor engine (or the GPU) sits idle on the critical path; MFU against the peak."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracediag.engine.rule import Rule
from tracediag.model import schema as S
from tracediag.model.findings import Severity
from tracediag.model.units import fmt_ns

if TYPE_CHECKING:
    import numpy as np


def main_compute_mask(ctx, rank: int) -> np.ndarray:
    """The events of the rank's main compute unit: the tensor engine on a NeuronCore, any
    compute kernel on a GPU (whose tracks are CUDA/HIP streams)."""
    ev = ctx.trace.events
    # Categorical and per-track tests, indexed by event (not a string compare per event).
    mine = (ev[S.RANK].to_numpy() == rank) & (ev[S.KIND] == "compute").to_numpy(dtype=bool)
    on_tensor = mine & _on_tensor_engine(ctx)
    return on_tensor if on_tensor.any() else mine


def _on_tensor_engine(ctx) -> np.ndarray:
    """Per event: whether its track is a tensor engine."""
    tensor_track = ctx.trace.tracks[S.ENGINE].astype(str).to_numpy() == "tensor"
    return tensor_track[ctx.trace.events[S.TRACK].to_numpy()]


#: How a report names a device's main compute engine (others: the engine's own name).
_UNIT_NAMES = {"tensor": "tensor engine", "gpu": "GPU", "tensorcore": "TensorCore", "mtia": "MTIA"}


def _main_engine(ctx, mask: np.ndarray) -> str:
    """The engine of the tracks most of the rank's main compute events run on (a GPU's streams,
    a TPU's TensorCore, a NeuronCore's tensor engine): never a device kind the rank lacks."""
    import numpy as np

    engines = ctx.trace.tracks[S.ENGINE].astype(str).to_numpy()
    tracks = ctx.trace.events[S.TRACK].to_numpy()[mask]
    if not len(tracks):
        return ""
    # Counted per engine name by the tracks' codes, not by sorting a name per event: names
    # no event uses count 0, so the most used (the first in name order on a tie) is the same.
    names, engine_code = np.unique(engines, return_inverse=True)
    counts = np.bincount(engine_code.reshape(-1)[tracks], minlength=len(names))
    return str(names[np.argmax(counts)])


class ComputeUnderutilization(Rule):
    code = "CMP301"
    name = "compute-underutilization"
    title = "Tensor engine (or GPU) idle on the critical path"
    severity = Severity.INFO
    options = {"min_idle_pct": 20.0}  # report when the main engine idles this share of the path
    doc = {
        "what it finds": "The share of each rank's part of the critical path during which its "
        "main compute unit (the NeuronCore's tensor engine, or any compute kernel on a GPU) runs "
        "nothing, broken down by what the path did instead, and the rank's model FLOPs "
        "utilisation (MFU) against the hardware's BF16 peak.",
        "why it matters": "Matmuls are where the FLOPs are; every ns the tensor engine waits on "
        "the step's longest chain is throughput lost. The breakdown says which other finding "
        "to fix first.",
        "how to fix": "Fix the causes in the breakdown (DMA waits, exposed collectives, other "
        "engines, host gaps); this rule's own saving is not one what-if but the sum of theirs, so "
        "it reports none itself.",
        "example": "`CMP301 info rank 0: the tensor engine idles 64% of the critical path (DMA "
        "38%, collectives 21%, vector 5%); MFU 31% of 95 TFLOP/s.`",
    }

    def check(self, ctx, opts):
        import numpy as np

        from tracediag.analysis.intervals import interval_overlap
        from tracediag.analysis.peers import device_ranks

        seg = ctx.path.segments
        seg_rank = seg["rank"].to_numpy()
        seg_start, seg_end = seg["start_ns"].to_numpy(), seg["end_ns"].to_numpy()
        for rank in sorted(device_ranks(ctx.trace)):  # a host-only rank has no engine to idle
            mine = seg_rank == rank
            if not mine.any():
                continue
            mask = main_compute_mask(ctx, rank)
            ev = ctx.trace.events
            s = ev[S.TS].to_numpy()[mask]
            e = s + ev[S.DUR].to_numpy()[mask]
            a, b = seg_start[mine], seg_end[mine]
            idle = (b - a) - interval_overlap(a, b, s, e)
            total = int((b - a).sum())
            idle_ns = int(idle.sum())
            if total == 0 or 100.0 * idle_ns / total < opts["min_idle_pct"]:
                continue
            why = seg[mine].assign(idle=idle)  # the rank's rows, copied only for a finding
            why = why[why["idle"] > 0]
            label = np.where(
                why["category"].astype(str) == "compute",
                why["engine"].astype(str),
                why["category"].astype(str),
            )
            by = why.groupby(label)["idle"].sum().sort_values(ascending=False)
            flops = (
                float(ev[S.FLOPS].to_numpy()[mask & np.isfinite(ev[S.FLOPS].to_numpy())].sum())
                if S.FLOPS in ev
                else 0.0
            )
            hwp = ctx.hardware.get(rank)
            step = (ctx.window_ns or ctx.step_ns).get(rank, 0)  # the window: its FLOPs are summed
            mfu = (
                100.0 * flops / (step * 1e-9 * hwp.peak_flops)
                if hwp and hwp.peak_flops and step and flops
                else None
            )
            engine = _main_engine(ctx, mask)
            unit = _UNIT_NAMES.get(engine, engine or "device")
            mfu_txt = (
                f"; MFU {mfu:.1f}% of {hwp.peak_flops / 1e12:.4g} TFLOP/s ({hwp.name})"
                if mfu is not None
                else ""
            )
            parts = ", ".join(f"{k} {100.0 * v / idle_ns:.0f}%" for k, v in by.head(4).items())
            yield ctx.finding(
                self,
                message=(
                    f"On rank {rank} the {unit} idles {fmt_ns(idle_ns)} of its {fmt_ns(total)} on the critical path "
                    f"({100.0 * idle_ns / total:.1f}%): {parts}{mfu_txt}."
                ),
                ranks=(rank,),
                engine=engine,
                start_ns=int(a.min()),
                end_ns=int(b.max()),
                impact_ns=idle_ns,
                saving_ns=0,
                suggestion="Fix the causes listed (see their own findings); each reports its own saving.",
                evidence={
                    "idle_by_cause_ns": {str(k): int(v) for k, v in by.items()},
                    "path_on_rank_ns": total,
                    "model_flops": flops,
                    "mfu_pct": mfu,
                    "peak_flops": hwp.peak_flops if hwp else None,
                },
            )
