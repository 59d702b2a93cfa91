"""CMP303: tensor-engine MATMULs whose tiles use a small share of the PE array."""

from __future__ import annotations

from tracediag.engine.rule import Rule, severity_by_saving
from tracediag.model import schema as S
from tracediag.model.findings import Severity
from tracediag.model.units import fmt_ns


class SmallMatmulTiles(Rule):
    code = "CMP303"
    name = "small-matmul-tiles"
    title = "MATMUL tiles use a small share of the PE array"
    severity = Severity.WARNING
    options = {
        "max_share": 0.5,  # flag tiles using at most this share of the PE array's rows x columns
        "min_count": 16,  # fewer such MATMULs from one source line are not a pattern
        "warn_saving_pct": 1.0,
        "error_saving_pct": 10.0,
    }
    doc = {
        "what it finds": "Tensor-engine MATMULs (transposes are CMP304's and NUM702's) whose "
        "tile, read from the instruction's `operands` (the trailing `K*M` pair), uses at most "
        "`max_share` of the PE array's rows x columns (Metadata `tensor_engine_num_rows` x "
        "`tensor_engine_num_cols`), grouped by source line and tile shape, as AWS's "
        "TE-inefficiency investigation reads them. The what-if runs those MATMULs at "
        "full-array efficiency: each takes its share of its time (the same FLOPs in fewer, "
        "full tiles), never less than its FLOPs at the tensor engine's peak, and replays.",
        "why it matters": "The moving tensor streams through the PE array one column per cycle "
        "whatever share of the array the stationary tile fills: a K=32 tile does a quarter of "
        "the work of a K=128 tile in the same time. K and M below the array's size cut the "
        "tensor engine's throughput in proportion.",
        "how to fix": "Tile the contraction dimension (K) and the stationary free dimension "
        "(M) to the PE array's 128 x 128: load and multiply full 128-partition tiles, or "
        "pack several small matmuls into one tile.",
        "example": "`CMP303 warning rank 0 tensor: 1024 MATMULs at matmul_kernel.py:31 use "
        "32x128 of the 128x128 PE array (25%); at full-array efficiency the kernel would be "
        "100 µs shorter.`",
    }

    def check(self, ctx, opts):
        import numpy as np
        import pandas as pd

        from tracediag.analysis.bounds import te_peak
        from tracediag.analysis.source_lines import event_sources, on_path_ns, short_line
        from tracediag.graph.changes import WhatIf

        ev = ctx.trace.events
        if S.TILE_ROWS not in ev or S.TILE_COLS not in ev:
            return
        k = ev[S.TILE_ROWS].to_numpy(dtype=np.float64)
        m = ev[S.TILE_COLS].to_numpy(dtype=np.float64)
        transpose = np.nan_to_num(_column(ev, S.TRANSPOSE_FLOPS)) > 0
        ids = np.flatnonzero(np.isfinite(k) & np.isfinite(m) & ~transpose & (k > 0) & (m > 0))
        if not len(ids):
            return
        rank = ev[S.RANK].to_numpy()[ids]
        ranks_seen = np.unique(rank)
        array = {int(r): _array(ctx, int(r)) for r in ranks_seen}  # per rank, not per event
        table = np.array([array[int(r)] for r in ranks_seen])[np.searchsorted(ranks_seen, rank)]
        share = np.minimum(k[ids] / table[:, 0], 1.0) * np.minimum(m[ids] / table[:, 1], 1.0)
        small = np.isfinite(share) & (share <= opts["max_share"])
        if small.sum() < opts["min_count"]:
            return
        ids, share, rank = ids[small], share[small], rank[small]
        peak = {r: te_peak(ctx.trace.meta[r].info, ctx.hardware.get(r))[0] for r in array}
        frame = pd.DataFrame(
            {
                "event": ids,
                "rank": rank,
                "share": share,
                "shape": pd.Series(k[ids]).astype(int).astype(str)
                + "x"
                + pd.Series(m[ids]).astype(int).astype(str),
                "line": event_sources(ctx.trace, ids),
                "peak": pd.Series(rank).map(peak).to_numpy(dtype=np.float64),
            }
        )
        flops = np.nan_to_num(_column(ev, S.FLOPS))
        for (line, shape), grp in frame.groupby(["line", "shape"], sort=True):
            if len(grp) < opts["min_count"]:
                continue
            gid = grp["event"].to_numpy()
            nodes = ctx.nodes_of(gid)
            ok = nodes >= 0
            dur = ctx.graph.dur[nodes[ok]]
            # The same FLOPs at full-array efficiency, never faster than the peak allows.
            at_peak = np.nan_to_num(flops[gid[ok]] / grp["peak"].to_numpy()[ok] * 1e9)
            full = np.maximum(np.ceil(dur * grp["share"].to_numpy()[ok]), np.ceil(at_peak))
            change = WhatIf.durations(nodes[ok], np.minimum(dur, full).astype(np.int64))
            saving = ctx.what_if(change)
            impact = int(on_path_ns(ctx, gid).sum())
            ranks = tuple(sorted(int(r) for r in grp["rank"].unique()))
            r0 = ranks[0]
            pct = 100 * float(grp["share"].mean())
            where = f" at {short_line(line)}" if line else ""
            yield ctx.finding(
                self,
                severity=severity_by_saving(ctx.cost_pct(saving), opts, self.severity),
                message=(
                    f"{len(grp)} MATMULs on {_ranks(ranks)}{where} use {shape} of the "
                    f"{array[r0][0]:.0f}x{array[r0][1]:.0f} PE array ({pct:.0f}%); they hold the "
                    f"critical path {fmt_ns(impact)} ({ctx.share(impact)}). At "
                    f"full-array efficiency the step would be {fmt_ns(saving)} shorter."
                ),
                ranks=ranks,
                engine="tensor",
                op=short_line(line) if line else "",
                start_ns=int(ev[S.TS].to_numpy()[gid].min()),
                end_ns=int((ev[S.TS].to_numpy()[gid] + ev[S.DUR].to_numpy()[gid]).max()),
                impact_ns=impact,
                saving_ns=int(saving),
                change=change,
                suggestion="Tile K and M to the PE array's rows and columns (128 x 128).",
                evidence={
                    "matmuls": int(len(grp)),
                    "tile": shape,
                    "pe_array": [float(array[r0][0]), float(array[r0][1])],
                    "array_share": round(float(grp["share"].mean()), 4),
                    "source_line": line or None,
                    "events": gid[:20].tolist(),
                },
            )


def _array(ctx, rank: int) -> tuple[float, float]:
    """The PE array's rows and columns: the profile's Metadata, else 128 x 128 (every
    NeuronCore generation so far)."""
    info = ctx.trace.meta[rank].info
    out = []
    for key in ("tensor_engine_num_rows", "tensor_engine_num_cols"):
        try:
            value = float(info.get(key))
        except (TypeError, ValueError):
            value = float("nan")
        out.append(value if value > 0 else 128.0)
    return out[0], out[1]


def _column(ev, name):
    import numpy as np

    if name not in ev:
        return np.zeros(len(ev))
    return ev[name].to_numpy(dtype=np.float64)


def _ranks(ranks: tuple[int, ...]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"
