"""Collectives of a Neuron Explorer CSV export, which has no ``CcOp`` table.

The export keeps two records of a collective (neuron-real-output.md, "CSV export"):

- the instruction that triggers it (``PSEUDO_TRIGGER_COLLECTIVE``), whose operands name the
  operation (``ctype=``), its ``stream_id``, ``group_id`` and, for a permute, its
  ``source_target_pairs`` (:mod:`neuron_cc_triggers` reads them);
- ``CcInstruction`` rows: the work of the CC cores (``core_idx``, ``DMA_ADVANCE``,
  ``SEM_INCREMENT``), each carrying the start of the instruction that triggered it
  (``trigger_start_ts``). The rows of one trigger are one collective: it runs from the first
  core's start to the last core's end.

CC-core rows without a trigger are work this rank did not issue: the receiving side of a
transfer another rank triggered (a ``CollectivePermute`` target has no trigger instruction).
The cores of one CC stream work together, and their k-th rows are one instance. Where the rows
do not name their trigger at all (``trigger_start_ts`` is optional), a stream's triggers bind to
a core set's instances by order where that is unambiguous. Their rows name no operation and no
peer, so they are marked untriggered (``untriggered_cores``): assembly binds each to the sender's
transfer it received (:mod:`tracediag.model.untriggered_receives`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracediag.model import schema as S
from tracediag.model.untriggered_receives import UNTRIGGERED_CORES as UNTRIGGERED
from tracediag.parsers.neuron_cc_triggers import (
    parse_triggers,
    trigger_collectives,
    trigger_times,
)
from tracediag.parsers.neuron_common import column, ints


def csv_collectives(
    cc_rows: pd.DataFrame | None, instr: pd.DataFrame | None, meta: S.RankMeta
) -> pd.DataFrame | None:
    """``CcOp``-named rows from the export's trigger instructions ``instr`` and its
    ``CcInstruction`` rows ``cc_rows`` (None when absent); None when neither names one."""
    parsed = parse_triggers(instr)  # once: read by the binding by order and the collectives
    if cc_rows is None or not len(cc_rows) or "start_ts" not in cc_rows:
        return trigger_collectives(instr, np.nan, meta, parsed=parsed)
    n = len(cc_rows)
    start, svalid = ints(cc_rows["start_ts"], n)
    if "end_ts" in cc_rows:
        end, evalid = ints(cc_rows["end_ts"], n)
    else:
        dur, evalid = ints(column(cc_rows, "duration_ns"), n)
        end = start + dur
    core, _ = ints(column(cc_rows, "core_idx"), n)
    trig, tvalid = ints(column(cc_rows, "trigger_start_ts"), n)
    ok = svalid & evalid & (end >= start)
    meta.count("CcInstruction: rows without a start or end", int((~ok).sum()))
    rows = pd.DataFrame({"trigger_start_ts": trig, "start": start, "end": end, "core": core})
    if (ok & ~tvalid).any():
        # Rows that do not name their trigger (the field is optional): bound to the trigger
        # instructions of a stream by order where that is unambiguous.
        found = _triggers_by_order(rows, ok, tvalid, trigger_times(parsed))
        if len(found):
            rows.loc[found.index, "trigger_start_ts"] = found.to_numpy()
            tvalid = tvalid.copy()
            tvalid[found.index.to_numpy()] = True
            meta.count(
                "CcInstruction: rows without trigger_start_ts bound to their trigger by order",
                len(found),
            )
    spans = (
        rows[ok & tvalid]
        .groupby("trigger_start_ts", as_index=False)
        .agg(start=("start", "min"), end=("end", "max"))
    )
    triggered = trigger_collectives(instr, np.nan, meta, spans, parsed)
    named = set() if triggered is None else set(triggered["trigger_start_ts"].tolist())
    orphan = spans[~spans["trigger_start_ts"].isin(named)]
    meta.count(
        "CcInstruction: triggers with no trigger instruction (operation unknown)", len(orphan)
    )
    untriggered = _untriggered_instances(rows[ok & ~tvalid])
    meta.info["cc_untriggered_instances"] = int(len(untriggered))
    frames = [f for f in (triggered, _orphans(orphan), untriggered) if f is not None and len(f)]
    return pd.concat(frames, ignore_index=True) if frames else None


def _orphans(spans: pd.DataFrame) -> pd.DataFrame:
    """Collectives of triggers the instruction table lacks: times only."""
    return pd.DataFrame(
        {
            "start_ts": spans["start"].to_numpy(dtype=np.int64),
            "duration_ns": (spans["end"] - spans["start"]).to_numpy(dtype=np.int64),
            "operation": "unknown",
            "trigger_start_ts": spans["trigger_start_ts"].to_numpy(dtype=np.int64),
        }
    )


def _instances(rows: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    """CC-core rows as instances. The cores of one CC stream work together: cores with as many
    rows as each other whose k-th rows all overlap in time are one group (a loop over the few
    cores), and the k-th rows of a group's cores are its k-th instance. Returns one row per
    instance (``start``, ``end``, ``cores`` "16-19") and each row's instance, row for row."""
    core = rows["core"].to_numpy()
    order = np.lexsort((rows["start"].to_numpy(), core))
    s, e, c = rows["start"].to_numpy()[order], rows["end"].to_numpy()[order], core[order]
    k = pd.Series(c).groupby(c).cumcount().to_numpy()
    heads = np.flatnonzero(np.r_[True, c[1:] != c[:-1]])
    bounds = np.r_[heads, len(c)]
    groups: list[tuple[int, int, int]] = []  # (first row, last row + 1, group id) of each lead
    group_of_core = np.empty(len(heads), dtype=np.int64)
    for i, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
        for a, b, gid in groups:
            if b - a == hi - lo and (s[lo:hi] <= e[a:b]).all() and (e[lo:hi] >= s[a:b]).all():
                group_of_core[i] = gid
                break
        else:
            group_of_core[i] = len(groups)
            groups.append((lo, hi, len(groups)))
    grp = np.repeat(group_of_core, np.diff(bounds))
    inst = pd.DataFrame({"g": grp, "k": k, "start": s, "end": e, "core": c})
    per = inst.groupby(["g", "k"], sort=True).agg(
        start=("start", "min"), end=("end", "max"), lo=("core", "min"), hi=("core", "max")
    )
    per["cores"] = per["lo"].astype(str) + "-" + per["hi"].astype(str)
    of_row = np.empty(len(rows), dtype=np.int64)
    of_row[order] = (
        pd.MultiIndex.from_arrays([grp, k])
        .map(pd.Series(np.arange(len(per)), index=per.index))
        .to_numpy(dtype=np.int64)
    )
    return per.reset_index(drop=True)[["start", "end", "cores"]], of_row


def _triggers_by_order(rows, ok, tvalid, triggers: pd.DataFrame) -> pd.Series:
    """``trigger_start_ts`` for rows that lack it, by order: the triggers of one stream that no
    row names are the instances of one core set, k-th to k-th, where the counts agree and each
    instance starts after its trigger ended (the set of least latency where several could)."""
    free = np.flatnonzero(ok & ~tvalid)
    if triggers is None or not len(triggers) or not len(free):
        return pd.Series(dtype=np.int64)
    named = set(rows["trigger_start_ts"].to_numpy()[ok & tvalid].tolist())
    pending = triggers[~triggers["trigger_start_ts"].isin(named)]
    inst, of_row = _instances(rows.iloc[free])
    taken: set[str] = set()
    out = []
    # A loop over the few streams and core sets, not rows.
    for _, trig in pending.sort_values("trigger_start_ts").groupby("stream_id", dropna=False):
        best = None
        for cores, mine in inst.groupby("cores"):
            if cores in taken or len(mine) != len(trig):
                continue
            mine = mine.sort_values("start")
            lag = mine["start"].to_numpy() - trig["trigger_end"].to_numpy()
            if (lag >= 0).all() and (best is None or np.median(lag) < best[0]):
                best = (float(np.median(lag)), cores, mine.index.to_numpy())
        if best is None:
            continue
        taken.add(best[1])
        ts = pd.Series(trig["trigger_start_ts"].to_numpy(), index=best[2])
        out.append(pd.Series(ts.reindex(of_row).to_numpy(), index=rows.index[free]).dropna())
    if not out:
        return pd.Series(dtype=np.int64)
    return pd.concat(out).astype(np.int64)


def _untriggered_instances(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per instance of untriggered CC-core work (see :func:`_instances`)."""
    if not len(rows):
        return pd.DataFrame()
    per, _ = _instances(rows)
    cores = per["cores"]
    out = pd.DataFrame(
        {
            "start_ts": per["start"].to_numpy(dtype=np.int64),
            "duration_ns": (per["end"] - per["start"]).to_numpy(dtype=np.int64),
            "operation": "unknown",
            UNTRIGGERED: cores.to_numpy(dtype=object),
        }
    )
    # The instance's ordinal on its cores, in start order.
    out = out.sort_values("start_ts", kind="stable").reset_index(drop=True)
    out["op_id"] = out.groupby(UNTRIGGERED).cumcount().to_numpy()
    return out
