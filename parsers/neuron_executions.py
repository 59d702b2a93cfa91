"""NEFF executions of one device profile: where each starts, and what ties one to the next.

A device profile may hold several executions of its NEFF (``--profile-nth-exec``, a session
capture). Explorer Parquet lists them in ``ExecutionInfo``; legacy JSON has no such table, but
each execution runs the program again from its start, so every engine's program counter (the
instruction ``pc``) starts over: :func:`pc_executions` splits a legacy profile where the whole
core idles and the engines that run on both sides restart their ``pc`` (none carries on), and
checks the count against ``profile_info.num_executions`` when the file has it. Where the ``pc``
says nothing of it (absent, or numbering the profile's instructions across executions), the
program starting over shows as each engine's first instruction after an idle core being the one
it began the profile with (the same ``bir_id`` where the table has one, else the same opcode,
operands and HLO name): a later part of one execution (the next layer after a wait on a DMA or
a collective, the next microbatch running the same code) begins with another instruction.

The runtime starts an execution after the previous one has completed (the host gap between
them). Nothing in the profile records that: without an edge, the next execution's first
instructions hang on whatever ran last on their engine in the previous execution, often long
before its end (an engine idle while the others wait at the final collective), with a gap no
what-if moves, so a faster execution would not start the next one earlier.
:func:`execution_edges` adds a ``dependency`` edge from the last-ending event of each execution
to the first instruction of every engine in the next one, and to every DMA transfer of it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracediag.model import schema as S
from tracediag.parsers.neuron_common import column, ints, normalise_engines
from tracediag.parsers.neuron_events import times

#: Spans of the executions on the events' time base: (starts, ends, step per execution).
Spans = tuple[np.ndarray, np.ndarray, np.ndarray]


def _start_end(frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Start and end (float64 ns, NaN where unknown) of a table's rows."""
    start, dur = times(frame)
    s = start.to_numpy(dtype=np.float64, na_value=np.nan)
    return s, s + dur.to_numpy(dtype=np.float64, na_value=np.nan)


def _engine_codes(instr: pd.DataFrame) -> np.ndarray:
    """Per instruction: one code per engine and physical core (LNC=2 cores run apart)."""
    pcore, _ = ints(column(instr, "pcore_idx"), len(instr))
    # The canonical engines' category codes: one per name (no string per row is made).
    engine = normalise_engines(instr["engine"]).codes
    return engine.astype(np.int64) * 1024 + pcore


def _small_keys(key: np.ndarray) -> np.ndarray:
    """``key`` shifted to start at 0 and narrowed to int16 when its range fits: the same order,
    and numpy's stable sort of 16-bit integers is a radix sort (one pass, not a merge sort)."""
    lo, hi = int(key.min(initial=0)), int(key.max(initial=0))
    return (key - lo).astype(np.int16) if hi - lo < np.iinfo(np.int16).max else key


def _stable_by(key: np.ndarray) -> np.ndarray:
    """The positions of ``key`` sorted stably (ties: position order), as
    ``np.lexsort((np.arange(n), key))`` gives them."""
    return np.argsort(_small_keys(key), kind="stable")


def _by_key_then_time(key: np.ndarray, s: np.ndarray) -> np.ndarray:
    """The positions sorted by ``key``, then ``s``, then position, as
    ``np.lexsort((np.arange(n), s, key))`` gives them: two stable sorts (the times are nearly
    in order already, the keys few), not a three-key lexsort."""
    in_time = np.argsort(s, kind="stable")
    return in_time[_stable_by(key[in_time])]


def _combined_codes(codes: list[np.ndarray]) -> np.ndarray:
    """One non-negative code per distinct tuple of the (non-negative) ``codes`` row by row, by
    arithmetic on the codes (no tuple per row); renumbered where the product would overflow."""
    key = np.zeros(len(codes[0]), dtype=np.int64)
    span = 1
    for c in codes:
        size = int(c.max(initial=0)) + 1
        if span * size >= 1 << 62:
            key = pd.factorize(key)[0].astype(np.int64)
            span = int(key.max(initial=0)) + 1
        key = key * size + c
        span *= size
    return key


#: The instruction's text that names it in the program: equal text, the same instruction.
TEXT_KEYS = ("opcode", "operands", "hlo_name")
#: Fields naming an instruction of the program (the same in every execution of it).
IDENTITY_KEYS = ("bir_id", "raw_bir_id")


#: How many instructions in a row must be those an engine began the profile with (fewer at the
#: engine's end): one alone may be a generic one that starts many parts of an execution.
RUN_AGAIN = 3


def _repeats_first(
    instr: pd.DataFrame, engine: np.ndarray | None = None, s: np.ndarray | None = None
) -> np.ndarray | None:
    """Per instruction: whether it and the next :data:`RUN_AGAIN` - 1 of its engine have the
    text (:data:`TEXT_KEYS`: opcode with operands or HLO name) of the engine's first ones in
    time (where either run is cut short by the engine's end, the part both have); None without
    such text. ``engine`` (:func:`_engine_codes`) and ``s`` (the starts): given when the caller
    has them already."""
    # The program's own instruction id, where the table has it, tells a restart (the same
    # instructions again) from a loop or the next microbatch (the same text, other instructions).
    identity = [c for c in IDENTITY_KEYS if c in instr and instr[c].notna().any()]
    cols = ["opcode", identity[0]] if identity and "opcode" in instr else None
    cols = cols or [c for c in TEXT_KEYS if c in instr]
    if "opcode" not in cols or len(cols) < 2:
        return None
    engine = _engine_codes(instr) if engine is None else engine
    codes = [pd.factorize(instr[c], use_na_sentinel=False)[0].astype(np.int64) for c in cols]
    text = _combined_codes([*codes, engine])  # only compared for equality
    s = _start_end(instr)[0] if s is None else s
    o = _by_key_then_time(engine, s)  # each engine's instructions in time order
    eng, t = engine[o], text[o]
    head = np.r_[True, eng[1:] != eng[:-1]]
    first_row = np.flatnonzero(head)[np.cumsum(head) - 1]  # each row's engine's first row
    match = np.ones(len(s), dtype=bool)
    for k in range(RUN_AGAIN):  # the k-th next instruction's text on the same engine (-1: none)
        on = np.r_[eng[k:] == eng[: len(eng) - k], np.zeros(k, bool)]
        nxt = np.where(on, np.r_[t[k:], np.full(k, -1)], -1)
        match &= (nxt == nxt[first_row]) | (nxt < 0) | (nxt[first_row] < 0)
    out = np.zeros(len(s), dtype=bool)
    out[o] = match
    return out


def _text_restarts(again, same, first_of_cluster, eng, cl, n_clusters) -> np.ndarray:
    """Per instruction (engine-then-time order): an engine's program starting over by its text
    (:func:`_repeats_first`), where that is evidence. An engine whose first run of instructions
    also comes round inside a cluster (a generic activation) tells nothing and is left out; a
    cluster restarts when every other engine that resumes in it after an idle core resumes with
    its first run, and at least one does."""
    noisy = np.zeros(int(eng.max(initial=0)) + 1, dtype=bool)
    np.logical_or.at(noisy, eng, again & same & ~first_of_cluster)
    evidence = first_of_cluster & ~noisy[eng]
    asked = np.bincount(cl[evidence], minlength=n_clusters)
    said = np.bincount(cl[evidence & again], minlength=n_clusters)
    return evidence & again & ((asked > 0) & (said == asked))[cl]


def pc_executions(instr: pd.DataFrame | None, meta: S.RankMeta) -> Spans | None:
    """The executions of a legacy profile from its program counters (see the module), or where
    ``pc`` gives none (absent, or counting on across executions), from the engines' first
    instructions coming round again; None for one execution. Records
    ``meta.info["executions"]``."""
    if instr is None or "engine" not in instr or len(instr) < 2:
        return None
    engine = _engine_codes(instr)
    s, e = _start_end(instr)
    again = _repeats_first(instr, engine, s)
    if "pc" not in instr and again is None:
        return None
    if "pc" in instr:
        pc, pvalid = ints(instr["pc"].astype("Int64"), len(instr))
    else:
        pc, pvalid = np.zeros(len(instr), dtype=np.int64), np.ones(len(instr), dtype=bool)
    ok = np.flatnonzero(pvalid & np.isfinite(s) & np.isfinite(e))
    if len(ok) < 2:
        return None
    order = ok[np.argsort(s[ok], kind="stable")]
    # Clusters: runs of instructions separated by a time when no engine of the core runs.
    reach = np.maximum.accumulate(e[order])
    cluster = np.r_[0, np.cumsum(s[order][1:] > reach[:-1])]
    eng = engine[order]
    by_engine = _stable_by(eng)  # time order within each engine
    same = np.r_[False, eng[by_engine][1:] == eng[by_engine][:-1]]
    prev_pc = np.r_[0, pc[order][by_engine][:-1]]
    prev_cluster = np.r_[-1, cluster[by_engine][:-1]]
    cl = cluster[by_engine]
    # An engine's first instruction of a cluster with a lower pc than its last one before
    # restarts that engine's program: its count of restarts is the execution it runs.
    resumes = same & (cl != prev_cluster)
    back = pc[order][by_engine] < prev_pc
    if again is not None:  # the program starts over where a profile's pc counts on across it
        n_clusters = int(cluster.max()) + 1
        back |= _text_restarts(
            again[order][by_engine], same, resumes, eng[by_engine], cl, n_clusters
        )
    restart = resumes & back
    runs = np.zeros(len(order), dtype=np.int64)
    runs[by_engine] = np.cumsum(restart) - np.maximum.accumulate(
        np.where(~same, np.cumsum(restart), 0)
    )
    # A cluster runs the latest execution any of its engines is in (engines that sit out an
    # execution lag behind); executions never go back.
    latest = np.zeros(int(cluster.max()) + 1, dtype=np.int64)
    np.maximum.at(latest, cluster, runs)
    latest = np.maximum.accumulate(latest)
    n_exec = int(latest[-1]) + 1
    stated = _stated_executions(meta)
    if n_exec < 2 or (stated is not None and stated != n_exec):
        if n_exec >= 2:
            meta.count(
                f"executions: program counters restart {n_exec - 1} times but profile_info says "
                f"{stated} executions: read as one",
                1,
            )
        return None
    execution = latest[cluster]  # per instruction in time order
    first = np.full(n_exec, np.inf)
    last = np.full(n_exec, -np.inf)
    np.minimum.at(first, execution, s[order])
    np.maximum.at(last, execution, e[order])
    starts, ends = first.astype(np.int64), last.astype(np.int64)
    meta.info["executions"] = [
        {"index": k, "neff": None, "kind": "model", "start_ns": int(a), "end_ns": int(b)}
        for k, (a, b) in enumerate(zip(starts, ends, strict=True))  # a handful
    ]
    meta.info["executions_source"] = (
        "instruction pc restarts"
        if again is None
        else "instruction pc restarts or the engines' first instructions again"
    )
    return starts, ends, np.arange(n_exec, dtype=np.float64)


def _stated_executions(meta: S.RankMeta) -> int | None:
    value = pd.to_numeric(
        pd.Series([meta.info.get("profile_num_executions")], dtype=object), errors="coerce"
    ).iloc[0]
    return int(value) if pd.notna(value) and value > 0 else None


#: The DMA table's columns that tell its tracks apart (the queue, its ring, the physical core).
_DMA_TRACK_COLUMNS = ("queue_name", "dma_queue", "subgroup", "engine_idx", "pcore_idx")


def _dma_track_codes(dma: pd.DataFrame) -> np.ndarray:
    """Per transfer row: one code per queue, ring and physical core (the columns present)."""
    cols = [c for c in _DMA_TRACK_COLUMNS if c in dma]
    if not cols:
        return np.zeros(len(dma), dtype=np.int64)
    code = np.zeros(len(dma), dtype=np.int64)
    for c in cols:
        k, uniq = pd.factorize(dma[c], use_na_sentinel=False)
        code = code * (len(uniq) + 1) + k
    return code


def _first_in_time(execution: np.ndarray, track: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Positions of the earliest row (ties: the first) of each (execution, track), in start
    order (ties: row order)."""
    order = np.argsort(start, kind="stable")
    key = _combined_codes([execution[order], track[order] - track.min(initial=0)])
    # Each key's first position, in position order (a hash pass, not a sort of the keys).
    return order[np.flatnonzero(~pd.Series(key).duplicated().to_numpy())]


def execution_edges(
    spans: Spans | None, tables: dict[str, tuple[pd.DataFrame, int] | None]
) -> pd.DataFrame:
    """``dependency`` edges from the last-ending row of each execution to the first instruction
    of every engine in the next (see the module). ``tables``: ``instruction``, ``dma``, ``cc``
    frames with the event row of their first row; ``spans`` on the frames' time base."""
    empty = pd.DataFrame(
        {S.SRC: np.zeros(0, np.int64), S.DST: np.zeros(0, np.int64), S.EDGE_KIND: "dependency"}
    )
    instr = tables.get("instruction")
    if spans is None or len(spans[0]) < 2 or instr is None:
        return empty
    starts = spans[0]
    n_exec = len(starts)
    # Per execution: the row that ends last (of any table), by the executions' start tiles.
    last_end = np.full(n_exec, -np.inf)
    last_row = np.full(n_exec, -1, dtype=np.int64)
    for located in tables.values():
        if located is None:
            continue
        frame, first_row = located
        s, e = _start_end(frame)
        ok = np.flatnonzero(np.isfinite(s) & np.isfinite(e) & (s >= starts[0]))
        k = np.searchsorted(starts, s[ok], side="right") - 1
        top = pd.Series(e[ok]).groupby(k).idxmax()
        better = e[ok][top.to_numpy()] > last_end[top.index.to_numpy()]
        at = top.index.to_numpy()[better]
        last_end[at] = e[ok][top.to_numpy()[better]]
        last_row[at] = first_row + ok[top.to_numpy()[better]]
    frame, first_row = instr
    s, _ = _start_end(frame)
    ok = np.flatnonzero(np.isfinite(s) & (s >= starts[0]))
    k = np.searchsorted(starts, s[ok], side="right") - 1
    heads = _first_in_time(k, _engine_codes(frame)[ok], s[ok])
    heads = heads[k[heads] > 0]
    k_of, dst = k[heads], first_row + ok[heads]
    if tables.get("dma") is not None:
        # Every transfer of a later execution too: a queue's transfers need not follow one
        # another (rings, lanes), and one without a known trigger would hang on the previous
        # execution's transfer on its track, the host gap unexplained.
        # Only the first transfer of each queue (and ring, core) in it, as for the engines: the
        # rest follow it on their track, and an edge into every one of them pinned transfers
        # that wait on their trigger to the previous execution's end as well.
        frame, first_dma = tables["dma"]
        s, _ = _start_end(frame)
        ok = np.flatnonzero(np.isfinite(s) & (s >= starts[0]))
        k = np.searchsorted(starts, s[ok], side="right") - 1
        first = _first_in_time(k, _dma_track_codes(frame)[ok], s[ok])
        first = first[k[first] > 0]
        k_of = np.r_[k_of, k[first]]
        dst = np.r_[dst, first_dma + ok[first]]
    src = last_row[k_of - 1]
    has = src >= 0
    return pd.DataFrame({S.SRC: src[has], S.DST: dst[has], S.EDGE_KIND: "dependency"})


def tiled(spans: Spans) -> Spans:
    """Executions as tiles: each runs to the next one's start (its DMAs and collectives may end
    in the host gap after its last instruction); the last to the profile's end."""
    starts, _ends, steps = spans
    return starts, np.r_[starts[1:] - 1, np.iinfo(np.int64).max], steps


def execution_of(frame: pd.DataFrame, spans: Spans | None) -> pd.arrays.IntegerArray:
    """Per row of ``frame``: the position (0, 1, ...) of the execution its start falls in, by
    the executions' start tiles (barrier executions counted; a row before the first start is
    the first's: ``ExecutionInfo`` starts may come after the first instruction), as nullable
    ints; missing for rows without a start and without executions."""
    n = len(frame)
    if spans is None or not len(spans[0]):
        return pd.arrays.IntegerArray(np.zeros(n, dtype=np.int64), np.ones(n, dtype=bool))
    s, _ = _start_end(frame)
    k = np.maximum(np.searchsorted(np.sort(spans[0]), s, side="right") - 1, 0)
    known = np.isfinite(s)
    return pd.arrays.IntegerArray(np.where(known, k, 0).astype(np.int64), ~known)


def snap_to_idle(spans: Spans | None, instr: pd.DataFrame | None, meta: S.RankMeta) -> Spans | None:
    """``spans`` (``ExecutionInfo``) with each execution's start, and its end by as much, where
    the engines' program counters restart (:func:`pc_executions`) when the two disagree across
    events. ``ExecutionInfo`` times are relative to "the profile start"; a file whose start is
    not Metadata ``first_hw_timestamp`` puts them off by the difference, inside an execution:
    its first instructions then count as the previous one's and no edge ties it to the previous
    one's end (the runtime starts an execution after the previous one completed). Kept as
    stated where the restarts give another count of executions (barrier NEFFs, no ``pc``). The
    moves go to ``info["execution_starts_moved_ns"]``."""
    if spans is None or instr is None or len(spans[0]) < 2:
        return spans
    by_pc = pc_executions(instr, S.RankMeta(rank=meta.rank))
    starts, ends, steps = spans
    if by_pc is None or len(by_pc[0]) != len(starts):
        return spans
    moved = by_pc[0].astype(np.int64)
    s = np.sort(_start_end(instr)[0])
    # A start moved without crossing an instruction keeps every one in its execution.
    crossed = np.searchsorted(s, np.maximum(moved, starts)) > np.searchsorted(
        s, np.minimum(moved, starts)
    )
    if not crossed.any():
        return spans
    moved = np.where(crossed, moved, starts).astype(np.int64)
    delta = moved - starts
    meta.info["execution_starts_moved_ns"] = [int(d) for d in delta]  # one per execution
    meta.count(
        "ExecutionInfo: execution starts inside an execution's run, moved to where the engines' "
        f"program counters restart (up to {int(np.abs(delta).max())} ns)",
        int(crossed.sum()),
    )
    return moved, ends + delta, steps
