"""What an Explorer profile says about its own quality, and how a session's executions split.

Notes go to ``meta.info["profile_notes"]`` as ``{"kind", "severity", "message"}`` dicts; rule
TRC507 reports them. They come from:

- the ``Warning`` table (the profiler's own data-quality warnings: read it first);
- the DMA tables: without DGE notifications (``NEURON_RT_ENABLE_DGE_NOTIFICATIONS=1``) a capture
  has no ``DmaPacket``/``DmaPacketAggregated`` rows (files absent or empty), and every DMA
  analysis is unavailable for that rank;
- a schema major version this reader does not know, with the fields it looked for and missed.

``ExecutionInfo`` lists a session's executions (times relative to the profile start): events
take the number of the model execution they fall in as their step; ``barrier_*.neff``
executions (the runtime's synchronisation between model runs) stay apart with no step.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracediag.model import schema as S
from tracediag.parsers.neuron_common import column, ints, labels

#: Rules and analyses that read DMA events: unavailable on a rank without DMA rows.
DMA_ANALYSES = ("DMA101", "DMA102", "DMA103", "DMA what-ifs", "DMA efficiency per transfer")


def add_note(meta: S.RankMeta, kind: str, severity: str, message: str) -> None:
    """Append one note for TRC507."""
    meta.info.setdefault("profile_notes", []).append(
        {"kind": kind, "severity": severity, "message": message}
    )


def profiler_warnings(warnings: pd.DataFrame | None, meta: S.RankMeta) -> None:
    """The ``Warning`` table's rows, one note per distinct (category, message)."""
    if warnings is None or not len(warnings) or "message" not in warnings:
        return
    cat = column(warnings, "category")
    pairs = pd.DataFrame(
        {
            "category": cat.astype(str) if cat is not None else "",
            "message": warnings["message"].astype(str),
        }
    ).drop_duplicates()
    meta.info["profiler_warnings"] = pairs.to_dict("records")  # a few rows
    for category, message in pairs.itertuples(index=False):
        add_note(
            meta, "profiler warning", "warning", f"{category}: {message}" if category else message
        )


def dma_presence(
    rows: int | None,
    meta: S.RankMeta,
    names: tuple[str, str] = ("DmaPacket", "DmaPacketAggregated"),
) -> str:
    """``present``, ``empty`` (``rows`` 0) or ``absent`` (``rows`` None: no DMA table file);
    a note unless present. ``names``: the format's DMA tables (one name: one table)."""
    state = "absent" if rows is None else "present" if rows else "empty"
    meta.info["dma_tables"] = state
    if state != "present":
        one = len(set(names)) == 1
        what = (
            f"no {' or '.join(dict.fromkeys(names))} table"
            if state == "absent"
            else f"{' and '.join(dict.fromkeys(names))} table{'' if one else 's'} without rows"
        )
        add_note(
            meta,
            "dma tables missing",
            "warning",
            f"{what}: the capture had no DGE notifications (recapture with "
            "NEURON_RT_ENABLE_DGE_NOTIFICATIONS=1); unavailable on this rank: "
            + ", ".join(DMA_ANALYSES),
        )
        meta.info["unavailable_analyses"] = list(DMA_ANALYSES)
    return state


def schema_fields_missing(
    version: object, wanted: dict[str, list[str]], present: dict[str, list[str]], meta: S.RankMeta
) -> None:
    """For a schema major this reader does not know: one note naming the fields it looked for
    in the tables the profile has and did not find (renamed or removed)."""
    missing = [
        f"{table}.{name}"
        for table, names in wanted.items()
        if table in present
        for name in names
        if name not in present[table]
    ]
    meta.info["schema_fields_missing"] = missing
    text = ", ".join(missing) if missing else "none of the fields it reads"
    add_note(
        meta,
        "unknown schema version",
        "warning",
        f"profile schema version {version} is a major version this reader has not seen (it knows "
        f"7.x and 12.x); fields it looked for and did not find: {text}",
    )


def execution_steps(
    executions: pd.DataFrame | None, base: int, meta: S.RankMeta
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(starts, ends, step per execution: the model execution's number, NaN for a barrier) on
    the events' time base (``base``: the profile start on that base); None without executions.
    ``meta.info["executions"]`` lists them."""
    if executions is None or not len(executions) or "execution_start_ts" not in executions:
        return None
    n = len(executions)
    start, svalid = ints(column(executions, "execution_start_ts"), n)
    end, evalid = ints(column(executions, "execution_end_ts"), n)
    ok = svalid & evalid
    if not ok.any():
        return None
    neff = np.asarray(labels(column(executions, "neff_name"), n).astype(object), dtype=object)
    index, _ = ints(column(executions, "execution_index"), n)
    order = np.flatnonzero(ok)[np.argsort(start[ok], kind="stable")]
    barrier = np.array([str(neff[i]).lower().startswith("barrier") for i in order])
    steps = np.full(len(order), np.nan)
    steps[~barrier] = np.arange(int((~barrier).sum()))
    meta.info["executions"] = [
        {
            "index": int(index[i]),
            "neff": None if neff[i] is None or neff[i] != neff[i] else str(neff[i]),
            "kind": "barrier" if b else "model",
            "start_ns": int(start[i]),
            "end_ns": int(end[i]),
        }
        for i, b in zip(order, barrier, strict=True)  # one per execution: a handful
    ]
    return start[order] + base, end[order] + base, steps


def steps_of(ts: np.ndarray, spans: tuple[np.ndarray, np.ndarray, np.ndarray]) -> np.ndarray:
    """Per event start: the step of the execution it falls in (NaN outside any, or in a
    barrier execution)."""
    starts, ends, steps = spans
    pos = np.searchsorted(starts, ts, side="right") - 1
    inside = (pos >= 0) & (ts <= ends[np.clip(pos, 0, None)])
    return np.where(inside, steps[np.clip(pos, 0, None)], np.nan)
