"""Chrome trace events as columns: phases, B/E pairing, instants, metadata names and flows.

:func:`tabulate` turns the decoded event objects into one row per interval (``X`` complete
events, ``B``/``E`` pairs, ``b``/``e`` and ``S``/``F`` async pairs, ``i``/``I`` instants as
zero-length slices) plus a table of flow points (``s``/``t``/``f``). Counters (``C``) and
metadata (``M``) are not events; ``M`` gives thread names (used in CPU track labels).
:func:`flow_edges` binds flow points to slices and chains them into edges.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import repeat

import numpy as np
import pandas as pd

from tracediag.model import schema as S
from tracediag.parsers.chrome_columns import ArgColumns, EventColumns, categorical_text
from tracediag.parsers.chrome_nesting import SliceNesting

_INSTANT = ("i", "I")
_FLOW = ("s", "t", "f")
_NOT_EVENTS = ("M", "C")
# Async begin/end phases paired like B/E but by (cat, id): nestable (b/e) and legacy (S/F).
_ASYNC_BEGIN = ("b", "S")
_ASYNC_END = ("e", "F")
_ASYNC_STEP = ("n", "T", "p")
#: The ``ph`` of a slice: complete, begin/end pair, async pair, instant.
SLICE_PHASES = pd.CategoricalDtype(["X", "B", "b", "i"])


@dataclass
class EventTable:
    """Slices and flow points of one Chrome trace, columnar.

    ``slices``: ``ph`` (categorical: X, B, b or i), ``cat``, ``name``, ``pid``, ``tid`` (text),
    ``ts_ns`` and ``dur_ns`` (nullable Int64: missing where the file gave no usable time) and
    ``pos`` (the event's position in :class:`EventColumns`, where its ``args`` are).
    ``flows``: ``ph``, ``cat``, ``id``, ``pid``, ``tid``, ``ts_ns`` (int64), ``enclosing`` (binds
    to the enclosing slice rather than the next one).
    """

    slices: pd.DataFrame
    flows: pd.DataFrame
    thread_names: dict[tuple[str, str], str] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)


def tabulate(columns: EventColumns, skip_flows: tuple[str, ...] = ()) -> EventTable:
    """Slices and flow points of the trace's events (see :class:`EventTable`).

    Flow points of the categories in ``skip_flows`` (matched case-insensitively) are left out.
    """
    counts = dict(columns.counts)
    text = columns.text  # the slices take their rows of it (no frame of every event is built)
    phase = text["ph"]
    times = _Times(columns.ts, columns.ts_ok, columns.dur, columns.dur_ok)
    is_phase = _phase_masks(phase, counts)
    parts = [
        _complete(text, is_phase("X"), times),
        _paired(text, is_phase("B"), is_phase("E"), columns, times, "B/E", counts),
        _paired(
            text, is_phase(*_ASYNC_BEGIN), is_phase(*_ASYNC_END), columns, times, "async", counts
        ),
        _instants(text, is_phase(*_INSTANT), times),
    ]
    slices = pd.concat([p for p in parts if len(p)] or parts[:1], ignore_index=True)
    skipped = [i for i, c in enumerate(text["cat"].categories) if c.lower() in skip_flows]
    flow_rows = is_phase(*_FLOW) & ~any_of(text["cat"].codes, skipped)
    flows = _flow_points(text, flow_rows, columns, times, counts)
    threads = _thread_names(text, is_phase("M"), columns.args)
    return EventTable(slices, flows, threads, counts)


@dataclass
class _Times:
    ts: np.ndarray
    ts_ok: np.ndarray
    dur: np.ndarray
    dur_ok: np.ndarray


def _phase_masks(phase: pd.Categorical, counts: dict[str, int]):
    """A function giving the row mask of some phases; counts the phases nobody reads."""
    codes = phase.codes
    cats = list(phase.categories)
    known = (
        "X",
        "B",
        "E",
        *_INSTANT,
        *_FLOW,
        *_NOT_EVENTS,
        *_ASYNC_BEGIN,
        *_ASYNC_END,
        *_ASYNC_STEP,
    )
    present = np.bincount(codes, minlength=len(cats))
    for i, p in enumerate(cats):
        if p not in known and present[i]:
            counts[
                f"events of unsupported phase {p!r}: skipped"
                if p
                else "events without a phase: skipped"
            ] = int(present[i])
    steps = sum(int(present[cats.index(p)]) for p in _ASYNC_STEP if p in cats)
    if steps:
        counts["async step events (n/T/p): not kept"] = steps

    def is_phase(*phases: str) -> np.ndarray:
        return any_of(codes, [cats.index(p) for p in phases if p in cats])

    return is_phase


def any_of(codes: np.ndarray, wanted: list[int]) -> np.ndarray:
    """Whether each code is one of the few ``wanted``: an equality test each (on a million
    small codes several times faster than ``np.isin``)."""
    mask = np.zeros(len(codes), dtype=bool)
    for code in wanted:
        mask |= codes == code
    return mask


def _slice_frame(text: dict, rows: np.ndarray, ph: str, ts, dur) -> pd.DataFrame:
    columns = {k: text[k][rows] for k in ("cat", "name", "pid", "tid")}
    phase = np.full(len(rows), SLICE_PHASES.categories.get_loc(ph), dtype=np.int8)
    return pd.DataFrame(
        {
            **columns,
            "pos": rows.astype(np.int64, copy=False),
            "ph": pd.Categorical.from_codes(phase, dtype=SLICE_PHASES),
            S.TS: ts,
            S.DUR: dur,
        },
        copy=False,  # fresh arrays: neither copied nor consolidated
    )


def _complete(text, mask, times: _Times) -> pd.DataFrame:
    rows = np.flatnonzero(mask)
    ts = pd.arrays.IntegerArray(times.ts[rows], ~times.ts_ok[rows])
    dur = pd.arrays.IntegerArray(times.dur[rows], ~times.dur_ok[rows])
    return _slice_frame(text, rows, "X", ts, dur)


def _instants(text, mask, times: _Times) -> pd.DataFrame:
    rows = np.flatnonzero(mask)
    ts = pd.arrays.IntegerArray(times.ts[rows], ~times.ts_ok[rows])
    return _slice_frame(text, rows, "i", ts, _valid(np.zeros(len(rows), dtype=np.int64)))


def _valid(values: np.ndarray) -> pd.arrays.IntegerArray:
    """Integers as a nullable array with none missing."""
    return pd.arrays.IntegerArray(values.astype(np.int64, copy=False), np.zeros(len(values), bool))


def _paired(
    text, begin_mask, end_mask, columns: EventColumns, times: _Times, what: str, counts
) -> pd.DataFrame:
    """Begin/end events paired as a stack, per thread (B/E) or per (cat, id) (async).

    The unpaired are counted, not kept."""
    rows = np.flatnonzero(begin_mask | end_mask)
    if not len(rows):
        return _slice_frame(text, rows, "B", _valid(rows), _valid(rows))
    bad_time = ~times.ts_ok[rows]
    if bad_time.any():
        counts[f"{what} events without a valid ts: skipped"] = int(bad_time.sum())
        rows = rows[~bad_time]
    if what == "async":
        ids = categorical_text(columns.id_values("id", rows)).codes.astype(np.int64)
        first = text["cat"].codes[rows].astype(np.int64)
        key = first * (ids.max() + 2) + ids
    else:
        tid = text["tid"].codes[rows].astype(np.int64)
        key = text["pid"].codes[rows].astype(np.int64) * (len(text["tid"].categories) + 1) + tid
    is_begin = begin_mask[rows]
    begin, end = pair_stack(key, is_begin, times.ts[rows])
    unpaired = {
        "begin without end": int(is_begin.sum()) - len(begin),
        "end without begin": int((~is_begin).sum()) - len(end),
    }
    for reason, n in unpaired.items():
        if n:
            counts[f"{what} {reason}: skipped"] = n
    b_rows, e_rows = rows[begin], rows[end]
    ts = _valid(times.ts[b_rows])
    dur = _valid(times.ts[e_rows] - times.ts[b_rows])
    return _slice_frame(text, b_rows, "b" if what == "async" else "B", ts, dur)


def pair_stack(
    key: np.ndarray, is_begin: np.ndarray, ts: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Pair begins with ends per key as a stack (in time order, file order among ties).

    Returns positions ``(begin, end)`` of the matched pairs. Vectorised: the depth after each
    event is a cumulative sum within its key; a begin at depth d is closed by the next end that
    leaves depth d, and the two are neighbours in the (key, level, order) sort.
    """
    m = len(key)
    order = np.lexsort((np.arange(m), ts, key))
    k, b = key[order], is_begin[order]
    depth = np.cumsum(np.where(b, 1, -1))
    first = np.r_[True, k[1:] != k[:-1]]
    base = np.maximum.accumulate(np.where(first, np.arange(m), 0))
    depth = depth - (depth[base] - np.where(b[base], 1, -1))
    level = np.where(b, depth, depth + 1)
    order2 = np.lexsort((np.arange(m), level, k))
    k2, l2, b2 = k[order2], level[order2], b[order2]
    pair = b2[:-1] & ~b2[1:] & (k2[:-1] == k2[1:]) & (l2[:-1] == l2[1:])
    i = np.flatnonzero(pair)
    return order[order2[i]], order[order2[i + 1]]


def _flow_points(text, mask, columns: EventColumns, times: _Times, counts) -> pd.DataFrame:
    rows = np.flatnonzero(mask)
    bad = ~times.ts_ok[rows]
    if bad.any():
        counts["flow events without a valid ts: skipped"] = int(bad.sum())
        rows = rows[~bad]
    ids = columns.id_values("flow_id", rows)
    bp = columns.id_values("bp", rows)
    ph = np.asarray(text["ph"][rows])
    return pd.DataFrame(
        {
            "ph": pd.Categorical(ph),
            "cat": text["cat"][rows],
            "id": categorical_text(ids),
            "pid": text["pid"][rows],
            "tid": text["tid"][rows],
            S.TS: times.ts[rows],
            # Chrome: s and t bind to the enclosing slice; f to the next slice unless bp == "e".
            "enclosing": (ph != "f") | (bp == "e"),
        }
    )


def _thread_names(text, mask, args: ArgColumns) -> dict[tuple[str, str], str]:
    """Thread names from ``thread_name`` metadata events (the last one of a thread wins).

    Rows are picked by category code and their pid/tid taken by array indexing: element access
    on a Categorical costs microseconds, and a trace may hold a million ``M`` events."""
    names = text["name"]
    rows = np.flatnonzero(mask)
    if "thread_name" not in names.categories or not len(rows):
        return {}
    rows = rows[names.codes[rows] == names.categories.get_loc("thread_name")]
    labels = args.value("name", rows)
    is_text = np.fromiter(map(isinstance, labels, repeat(str)), bool, len(labels))
    rows, labels = rows[is_text], labels[is_text]
    pids = np.asarray(text["pid"].categories, dtype=object)[text["pid"].codes[rows]]
    tids = np.asarray(text["tid"].categories, dtype=object)[text["tid"].codes[rows]]
    return dict(zip(zip(pids.tolist(), tids.tolist(), strict=True), labels.tolist(), strict=True))


def flow_edges(flows: pd.DataFrame, slices: pd.DataFrame, thread: np.ndarray) -> pd.DataFrame:
    """Edges ``src -> dst`` (slice rows) along each flow.

    ``thread`` holds the slices' integer thread codes; flow points take the code of the slices
    with their (pid, tid). ``flows`` and ``slices`` come from one :func:`tabulate` (their pid and
    tid categories are the same). Points that bind to no slice are dropped; their number is in the
    returned frame's ``attrs["unbound"]``.
    """
    empty = pd.DataFrame({S.SRC: np.zeros(0, np.int64), S.DST: np.zeros(0, np.int64)})
    empty.attrs["unbound"] = 0
    if not len(flows) or not len(slices):
        empty.attrs["unbound"] = len(flows)
        return empty
    ph = slices["ph"].array
    no_stack = [ph.categories.get_loc(p) for p in ("i", "b")]  # instants and async ranges
    rows = np.flatnonzero(~any_of(ph.codes, no_stack))
    start = slices[S.TS].to_numpy(dtype=np.int64)[rows]
    end = start + slices[S.DUR].to_numpy(dtype=np.int64)[rows]
    nesting = SliceNesting(thread[rows], start, end)
    n_tid = len(slices["tid"].cat.categories) + 1

    def key(frame: pd.DataFrame) -> np.ndarray:
        pid = frame["pid"].cat.codes.to_numpy().astype(np.int64)
        return pid * n_tid + frame["tid"].cat.codes.to_numpy().astype(np.int64)

    by_key = pd.Series(thread, index=key(slices))
    by_key = by_key[~by_key.index.duplicated()]
    q_thread = by_key.reindex(key(flows)).fillna(-1).to_numpy(dtype=np.int64)
    t = flows[S.TS].to_numpy(dtype=np.int64)
    enclosing = flows["enclosing"].to_numpy(dtype=bool)
    bound = np.where(enclosing, nesting.innermost(q_thread, t), nesting.next_starting(q_thread, t))
    bound = np.where(bound >= 0, rows[np.maximum(bound, 0)], -1)
    cat = flows["cat"].cat.codes.to_numpy().astype(np.int64)
    fid = flows["id"].cat.codes.to_numpy().astype(np.int64)
    ph = flows["ph"].to_numpy(dtype=object)
    order = np.lexsort((np.select([ph == "s", ph == "t"], [0, 1], 2), t, fid, cat))
    cat, fid, ph, row = cat[order], fid[order], ph[order], bound[order]
    # An edge runs from a start/step point to the next step/finish point of the same flow.
    link = (cat[:-1] == cat[1:]) & (fid[:-1] == fid[1:]) & (ph[:-1] != "f") & (ph[1:] != "s")
    src, dst = row[:-1][link], row[1:][link]
    ok = (src >= 0) & (dst >= 0) & (src != dst)
    out = pd.DataFrame({S.SRC: src[ok], S.DST: dst[ok]})
    out.attrs["unbound"] = int((bound < 0).sum())
    return out
