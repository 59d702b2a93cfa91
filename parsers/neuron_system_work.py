"""A system profile's executions as device work: ``nc_exec_running`` read as the span it is.

The runtime writes one ``nc_exec_running`` per execution and physical core, from the device
starting the NEFF to its end (a start/stop pair in the runtime's JSON, a slice with a duration
elsewhere: neuron-real-output.md), and a ``cc_running`` for each collective inside it. The span
holds the device's work *and* its waits in the collectives, so it is cut at the worker's
``cc_running`` events: the pieces before, between and after them are ``compute`` on one track per
physical core (named alike on every rank, so the same execution's work pairs with its peers'),
each piece points to the collective that follows it and each collective to the piece after it.
A rank that computes longer then arrives late, its peers wait in ``cc_running``, and a replay at
the median pace moves every later execution up. Every piece of an execution carries its ordinal
on the worker as its ``step``; the spans themselves go to ``meta.info["execution_spans_ns"]``
(for the join with device profiles, which hold the device work in detail).

Flow edges that end in an execution's piece but whose source ends after that piece starts
(``nrt_execute`` encloses its execution; the cores of one LNC>1 execution share a flow) are not
dependencies: they are dropped and counted.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracediag.model import schema as S
from tracediag.model.assembly import TRACK_ENGINE, TRACK_KIND_COL, TRACK_LABEL, RankPart
from tracediag.parsers.neuron_system_names import COLLECTIVE, EXECUTION

#: Track of the first physical core's executions (others: ``nc_exec_running pcore<k>``) and
#: of the worker's collectives: the same names on every rank.
WORK_TRACK, CC_TRACK = EXECUTION, COLLECTIVE
SPANS_INFO = "execution_spans_ns"


def execution_work(part: RankPart) -> RankPart:
    """``part`` with its ``nc_exec_running`` markers as compute pieces (see the module)."""
    ev = part.events
    if not len(ev):
        return part
    name = ev[S.NAME].astype(str).to_numpy()
    kind = ev[S.KIND].astype(str).to_numpy()
    exe = np.flatnonzero((name == EXECUTION) & (kind == "marker"))
    if not len(exe):
        return part
    cc = np.flatnonzero((name == COLLECTIVE) & (kind == "collective"))
    cc = cc[np.argsort(ev[S.TS].to_numpy(dtype=np.int64)[cc], kind="stable")]
    ts = ev[S.TS].to_numpy(dtype=np.int64)
    end = ts + ev[S.DUR].to_numpy(dtype=np.int64)
    cs, ce = ts[cc], end[cc]
    s, t = ts[exe], end[exe]
    part.meta.info[SPANS_INFO] = np.stack([s, t], axis=1).tolist()
    # The collectives starting inside each execution cut it into cuts + 1 pieces.
    lo = np.searchsorted(cs, s, side="left")
    cuts = np.searchsorted(cs, t, side="left") - lo
    owner = np.repeat(np.arange(len(exe)), cuts + 1)
    j = np.arange(len(owner)) - np.repeat(np.cumsum(cuts + 1) - (cuts + 1), cuts + 1)
    k = lo[owner] + j  # the collective after piece j (valid where j < cuts)
    before, after = np.clip(k - 1, 0, None), np.clip(k, 0, max(len(cc) - 1, 0))
    p_start = np.where(j == 0, s[owner], ce[before] if len(cc) else s[owner])
    p_end = np.where(j == cuts[owner], t[owner], cs[after] if len(cc) else t[owner])
    p_start = np.minimum(p_start, t[owner])
    p_end = np.maximum(p_end, p_start)
    # Piece 0 is the original row; the others are new rows after the part's events.
    first = j == 0
    rows = np.empty(len(owner), dtype=np.int64)
    rows[first] = exe
    rows[~first] = len(ev) + np.arange(int((~first).sum()))
    extra = ev.iloc[exe[owner[~first]]].reset_index(drop=True)
    events = pd.concat([ev, extra], ignore_index=True) if len(extra) else ev.copy()
    for col in ev.columns:  # keep text columns categorical
        if isinstance(ev[col].dtype, pd.CategoricalDtype) and events[col].dtype == object:
            events[col] = events[col].astype("category")
    events.loc[rows, S.TS] = p_start
    events.loc[rows, S.DUR] = p_end - p_start
    _relabel(events, rows, exe[owner], cc, ev)
    step = _execution_steps(ev, exe)
    if S.STEP not in events:
        events[S.STEP] = np.nan
    events.loc[rows, S.STEP] = step[owner]
    if len(cc):  # a collective is in the step of the execution it sits in
        order = np.argsort(s, kind="stable")
        holder = order[np.clip(np.searchsorted(s[order], cs, side="right") - 1, 0, None)]
        events.loc[cc, S.STEP] = step[holder]
    cut = np.flatnonzero(j < cuts[owner])
    into_cc = pd.DataFrame({S.SRC: rows[cut], S.DST: cc[k[cut]], S.EDGE_KIND: "dependency"})
    out_cc = pd.DataFrame({S.SRC: cc[k[cut]], S.DST: rows[cut + 1], S.EDGE_KIND: "dependency"})
    kept = _timely_edges(part, events, rows)
    part.events = events
    part.edges = pd.concat([kept, into_cc, out_cc], ignore_index=True)
    return part


def _relabel(events: pd.DataFrame, rows, exe_of_row, cc, ev) -> None:
    """Pieces -> compute on ``nc_exec_running[ pcore<k>]`` (k: the core's order on the worker),
    collectives -> the worker's ``cc_running`` track."""
    core_label = ev[TRACK_LABEL].astype(str).to_numpy()[exe_of_row]
    codes, uniques = pd.factorize(core_label, sort=True)
    names = np.array([WORK_TRACK] + [f"{WORK_TRACK} pcore{i}" for i in range(1, len(uniques))])
    for col, values, where in (
        (TRACK_LABEL, names[codes], rows),
        (TRACK_KIND_COL, np.full(len(rows), "compute_engine"), rows),
        (S.KIND, np.full(len(rows), "compute"), rows),
        (TRACK_ENGINE, np.full(len(rows), "nc"), rows),
        (TRACK_LABEL, np.full(len(cc), CC_TRACK), cc),
        (TRACK_KIND_COL, np.full(len(cc), "cc_core"), cc),
    ):
        if col not in events:
            continue
        current = events[col].astype(object).to_numpy(copy=True)
        current[where] = values
        events[col] = pd.Categorical(current)


def _execution_steps(ev: pd.DataFrame, exe: np.ndarray) -> np.ndarray:
    """Per execution row: its ordinal among the executions of its core (time order)."""
    label = ev[TRACK_LABEL].astype(str).to_numpy()[exe]
    ts = ev[S.TS].to_numpy(dtype=np.int64)[exe]
    return pd.Series(ts).groupby(label).rank(method="first").to_numpy(dtype=np.float64) - 1.0


def _timely_edges(part: RankPart, events: pd.DataFrame, rows: np.ndarray) -> pd.DataFrame:
    """The part's edges, less those into a piece whose source ends after the piece starts."""
    edges = part.edges
    if not len(edges):
        return edges
    src, dst = edges[S.SRC].to_numpy(np.int64), edges[S.DST].to_numpy(np.int64)
    ts = events[S.TS].to_numpy(dtype=np.int64)
    end = ts + events[S.DUR].to_numpy(dtype=np.int64)
    late = np.isin(dst, rows) & (end[src] > ts[dst])
    part.meta.count(
        "system profile: flow edges into an execution that do not precede it", int(late.sum())
    )
    return edges.loc[~late].reset_index(drop=True)
