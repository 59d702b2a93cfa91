"""Per-operator and per-layer duration statistics: what ``diff`` compares between two runs.

Both tables summarise device events (compute, DMA, collective) so that a saved JSON report
carries enough to compare runs and test the change for significance without the trace:
count, total, mean and standard deviation.

- ``by_op``: one row per operator (``op``: HLO instruction, kernel; the event's name where the
  trace names no operator, e.g. a DMA's tensor or a collective), over its instances on every
  rank.
- ``by_layer``: one row per model layer; its samples are the per-rank sums of the layer's event
  durations (overlap between engines counted per event), so ``count`` is the number of ranks.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracediag import schema as S

DEVICE_KINDS = ("compute", "dma", "collective")
#: Rows kept per table (largest total first) so reports of big programs stay small.
MAX_ROWS = 500


def _device_events(
    trace: S.Trace, column: str, fallback: str | None = None
) -> tuple[pd.DataFrame, np.ndarray]:
    """Device events keyed by ``column`` (by ``fallback`` where ``column`` is empty), and the
    keys' texts: ``key`` is an integer code into them, so the groupings run on integers, not on
    a string per event. (Not in ``frame.attrs``: pandas deep-copies those into every result.)
    """
    ev = trace.events
    if not len(ev) or (column not in ev and fallback is None):
        return pd.DataFrame(columns=["key", "rank", "kind", "dur"]), np.zeros(0, dtype=object)
    columns = [c for c in (column, fallback) if c is not None and c in ev]
    coded = [_text_codes(ev[c]) for c in columns]
    labels, unified = pd.factorize(np.concatenate([texts for _, texts in coded]))
    key = np.full(len(ev), -1, dtype=np.int64)
    offset = 0
    for codes, texts in coded:  # the first column that names an event wins
        named = np.append(texts != "", False)[codes]  # code -1 (missing) is not named
        fill = (key < 0) & named
        key[fill] = labels[offset + codes[fill]]
        offset += len(texts)
    kind = S.strings(ev[S.KIND])
    keep = (key >= 0) & np.isin(kind, DEVICE_KINDS)
    frame = pd.DataFrame(
        {
            "key": key[keep],
            "rank": ev[S.RANK].to_numpy()[keep],
            "kind": kind[keep],
            "dur": ev[S.DUR].to_numpy()[keep].astype(np.float64),
        }
    )
    return frame, np.asarray(unified, dtype=object)


def _text_codes(col: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Per row a code into the returned texts (-1 where missing); categories as text."""
    codes, uniques = pd.factorize(col)
    return codes, np.asarray([str(u) for u in uniques], dtype=object)


def _stats(frame: pd.DataFrame, key: str) -> pd.DataFrame:
    g = frame.groupby(key, sort=False)["dur"]
    out = pd.DataFrame(
        {
            "count": g.size(),
            "total_ns": g.sum(),
            "mean_ns": g.mean(),
            "std_ns": g.std(ddof=1).fillna(0.0),
        }
    )
    return out.sort_values(["total_ns", "count"], ascending=False, kind="stable").head(MAX_ROWS)


def _rows(
    stats: pd.DataFrame, name: str, labels: np.ndarray, extra: pd.DataFrame | None = None
) -> list[dict]:
    rows = []
    for key, r in stats.iterrows():  # at most MAX_ROWS rows, not events
        row = {name: str(labels[key])}
        if extra is not None:
            row["kind"] = str(extra.at[key, "kind"])
        row.update(
            count=int(r["count"]),
            total_ns=int(round(r["total_ns"])),
            mean_ns=round(float(r["mean_ns"]), 1),
            std_ns=round(float(r["std_ns"]), 1),
        )
        rows.append(row)
    return rows


def op_durations(trace: S.Trace) -> list[dict]:
    """``[{op, kind, count, total_ns, mean_ns, std_ns}]`` over every instance on every rank;
    an event without an operator counts under its name (a DMA under its tensor, a collective
    under its operation)."""
    ev, labels = _device_events(trace, S.OP, fallback=S.NAME)
    if not len(ev):
        return []
    kinds = ev.groupby("key", sort=False)[["kind"]].first()
    return _rows(_stats(ev.rename(columns={"key": "op"}), "op"), "op", labels, kinds)


def layer_durations(trace: S.Trace) -> list[dict]:
    """``[{layer, count, total_ns, mean_ns, std_ns}]``: samples are per-rank sums of the layer."""
    ev, labels = _device_events(trace, S.LAYER)
    if not len(ev):
        return []
    per_rank = ev.groupby(["key", "rank"], sort=False)["dur"].sum().reset_index()
    return _rows(_stats(per_rank.rename(columns={"key": "layer"}), "layer"), "layer", labels)
