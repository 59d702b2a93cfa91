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
Overlapping rows on distinct cores are one such instance. Their rows name no operation and no
peer, so they are marked untriggered (``untriggered_cores``): assembly binds each to the sender's
transfer it received (:mod:`tracediag.model.untriggered_receives`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracediag.model import schema as S
from tracediag.model.untriggered_receives import UNTRIGGERED_CORES as UNTRIGGERED
from tracediag.parsers.neuron_cc_triggers import trigger_collectives
from tracediag.parsers.neuron_common import column, ints


def csv_collectives(
    cc_rows: pd.DataFrame | None, instr: pd.DataFrame | None, meta: S.RankMeta
) -> pd.DataFrame | None:
    """``CcOp``-named rows from the export's trigger instructions ``instr`` and its
    ``CcInstruction`` rows ``cc_rows`` (None when absent); None when neither names one."""
    if cc_rows is None or not len(cc_rows) or "start_ts" not in cc_rows:
        return trigger_collectives(instr, np.nan, meta)
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
    spans = (
        rows[ok & tvalid]
        .groupby("trigger_start_ts", as_index=False)
        .agg(start=("start", "min"), end=("end", "max"))
    )
    triggered = trigger_collectives(instr, np.nan, meta, spans)
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


def _untriggered_instances(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per instance of untriggered CC-core work: rows that overlap in time, each core
    once (a core that appears again starts the next instance)."""
    if not len(rows):
        return pd.DataFrame()
    rows = rows.sort_values(["start", "core"], kind="stable")
    s, e, c = (rows[k].to_numpy() for k in ("start", "end", "core"))
    reach = np.maximum.accumulate(e)
    # A new overlap component starts where a row starts after everything before it ended.
    comp = np.cumsum(np.r_[True, s[1:] > reach[:-1]])
    # Within a component, the j-th row of a core belongs to the component's j-th instance.
    j = pd.DataFrame({"comp": comp, "core": c}).groupby(["comp", "core"]).cumcount().to_numpy()
    inst = pd.DataFrame({"comp": comp, "j": j, "start": s, "end": e, "core": c})
    per = inst.groupby(["comp", "j"], sort=True).agg(
        start=("start", "min"), end=("end", "max"), lo=("core", "min"), hi=("core", "max")
    )
    cores = per["lo"].astype(str) + "-" + per["hi"].astype(str)
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
