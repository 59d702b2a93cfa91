"""NUM701: matmuls running at FP32 (or TF32) where the model otherwise runs BF16/FP16/FP8."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracediag.engine.rule import Rule, severity_by_saving
from tracediag.model import schema as S
from tracediag.model.findings import Severity
from tracediag.model.units import fmt_ns
from tracediag.model.wording import plural

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd


class Fp32Matmuls(Rule):
    code = "NUM701"
    name = "fp32-matmuls"
    title = "Matmuls run at FP32 where the model runs a 16/8-bit format"
    severity = Severity.WARNING
    options = {
        "min_fast_share": 0.5,  # share of matmul FLOPs in bf16/fp16/fp8 that makes it "the model's"
        # share of the matmul work a format needs before NUM701 prices FP32 matmuls at its rate
        "min_target_share": 0.05,
        "warn_saving_pct": 1.0,
        "error_saving_pct": 25.0,
        "max_findings": 10,  # layers reported, largest time first
    }
    doc = {
        "what it finds": "Tensor-engine matmuls (Neuron) or matmul kernels (GPU) whose dtype is "
        "FP32 or TF32 on ranks where most matmul FLOPs run in BF16, FP16 or FP8, one finding per "
        "layer, with the time and FLOPs per dtype as evidence. Dtypes come from the instructions "
        "(Neuron `adjusted_flops` against `raw_flops`, or their operands) or from kernel names "
        "(`ampere_sgemm_*`, `cutlass_80_tensorop_s1688gemm_*`, `sm90_xmma_gemm_bf16bf16_*`).",
        "why it matters": "The PE array and tensor cores run FP32 at a fraction of the 16-bit "
        "rate (a quarter on a NeuronCore-v2, 1/15 on an H100 without TF32). A few layers left in "
        "FP32 by a missing autocast, an explicit `.float()` or an FP32 master-weight path can "
        "cost more than every other matmul of the step.",
        "how to fix": "Run those layers under the model's autocast / `torch.autocast(dtype="
        "torch.bfloat16)`, cast their weights and inputs, or compile with `--auto-cast matmult` "
        "(`neuronx-cc`); keep FP32 only where numerics need it (loss, softmax statistics).",
        "example": "`NUM701 warning ranks 0-3 tensor layer_2: 48 matmuls run in fp32 for "
        "2.1 ms of the step's tensor time (the model's other matmuls run bf16); at the bf16 "
        "rate (4x faster on trn1) the step would be 1.4 ms shorter.`",
    }

    def check(self, ctx, opts):
        import numpy as np
        import pandas as pd

        from tracediag.model import numeric_formats as dtypes

        trace = ctx.trace
        ev = trace.events
        work = ctx.matmul_work
        matmul, dt = work.mask, work.dtypes
        if dt is None:  # no matmul
            return
        # Tested per dtype code (-1: unknown) and indexed by event, not per event's name.
        each_code = pd.Categorical.from_codes(np.arange(-1, len(dt.categories)), dtype=dt.dtype)
        slow_code = np.isin(dtypes.names(each_code), dtypes.SLOW)
        slow = matmul & slow_code[dt.codes + 1]
        if not slow.any():  # no matmul in a slow dtype: no need for the model's dtype per rank
            return
        table = work.table
        fast_dtype = _model_dtype(table, opts["min_fast_share"])
        if not fast_dtype:
            return
        rank = ev[S.RANK].to_numpy()
        slow &= np.isin(rank, list(fast_dtype))
        if not slow.any():
            return
        dtype_name = dtypes.names(dt)
        target = _target_dtype(table, fast_dtype, ctx.hardware, opts["min_target_share"])
        factor = self._factors(ctx, rank, dtype_name, slow, target)
        layer = (
            np.asarray(ev[S.LAYER].astype(object).fillna(""), dtype=object)
            if S.LAYER in ev
            else np.full(len(ev), "", dtype=object)
        )
        seg = ctx.path.segments
        on_path = seg[seg["event"] >= 0].groupby("event")["dur_ns"].sum()
        ids = np.flatnonzero(slow)
        frame = pd.DataFrame(
            {
                "event": ids,
                "layer": layer[ids],
                "dtype": dtype_name[ids],
                "dur": ev[S.DUR].to_numpy()[ids],
            }
        )
        by_layer = frame.groupby("layer")["dur"].sum().sort_values(ascending=False)
        for name in by_layer.index[: opts["max_findings"]]:
            yield self._finding(ctx, opts, frame, name, factor, on_path, table, fast_dtype, target)

    @staticmethod
    def _factors(ctx, rank, dtype_name, slow, fast_dtype) -> np.ndarray:
        """Per event: the duration multiplier at the model's dtype (NaN when a peak is unknown)."""
        import numpy as np

        from tracediag.model import numeric_formats as dtypes

        factor = np.full(len(rank), np.nan)
        for r, fast in fast_dtype.items():  # a loop over ranks and the two slow dtypes
            hw = ctx.hardware.get(r)
            for slow_name in dtypes.SLOW:
                ratio = hw.rate_ratio(slow_name, fast) if hw is not None else None
                if ratio:
                    factor[slow & (rank == r) & (dtype_name == slow_name)] = ratio
        return factor

    def _finding(self, ctx, opts, frame, name, factor, on_path, table, fast_dtype, target):
        import numpy as np

        from tracediag.graph.changes import WhatIf

        ev = ctx.trace.events
        rows = frame[frame["layer"] == name]
        ids = rows["event"].to_numpy()
        f = factor[ids]
        nodes = ctx.nodes_of(ids)
        ok = (nodes >= 0) & ~np.isnan(f)
        saving, change = 0, None
        if ok.any():
            new = np.floor(ctx.graph.dur[nodes[ok]] * f[ok]).astype(np.int64)
            change = WhatIf.durations(nodes[ok], new)
            saving = ctx.what_if(change)
        impact = int(on_path.reindex(ids).fillna(0).sum())
        start = ev[S.TS].to_numpy()[ids]
        end = start + ev[S.DUR].to_numpy()[ids]
        ranks = tuple(sorted(int(r) for r in np.unique(ev[S.RANK].to_numpy()[ids])))
        slow_dtypes = sorted(rows["dtype"].unique().tolist())
        fast = sorted({fast_dtype[r] for r in ranks})
        goal = sorted({target[r] for r in ranks if r in target})
        total = int(rows["dur"].sum())
        where = f" in {name}" if name else ""
        if ok.any():
            speedup = 1 / float(np.nanmedian(f))
            why = (
                "the model's own format"
                if goal == fast
                else "the most precise format the model's other matmuls use"
            )
            what_if = (
                f"At the {'/'.join(goal)} rate ({why}; {speedup:.3g}x faster on this hardware) "
                f"the step would be {fmt_ns(saving)} shorter."
            )
        else:
            what_if = "No peak is known for these dtypes on this hardware: no what-if."
        evidence = {
            "events": len(ids),
            "dtypes": slow_dtypes,
            "model_dtype": {str(r): fast_dtype[r] for r in ranks},
            "target_dtype": {str(r): target[r] for r in ranks if r in target},
            "rates_flops": _rates(ctx, ranks, slow_dtypes + goal),
            "time_ns_slow": total,
            "by_dtype": _by_dtype(table, ranks),
            "scale_factor": float(np.nanmedian(f)) if ok.any() else None,
            "event_ids": ids[:50].tolist(),
        }
        engine = _engine(ctx, ids)
        return ctx.finding(
            self,
            severity=severity_by_saving(ctx.cost_pct(saving), opts, self.severity),
            message=(
                f"{plural(len(ids), 'matmul')}{where} {'runs' if len(ids) == 1 else 'run'} in "
                f"{'/'.join(slow_dtypes)} on "
                f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))} "
                f"({fmt_ns(total)} of {engine} time over these ranks), where the model's other matmuls run "
                f"{'/'.join(fast)}; {fmt_ns(impact)} of them lie on the critical path. {what_if}"
            ),
            ranks=ranks,
            engine=engine,
            layer=str(name),
            start_ns=int(start.min()),
            end_ns=int(end.max()),
            impact_ns=impact,
            saving_ns=int(saving),
            change=change,
            suggestion=f"Run {name or 'these matmuls'} in {(goal or fast)[0]} (autocast or an explicit "
            "cast of weights and inputs).",
            evidence=evidence,
        )


def _target_dtype(table, fast_dtype: dict, hardware: dict, min_share: float) -> dict[int, str]:
    """Per rank of ``fast_dtype``: the format its slow matmuls are priced at. Of the fast
    formats the rank's other matmuls run in (each at least ``min_share`` of their work, FLOPs
    or else events) and whose rate its hardware lists, the most precise: a layer left in FP32
    goes to BF16 where the recipe keeps BF16 layers, and to FP8, MXFP8 or FP4 only where the
    recipe runs (nearly) all else in it, so the saving never assumes a format the recipe does
    not already trust. The model's format where no rate is listed (no what-if then)."""
    from tracediag.model import numeric_formats as dtypes

    known = table[table["dtype"].isin(dtypes.FAST) & table["rank"].isin(list(fast_dtype))].copy()
    has_flops = known.groupby("rank")["flops"].transform("sum") > 0
    known["work"] = known["flops"].where(has_flops, known["events"])
    known["share"] = known["work"] / known.groupby("rank")["work"].transform("sum")
    known["width"] = known["dtype"].map(dtypes.WIDTH)
    known = known[known["share"] >= min_share].sort_values(
        ["rank", "width", "work"], ascending=[True, False, False]
    )
    out = {}
    for r, group in known.groupby("rank"):  # a loop over ranks and their few formats
        hw = hardware.get(int(r))
        usable = [d for d in group["dtype"] if hw is not None and hw.rate(d)]
        out[int(r)] = usable[0] if usable else fast_dtype[int(r)]
    return out


def _rates(ctx, ranks, names) -> dict:
    """FLOP/s of each format named on the finding's ranks (the first rank's hardware)."""
    hw = ctx.hardware.get(ranks[0]) if ranks else None
    return {d: hw.rate(d) for d in sorted(set(names))} if hw is not None else {}


def _model_dtype(table: pd.DataFrame, min_share: float) -> dict[int, str]:
    """Per rank whose matmul FLOPs (event counts where FLOPs are unknown) run mostly in a fast
    dtype: that dtype."""
    import numpy as np

    from tracediag.model import numeric_formats as dtypes

    known = table[table["dtype"] != "unknown"].copy()
    if not len(known):
        return {}
    has_flops = known.groupby("rank")["flops"].transform("sum") > 0
    known["work"] = np.where(has_flops, known["flops"], known["events"])
    share = known["work"] / known.groupby("rank")["work"].transform("sum")
    fast = known[known["dtype"].isin(dtypes.FAST)].assign(share=share)
    total = fast.groupby("rank")["share"].sum()
    top = fast.sort_values(["rank", "work"], ascending=[True, False]).drop_duplicates("rank")
    top = top.set_index("rank")["dtype"]
    return {int(r): str(top[r]) for r in total.index if total[r] >= min_share}


def _by_dtype(table: pd.DataFrame, ranks: tuple[int, ...]) -> dict:
    """Time and FLOPs per dtype on the finding's ranks (the precision evidence)."""
    sub = table[table["rank"].isin(ranks)].groupby("dtype")[["events", "time_ns", "flops"]].sum()
    return {
        str(d): {"events": int(r.events), "time_ns": int(r.time_ns), "flops": float(r.flops)}
        for d, r in sub.iterrows()
    }


def _engine(ctx, ids: np.ndarray) -> str:
    import numpy as np

    from tracediag.model import numeric_formats as dtypes

    engines = dtypes.event_engines(ctx.trace)[ids]
    values, counts = np.unique(engines.astype(str), return_counts=True)
    return str(values[np.argmax(counts)])
