"""Collectives of a legacy Neuron JSON profile that has no collective table, from the
instructions that trigger them.

Real legacy files keep collectives in ``cc_ops``; some have none, and then the only evidence of a
collective is its trigger: a ``PSEUDO_TRIGGER_COLLECTIVE``-style instruction whose operand text
names the operation (``ctype=ALL_REDUCE``), its ``stream_id`` and ``group_id``, and the semaphore
it increments when the collective completes (``$S[15]++@complete``; neuron-real-output.md,
"Legacy device JSON"; neuron-parquet-fields.md, ``instruction_chain``). Each trigger becomes one
collective row with the Parquet ``CcOp`` field names:

- its operation: the ``ctype`` in camel case (``ALL_REDUCE`` -> ``AllReduce``);
- arrival at the trigger (``trigger_start_ts``, ``trigger_engine``: the trigger edge and the
  arrival skew), start at the trigger's end (the op cannot start before it is issued);
- completion, which nothing records, inferred, in this order
  (``info["collective_completion_inferred"]`` counts each):
  ``semaphore``: the start of the first later instruction waiting on the semaphore the trigger
  increments on completion (``$S[15]>=v``: it could start only once the collective had
  completed); ``core_resumed``: where no instruction names it, the start of the first
  instruction after the rank's engines all idled following the trigger (a step-ending
  collective holds the next step: the core resumes once it completed, so this is an upper
  bound); ``profile_end``: where no instruction follows, the profile's end
  (``last_hw_timestamp``); ``unknown``: none of these, the op ends where it starts;
- instances matched across ranks by ``stream_id``, their order on the stream (``op_id``: the
  ordinal, as for ``cc_ops`` rows without one) and ``group_id``. No byte count is stated.

``info["collectives_from_triggers"]`` says how many collectives came from triggers, and the
rank's repair counts (listed in the report) how many completions were inferred in each way, so
that a report says its collective times are inferred.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracediag.model import schema as S
from tracediag.parsers.neuron_common import column
from tracediag.parsers.neuron_events import times
from tracediag.parsers.neuron_semaphores import SEMAPHORE_NAME, TEXT_COLUMNS, WAIT

_CTYPE = re.compile(r"\bctype=(?P<ctype>[A-Za-z_]+)")
_ON_COMPLETE = re.compile(SEMAPHORE_NAME + r"\s*\+\+@complete")


@dataclass(frozen=True)
class Triggers:
    """The trigger instructions of an instruction table, parsed once: every instruction's
    operand ``text``, each trigger's ``ctype`` (by row), the trigger ``rows`` (with a finite
    end) and every instruction's start and end (``i_ts``, ``i_end``, float ns)."""

    text: pd.Series
    ctype: pd.Series
    rows: np.ndarray
    i_ts: np.ndarray
    i_end: np.ndarray


def parse_triggers(instr: pd.DataFrame | None) -> Triggers | None:
    """The instructions of ``instr`` that name a ``ctype``; None without any."""
    if instr is None or not len(instr):
        return None
    text = _operand_text(instr)
    ctype = text.str.extract(_CTYPE)["ctype"]
    rows = np.flatnonzero(ctype.notna().to_numpy())
    if not len(rows):
        return None
    start, dur = times(instr)
    i_ts = start.to_numpy(dtype=np.float64, na_value=np.nan)
    i_end = i_ts + dur.to_numpy(dtype=np.float64, na_value=np.nan)
    rows = rows[np.isfinite(i_end[rows])]
    return Triggers(text, ctype, rows, i_ts, i_end) if len(rows) else None


def trigger_collectives(
    instr: pd.DataFrame | None,
    profile_end_ns: float,
    meta: S.RankMeta,
    spans: pd.DataFrame | None = None,
    parsed: Triggers | None = None,
) -> pd.DataFrame | None:
    """``CcOp``-named rows for the collectives the instructions ``instr`` (Parquet field names,
    times in ns) trigger, None when no instruction names a ``ctype``. ``profile_end_ns``: the
    profile's end (NaN when unknown). ``spans``: the CC cores' work per trigger where a
    ``CcInstruction`` table records it (columns ``trigger_start_ts``, ``start``, ``end``): those
    triggers' collectives take its times instead of inferred ones. ``parsed``: the triggers of
    ``instr`` when the caller has parsed them already. Counts go to ``meta``."""
    found = parsed if parsed is not None else parse_triggers(instr)
    if found is None:
        return None
    text, ctype, rows, i_ts, i_end = found.text, found.ctype, found.rows, found.i_ts, found.i_end
    trig_text = text.iloc[rows]
    stream = _field(trig_text, "stream_id")
    group = _field(trig_text, "group_id")
    sem = pd.to_numeric(trig_text.str.extract(_ON_COMPLETE)["sem"], errors="coerce").to_numpy()
    is_trigger = np.zeros(len(instr), dtype=bool)
    is_trigger[rows] = True
    completion, how = _completions(text, i_ts, i_end, is_trigger, rows, sem, profile_end_ns)
    begin = i_end[rows]
    if spans is not None and len(spans):
        # The CC cores' own rows: the op runs from the first core's start to the last one's end.
        by_trigger = spans.drop_duplicates("trigger_start_ts").set_index("trigger_start_ts")
        found = by_trigger.reindex(i_ts[rows])
        have = found["end"].notna().to_numpy()
        begin = np.where(have, np.fmax(found["start"].to_numpy(dtype=np.float64), begin), begin)
        completion = np.where(have, found["end"].to_numpy(dtype=np.float64), completion)
        how[have] = "cc_instruction"
    completion = np.maximum(completion, begin)
    engine = column(instr, "engine")
    out = pd.DataFrame(
        {
            "start_ts": begin.astype(np.int64),
            "duration_ns": (completion - begin).astype(np.int64),
            "operation": [_camel(c) for c in ctype.iloc[rows]],
            "stream_id": pd.array(stream, dtype="Int64"),
            "group_id": pd.array(group, dtype="Int64"),
            "trigger_start_ts": i_ts[rows].astype(np.int64),
            "trigger_engine": engine.iloc[rows].to_numpy(dtype=object)
            if engine is not None
            else None,
            "dtype": trig_text.str.extract(r"\bdtype=(?P<d>\w+)")["d"].to_numpy(dtype=object),
            "replica_group": _pairs(trig_text),
        }
    )
    # The op on its stream: the ordinal on the stream in start order, whatever its group. Every
    # rank runs the same program, so the k-th op of a stream is one op on all of them; its
    # group_id (in the key too) then tells which group's instance a rank ran, where group ids
    # number a family's groups ({0, 1} is 0 and {2, 3} is 1 for the tensor-parallel ops, {0, 2}
    # is 0 again for the data-parallel ones): an ordinal per group would count the two
    # families' ops together on some ranks and apart on others.
    key = pd.DataFrame({"s": out["stream_id"].fillna(-1)})
    out["op_id"] = (
        key.assign(t=out["start_ts"])
        .sort_values("t", kind="stable")
        .groupby("s")
        .cumcount()
        .sort_index()
        .to_numpy()
    )
    meta.info["collectives_from_triggers"] = int(len(out))
    if spans is not None:
        meta.info["collective_times_from_cc_instructions"] = int((how == "cc_instruction").sum())
    meta.info["collective_completion_inferred"] = inferred = {
        k: int((how == k).sum()) for k in ("semaphore", "core_resumed", "profile_end", "unknown")
    }
    for k, n in inferred.items():  # the report lists them with the rows it repaired
        meta.count(f"collectives: from trigger instructions, completion inferred ({k})", n)
    return out


def trigger_times(found: Triggers | None) -> pd.DataFrame | None:
    """The triggers' ``trigger_start_ts``, ``trigger_end`` and ``stream_id`` (NaN where the
    operands name none); None without any."""
    if found is None:
        return None
    rows = found.rows
    return pd.DataFrame(
        {
            "trigger_start_ts": found.i_ts[rows].astype(np.int64),
            "trigger_end": found.i_end[rows].astype(np.int64),
            "stream_id": _field(found.text.iloc[rows], "stream_id"),
        }
    )


def _operand_text(instr: pd.DataFrame) -> pd.Series:
    """Per instruction, its operand texts joined (a trigger's fields may be in any)."""
    parts = [column(instr, c) for c in TEXT_COLUMNS]
    parts = [p.astype(object).where(p.notna(), "") for p in parts if p is not None]
    if not parts:
        return pd.Series("", index=instr.index, dtype=object)
    text = parts[0].astype(str)
    for p in parts[1:]:
        text = text + " " + p.astype(str)
    return text.reset_index(drop=True)


def _field(text: pd.Series, name: str) -> np.ndarray:
    """The integer ``name=<n>`` of each text, NaN where absent."""
    found = text.str.extract(rf"\b{name}=(?P<v>-?\d+)")["v"]
    return pd.to_numeric(found, errors="coerce").to_numpy(dtype=np.float64)


def _pairs(text: pd.Series) -> np.ndarray:
    """Per trigger, its ``source_target_pairs={{1,2}}`` as a replica group ``[[1, 2]]`` (the
    form CcOp rows give a permute's pair); None where it names none."""
    found = text.str.extract(r"\bsource_target_pairs=\{(?P<p>(?:\{[\d,\s]*\},?\s*)+)\}")["p"]
    lists = found.str.replace(r"\s+", "", regex=True).str.rstrip(",")
    lists = lists.str.replace(",", ", ").str.replace("{", "[").str.replace("}", "]")
    return ("[" + lists + "]").where(found.notna(), None).to_numpy(dtype=object)


def _camel(ctype: str) -> str:
    """``ALL_REDUCE`` -> ``AllReduce``, ``COLLECTIVE_PERMUTE`` -> ``CollectivePermute``."""
    return "".join(w.capitalize() for w in str(ctype).split("_") if w)


def _completions(
    text: pd.Series,
    i_ts: np.ndarray,
    i_end: np.ndarray,
    is_trigger: np.ndarray,
    rows: np.ndarray,
    sem: np.ndarray,
    profile_end_ns: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Per trigger (``rows``): its collective's inferred completion and how it was inferred."""
    n = len(rows)
    after = i_end[rows]
    completion = np.full(n, np.nan)
    how = np.full(n, "unknown", dtype=object)
    # 1. The first later instruction (not a trigger) waiting on the completion semaphore.
    waits = text.str.extract(WAIT)["sem"]
    waiter = np.flatnonzero(waits.notna().to_numpy() & ~is_trigger & np.isfinite(i_ts))
    if len(waiter) and np.isfinite(sem).any():
        w = pd.DataFrame({"sem": waits.iloc[waiter].astype(float).to_numpy(), "ts": i_ts[waiter]})
        for s, grp in w.groupby("sem"):  # a loop over the few semaphores, not instructions
            mine = np.flatnonzero(sem == s)
            ts = np.sort(grp["ts"].to_numpy())
            at = np.searchsorted(ts, after[mine], side="left")
            hit = at < len(ts)
            completion[mine[hit]] = ts[at[hit]]
            how[mine[hit]] = "semaphore"
    # 2. The first instruction after every engine idled, following the trigger.
    resumed = _resumes(i_ts, i_end, after)
    fill = np.isnan(completion) & np.isfinite(resumed)
    completion[fill], how[fill] = resumed[fill], "core_resumed"
    # 3. The profile's end.
    fill = np.isnan(completion) & np.isfinite(profile_end_ns) & (profile_end_ns >= after)
    completion[fill], how[fill] = profile_end_ns, "profile_end"
    fill = np.isnan(completion)
    completion[fill] = after[fill]
    return completion, how


def _resumes(i_ts: np.ndarray, i_end: np.ndarray, after: np.ndarray) -> np.ndarray:
    """Per time in ``after``: the start of the first busy period of the instructions (their
    union) that begins after an idle gap following that time; NaN where none does."""
    ok = np.isfinite(i_ts) & np.isfinite(i_end)
    order = np.argsort(i_ts[ok], kind="stable")
    s, e = i_ts[ok][order], i_end[ok][order]
    if not len(s):
        return np.full(len(after), np.nan)
    reach = np.maximum.accumulate(e)
    # A busy period starts where an instruction starts after everything before it ended.
    begins = np.flatnonzero(np.r_[True, s[1:] > reach[:-1]])
    starts = s[begins]
    at = np.searchsorted(starts, after, side="right")  # the first period starting after it
    out = np.full(len(after), np.nan)
    hit = at < len(starts)
    out[hit] = starts[at[hit]]
    return out
