"""Source lines of events, and what the kernel investigations group by.

An instruction carries its own line (Neuron ``bir_debug_info_source_location`` or
``nki_source_location``, XLA source annotations); a DMA transfer carries none, so it takes the
line of the instruction that triggered it (a ``dma_trigger`` edge), as AWS's investigations
join ``Flow`` from ``Instruction`` to ``DmaPacketAggregated``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracediag.model import schema as S


def event_sources(trace: S.Trace, ids: np.ndarray) -> np.ndarray:
    """Per event id of ``ids``: its source line, else its trigger's; "" when neither says."""
    ids = np.asarray(ids, dtype=np.int64)
    ev = trace.events
    if S.SOURCE not in ev or not len(ids):
        return np.full(len(ids), "", dtype=object)
    col = ev[S.SOURCE]
    if isinstance(col.dtype, pd.CategoricalDtype):
        cats = np.append(np.asarray(col.cat.categories.astype(str), dtype=object), "")
        codes = col.cat.codes.to_numpy()
    else:
        codes, uniq = pd.factorize(col)
        cats = np.append(np.asarray(uniq, dtype=object).astype(str), "")
    code = codes[ids].astype(np.int64)
    missing = code < 0
    ed = trace.edges
    if missing.any() and len(ed):
        trig = (ed[S.EDGE_KIND] == "dma_trigger").to_numpy(dtype=bool)
        by_dst = pd.Series(ed[S.SRC].to_numpy()[trig]).groupby(ed[S.DST].to_numpy()[trig]).first()
        src = by_dst.reindex(ids[missing]).to_numpy()
        known = np.isfinite(src)
        fill = np.full(int(missing.sum()), -1, dtype=np.int64)
        fill[known] = codes[src[known].astype(np.int64)]
        code[missing] = fill
    return cats[np.where(code >= 0, code, len(cats) - 1)]


def short_line(location: str) -> str:
    """``/home/u/kernel.py:42`` -> ``kernel.py:42``; the first of several "; "-joined lines."""
    first = str(location or "").split("; ")[0]
    return first.rsplit("/", 1)[-1]


def event_steps(trace: S.Trace, ids: np.ndarray) -> np.ndarray:
    """Per event id: its step number (-1 where the trace numbers no steps)."""
    ev = trace.events
    if S.STEP not in ev:
        return np.full(len(ids), -1.0)
    return np.nan_to_num(ev[S.STEP].to_numpy(dtype=np.float64)[ids], nan=-1.0)


def on_path_ns(ctx, ids: np.ndarray, *categories: str) -> np.ndarray:
    """Per event id: its ns on the critical path (in ``categories`` when given)."""
    seg = ctx.path.segments
    if categories:
        seg = seg[seg["category"].isin(categories)]
    per = seg[seg["event"] >= 0].groupby("event")["dur_ns"].sum()
    return per.reindex(np.asarray(ids)).fillna(0).to_numpy(dtype=np.int64)


def lines_text(lines: pd.Series, top: int = 3) -> str:
    """``kernel.py:31 (512), kernel.py:35 (64)``: the lines with the most events first."""
    counts = lines[lines != ""].value_counts()
    return ", ".join(f"{short_line(k)} ({v})" for k, v in counts.head(top).items())


# ---- grouping by source line (``--by source``) ------------------------------------------------

#: What a report or a table says when the trace names no source line at all.
NO_SOURCE = "no source lines in this trace (its events carry no source location)"


def has_sources(trace: S.Trace) -> bool:
    """Whether any event of ``trace`` states a source line."""
    ev = trace.events
    return S.SOURCE in ev and bool((ev[S.SOURCE].astype(object).fillna("") != "").any())


def path_by_source(trace: S.Trace, segments: pd.DataFrame) -> pd.DataFrame:
    """Critical-path time per source line: one row per line (index ``source_line``; "" for
    path time whose event names no line), ``path_ns`` and one ``<category>_ns`` column per
    path category, most path time first. A DMA segment takes its trigger's line."""
    from tracediag.model.path_categories import CATEGORIES

    seg = segments[["event", "category", "dur_ns"]]
    event = seg["event"].to_numpy(dtype=np.int64)
    line = np.full(len(seg), "", dtype=object)
    own = event >= 0
    line[own] = event_sources(trace, event[own])
    cat = seg["category"].astype(str).to_numpy()
    per = (
        pd.DataFrame({"source_line": line, "category": cat, "ns": seg["dur_ns"].to_numpy()})
        .groupby(["source_line", "category"])["ns"]
        .sum()
        .unstack(fill_value=0)
        .reindex(columns=list(CATEGORIES), fill_value=0)
    )
    per.columns = [f"{c}_ns" for c in per.columns]
    per.insert(0, "path_ns", per.sum(axis=1))
    return per.astype(np.int64).sort_values("path_ns", ascending=False, kind="stable")


#: The per-line bounds: each is the rank's bound restricted to the line's events.
LINE_BOUNDS = (
    "memory_bound",
    "memory_ideal",
    "compute_bound",
    "compute_ideal",
    "compute_useful",
    "pipeline_bound",
)
#: The gaps that lie between two per-line bounds (the idle gaps need the whole window).
LINE_GAPS = ("dma_inefficiency", "te_underutilization", "transpose_overhead")


def bounds_by_source(trace: S.Trace, hardware=None, window=None) -> pd.DataFrame:
    """The bounds of each (rank, source line) over the rank's bounds window: one row per pair
    (index ``rank``, ``source_line``) with ``events``, the bounds of :data:`LINE_BOUNDS`
    (``<bound>_ns``), the gaps of :data:`LINE_GAPS`, ``bottleneck``, each engine's active time
    (``busy_<engine>_ns``), ``dma_bytes``, ``hw_flops`` and ``transpose_flops``; most pipeline
    time first. Events that name no line (nor a trigger that does) are left out.

    Each (rank, line) pair is given to :func:`tracediag.analysis.bounds.bounds_table` as a rank
    of its own, holding only that line's events, over the real rank's window with the real
    rank's peaks: so a line's bounds are the same formulas as a rank's, by construction.
    """
    from tracediag.analysis.bounds import bounds_table

    hardware = hardware or {}
    ev = trace.events
    ranks = bounds_table(trace, hardware, window)
    line = event_sources(trace, np.arange(len(ev)))
    keep = np.flatnonzero(line != "")
    cols = [
        "events",
        *(f"{b}_ns" for b in LINE_BOUNDS),
        *(f"{g}_ns" for g in LINE_GAPS),
        "bottleneck",
    ]
    if not len(keep):
        empty = pd.MultiIndex.from_arrays([[], []], names=[S.RANK, "source_line"])
        return pd.DataFrame(columns=cols, index=empty)
    pairs = pd.DataFrame({"rank": ev[S.RANK].to_numpy()[keep], "line": line[keep]})
    group, uniq = pd.factorize(pd.MultiIndex.from_frame(pairs))
    sub = ev.iloc[keep].copy()
    sub[S.RANK] = group.astype(sub[S.RANK].dtype)
    g_rank = uniq.get_level_values(0).to_numpy()
    pseudo = S.Trace(
        events=sub.reset_index(drop=True),
        tracks=trace.tracks,
        edges=trace.edges.iloc[:0],
        collectives=trace.collectives.iloc[:0],
        meta={g: trace.meta[int(r)] for g, r in enumerate(g_rank)},
    )
    windows = {
        g: (int(ranks.at[r, "start_ns"]), int(ranks.at[r, "end_ns"])) for g, r in enumerate(g_rank)
    }
    per = bounds_table(pseudo, {g: hardware.get(int(r)) for g, r in enumerate(g_rank)}, windows)
    per["events"] = np.bincount(group, minlength=len(uniq))[per.index.to_numpy()]
    busy = [c for c in per.columns if c.startswith("busy_")]
    rest = ["dma_bytes", "hw_flops", "transpose_flops"]
    out = per[cols + busy + rest].copy()
    pos = per.index.to_numpy()
    out.index = pd.MultiIndex.from_arrays(
        [g_rank[pos].astype(np.int32), uniq.get_level_values(1).to_numpy()[pos]],
        names=[S.RANK, "source_line"],
    )
    return out.sort_values("pipeline_bound_ns", ascending=False, kind="stable")


def finding_lines(trace: S.Trace, finding) -> dict[str, int]:
    """The source lines of one finding with how many of its events each holds: the rule's own
    (``source_line`` / ``source_lines`` in its evidence), else those of its evidence events."""
    evidence = finding.evidence if hasattr(finding, "evidence") else finding.get("evidence", {})
    lines = evidence.get("source_lines")
    if isinstance(lines, dict) and lines:
        return {str(k): int(v) for k, v in lines.items()}
    one = evidence.get("source_line")
    if one:  # one line: the rule's count of what it grouped there
        counts = [evidence[k] for k in _COUNT_KEYS if isinstance(evidence.get(k), int)]
        return {str(one): int(counts[0]) if counts else len(_evidence_ids(evidence)) or 1}
    ids = [int(i) for i in _evidence_ids(evidence) if 0 <= int(i) < len(trace.events)]
    found = pd.Series(event_sources(trace, np.asarray(ids, dtype=np.int64)))
    return {str(k): int(v) for k, v in found[found != ""].value_counts().items()}


#: Evidence keys that count the events a rule grouped on its one ``source_line``.
_COUNT_KEYS = ("transfers", "matmuls", "transposes", "repeated_transfers")


def _evidence_ids(evidence: dict) -> list:
    for key in ("events", "event_ids"):
        ids = evidence.get(key)
        if isinstance(ids, list | tuple) and all(isinstance(i, int) for i in ids):
            return list(ids)
    one = evidence.get("event")
    return [one] if isinstance(one, int) else []


def findings_by_source(trace: S.Trace, findings) -> list[dict]:
    """Per source line (most saving first): the findings that point at it (``index`` into
    ``findings``, ``code``, ``saving_ns``, ``events`` of the line) and their summed saving."""
    rows: dict[str, list[dict]] = {}
    for i, f in enumerate(findings):  # a handful of findings, not events
        for line, n in finding_lines(trace, f).items():
            rows.setdefault(line, []).append(
                {"index": i, "code": f.code, "saving_ns": int(f.saving_ns), "events": n}
            )
    out = [
        {"source_line": k, "saving_ns": sum(x["saving_ns"] for x in v), "findings": v}
        for k, v in rows.items()
    ]
    return sorted(out, key=lambda r: (-r["saving_ns"], r["source_line"]))
