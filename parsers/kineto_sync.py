"""Synchronisation edges of a Kineto trace (kind ``sync``).

Kineto's CUPTI synchronisation records (``cat: cuda_sync``) share their correlation id with the
host call and say what it waited for:

- ``Stream Wait Event`` (``cudaStreamWaitEvent``): the GPU work recorded by the matching
  ``cudaEventRecord`` (``wait_on_cuda_event_record_corr_id`` on ``wait_on_stream``: the last work
  launched on that stream before the record call) -> the first work launched on the waiting stream
  after the wait call.
- ``Event Sync`` (``cudaEventSynchronize``): that recorded work -> the host call.
- Stream and device synchronisation (and any sync call without a record, e.g. HIP): the last GPU
  work ending inside the call, on the synchronised stream when a record names it, else on any
  stream of the device (or of the rank) -> the host call.

Launch order is correlation order (CUPTI/roctracer ids increase with API calls).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracediag.model import schema as S
from tracediag.parsers.kineto import GPU_WORK, KIND, Rows

_NO_STREAM = (-1, 2**32 - 1)  # "no stream" as Kineto writes it (int32 or uint32 -1)


def sync_edges(rows: Rows, kind: np.ndarray) -> pd.DataFrame:
    """Edges GPU work -> GPU work (stream waits) and GPU work -> host sync call."""
    work = rows.where(*GPU_WORK, gpu=True)
    calls = np.flatnonzero((kind == KIND["sync"]) & ~rows.on_gpu)
    if not len(work) or not len(calls):
        return _edges([], [])
    records = rows.where("gpu_sync", gpu=True)
    is_wait, is_event_sync, is_stream_sync = _record_kinds(rows, records)
    # Streams and devices are named by text ("{device}/{stream}", "{pid}/{tid}", "{pid}"), as
    # ids of the distinct texts: the searches compare integers, each text is built once.
    texts = _Texts()
    device = rows.args.number("device", records)
    pid_text = texts.ids(rows.pid_categories)[rows.pid_codes[records]]
    device_text = np.where(np.isfinite(device), texts.int_ids(device), pid_text)
    waits_on = texts.joined(device_text, texts.int_ids(rows.args.number("wait_on_stream", records)))
    stream = rows.args.number("stream", records)
    on_stream = texts.joined(device_text, texts.int_ids(stream))
    recorded_corr = rows.args.number("wait_on_cuda_event_record_corr_id", records)
    rec_corr = rows.corr[records]

    w_stream = _per_track_text(rows, work, lambda pid, tid: f"{pid}/{tid}", texts)
    launched = np.isfinite(rows.corr[work])
    w_key, w_corr = w_stream[launched], rows.corr[work][launched]
    recorded = _search(w_key, w_corr, waits_on, recorded_corr, "before")
    recorded = _row_at(work[launched], recorded)

    src, dst = [], []
    # Stream waits: recorded work -> first work launched on the waiting stream after the wait.
    first_after = _search(w_key, w_corr, on_stream, rec_corr, "after")
    first_after = _row_at(work[launched], first_after)
    ok = is_wait & (recorded >= 0) & (first_after >= 0)
    src.append(recorded[ok])
    dst.append(first_after[ok])

    call_by_corr = pd.Series(calls, index=rows.corr[calls])
    call_by_corr = call_by_corr[~call_by_corr.index.duplicated()]
    call_of_record = call_by_corr.reindex(rec_corr).to_numpy()
    has_call = np.isfinite(call_of_record)
    # Event synchronize: recorded work -> the host call.
    is_event_sync &= has_call & (recorded >= 0)
    src.append(recorded[is_event_sync])
    dst.append(call_of_record[is_event_sync].astype(np.int64))

    # Every other sync call: the last work that ends inside it, on the narrowest known scope.
    handled = call_of_record[is_event_sync].astype(np.int64)
    rest = np.setdiff1d(calls, handled)  # sorted, distinct
    anywhere = texts.ids(["*"])[0]
    scope = np.full(len(rest), anywhere, dtype=np.int64)
    stream_known = has_call & is_stream_sync & np.isfinite(stream)
    stream_known &= ~np.isin(stream, _NO_STREAM)
    device_known = has_call & np.isfinite(device)
    for known, key in ((device_known, device_text), (stream_known, on_stream)):
        idx = call_of_record[known].astype(np.int64)
        sel = np.isin(idx, rest)
        scope[np.searchsorted(rest, idx[sel])] = key[known][sel]  # the last record wins
    # Work on each scope level (stream, device, anywhere), only of the scopes asked for.
    levels = (
        w_stream,
        _per_track_text(rows, work, lambda pid, _tid: str(pid), texts),
        np.full(len(work), anywhere, dtype=np.int64),
    )
    asked = np.unique(scope)
    picked = [np.flatnonzero(np.isin(level, asked)) for level in levels]
    w_scope = np.concatenate([level[i] for level, i in zip(levels, picked, strict=True)])
    w_rows = np.concatenate([work[i] for i in picked])
    last = _search(w_scope, rows.end[w_rows], scope, rows.end[rest], "at_or_before")
    last_row = _row_at(w_rows, last)
    inside = (last_row >= 0) & (rows.end[np.maximum(last_row, 0)] >= rows.ts[rest])
    src.append(last_row[inside])
    dst.append(rest[inside])
    return _edges(src, dst)


class _Texts:
    """Integer ids of texts: equal texts, equal ids."""

    def __init__(self) -> None:
        self._id: dict[str, int] = {}
        self._text: list[str] = []

    def ids(self, texts) -> np.ndarray:
        """The id of each text."""
        out = np.empty(len(texts), dtype=np.int64)
        for i, text in enumerate(texts):  # a loop over distinct texts, not events
            if text not in self._id:
                self._id[text] = len(self._text)
                self._text.append(text)
            out[i] = self._id[text]
        return out

    def int_ids(self, values: np.ndarray) -> np.ndarray:
        """The id of each value's integer text ('?' where not finite)."""
        ok = np.isfinite(values)
        codes, distinct = pd.factorize(np.where(ok, values, 0).astype(np.int64))
        per_code = self.ids([str(v) for v in distinct] + ["?"])
        return per_code[np.where(ok, codes, len(distinct))]

    def joined(self, first: np.ndarray, second: np.ndarray) -> np.ndarray:
        """The id of ``"{first}/{second}"`` of each pair of ids."""
        codes, pairs = pd.factorize(first * (len(self._text) + 1) + second)
        left, right = np.divmod(pairs, len(self._text) + 1)
        pair_texts = [f"{self._text[a]}/{self._text[b]}" for a, b in zip(left, right, strict=True)]
        return self.ids(pair_texts)[codes]


def _per_track_text(rows: Rows, idx: np.ndarray, text, texts: _Texts) -> np.ndarray:
    """Ids of ``text(pid, tid)`` of the given rows, built once per track (not per row)."""
    pids, tids = rows.pid_of(rows.track_first), rows.tid_of(rows.track_first)
    per_track = texts.ids([text(pid, tid) for pid, tid in zip(pids, tids, strict=True)])
    return per_track[rows.thread[idx]]


def _record_kinds(rows: Rows, records: np.ndarray) -> tuple[np.ndarray, ...]:
    """Whether each sync record is a stream wait, an event sync, a stream sync: by its
    ``cuda_sync_kind``, else its name, lower-cased (evaluated once per distinct text)."""
    kind = rows.args.value("cuda_sync_kind", records)
    given = np.where(pd.notna(kind), kind, rows.name_of(records))
    try:
        codes, distinct = pd.factorize(given, use_na_sentinel=False)
    except TypeError:  # unhashable values (lists) stand for their text
        as_text = np.array([str(v) for v in given], dtype=object)
        codes, distinct = pd.factorize(as_text, use_na_sentinel=False)
    what = np.char.lower(np.asarray(distinct, dtype=object).astype(str))
    return tuple(
        (np.char.find(what, word) >= 0)[codes] for word in ("wait", "event sync", "stream sync")
    )


def _row_at(rows: np.ndarray, found: np.ndarray) -> np.ndarray:
    """``rows[found]`` where ``found`` >= 0, else -1 (``rows`` may be empty)."""
    out = np.full(len(found), -1, dtype=np.int64)
    out[found >= 0] = rows[found[found >= 0]]
    return out


def _search(
    w_key: np.ndarray, w_val: np.ndarray, q_key: np.ndarray, q_val: np.ndarray, how: str
) -> np.ndarray:
    """Per query, the position in ``w_*`` of the entry with the same key that is the last with a
    value ``before`` (<) or ``at_or_before`` (<=) the query's value, or the first ``after`` (>);
    -1 where none. Keys are integers; one loop step per key queried (few: streams, devices), each
    sorting only that key's entries (in time order already, which the stable sort exploits)."""
    out = np.full(len(q_key), -1, dtype=np.int64)
    q_ok = np.flatnonzero(np.isfinite(q_val))
    for key in np.unique(q_key[q_ok]):
        q = q_ok[q_key[q_ok] == key]
        w = np.flatnonzero(w_key == key)
        if not len(w):
            continue
        w = w[np.argsort(w_val[w], kind="stable")]
        vals = w_val[w]
        if how == "after":
            k = np.searchsorted(vals, q_val[q], side="right")
            out[q] = np.where(k < len(w), w[np.minimum(k, len(w) - 1)], -1)
        else:
            k = np.searchsorted(vals, q_val[q], side="left" if how == "before" else "right") - 1
            out[q] = np.where(k >= 0, w[np.maximum(k, 0)], -1)
    return out


def _edges(src: list, dst: list) -> pd.DataFrame:
    s = np.concatenate(src).astype(np.int64) if src else np.zeros(0, np.int64)
    d = np.concatenate(dst).astype(np.int64) if dst else np.zeros(0, np.int64)
    return pd.DataFrame({S.SRC: s, S.DST: d, S.EDGE_KIND: "sync"})
