"""Semaphore waits of a Neuron profile as ``dependency`` edges: waiter -> the event it waited for.

An engine instruction that waits on a semaphore names the condition in its operand text
(``$S[45]>=16`` in ``compiler_operands``/``instruction_chain``, ``S[5] (Tensor)>=1`` in
``operands``); it depends on the event whose update first made ``S[k] >= v`` true and kept it true
until the instruction started. Where the semaphore's values come from, by what the profile has:

- ``SemaphoreUpdate`` rows (``timestamp``, ``id`` such as ``S[15] (Pool)`` or a bare number,
  ``value``): the binding update is the last one, at or before the waiter's start, that took the
  value from below ``v`` to ``v`` or more. Its producer is the event of the same rank ending at
  the update (within :data:`TOLERANCE_NS`): an instruction whose operands increment that
  semaphore (``S[8]++@complete``) or a DMA transfer whose ``semaphore_id`` column names it,
  else a collective (CC-core completions do not name their semaphore anywhere else).
- no ``SemaphoreUpdate`` table: the semaphore counts the increments the profile names (the
  instructions' ``S[k]++`` and the DMA rows' ``semaphore_id``) from 0, in end order; the
  ``v``-th one is the producer. With ``partial`` updates (a Perfetto device trace shows some
  semaphores on tracks, not necessarily all), a semaphore the updates never name is counted so.
- no semaphore named in any operand text: nothing to read, no edge.

A DMA transfer increments its semaphore once, when it completes: on packet rows (``DmaPacket``,
whose ``semaphore_id`` comes from its ``DmaPacketAggregated`` block) only the last-ending packet
of each ``packet_aggregation_id`` is a producer. A semaphore is known by its number; the owner
in parentheses (``S[6] (Vector)``, ``S[6] (qSyncSpillReload0)``; engine names normalised, so
``Pool`` is ``GpSimd``) tells two apart only when both sides name one (``$S[15]`` matches
``S[15] (Pool)``).

Edges are recorded, not inferred (the profile states both ends), so they take the canonical kind
``dependency`` (a data/semaphore dependency). Semaphores are one set per rank (``pcore_idx``
is not told apart). ``meta.info["semaphore_waits"]`` counts the waits
read, the edges made and the waits no update or producer explains.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from tracediag.model import schema as S
from tracediag.model.errors import TraceInputError
from tracediag.parsers.neuron_common import (
    ENGINE_ALIASES,
    column,
    ints,
    labels,
    normalise_engines,
)
from tracediag.parsers.neuron_events import times

#: A semaphore update and the end of the event that made it are at most this far apart (ns).
TOLERANCE_NS = 100
#: Operand text columns that can name semaphore conditions and increments, in reading order.
TEXT_COLUMNS = ("compiler_operands", "operands", "instruction_chain")

#: The ``SemaphoreUpdate`` fields read (``id`` is text, ``S[15] (Pool)``, or a number).
UPDATE_COLUMNS = ("timestamp", "id", "value", "update_source")
#: ``update_source`` of updates that came over the AXI bus (DMA), never from a CC core.
AXI = "axi"

_OWNER = r"(?:\s*\((?P<owner>[^)]*)\))?"
#: A semaphore as operand texts name it: ``$S[15]``, ``S[5] (Tensor)``.
SEMAPHORE_NAME = r"\$?S\[(?P<sem>\d+)\]" + _OWNER
#: A wait on a semaphore: ``$S[15]>=2``.
WAIT = re.compile(SEMAPHORE_NAME + r"\s*>=\s*(?P<value>\d+)")
_INCREMENT = re.compile(SEMAPHORE_NAME + r"\s*\+\+")
_ID = re.compile(r"^\s*\$?S?\[?(?P<sem>\d+)\]?" + _OWNER)


def semaphore_edges(
    tables: dict[str, pd.DataFrame],
    first: dict[str, int],
    updates: pd.DataFrame | None,
    meta: S.RankMeta,
    texts: pd.DataFrame | None = None,
    partial: bool = False,
) -> pd.DataFrame:
    """Edges producer -> waiter for the semaphore waits of one rank's ``instruction`` table
    (``tables``/``first``: the part builder's tables and their first event rows; ``updates``:
    the ``SemaphoreUpdate`` table, None when absent; ``texts``: the instructions'
    :data:`TEXT_COLUMNS` row for row, None: those of the instruction table; ``partial``: the
    updates cover only the semaphores they name). See the module docstring."""
    empty = pd.DataFrame({S.SRC: np.zeros(0, np.int64), S.DST: np.zeros(0, np.int64)})
    instr = tables.get("instruction")
    if instr is None or not len(instr):
        return empty.assign(**{S.EDGE_KIND: "dependency"})
    i_start, i_dur = times(instr)
    i_ts = i_start.to_numpy(dtype=np.float64, na_value=np.nan)
    i_end = i_ts + i_dur.to_numpy(dtype=np.float64, na_value=np.nan)
    extra = texts if texts is not None and len(texts) == len(instr) else instr
    texts = {c: v for c in TEXT_COLUMNS if (v := _first_of(c, extra, instr)) is not None}
    waits = _matches(texts, len(instr), WAIT, with_value=True)
    if not len(waits):
        return empty.assign(**{S.EDGE_KIND: "dependency"})
    producers = _named_producers(texts, i_ts, i_end, first["instruction"], tables, first)
    if updates is not None and {"timestamp", "id", "value"} <= set(updates.columns):
        values = _table_updates(updates)
        values = _attribute(values, producers, tables, first)
        if partial:  # semaphores without a track: counted from their named increments
            counted = _counted_updates(producers)
            untracked = ~np.isin(counted["sem"].to_numpy(), values["sem"].to_numpy())
            values = pd.concat([values, counted[untracked]], ignore_index=True)
    else:
        values = _counted_updates(producers)
    waits["start"] = i_ts[waits["row"].to_numpy()]
    waits = waits[np.isfinite(waits["start"].to_numpy())].reset_index(drop=True)
    waits["dst"] = first["instruction"] + waits["row"].to_numpy()
    src = _binding_source(waits, values)
    ok = (src >= 0) & (src != waits["dst"].to_numpy())
    meta.info["semaphore_waits"] = {
        "read": int(len(waits)),
        "edges": int(ok.sum()),
        "unexplained": int((~ok).sum()),
    }
    return pd.DataFrame(
        {
            S.SRC: src[ok].astype(np.int64),
            S.DST: waits["dst"].to_numpy(dtype=np.int64)[ok],
            S.EDGE_KIND: "dependency",
        }
    )


def read_updates(files: list[Path] | None) -> pd.DataFrame | None:
    """The ``SemaphoreUpdate`` table's :data:`UPDATE_COLUMNS` (text as Categorical), None when
    the table is absent; a part pyarrow cannot read is a TraceInputError naming it."""
    if not files:
        return None
    frames = []
    for path in files:
        try:
            pf = pq.ParquetFile(path)
            table = pf.read(columns=[c for c in UPDATE_COLUMNS if c in pf.schema_arrow.names])
        except (pa.ArrowException, OSError, ValueError) as exc:
            problem = " ".join(str(exc).split())[:200]
            raise TraceInputError(path, f"corrupt Parquet file ({problem})") from None
        if "id" in table.column_names and pa.types.is_string(table.schema.field("id").type):
            ids = table.column("id").dictionary_encode()  # Categorical, not a str per row
            table = table.set_column(table.column_names.index("id"), "id", ids)
        frames.append(table.to_pandas())
    return pd.concat(frames, ignore_index=True)


def _first_of(name: str, *frames: pd.DataFrame) -> pd.Series | None:
    """Column ``name`` of the first frame that has it."""
    return next((c for f in frames if (c := column(f, name)) is not None), None)


def _matches(
    texts: dict[str, pd.Series], n: int, pattern: re.Pattern, with_value: bool
) -> pd.DataFrame:
    """(row, sem[, value]) of every semaphore token ``pattern`` finds in the text columns (of
    ``n`` rows), once each, in column, row and token order; the regex runs on each column's
    distinct texts, not per row, and the rows take their texts' tokens by position."""
    keys = ["row", "sem", "value"] if with_value else ["row", "sem"]
    rows, picks, found = [], [], []
    for col in texts.values():
        cat = labels(col, n)
        hits = pd.Series(cat.categories.astype(str)).str.extractall(pattern)
        if len(hits):
            row, pick = _token_rows(np.asarray(cat.codes), hits, len(cat.categories))
            rows.append(row)
            picks.append(pick + sum(len(h) for h in found))
            found.append(hits.reset_index(drop=True))
    if not found:
        out = pd.DataFrame({k: np.zeros(0, np.int64) for k in keys})
        return out.assign(owner=np.zeros(0, dtype=object))
    hits = pd.concat(found, ignore_index=True)
    numbers = [hits[k].to_numpy().astype(np.int64) for k in keys[1:]]
    owner = _owners(hits["owner"])
    token, bare = _codes_of([*numbers, owner]), _codes_of(numbers)  # with and without owner
    row, pick = np.concatenate(rows), np.concatenate(picks)
    once = ~pd.Series(row * (int(token.max()) + 1) + token[pick]).duplicated().to_numpy()
    row, pick = row[once], pick[once]
    # One token named in two columns (``$S[15]`` and ``S[15] (Pool)``): the named one.
    named = owner[pick] != ""
    span = int(bare.max()) + 1
    spelt_both = (np.bincount(bare[owner != ""], minlength=span) > 0) & (
        np.bincount(bare[owner == ""], minlength=span) > 0
    )
    keep = np.ones(len(row), dtype=bool)
    maybe = np.flatnonzero(~named & spelt_both[bare[pick]])
    if len(maybe):
        named_keys = row[named] * span + bare[pick[named]]
        keep[maybe] = ~np.isin(row[maybe] * span + bare[pick[maybe]], named_keys)
    row, pick = row[keep], pick[keep]
    out = pd.DataFrame({"row": row, **{k: v[pick] for k, v in zip(keys[1:], numbers, strict=True)}})
    return out.assign(owner=owner[pick])


def _token_rows(
    codes: np.ndarray, hits: pd.DataFrame, n_texts: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per token of each row (rows in order, a text's tokens in order): the row and the token's
    position in ``hits`` (``extractall`` of the distinct texts: each text's tokens together,
    texts in code order)."""
    per_text = np.bincount(hits.index.get_level_values(0), minlength=n_texts)
    first_hit = np.cumsum(per_text) - per_text
    row = np.flatnonzero((codes >= 0) & (per_text[np.maximum(codes, 0)] > 0))
    count = per_text[codes[row]]
    within = np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count)
    return np.repeat(row, count), np.repeat(first_hit[codes[row]], count) + within


def _codes_of(columns: list[np.ndarray]) -> np.ndarray:
    """One code (0, 1, ...) per distinct tuple of the rows of ``columns`` (no tuple per row:
    each step's codes stay below the row count, so the products cannot overflow)."""
    key = np.zeros(len(columns[0]), dtype=np.int64)
    for col in columns:
        codes, uniques = pd.factorize(col)
        key = pd.factorize(key * len(uniques) + codes)[0].astype(np.int64)
    return key


def _owners(text: pd.Series) -> np.ndarray:
    """The owner of each semaphore name, lower-case, engines by their canonical name (``Pool``
    -> ``gpsimd``); "" where none is named. Worked out once per distinct text."""
    codes, uniques = pd.factorize(text.fillna("").astype(str).str.strip().str.lower())
    canon = np.array([ENGINE_ALIASES.get(u, u) for u in uniques] + [""], dtype=object)
    return canon[codes]  # a loop over distinct owners above, none per row


def _named_producers(
    texts: dict[str, pd.Series],
    i_ts: np.ndarray,
    i_end: np.ndarray,
    instr_first: int,
    tables: dict[str, pd.DataFrame],
    first: dict[str, int],
) -> pd.DataFrame:
    """Events that name a semaphore they increment on completion: (sem, end, src). A
    collective trigger's increment (``S[15]++@complete``) happens when the collective it
    triggers completes, so it is that collective's, at its end."""
    inc = _matches(texts, len(i_end), _INCREMENT, with_value=False)
    row = inc["row"].to_numpy()
    end, src = i_end[row], instr_first + row
    cc_end, cc_src = _triggered_collectives(i_ts, tables, first)
    moved = cc_src[row] >= 0
    end, src = np.where(moved, cc_end[row], end), np.where(moved, cc_src[row], src)
    frames = [
        pd.DataFrame(
            {"sem": inc["sem"].to_numpy(), "owner": inc["owner"].to_numpy(), "end": end, "src": src}
        )
    ]
    dma = tables.get("dma")
    sid = column(dma, "semaphore_id") if dma is not None else None
    if sid is not None:
        sem, owner = _semaphore_numbers(sid)
        start, dur = times(dma)
        end = start.to_numpy(dtype=np.float64, na_value=np.nan) + dur.to_numpy(
            dtype=np.float64, na_value=np.nan
        )
        named = (sem >= 0) & _last_packet(dma, end)
        frames.append(
            pd.DataFrame(
                {
                    "sem": sem[named],
                    "owner": owner[named],
                    "end": end[named],
                    "src": first["dma"] + np.flatnonzero(named),
                }
            )
        )
    out = pd.concat(frames, ignore_index=True)
    return out[np.isfinite(out["end"].to_numpy())].reset_index(drop=True)


def _triggered_collectives(
    i_ts: np.ndarray, tables: dict[str, pd.DataFrame], first: dict[str, int]
) -> tuple[np.ndarray, np.ndarray]:
    """Per instruction: the end and event row of the collective it triggered (the CcOp whose
    ``trigger_start_ts`` is the instruction's start, on its ``trigger_engine`` where both name
    an engine); NaN and -1 where it triggered none."""
    end_of, src_of = np.full(len(i_ts), np.nan), np.full(len(i_ts), -1, dtype=np.int64)
    cc, instr = tables.get("cc"), tables["instruction"]
    trigger = column(cc, "trigger_start_ts") if cc is not None else None
    if trigger is None or not len(cc):
        return end_of, src_of
    t, valid = ints(trigger, len(cc))
    start, dur = times(cc)
    cc_end = start.to_numpy(dtype=np.float64, na_value=np.nan) + dur.to_numpy(
        dtype=np.float64, na_value=np.nan
    )
    ops = pd.DataFrame({"t": t, "end": cc_end, "src": first["cc"] + np.arange(len(cc))})
    ops = ops[valid & np.isfinite(cc_end)]
    near = np.flatnonzero(np.isin(i_ts, ops["t"].to_numpy()))  # the few trigger rows
    rows = pd.DataFrame({"t": i_ts[near], "row": near})
    by = ["t"]
    cc_engine, i_engine = column(cc, "trigger_engine"), column(instr, "engine")
    if cc_engine is not None and i_engine is not None:
        ops["e"] = _engines(cc_engine, ops.index.to_numpy())
        rows["e"] = _engines(i_engine, near)
        by = ["t", "e"]
    ops = ops.astype({"t": np.float64})
    hit = rows.merge(ops, on=by).drop_duplicates("row")
    end_of[hit["row"].to_numpy()] = hit["end"].to_numpy()
    src_of[hit["row"].to_numpy()] = hit["src"].to_numpy()
    return end_of, src_of


def _engines(values: pd.Series, rows: np.ndarray) -> np.ndarray:
    """Canonical engine names of ``rows``, as objects (made for those rows only)."""
    engines = normalise_engines(labels(values, len(values)))
    return np.asarray(engines.categories, dtype=object)[engines.codes[rows]]


def _last_packet(dma: pd.DataFrame, end: np.ndarray) -> np.ndarray:
    """Rows that complete their transfer: the last-ending row of each
    ``packet_aggregation_id`` (every row where the column is absent or empty)."""
    agg, valid = ints(column(dma, "packet_aggregation_id"), len(dma))
    if not valid.any():
        return np.ones(len(dma), dtype=bool)
    last = pd.Series(end).groupby(np.where(valid, agg, -1 - np.arange(len(dma)))).transform("max")
    return ~valid | (end >= last.to_numpy())


def _semaphore_numbers(ids: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """``S[15] (Pool)``, ``$S[15]``, ``15`` -> 15 (-1 where no number is given) and the owner
    (``gpsimd``; "" where none is named), per row."""
    cat = labels(ids, len(ids))
    parts = pd.Series(cat.categories.astype(str)).str.extract(_ID)
    per_cat = pd.to_numeric(parts["sem"], errors="coerce").fillna(-1).to_numpy(dtype=np.int64)
    # code -1 (no value) takes the appended last entry: also right when no row has a value
    per_cat, owner_cat = np.append(per_cat, -1), np.append(_owners(parts["owner"]), "")
    codes = np.asarray(cat.codes)
    return per_cat[codes], owner_cat[codes]


def _table_updates(updates: pd.DataFrame) -> pd.DataFrame:
    """The ``SemaphoreUpdate`` rows as (sem, ts, value, src=-1: producer not known yet)."""
    ts = pd.to_numeric(updates["timestamp"], errors="coerce").to_numpy(dtype=np.float64)
    value = pd.to_numeric(updates["value"], errors="coerce").to_numpy(dtype=np.float64)
    sem, owner = _semaphore_numbers(updates["id"])
    ok = np.isfinite(ts) & np.isfinite(value) & (sem >= 0)
    source = column(updates, "update_source")
    axi = (
        np.zeros(len(updates), dtype=bool)
        if source is None
        else (pd.Series(labels(source, len(updates))).str.lower() == AXI).to_numpy(dtype=bool)
    )
    return pd.DataFrame(
        {
            "sem": sem[ok],
            "owner": owner[ok],
            "ts": ts[ok],
            "value": value[ok],
            "src": np.full(ok.sum(), -1),
            "axi": axi[ok],
        }
    )


def _counted_updates(producers: pd.DataFrame) -> pd.DataFrame:
    """Without a SemaphoreUpdate table: each named increment adds 1 to its semaphore (number
    and owner), from 0, in end order."""
    p = producers.sort_values(["sem", "end"], kind="stable").reset_index(drop=True)
    value = p.groupby(["sem", "owner"]).cumcount().to_numpy() + 1  # one count per semaphore
    return pd.DataFrame(
        {
            "sem": p["sem"].to_numpy(),
            "owner": p["owner"].to_numpy(),
            "ts": p["end"].to_numpy(),
            "value": value,
            "src": p["src"],
        }
    )


def _attribute(
    values: pd.DataFrame,
    producers: pd.DataFrame,
    tables: dict[str, pd.DataFrame],
    first: dict[str, int],
) -> pd.DataFrame:
    """Each update's producer: the event naming that semaphore whose end is nearest the update
    (within the tolerance), else the collective ending nearest it (not for an update that came
    over the AXI bus: a DMA's)."""
    values = values.reset_index(drop=True)
    values["ts"] = values["ts"].astype(np.float64)
    order = np.argsort(values["ts"].to_numpy(), kind="stable")
    left = values.iloc[order].reset_index().rename(columns={"index": "u"})
    named = _once_each(_nearest_owned(left, producers), left["ts"].to_numpy(), producers)
    cc = tables.get("cc")
    if cc is not None and len(cc):
        start, dur = times(cc)
        end = start.to_numpy(dtype=np.float64, na_value=np.nan) + dur.to_numpy(
            dtype=np.float64, na_value=np.nan
        )
        ops = pd.DataFrame({"end": end, "src": first["cc"] + np.arange(len(cc))})
        ops = ops[np.isfinite(ops["end"].to_numpy())]
        from_cc = (named < 0) & ~left["axi"].to_numpy(dtype=bool)
        named = np.where(from_cc, _nearest(left, ops, by=[]), named)
    src = np.full(len(values), -1, dtype=np.int64)
    src[left["u"].to_numpy()] = named
    values["src"] = src
    return values


def _once_each(src: np.ndarray, ts: np.ndarray, producers: pd.DataFrame) -> np.ndarray:
    """``src`` with each producer kept for the one update nearest its end: a completion
    increments once. An update 46 ns after a send's completion (itself the update at that
    send's end) is the receive's that ended with it, which names no semaphore."""
    got = np.flatnonzero(src >= 0)
    if not len(got):
        return src
    end_of = pd.Series(producers["end"].to_numpy(), index=producers["src"].to_numpy())
    end_of = end_of[~end_of.index.duplicated()]
    dist = np.abs(ts[got] - end_of.reindex(src[got]).to_numpy())
    o = np.lexsort((dist, src[got]))  # per producer, its nearest update first
    first = np.r_[True, src[got][o][1:] != src[got][o][:-1]]
    out = src.copy()
    out[got[o[~first]]] = -1
    return out


def _nearest_owned(left: pd.DataFrame, right: pd.DataFrame) -> np.ndarray:
    """:func:`_nearest` by semaphore among the producers whose owner agrees with the update's:
    the same owner first, then (either side unnamed) any owner."""
    out = _nearest(left, right, by=["sem", "owner"])
    l_named, r_named = left["owner"].to_numpy() != "", right["owner"].to_numpy() != ""
    for mine, theirs in ((l_named, ~r_named), (~l_named, np.ones(len(right), dtype=bool))):
        todo = (out < 0) & mine
        if todo.any():
            out[todo] = _nearest(left[todo], right[theirs], by=["sem"])
    return out


def _nearest(left: pd.DataFrame, right: pd.DataFrame, by: list[str]) -> np.ndarray:
    """Per ``left`` row (sorted by ts): the ``src`` of the ``right`` row (same ``by`` values)
    whose end is nearest its ts within the tolerance, -1 where none."""
    if not len(right) or not len(left):
        return np.full(len(left), -1, dtype=np.int64)
    right = right.sort_values("end", kind="stable")[["end", "src", *by]]
    same = {"owner": "str"} if "owner" in by else {}  # one text dtype on both sides
    hit = pd.merge_asof(
        left[["ts", *by]].astype(same),
        right.astype({"end": np.float64, **same}),
        left_on="ts",
        right_on="end",
        by=by or None,
        direction="nearest",
        tolerance=float(TOLERANCE_NS),
    )
    return hit["src"].fillna(-1).to_numpy(dtype=np.int64)


def _binding_source(waits: pd.DataFrame, values: pd.DataFrame) -> np.ndarray:
    """Per wait (sem, value, start): the producer of the last update at or before the start
    that took the semaphore from below the wanted value to it or above,
    provided the value still held at the start; -1 where none. A wait naming an owner reads
    only the updates of that owner or of none. One pass per distinct (semaphore, owner, wanted
    value), vectorised over its waits."""
    out = np.full(len(waits), -1, dtype=np.int64)
    if not len(values):
        return out
    values = values.sort_values(["sem", "ts"], kind="stable")
    by_sem = {int(k): g for k, g in values.groupby("sem", sort=False)}
    starts = waits["start"].to_numpy()
    groups = waits.groupby(["sem", "owner", "value"], sort=False).indices
    for (sem, owner, want), idx in groups.items():  # a loop over distinct waits, not rows
        g = by_sem.get(int(sem))
        if g is not None and owner:
            g = g[np.isin(g["owner"].to_numpy(), (owner, ""))]
        if g is None or not len(g):
            continue
        ts, val, src = g["ts"].to_numpy(), g["value"].to_numpy(), g["src"].to_numpy()
        sat = val >= want
        crossing = np.flatnonzero(sat & ~np.r_[False, sat[:-1]])
        start = starts[idx]
        last = np.searchsorted(ts, start, side="right") - 1  # the value at the start
        k = np.searchsorted(ts[crossing], start, side="right") - 1
        ok = (k >= 0) & (last >= 0) & sat[np.maximum(last, 0)]
        out[idx[ok]] = src[crossing[k[ok]]]
    return out
