"""Consumers of received buffers that the trace does not bind: ``receive_use`` edges.

A point-to-point receive (the target side of a ``CollectivePermute``, a ``recv``) lands in a
buffer that later work reads. The trace names that reader only sometimes: a semaphore wait in
the consumer's operands, or a stall that the receive's end explains (both become edges before
this runs). A receive that arrives before its reader is ready leaves no trace of the
dependency, and a what-if that speeds the reader up then lets it run ahead of its data (a
pipeline stage sped up in a replay would start a backward pass before its gradient arrives).

The same code consumes every buffer a link delivers: each micro-batch's forward reads the
activation its predecessor stage sent, with the same instructions. So a link's known consumers
(receive -> event edges, recorded or inferred, into another track) give the consumer's
*signature*, its (track, name, operation, source location); the signature's occurrences on the rank, in
time order, are the consumer's runs, ``m`` per receive when they number ``m`` times the link's
receives. Where every known consumer of the link sits at occurrence ``a + m * k`` of its
receive ``k`` (in end order), and every such occurrence starts at or after its receive's end
(a buffer is read after it lands), the unknown ones are taken to sit there too. Otherwise (a
pipeline's warm-up and cool-down run the code more often between some receives than others)
each receive's reader is the first occurrence that starts after its buffer landed and after
the previous receive's reader, accepted only when that rule finds every known reader. Each
reader found becomes a ``receive_use`` edge. Events with neither an operation (an HLO name) nor
a source location have no signature: a name and a track alone repeat too often to tell one
consumer from the next.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracediag.graph.wait_evidence import empty_evidence_frame, evidence_frame
from tracediag.model import schema as S
from tracediag.model.collective_ops import one_sided_sources

RECEIVE_USE = "receive_use"

_RECEIVE_OPS = ("recv",)  # two-sided receives, besides one-sided targets


def receive_use_edges(
    trace: S.Trace, known: pd.DataFrame, pred_end: np.ndarray, pred_ev: np.ndarray
) -> pd.DataFrame:
    """``receive_use`` edges receive -> consumer with their evidence (see the module docstring).

    ``known``: the edges already made (SRC, DST), recorded and inferred; ``pred_end`` and
    ``pred_ev``: per event, its latest recorded predecessor's end and id
    (:func:`tracediag.graph.idle_waits.recorded_predecessors`)."""
    ev, coll = trace.events, trace.collectives
    if not len(coll) or not len(known) or (S.SOURCE not in ev and S.OP not in ev):
        return empty_evidence_frame()
    recv = _receives(coll)
    if not len(recv):
        return empty_evidence_frame()
    n = len(ev)
    link_of = np.full(n, -1, dtype=np.int64)
    link_of[recv[S.EVENT].to_numpy()] = recv["link"].to_numpy()
    sig = _signatures(ev)
    track = ev[S.TRACK].to_numpy()
    src, dst = known[S.SRC].to_numpy(), known[S.DST].to_numpy()
    use = (link_of[src] >= 0) & (sig[dst] >= 0) & (track[src] != track[dst])
    if not use.any():
        return empty_evidence_frame()
    ts = ev[S.TS].to_numpy()
    # Occurrences of each signature in time order: positions by (signature, start).
    occ = np.flatnonzero(sig >= 0)
    occ = occ[np.lexsort((ts[occ], sig[occ]))]
    bounds = np.searchsorted(sig[occ], np.arange(sig.max() + 2))
    position = np.full(n, -1, dtype=np.int64)  # an event's index among its signature's
    position[occ] = np.arange(len(occ)) - bounds[sig[occ]]
    # Per link: its receives in end order.
    recv = recv.sort_values(["link", S.END], kind="stable")
    r_ev = recv[S.EVENT].to_numpy()
    r_end = recv[S.END].to_numpy()
    r_link = recv["link"].to_numpy()
    r_bounds = np.searchsorted(r_link, np.arange(r_link.max() + 2))
    order_in_link = np.arange(len(r_ev)) - r_bounds[r_link]
    k_of = np.full(n, -1, dtype=np.int64)
    k_of[r_ev] = order_in_link
    pairs = pd.DataFrame({"link": link_of[src[use]], "sig": sig[dst[use]], "src": src[use]})
    pairs["k"] = k_of[pairs["src"].to_numpy()]
    pairs["dst"] = dst[use]
    made_src, made_dst = [], []
    # One pass per (link, signature): a job has few links and few consumer codes per link.
    for (link, s), grp in pairs.groupby(["link", "sig"], sort=False):
        lo, hi = r_bounds[link], r_bounds[link + 1]
        made = _predicted_uses(
            occ[bounds[s] : bounds[s + 1]],
            position[grp["dst"].to_numpy()],
            grp["k"].to_numpy(),
            ts,
            r_end[lo:hi],
        )
        if made is not None:
            made_src.append(r_ev[lo + made[0]])
            made_dst.append(made[1])
    if not made_src:
        return empty_evidence_frame()
    s_arr, d_arr = np.concatenate(made_src), np.concatenate(made_dst)
    # Not the edges already made (only those into a signature could be repeated).
    new = ~np.isin(s_arr * n + d_arr, pairs["src"].to_numpy() * n + pairs["dst"].to_numpy())
    s_arr, d_arr = s_arr[new].astype(np.int64), d_arr[new].astype(np.int64)
    if not len(s_arr):
        return empty_evidence_frame()
    end = ts + ev[S.DUR].to_numpy()
    return evidence_frame(
        s_arr,
        d_arr,
        ev[S.RANK].to_numpy()[d_arr],
        ts[d_arr] - end[s_arr],
        np.maximum(ts[d_arr] - pred_end[d_arr], 0),
        pred_ev[d_arr],
        np.full(len(d_arr), -1),
        np.full(len(d_arr), -1),
        kind=RECEIVE_USE,
    )


def _receives(coll: pd.DataFrame) -> pd.DataFrame:
    """The receiving rows of point-to-point transfers, each with its ``link`` (a code per rank,
    operation and group)."""
    op = coll[S.COLL_OP].astype(str)
    side = one_sided_sources(op.to_numpy(), coll[S.GROUP].to_numpy(), coll[S.RANK].to_numpy())
    is_recv = (side == 0) | op.str.lower().isin(_RECEIVE_OPS).to_numpy()
    recv = coll.loc[is_recv, [S.EVENT, S.RANK, S.COLL_OP, S.GROUP, S.END]].copy()
    recv["link"] = recv.groupby([S.RANK, S.COLL_OP, S.GROUP], observed=True, sort=False).ngroup()
    return recv


def _signatures(ev: pd.DataFrame) -> np.ndarray:
    """Per event: a code per (rank, track, name, operation, source location); -1 where it has
    neither an operation nor a location."""
    parts = [_codes(ev[c]) if c in ev else np.full(len(ev), -1) for c in (S.OP, S.SOURCE)]
    keys = pd.MultiIndex.from_arrays(
        [ev[S.RANK].to_numpy(), ev[S.TRACK].to_numpy(), _codes(ev[S.NAME]), *parts]
    )
    codes = pd.factorize(keys)[0].astype(np.int64)
    codes[(parts[0] < 0) & (parts[1] < 0)] = -1
    return codes


def _codes(col: pd.Series) -> np.ndarray:
    """A code per distinct value, -1 where missing (a categorical's own codes)."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        return col.cat.codes.to_numpy()
    return pd.factorize(col)[0]


def _predicted_uses(occurrences, known_at, known_k, ts, ends):
    """(receive orders, consumer events) a signature's ``occurrences`` predict for a link's
    receives ending at ``ends`` (see the module docstring), or None when its known consumers
    (at occurrence ``known_at`` of receive ``known_k``) fit neither way."""
    k = np.arange(len(ends))
    at = _regular_positions(len(occurrences), known_at, known_k, len(ends))
    if at is not None and (ts[occurrences[at]] >= ends).all():
        return k, occurrences[at]
    # First run at or after each buffer landed, each receive's after the previous one's: it
    # must find every known reader where the known readers say it.
    at = np.searchsorted(ts[occurrences], ends, side="left")
    at = np.maximum.accumulate(at - k) + k
    if (at[known_k] != known_at).any():
        return None
    inside = at < len(occurrences)
    return k[inside], occurrences[at[inside]]


def _regular_positions(n_occ: int, known_at, known_k, n_recv: int) -> np.ndarray | None:
    """Occurrence ``a + m * k`` for each receive ``k``, with ``m`` runs per receive, where every
    known reader sits so; None otherwise."""
    if n_occ % n_recv:
        return None
    m = n_occ // n_recv
    a = known_at - m * known_k
    if (a != a[0]).any() or not 0 <= a[0] < m:
        return None
    return a[0] + m * np.arange(n_recv)
