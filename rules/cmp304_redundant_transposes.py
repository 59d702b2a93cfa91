"""CMP304: tensor-engine transposes repeated on the same data, or undone by another."""

from __future__ import annotations

from tracediag.engine.rule import Rule, severity_by_saving
from tracediag.model import schema as S
from tracediag.model.findings import Severity
from tracediag.model.units import fmt_ns


class RedundantTransposes(Rule):
    code = "CMP304"
    name = "redundant-transposes"
    title = "Tensor-engine transposes repeated on the same data"
    severity = Severity.WARNING
    options = {
        "min_count": 8,  # fewer redundant transposes from one source line are not a pattern
        "warn_saving_pct": 1.0,
        "error_saving_pct": 10.0,
    }
    doc = {
        "what it finds": "Transposes on the tensor engine (instructions with transpose FLOPs, "
        "`tensor_instruction_type` TRANSPOSE) that repeat an earlier one of the same step: the "
        "same engine, layer, source address and tile shape (from `operands`) holding the "
        "same data (the same producing instruction or DMA), and pairs where the second "
        "transpose undoes the first (it reads what the first wrote and writes back where the "
        "first read). Grouped by "
        "source line; the what-if replays the step without them and without the copies of "
        "their results out of PSUM (instructions off the tensor engine whose only recorded "
        "predecessor is one of them). NUM702 reports the share of "
        "all transpose FLOPs; this rule only the ones that recompute a result the kernel has.",
        "why it matters": "A transpose is an identity MATMUL on the PE array: it occupies the "
        "tensor engine and the engine that copies its result out of PSUM, and a repeated one "
        "does it for a result that is already in SBUF.",
        "how to fix": "Transpose each tile once and keep the result (hoist `nc_transpose` out "
        "of the loop that reuses it), drop a transpose that a later one undoes, or load the "
        "tensor in the layout its consumer reads.",
        "example": "`CMP304 warning rank 0 tensor: 192 transposes at matmul_kernel.py:27 "
        "repeat one of the same tile; without them the kernel would be 10 µs shorter.`",
    }

    def check(self, ctx, opts):
        import numpy as np
        import pandas as pd

        from tracediag.analysis.source_lines import (
            event_sources,
            event_steps,
            on_path_ns,
            short_line,
        )
        from tracediag.graph.changes import WhatIf

        ev = ctx.trace.events
        if S.TRANSPOSE_FLOPS not in ev or S.SRC_ADDRESS not in ev:
            return
        tf = np.nan_to_num(ev[S.TRANSPOSE_FLOPS].to_numpy(dtype=np.float64))
        src = ev[S.SRC_ADDRESS].to_numpy(dtype=np.float64)
        ids = np.flatnonzero((tf > 0) & np.isfinite(src))
        if len(ids) < opts["min_count"]:
            return
        t = pd.DataFrame(
            {
                "event": ids,
                "rank": ev[S.RANK].to_numpy()[ids],
                "step": event_steps(ctx.trace, ids),
                "ts": ev[S.TS].to_numpy()[ids],
                "src": src[ids],
                "dst": _column(ev, S.DST_ADDRESS)[ids],
                "shape": _shape_code(ev, ids),
                "producer": _producers(ctx.trace, ids),
                # SBUF addresses are reused by every layer, and each physical core (track)
                # has its own: one layer on one engine reading one address is what says two
                # transposes without a recorded producer read the same data.
                "track": ev[S.TRACK].to_numpy()[ids],
                "layer": _layer_codes(ev, ids),
            }
        ).sort_values(["ts", "event"], kind="stable")
        same = ["rank", "track", "step", "layer", "src", "shape", "producer"]
        repeat = t.groupby(same, dropna=False).cumcount().to_numpy() > 0
        undone = _undone(t)
        t["why"] = np.where(repeat, "repeat", np.where(undone, "undone", ""))
        red = t[t["why"] != ""].copy()
        if len(red) < opts["min_count"]:
            return
        red["line"] = event_sources(ctx.trace, red["event"].to_numpy())
        for line, grp in red.groupby("line", sort=True):
            if len(grp) < opts["min_count"]:
                continue
            gid = grp["event"].to_numpy()
            copies = _result_copies(ctx.trace, gid)
            nodes = ctx.nodes_of(np.r_[gid, copies])
            ok = nodes >= 0
            change = WhatIf.durations(nodes[ok], np.zeros(int(ok.sum()), dtype=np.int64))
            saving = ctx.what_if(change)
            impact = int(on_path_ns(ctx, np.r_[gid, copies]).sum())
            ranks = tuple(sorted(int(r) for r in grp["rank"].unique()))
            n_rep = int((grp["why"] == "repeat").sum())
            n_undo = len(grp) - n_rep
            parts = [f"{n_rep} repeat one of the same tile"] if n_rep else []
            parts += [f"{n_undo} undo another transpose"] if n_undo else []
            where = f" at {short_line(line)}" if line else ""
            end = ev[S.TS].to_numpy()[gid] + ev[S.DUR].to_numpy()[gid]
            yield ctx.finding(
                self,
                severity=severity_by_saving(ctx.cost_pct(saving), opts, self.severity),
                message=(
                    f"{len(grp)} tensor-engine transposes on {_ranks(ranks)}{where} are "
                    f"redundant ({' and '.join(parts)}); they hold the critical path "
                    f"{fmt_ns(impact)} ({ctx.share(impact)}). Without them the step "
                    f"would be {fmt_ns(saving)} shorter."
                ),
                ranks=ranks,
                engine="tensor",
                op=short_line(line) if line else "",
                start_ns=int(grp["ts"].min()),
                end_ns=int(end.max()),
                impact_ns=impact,
                saving_ns=int(saving),
                change=change,
                suggestion="Transpose each tile once and keep the result, or load the tensor "
                "in the layout its consumer reads.",
                evidence={
                    "transposes": int(len(t)),
                    "redundant": int(len(grp)),
                    "repeats": n_rep,
                    "undone": n_undo,
                    "transpose_flops": float(tf[gid].sum()),
                    "result_copies": int(len(copies)),
                    "source_line": line or None,
                    "events": gid[:20].tolist(),
                },
            )


def _column(ev, name):
    import numpy as np

    if name not in ev:
        return np.full(len(ev), np.nan)
    return ev[name].to_numpy(dtype=np.float64)


def _layer_codes(ev, ids):
    """Per transpose, a code of its layer, -1 where it has none."""
    import numpy as np
    import pandas as pd

    if S.LAYER not in ev:
        return np.full(len(ids), -1, dtype=np.int64)
    return pd.factorize(ev[S.LAYER].iloc[ids], use_na_sentinel=True)[0].astype(np.int64)


def _shape_code(ev, ids):
    """One number per tile shape (K, M, N), NaN parts as -1."""
    import numpy as np

    parts = [np.nan_to_num(_column(ev, c)[ids], nan=-1) for c in (S.TILE_ROWS, S.TILE_COLS)]
    moving = np.nan_to_num(_column(ev, S.TILE_MOVING)[ids], nan=-1)
    return (parts[0] + 1) * 1e8 + (parts[1] + 1) * 1e4 + (moving + 1)


def _producers(trace, ids):
    """Per transpose: the recorded predecessor that ends last (what wrote its input), -1."""
    import numpy as np
    import pandas as pd

    ed = trace.edges
    out = np.full(len(ids), -1, dtype=np.int64)
    if not len(ed):
        return out
    dst = ed[S.DST].to_numpy()
    into = np.isin(dst, ids)
    if not into.any():
        return out
    src = ed[S.SRC].to_numpy()[into]
    ev = trace.events
    end = ev[S.TS].to_numpy()[src] + ev[S.DUR].to_numpy()[src]
    last = pd.DataFrame({"dst": dst[into], "src": src, "end": end}).sort_values(
        ["dst", "end", "src"], kind="stable"
    )
    last = last.groupby("dst")["src"].last()
    out[:] = last.reindex(ids).fillna(-1).to_numpy(dtype=np.int64)
    return out


def _result_copies(trace, ids):
    """The instructions that only copy these transposes' results out of PSUM: compute events
    off the tensor engine whose one recorded predecessor is one of them. A redundant
    transpose's copy moves a result the kernel already has, so it goes with it."""
    import numpy as np

    ed = trace.edges
    if not len(ed):
        return np.zeros(0, dtype=np.int64)
    src, dst = ed[S.SRC].to_numpy(), ed[S.DST].to_numpy()
    ev = trace.events
    engine = trace.tracks[S.ENGINE].astype(str).to_numpy()[ev[S.TRACK].to_numpy()]
    compute = (ev[S.KIND] == "compute").to_numpy(dtype=bool)
    preds = np.bincount(dst, minlength=len(ev))
    out = dst[np.isin(src, ids)]
    keep = compute[out] & (engine[out] != "tensor") & (preds[out] == 1)
    return np.unique(out[keep])


def _undone(t):
    """Per row of ``t`` (sorted by time): a transpose that a later one undoes, or the later
    one: it reads what the earlier wrote and writes back where the earlier read."""
    import numpy as np

    t = t.assign(pos=np.arange(len(t)))
    ok = t[np.isfinite(t["dst"].to_numpy()) & (t["src"] != t["dst"]).to_numpy()]
    pairs = ok.merge(
        ok, left_on=["rank", "step", "dst", "src", "shape"],
        right_on=["rank", "step", "src", "dst", "shape"], suffixes=("", "_b"),
    )  # fmt: skip
    pairs = pairs[pairs["pos_b"].to_numpy() > pairs["pos"].to_numpy()]
    out = np.zeros(len(t), dtype=bool)
    out[pairs["pos"].to_numpy()] = True
    out[pairs["pos_b"].to_numpy()] = True
    return out


def _ranks(ranks: tuple[int, ...]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"
