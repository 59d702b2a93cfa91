"""CMP302: an engine other than the tensor engine bounds the step."""

from __future__ import annotations

from tracediag.engine.rule import Rule, severity_by_saving
from tracediag.model import schema as S
from tracediag.model.findings import Severity
from tracediag.model.units import fmt_ns

NEURON_ENGINES = ("tensor", "vector", "scalar", "gpsimd", "sync")


class BottleneckEngine(Rule):
    code = "CMP302"
    name = "bottleneck-engine"
    title = "A non-tensor engine bounds the step"
    severity = Severity.WARNING
    options = {
        "min_ratio": 1.0,
        # An engine whose instructions would take at most this share of their time at its
        # element rate runs below it: the what-if runs them at the rate.
        "max_rate_share": 0.5,
        "warn_saving_pct": 5.0,
        "error_saving_pct": 25.0,
    }
    doc = {
        "what it finds": "NeuronCores whose busiest engine (union of its instructions' time) is "
        "not the tensor engine, and whose critical path runs on that engine longer than on the "
        "tensor engine: the vector, scalar or GpSimd engine, not the matmuls, sets the pace. "
        "When the engine's instructions state their element count (`operands`) and would take "
        "at most `max_rate_share` of their time at the engine's rate (Metadata lanes x clock, "
        "plus one instruction's fixed cost: the shortest instruction of the core's other "
        "engines), the engine runs below its rate and the what-if runs them at it (the "
        "transfers they trigger keep only the latency their queue would not hide); otherwise "
        "it makes the engine no busier than the tensor engine.",
        "why it matters": "The perfect pipeline of a NeuronCore runs as fast as its busiest engine. "
        "When that is not the tensor engine, the FLOPs you pay for wait on elementwise work, "
        "activations or custom kernels.",
        "how to fix": "Move work off the bottleneck engine: fuse elementwise operations, pick "
        "activations the scalar engine implements natively, rebalance work between vector and "
        "GpSimd, check `performance_mode` and data types of the engine's instructions.",
        "example": "`CMP302 warning rank 0 vector: busy 2.1 ms against the tensor engine's 1.2 ms; "
        "the critical path runs 1.6 ms on it. Balanced with the tensor engine the step would be "
        "0.8 ms shorter.`",
    }

    def check(self, ctx, opts):
        import numpy as np

        from tracediag.analysis.intervals import busy_ns_by_group
        from tracediag.graph.changes import WhatIf
        from tracediag.whatif.engine_rate import at_engine_rate, instruction_overhead_ns
        from tracediag.whatif.trigger_latency import with_trigger_latency

        ev = ctx.trace.events
        engines = ctx.trace.tracks[S.ENGINE].astype(str).to_numpy()
        track = ev[S.TRACK].to_numpy()
        # Categorical and per-track tests, indexed by event (not a string compare per event).
        comp = (ev[S.KIND] == "compute").to_numpy(dtype=bool) & np.isin(engines, NEURON_ENGINES)[
            track
        ]
        if not comp.any():
            return
        rank = ev[S.RANK].to_numpy()[comp]
        e = engines[track[comp]]
        key = rank.astype(np.int64) * len(NEURON_ENGINES) + np.searchsorted(
            np.array(sorted(NEURON_ENGINES)), e
        )
        s = ev[S.TS].to_numpy()[comp]
        busy = busy_ns_by_group(key, s, s + ev[S.DUR].to_numpy()[comp])
        names = np.array(sorted(NEURON_ENGINES))
        by_rank: dict[int, dict[str, int]] = {}
        for k, v in busy.items():
            by_rank.setdefault(int(k) // len(NEURON_ENGINES), {})[
                str(names[int(k) % len(NEURON_ENGINES)])
            ] = int(v)
        seg = ctx.path.segments
        path_eng = seg[seg["category"] == "compute"].groupby(["rank", "engine"])["dur_ns"].sum()
        # One finding per bottleneck engine across the ranks it bounds (the fix is the same);
        # the path, which lives on one rank at a time, must run longer on it than on the
        # tensor engine.
        bound: dict[str, list[int]] = {}
        for r, b in sorted(by_rank.items()):
            top = max(b, key=b.get)
            if top != "tensor" and b[top] >= opts["min_ratio"] * b.get("tensor", 0):
                bound.setdefault(top, []).append(r)
        on_path = path_eng.groupby(level="engine").sum()
        bound = {e: r for e, r in bound.items() if on_path.get(e, 0) > on_path.get("tensor", 0)}
        for engine, ranks in bound.items():
            sel = comp.copy()
            sel[comp] = np.isin(rank, ranks) & (e == engine)
            ids = np.flatnonzero(sel)
            # What-if 1: an engine running below its own rate (its instructions far longer than
            # their elements at lanes x clock plus one instruction's fixed cost) runs at it.
            others = comp.copy()
            others[comp] = np.isin(rank, ranks) & (e != engine)
            overhead = instruction_overhead_ns(ctx.trace, others)
            at_rate, figures = at_engine_rate(ctx, ids, engine, overhead)
            known = np.isfinite(at_rate)
            held = float(ev[S.DUR].to_numpy()[ids][known].sum())
            rate_share = float(at_rate[known].sum()) / held if held else 1.0
            slow = known.any() and rate_share <= opts["max_rate_share"]
            nodes = ctx.nodes_of(ids)
            ok = nodes >= 0
            if slow:
                ok &= known
                new = np.minimum(ctx.graph.dur[nodes[ok]], at_rate[ok]).astype(np.int64)
                factors = {}
            else:
                # What-if 2: the engine no busier than the tensor engine (a balanced pipeline).
                factors = {
                    r: min(1.0, by_rank[r].get("tensor", 0) / by_rank[r][engine]) for r in ranks
                }
                per_rank = np.ones(max(ranks) + 1)
                per_rank[list(factors)] = list(factors.values())
                f = per_rank[ev[S.RANK].to_numpy()[ids]]
                new = np.floor(ctx.graph.dur[nodes[ok]] * f[ok]).astype(np.int64)
            change = WhatIf.durations(nodes[ok], new)
            if slow:
                # Sooner triggers: the stores' trigger latency hides behind their queue's
                # previous transfer, as it does in a kernel whose engine keeps pace.
                change = with_trigger_latency(ctx, change)
            saving = ctx.what_if(change)
            impact = int(on_path.get(engine, 0))
            r0 = ranks[0]
            if slow:
                rate, fixed = figures[r0]
                how = (
                    f"Its {int(known.sum())} instructions with a stated element count take "
                    f"{fmt_ns(held)}; at the engine's rate ({rate:.0f} elements/ns: lanes x "
                    f"clock) plus {fmt_ns(fixed)} per instruction they would take "
                    f"{fmt_ns(at_rate[known].sum())} ({100 * rate_share:.0f}%), and the step "
                    f"{fmt_ns(saving)} shorter."
                )
                suggestion = (
                    f"The {engine} engine runs at {100 * rate_share:.0f}% of its element rate: "
                    "check its instructions' performance mode, data types and access patterns."
                )
            else:
                how = f"Balanced with the tensor engine the step would be {fmt_ns(saving)} shorter."
                suggestion = (
                    f"Move or fuse work off the {engine} engine so the tensor engine sets the pace."
                )
            yield ctx.finding(
                self,
                severity=severity_by_saving(ctx.cost_pct(saving), opts, self.severity),
                message=(
                    f"The {engine} engine bounds rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}: "
                    f"busy {fmt_ns(by_rank[r0][engine])} against the tensor engine's {fmt_ns(by_rank[r0].get('tensor', 0))} "
                    f"on rank {r0}, and the critical path runs {fmt_ns(impact)} on it ({ctx.share(impact)}). "
                    + how
                ),
                ranks=tuple(ranks),
                engine=engine,
                start_ns=int(ev[S.TS].to_numpy()[ids].min()),
                end_ns=int((ev[S.TS].to_numpy()[ids] + ev[S.DUR].to_numpy()[ids]).max()),
                impact_ns=impact,
                saving_ns=int(saving),
                change=change,
                suggestion=suggestion,
                evidence={
                    "busy_ns_by_engine": {str(r): by_rank[r] for r in ranks},
                    "scale_factors": factors,
                    "what_if": "engine_rate" if slow else "balance",
                    **(
                        {
                            "rate_share": round(rate_share, 4),
                            "elements_per_ns": {str(r): v[0] for r, v in figures.items()},
                            "instruction_overhead_ns": {str(r): v[1] for r, v in figures.items()},
                        }
                        if slow
                        else {}
                    ),
                },
            )
