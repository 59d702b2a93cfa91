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

from tracediag.model import schema as S

DEVICE_KINDS = ("compute", "dma", "collective")
#: Rows kept per table (largest total first) so reports of big programs stay small.
MAX_ROWS = 500


def _device_events(
    trace: S.Trace, column: str, fallback: str | None = None
) -> tuple[pd.DataFrame, np.ndarray, list[str]]:
    """Device events keyed by ``column`` (by ``fallback`` where ``column`` is empty), the keys'
    texts and the kinds' texts: ``key`` and ``kind`` are integer codes into them, so the
    groupings run on integers, not on a string per event. (Not in ``frame.attrs``: pandas
    deep-copies those into every result.)
    """
    ev = trace.events
    if not len(ev) or (column not in ev and fallback is None):
        return pd.DataFrame(columns=["key", "rank", "kind", "dur"]), np.zeros(0, object), []
    kinds, kind = S.text_codes(ev[S.KIND])
    device = np.append(np.isin(np.asarray(kinds, object), DEVICE_KINDS), False)[kind]
    # None: every event (a device trace), read without gathering a copy of each column.
    rows = None if device.all() else np.flatnonzero(device)
    columns = [c for c in (column, fallback) if c is not None and c in ev]
    coded = [S.text_codes(ev[c]) for c in columns]
    labels, unified = pd.factorize(np.asarray([t for texts, _ in coded for t in texts], object))
    key = None
    offset = 0
    for texts, codes in coded:  # the first column that names an event wins
        # Per text its label (-1: empty), plus -1 for a missing value's code -1.
        named = np.asarray([t != "" for t in texts], bool)
        label = np.append(np.where(named, labels[offset : offset + len(texts)], -1), -1)
        found = label[_pick(codes, rows)]
        key = found if key is None else np.where(key < 0, found, key)
        offset += len(texts)
    if key is None:
        key = np.full(len(ev) if rows is None else len(rows), -1, dtype=np.int64)
    ok = key >= 0
    keep = (None if ok.all() else np.flatnonzero(ok)) if rows is None else rows[ok]
    frame = pd.DataFrame(
        {
            "key": key if keep is None else key[ok],
            "rank": _pick(ev[S.RANK].to_numpy(), keep),
            "kind": _pick(kind, keep),
            "dur": _pick(ev[S.DUR].to_numpy(), keep).astype(np.float64),
        }
    )
    return frame, np.asarray(unified, dtype=object), kinds


def _pick(values: np.ndarray, rows: np.ndarray | None) -> np.ndarray:
    """``values`` at ``rows`` (all of them where ``rows`` is None)."""
    return values if rows is None else values[rows]


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
    stats: pd.DataFrame,
    name: str,
    labels: np.ndarray,
    kinds: tuple[np.ndarray, list[str]] | None = None,
) -> list[dict]:
    """The rows of ``stats`` as dicts; ``kinds`` (per key a code into the kinds' texts, and the
    texts) adds ``kind``. Read column by column (``iterrows`` builds a Series per row)."""
    keys = stats.index.to_numpy()
    columns = zip(
        keys.tolist(),
        stats["count"].to_numpy().tolist(),
        stats["total_ns"].to_numpy(dtype=np.float64).tolist(),
        stats["mean_ns"].to_numpy(dtype=np.float64).tolist(),
        stats["std_ns"].to_numpy(dtype=np.float64).tolist(),
        strict=True,
    )
    rows = []
    for key, count, total, mean, std in columns:  # at most MAX_ROWS rows, not events
        row = {name: str(labels[key])}
        if kinds is not None:
            row["kind"] = kinds[1][kinds[0][key]]
        row.update(
            count=int(count),
            total_ns=int(round(total)),
            mean_ns=round(mean, 1),
            std_ns=round(std, 1),
        )
        rows.append(row)
    return rows


def op_durations(trace: S.Trace) -> list[dict]:
    """``[{op, kind, count, total_ns, mean_ns, std_ns}]`` over every instance on every rank;
    an event without an operator counts under its name (a DMA under its tensor, a collective
    under its operation)."""
    ev, labels, kind_texts = _device_events(trace, S.OP, fallback=S.NAME)
    if not len(ev):
        return []
    # Each key's kind: that of its first event (a hash pass, not a sort of every event).
    first = ev["key"].drop_duplicates()
    kind_of_key = np.zeros(len(labels), dtype=np.int64)
    kind_of_key[first.to_numpy()] = ev["kind"].to_numpy()[first.index.to_numpy()]
    kinds = (kind_of_key, kind_texts)
    return _rows(_stats(ev.rename(columns={"key": "op"}), "op"), "op", labels, kinds)


def layer_durations(trace: S.Trace) -> list[dict]:
    """``[{layer, count, total_ns, mean_ns, std_ns}]``: samples are per-rank sums of the layer."""
    ev, labels, _ = _device_events(trace, S.LAYER)
    if not len(ev):
        return []
    per_rank = ev.groupby(["key", "rank"], sort=False)["dur"].sum().reset_index()
    return _rows(_stats(per_rank.rename(columns={"key": "layer"}), "layer"), "layer", labels)
