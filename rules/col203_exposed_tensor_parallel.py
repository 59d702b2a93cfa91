"""COL203: tensor-parallel collectives inside the layers sit on the critical path, unhidden."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracediag.engine.rule import Rule, severity_by_saving
from tracediag.model import schema as S
from tracediag.model.collective_ops import bus_factor
from tracediag.model.findings import Severity
from tracediag.model.units import fmt_ns
from tracediag.model.wording import bus_bandwidth_text, plural

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd


def _compute_rows(ev: pd.DataFrame) -> dict[int, np.ndarray]:
    """Per rank: the rows of its compute events, in event order (positions: the rules below
    read a few columns at them instead of copying every column of the rank's events)."""
    import numpy as np

    rows = np.flatnonzero((ev[S.KIND] == "compute").to_numpy(dtype=bool))
    rank = ev[S.RANK].to_numpy()[rows]
    order = np.argsort(rank, kind="stable")
    rows, rank = rows[order], rank[order]
    cut = np.flatnonzero(rank[1:] != rank[:-1]) + 1
    return {int(rank[i]): part for i, part in zip(np.r_[0, cut], np.split(rows, cut), strict=True)}


def _rows_of(compute: dict[int, np.ndarray], rank) -> np.ndarray:
    import numpy as np

    return compute.get(int(rank), np.zeros(0, dtype=np.int64))


def _spans(ev: pd.DataFrame, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start and end of the events at ``rows``."""
    s = ev[S.TS].to_numpy()[rows]
    return s, s + ev[S.DUR].to_numpy()[rows]


def _string_categories(col: pd.Series):
    """The categories of a categorical of strings as an object array (their text is what
    ``astype(str)`` gives each row), else None."""
    import numpy as np
    import pandas as pd

    if not isinstance(col.dtype, pd.CategoricalDtype):
        return None
    cats = col.cat.categories
    if pd.api.types.infer_dtype(cats, skipna=False) != "string":
        return None
    return np.asarray(cats, dtype=object)


def _exposed_rows(ev: pd.DataFrame, coll: pd.DataFrame, compute: dict) -> pd.Series:
    """Per collective row: ns of its transfer with no compute on its rank beside it."""
    import numpy as np
    import pandas as pd

    from tracediag.analysis.intervals import interval_overlap

    out = np.zeros(len(coll), dtype=np.int64)
    for rank in coll[S.RANK].unique():
        mine = (coll[S.RANK] == rank).to_numpy()
        s, e = _spans(ev, _rows_of(compute, rank))
        a, b = coll[S.START].to_numpy()[mine], coll[S.END].to_numpy()[mine]
        out[mine] = (b - a) - interval_overlap(a, b, s, e)
    return pd.Series(out, index=coll.index)


def _layers_before(ev: pd.DataFrame, rows: np.ndarray, times: np.ndarray) -> np.ndarray:
    """The layer of the last compute event of ``rows`` (one rank's) starting before each time."""
    import numpy as np

    col = ev[S.LAYER]
    cats = _string_categories(col)
    if cats is not None:  # by category code: no string per event
        codes = col.cat.codes.to_numpy()[rows]
        rows = rows[codes >= 0]
        codes = codes[codes >= 0]
    else:
        layer = col.iloc[rows]
        keep = layer.notna().to_numpy()
        rows, layer = rows[keep], layer[keep]
    ts = ev[S.TS].to_numpy()[rows]
    order = np.argsort(ts, kind="stable")
    at = np.searchsorted(ts[order], times, side="right") - 1
    if not len(rows):
        return np.where(at >= 0, "", "")
    pick = order[np.maximum(at, 0)]
    names = cats[codes[pick]] if cats is not None else layer.astype(str).to_numpy()[pick]
    return np.where(at >= 0, names, "")


def _compute_by_layer(ev: pd.DataFrame, rows: np.ndarray) -> pd.Series:
    """Compute ns of the events at ``rows`` per layer name (events without a layer left out)."""
    import pandas as pd

    col = ev[S.LAYER]
    dur = ev[S.DUR].to_numpy()[rows]
    cats = _string_categories(col)
    if cats is None:
        return pd.Series(dur).groupby(col.iloc[rows].astype(str).to_numpy()).sum()
    codes = col.cat.codes.to_numpy()[rows]
    has = codes >= 0
    per_code = pd.Series(dur[has]).groupby(codes[has]).sum()
    return pd.Series(per_code.to_numpy(), index=cats[per_code.index.to_numpy()])


class ExposedTensorParallel(Rule):
    code = "COL203"
    name = "exposed-tensor-parallel"
    title = "Tensor-parallel collectives inside layers on the critical path"
    severity = Severity.WARNING
    options = {"min_impact_pct": 1.0, "warn_saving_pct": 3.0, "error_saving_pct": 15.0}
    doc = {
        "what it finds": "Transfers of collectives over a tensor-parallel group (from the "
        "layout) that lie on the critical path with no compute beside them: the exposed share "
        "per layer, the achieved bus bandwidth against the link's, and each layer's "
        "compute-to-communication ratio.",
        "why it matters": "Tensor parallelism splits every layer's matmuls and joins their "
        "results with an AllReduce (or AllGather/ReduceScatter): once per layer per micro-batch. "
        "Unhidden, that cost repeats in every layer and adds straight to the step.",
        "how to fix": "Overlap the TP collective with the next chunk's matmul (chunked or "
        "asynchronous tensor parallelism, sequence parallelism with overlapped AllGather/"
        "ReduceScatter); keep TP groups inside one node's fast links; lower the TP degree when "
        "a layer's compute-to-communication ratio is low.",
        "example": "`COL203 warning ranks 0-3: 8 TP AllReduce transfers (layer_0..layer_3) run "
        "unhidden for 0.8 ms (7% of the step) at 96 GB/s bus bandwidth (link 96 GB/s); hidden "
        "the step would be 0.8 ms shorter.`",
    }

    def check(self, ctx, opts):
        import numpy as np
        import pandas as pd

        from tracediag.analysis.hardware import credible_peak
        from tracediag.analysis.intervals import interval_overlap
        from tracediag.analysis.tensor_parallel import tp_collective_rows
        from tracediag.engine.saving_bound import impact_covering_saving
        from tracediag.graph.changes import WhatIf

        tp = tp_collective_rows(ctx)
        if not len(tp):
            return
        seg = ctx.path.segments
        seg = seg[(seg["category"] == "collective_transfer") & seg["event"].isin(tp[S.EVENT])]
        if not len(seg):
            return
        ev = ctx.trace.events
        compute = _compute_rows(ev)
        parts = []
        for rank, rows in seg.groupby("rank"):
            mine = _rows_of(compute, rank)
            s, e = _spans(ev, mine)
            a, b = rows["start_ns"].to_numpy(), rows["end_ns"].to_numpy()
            exposed = (b - a) - interval_overlap(a, b, s, e)
            parts.append(rows.assign(exposed=exposed, layer=_layers_before(ev, mine, a)))
        seg = pd.concat(parts)
        seg = seg[seg["exposed"] > 0]
        impact = int(seg["exposed"].sum())
        if not len(seg) or ctx.pct(impact) < opts["min_impact_pct"]:
            return
        keyed = tp.set_index(S.EVENT)
        seg = seg.assign(coll_key=keyed.loc[seg["event"], S.COLL_KEY].to_numpy())
        # Every TP group runs the same collectives: hiding them on the critical group only would
        # leave the others' on the path, so the what-if hides the exposed part of all of them.
        per_key = _exposed_rows(ev, tp, compute).groupby(tp[S.COLL_KEY].to_numpy()).max()
        per_key = per_key[per_key > 0]
        rows = tp[tp[S.COLL_KEY].isin(per_key.index)]
        nodes = ctx.nodes_of(rows[S.EVENT].to_numpy())
        cut = per_key.reindex(rows[S.COLL_KEY]).to_numpy()
        ok = nodes >= 0
        dur = ctx.graph.dur[nodes[ok]]
        new = np.maximum(dur - cut[ok], 0)
        # A wholly exposed transfer's handshake (last arrival to start) goes with it.
        whole = nodes[ok][new == 0]
        change = WhatIf.durations(nodes[ok], new) + WhatIf.gaps(whole, np.zeros(len(whole)))
        saving = ctx.what_if(change)
        # The handshakes the change also removes are on the path beyond the exposed transfer.
        exposed = impact
        impact = impact_covering_saving(ctx, change, exposed, int(saving))
        body = tp[tp[S.COLL_KEY].isin(seg["coll_key"])]
        t_ns = float((body[S.END] - body[S.START]).sum())
        algbw = float(body[S.BYTES].sum()) / t_ns * 1e9 if t_ns > 0 else float("nan")
        op = str(body[S.COLL_OP].mode().iat[0])
        busbw = algbw * bus_factor(op, ctx.layout.tp)
        hwp = next((h for h in ctx.hardware.values() if h is not None), None)
        link = credible_peak(hwp.link_bw if hwp is not None else None, busbw)
        layers = _per_layer(ctx, tp, seg, compute)
        ranks = tuple(sorted(int(r) for r in seg["rank"].unique()))
        n_inst = int(seg["coll_key"].nunique())
        yield ctx.finding(
            self,
            severity=severity_by_saving(ctx.cost_pct(saving), opts, self.severity),
            message=(
                f"{plural(n_inst, f'tensor-parallel {op} transfer')} over "
                f"{plural(len(layers), 'layer')} {'runs' if n_inst == 1 else 'run'} on the critical path "
                f"with no compute beside {'it' if n_inst == 1 else 'them'} for "
                f"{fmt_ns(exposed)} ({ctx.share(exposed)})"
                f"{bus_bandwidth_text(busbw, link)}. Hidden behind compute the step would be "
                f"{fmt_ns(saving)} shorter."
            ),
            ranks=ranks,
            engine="cc",
            op=op,
            layer=",".join(sorted(layers)),
            start_ns=int(seg["start_ns"].min()),
            end_ns=int(seg["end_ns"].max()),
            impact_ns=impact,
            saving_ns=int(saving),
            change=change,
            suggestion="Overlap each layer's TP collective with the next chunk's compute "
            "(chunked/async TP), or lower the TP degree.",
            evidence={
                "instances": int(seg["coll_key"].nunique()),
                "algbw": algbw,
                "busbw": busbw,
                "link_bw": link,
                "tp": ctx.layout.tp,
                "per_layer": layers,
            },
        )


def _per_layer(ctx, tp: pd.DataFrame, seg: pd.DataFrame, compute: dict) -> dict[str, dict]:
    """Per layer: exposed TP ns on the critical path, their share of the layer's time on the
    path, and the layer's compute-to-TP-communication ratio (all of its ranks' events)."""
    import numpy as np
    import pandas as pd

    ev = ctx.trace.events
    comm = (tp[S.END] - tp[S.START]).to_numpy()
    layer_of = np.empty(len(tp), dtype=object)
    ranks = tp[S.RANK].unique()
    for rank in ranks:
        mine = (tp[S.RANK] == rank).to_numpy()
        rows = _rows_of(compute, rank)
        layer_of[mine] = _layers_before(ev, rows, tp[S.START].to_numpy()[mine])
    comm_by_layer = pd.Series(comm).groupby(layer_of).sum()
    rows = np.sort(np.concatenate([_rows_of(compute, r) for r in ranks]))
    compute_by_layer = _compute_by_layer(ev, rows)
    path = ctx.segments
    on_path = path.loc[path["category"] == "compute", "dur_ns"]
    path_by_layer = on_path.groupby(path.loc[on_path.index, S.LAYER].astype(str)).sum()
    out = {}
    for layer, exposed in seg.groupby("layer")["exposed"].sum().items():
        total = float(comm_by_layer.get(layer, 0))
        on_layer = float(path_by_layer.get(layer, 0)) + exposed
        out[str(layer)] = {
            "exposed_ns": int(exposed),
            "exposed_share": round(exposed / on_layer, 3) if on_layer else None,
            "compute_to_comm": round(float(compute_by_layer.get(layer, 0)) / total, 2)
            if total
            else None,
        }
    return out
