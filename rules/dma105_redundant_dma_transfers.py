"""DMA105: the same tensor moved more than once within a step."""

from __future__ import annotations

from tracediag.engine.rule import Rule, severity_by_saving
from tracediag.model.findings import Severity
from tracediag.model.units import fmt_bytes, fmt_ns


class RedundantDmaTransfers(Rule):
    code = "DMA105"
    name = "redundant-dma-transfers"
    title = "The same tensor moved more than once"
    severity = Severity.WARNING
    options = {
        "min_excess_pct": 10.0,  # bytes beyond one pass over the tensor, in % of its size
        "warn_saving_pct": 1.0,
        "error_saving_pct": 10.0,
    }
    doc = {
        "what it finds": "Tensors whose DMA transfers within one step move more bytes than the "
        "tensor holds (its size in the profile's `TensorInfo`): once the tensor's bytes have "
        "all been moved, every later transfer of it is a repeat (a reload). Per tensor: how many "
        "times it was moved, the source lines that trigger the repeats (the triggering "
        "instruction's `bir_debug_info_source_location`, as AWS's redundant-transfer "
        "investigation joins `Flow` to the DMA rows), and what the step takes without them, by "
        "replay (the repeats moving nothing). Needs `TensorInfo`; spill reloads are NUM703's.",
        "why it matters": "A reload moves bytes the kernel already had: the excess HBM traffic "
        "of the performance bounds. On a DMA-bound kernel every reloaded byte is time.",
        "how to fix": "Keep the tensor resident in SBUF across the loop that reuses it (hoist "
        "the `dma_copy` out of the loop, reorder the loops so the reused tile is the outer one), "
        "or tile so that it fits.",
        "example": "`DMA105 warning rank 0 qSyncIO0: tensor B (4 MiB) is moved 8.0 times in "
        "the step (28 MiB more than once), from matmul_kernel.py:24 (224); without the repeats "
        "the kernel would be 150 µs shorter.`",
    }

    def check(self, ctx, opts):
        import numpy as np
        import pandas as pd

        from tracediag.analysis.source_lines import (
            event_sources,
            event_steps,
            lines_text,
            on_path_ns,
        )
        from tracediag.graph.changes import WhatIf

        sizes = {r: m.info.get("tensor_sizes") or {} for r, m in ctx.trace.meta.items()}
        if not any(sizes.values()):
            return
        # The columns read below only: filtering or sorting every DMA column copies them all.
        dma = ctx.dma[["event", "rank", "tensor", "ts", "dur", "bytes", "queue"]]
        # Per (rank, tensor) the size TensorInfo gives, by the tensor's code (one lookup per
        # rank and tensor name, not per transfer); NaN where TensorInfo has none.
        code, names = pd.factorize(dma["tensor"])
        rank = dma["rank"].to_numpy()
        size = np.full(len(dma), np.nan)
        for r in np.unique(rank):
            per = {str(t): float(b) for t, b in sizes.get(int(r), {}).items()}
            if not per:
                continue
            by_code = np.array([per.get(str(t), np.nan) for t in names] + [np.nan])
            mine = rank == r
            size[mine] = by_code[code[mine]]  # code -1 (no tensor): the NaN at the end
        known = np.isfinite(size) & dma["bytes"].notna().to_numpy()
        if not known.any():
            return
        rows = np.flatnonzero(known)
        step = event_steps(ctx.trace, dma["event"].to_numpy()[rows])
        # Sorted by rank, step, tensor name, start, event (ties: table order), as a stable
        # sort of those columns: the names' order by their codes.
        by_name = np.argsort(np.asarray(names, dtype=object), kind="stable")
        sorted_names = np.asarray(names, dtype=object)[by_name]
        name_order = np.empty(len(names), dtype=np.int64)
        name_order[by_name] = np.arange(len(names))
        tensor_rank = name_order[code[rows]]
        order = np.lexsort(
            (
                dma["event"].to_numpy()[rows],
                dma["ts"].to_numpy()[rows],
                tensor_rank,
                step,
                rank[rows],
            )
        )
        rows, step, tensor_rank = rows[order], step[order], tensor_rank[order]
        d = dma.iloc[rows].reset_index(drop=True)
        d["size"] = size[rows]
        d["step"] = step
        r_sorted = rank[rows]
        new_group = np.r_[
            True,
            (r_sorted[1:] != r_sorted[:-1])
            | (step[1:] != step[:-1])
            | (tensor_rank[1:] != tensor_rank[:-1]),
        ]
        bytes_ = d["bytes"]
        moved_before = bytes_.groupby(np.cumsum(new_group)).cumsum() - bytes_
        # Once a step has moved every byte of the tensor, later transfers of it are repeats.
        d["repeat"] = (moved_before >= d["size"]).to_numpy()
        # The repeats' source lines and path time, looked up once for every tensor (each lookup
        # reads every trigger edge and path segment), indexed by position in ``d``.
        rep = d["repeat"].to_numpy()
        rep_line = np.full(len(d), "", dtype=object)
        rep_line[rep] = event_sources(ctx.trace, d["event"].to_numpy()[rep])
        rep_path = np.zeros(len(d), dtype=np.int64)
        rep_path[rep] = on_path_ns(ctx, d["event"].to_numpy()[rep])
        # Tensor by tensor in name order, each one's rows in the order above.
        tensor_rows = np.argsort(tensor_rank, kind="stable")
        t_sorted = tensor_rank[tensor_rows]
        bounds = np.r_[0, np.flatnonzero(t_sorted[1:] != t_sorted[:-1]) + 1, len(d)]
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
            grp = d.iloc[tensor_rows[lo:hi]]
            tensor = sorted_names[t_sorted[lo]]
            per = grp.groupby(["rank", "step"])["bytes"].sum()
            tensor_size = float(grp["size"].iloc[0])
            excess = float((per - tensor_size).clip(lower=0).sum())
            steps = len(per)
            reps = grp[grp["repeat"].to_numpy()]
            if not len(reps) or 100.0 * excess / (tensor_size * steps) < opts["min_excess_pct"]:
                continue
            ids = reps["event"].to_numpy()
            nodes = ctx.nodes_of(ids)
            ok = nodes >= 0
            zero = np.zeros(int(ok.sum()), dtype=np.int64)
            # A repeat removed moves nothing and waits for nothing after its trigger.
            change = WhatIf.durations(nodes[ok], zero) + WhatIf.gaps(nodes[ok], zero)
            saving = ctx.what_if(change)
            impact = int(rep_path[reps.index.to_numpy()].sum())
            lines = pd.Series(rep_line[reps.index.to_numpy()])
            times = float(per.mean() / tensor_size)
            queue = str(reps["queue"].value_counts().idxmax())
            ranks = tuple(sorted(int(r) for r in reps["rank"].unique()))
            where = f" from {lines_text(lines)}" if (lines != "").any() else ""
            yield ctx.finding(
                self,
                severity=severity_by_saving(ctx.cost_pct(saving), opts, self.severity),
                message=(
                    f"Tensor {tensor} ({fmt_bytes(tensor_size)}) is moved {times:.1f} times per "
                    f"step on {_ranks(ranks)} ({fmt_bytes(excess / steps)} per step more than "
                    f"once) in {len(reps)} repeated transfers{where}; they hold the critical "
                    f"path {fmt_ns(impact)} ({ctx.share(impact)}). Without the "
                    f"repeats the step would be {fmt_ns(saving)} shorter."
                ),
                ranks=ranks,
                engine="dma",
                track=queue,
                op=str(tensor),
                start_ns=int(reps["ts"].min()),
                end_ns=int((reps["ts"] + reps["dur"]).max()),
                impact_ns=impact,
                saving_ns=int(saving),
                change=change,
                suggestion="Keep the tensor resident in SBUF across the loop that reuses it, or "
                "reorder the loops so the reused tile is loaded once.",
                evidence={
                    "tensor": str(tensor),
                    "tensor_bytes": tensor_size,
                    "bytes_moved_per_step": float(per.mean()),
                    "times_moved": round(times, 3),
                    "excess_bytes": excess,
                    "repeated_transfers": int(len(reps)),
                    "source_lines": {str(k): int(v) for k, v in lines.value_counts().items() if k},
                    "events": ids[:20].tolist(),
                },
            )


def _ranks(ranks: tuple[int, ...]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"
