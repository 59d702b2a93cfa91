"""NUM702: the tensor engine spends more than 10% of its FLOPs on transposes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracediag.engine.rule import Rule, severity_by_saving
from tracediag.model import schema as S
from tracediag.model.findings import Severity
from tracediag.model.units import fmt_ns

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd


class TransposeFlops(Rule):
    code = "NUM702"
    name = "transpose-flops"
    title = "Transposes take a large share of the tensor engine's FLOPs"
    severity = Severity.WARNING
    options = {
        "max_transpose_pct": 10.0,  # the Neuron profiler's own threshold
        "warn_saving_pct": 1.0,
        "error_saving_pct": 25.0,
    }
    doc = {
        "what it finds": "Ranks whose transpose FLOPs exceed `max_transpose_pct` of the hardware "
        "FLOPs: per instruction (`flops_transpose` against `raw_flops` of the Neuron `Instruction` "
        "table) where the profile has them, else from the `Summary` (`transpose_flops` against "
        "`hardware_flops`). The what-if removes the transposing share of each such instruction's "
        "time and replays the step.",
        "why it matters": "On a NeuronCore a transpose is a matmul against the identity on the "
        "PE array: it occupies the tensor engine without doing model work. Above a tenth of the "
        "FLOPs it usually means a layout mismatch between producer and consumer.",
        "how to fix": "Keep tensors in the layout their consumer reads (transpose weights once, "
        "offline), fuse the transpose into a DMA (`dma transpose`), or change the NKI kernel's "
        "tiling so the contraction dimension lands on the partitions.",
        "example": "`NUM702 warning ranks 0-3 tensor layer_2: 18.4% of the tensor engine's FLOPs "
        "are transposes (threshold 10%); without them the step would be 310 µs shorter.`",
    }

    def check(self, ctx, opts):
        import numpy as np

        from tracediag.analysis.vendor_summary import summary_total
        from tracediag.graph.changes import WhatIf
        from tracediag.model import numeric_formats as dtypes

        trace = ctx.trace
        ev = trace.events
        rank = ev[S.RANK].to_numpy()
        tf = _column(ev, S.TRANSPOSE_FLOPS)
        flops = _column(ev, S.FLOPS)
        compute = (ev[S.KIND] == "compute").to_numpy(dtype=bool)
        size = int(rank.max()) + 1 if len(rank) else 0
        tf_sum = np.bincount(rank[compute], tf[compute], minlength=size)
        flops_sum = np.bincount(rank[compute], flops[compute], minlength=size)
        per_rank, flagged = {}, []
        for r in trace.ranks:  # a loop over ranks
            if r < size and tf_sum[r] > 0:
                source, t, hw = "instructions", float(tf_sum[r]), float(flops_sum[r])
            else:
                t = summary_total(trace.meta[r], "transpose_flops")
                hw = summary_total(trace.meta[r], "hardware_flops")
                source = "summary"
            if not t or not hw:
                continue
            pct = round(100.0 * t / hw, 2)
            per_rank[r] = {"transpose_pct": pct, "transpose_flops": t, "hardware_flops": hw}
            per_rank[r]["source"] = source
            if pct > opts["max_transpose_pct"]:
                flagged.append(r)
        if not flagged:
            return
        transposing = compute & (tf > 0) & np.isin(rank, flagged)
        ids = np.flatnonzero(transposing)
        saving, impact, change = 0, 0, None
        if len(ids):
            share = np.clip(tf[ids] / np.where(flops[ids] > 0, flops[ids], tf[ids]), 0, 1)
            nodes = ctx.nodes_of(ids)
            ok = nodes >= 0
            new = np.floor(ctx.graph.dur[nodes[ok]] * (1 - share[ok])).astype(np.int64)
            change = WhatIf.durations(nodes[ok], new)
            saving = ctx.what_if(change)
            seg = ctx.path.segments
            on_path = seg[seg["event"] >= 0].groupby("event")["dur_ns"].sum()
            impact = int((on_path.reindex(ids).fillna(0).to_numpy() * share).sum())
            window_ids = ids
        else:  # only the summary knows: the window is the ranks' tensor-engine work
            engine = dtypes.event_engines(trace)
            window_ids = np.flatnonzero(compute & np.isin(rank, flagged) & (engine == "tensor"))
        worst = max(flagged, key=lambda r: per_rank[r]["transpose_pct"])
        severity = (
            severity_by_saving(ctx.cost_pct(saving), opts, self.severity)
            if len(ids)
            else self.severity
        )
        start = ev[S.TS].to_numpy()[window_ids]
        end = start + ev[S.DUR].to_numpy()[window_ids]
        what_if = (
            f"Without them the step would be {fmt_ns(saving)} shorter."
            if len(ids)
            else "Only the profile summary counts them: no per-instruction what-if."
        )
        yield ctx.finding(
            self,
            severity=severity,
            message=(
                f"{per_rank[worst]['transpose_pct']}% of the tensor engine's FLOPs on rank {worst} "
                f"are transposes (threshold {opts['max_transpose_pct']}%), on "
                f"{len(flagged)} rank{'s' if len(flagged) > 1 else ''} in all. {what_if}"
            ),
            ranks=tuple(flagged),
            engine="tensor",
            layer=_top_layers(ev, ids, tf),
            start_ns=int(start.min()) if len(start) else 0,
            end_ns=int(end.max()) if len(end) else 0,
            impact_ns=impact,
            saving_ns=int(saving),
            change=change,
            suggestion="Keep tensors in the layout their consumer reads, or move the transpose "
            "into a DMA.",
            evidence={"by_rank": {str(r): per_rank[r] for r in flagged}, "events": len(ids)},
        )


def _column(ev: pd.DataFrame, name: str) -> np.ndarray:
    import numpy as np

    if name not in ev:
        return np.zeros(len(ev))
    return np.nan_to_num(ev[name].to_numpy(dtype=np.float64))


def _top_layers(ev: pd.DataFrame, ids: np.ndarray, tf: np.ndarray, top: int = 3) -> str:
    """The layers with the most transpose FLOPs, largest first."""
    import pandas as pd

    if not len(ids) or S.LAYER not in ev:
        return ""
    layer = pd.Series(ev[S.LAYER].to_numpy()[ids]).astype(object)
    by_layer = pd.Series(tf[ids]).groupby(layer.to_numpy()).sum().sort_values(ascending=False)
    return ", ".join(str(name) for name in by_layer.index[:top])
