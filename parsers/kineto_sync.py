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

from tracediag import schema as S
from tracediag.parsers.kineto import GPU_WORK, Rows

_NO_STREAM = (-1, 2**32 - 1)  # "no stream" as Kineto writes it (int32 or uint32 -1)


def sync_edges(rows: Rows, kind: np.ndarray) -> pd.DataFrame:
    """Edges GPU work -> GPU work (stream waits) and GPU work -> host sync call."""
    work = rows.where(*GPU_WORK, gpu=True)
    calls = np.flatnonzero((kind == "sync") & ~rows.on_gpu)
    if not len(work) or not len(calls):
        return _edges([], [])
    records = rows.where("gpu_sync", gpu=True)
    what = _record_kind(rows, records)
    device = rows.args.number("device", records)
    device_text = np.where(np.isfinite(device), _int_text(device), rows.pid[records])
    waits_on = device_text + "/" + _int_text(rows.args.number("wait_on_stream", records))
    stream = rows.args.number("stream", records)
    on_stream = device_text + "/" + _int_text(stream)
    recorded_corr = rows.args.number("wait_on_cuda_event_record_corr_id", records)
    rec_corr = rows.corr[records]

    w_stream = _per_track_text(rows, work, lambda pid, tid: f"{pid}/{tid}")
    launched = np.isfinite(rows.corr[work])
    recorded = _search(
        w_stream[launched], rows.corr[work][launched], waits_on, recorded_corr, "before"
    )
    recorded = np.where(recorded >= 0, work[launched][np.maximum(recorded, 0)], -1)

    src, dst = [], []
    # Stream waits: recorded work -> first work launched on the waiting stream after the wait.
    is_wait = np.char.find(what, "wait") >= 0
    first_after = _search(
        w_stream[launched], rows.corr[work][launched], on_stream, rec_corr, "after"
    )
    first_after = np.where(first_after >= 0, work[launched][np.maximum(first_after, 0)], -1)
    ok = is_wait & (recorded >= 0) & (first_after >= 0)
    src.append(recorded[ok])
    dst.append(first_after[ok])

    call_by_corr = pd.Series(calls, index=rows.corr[calls])
    call_by_corr = call_by_corr[~call_by_corr.index.duplicated()]
    call_of_record = call_by_corr.reindex(rec_corr).to_numpy()
    has_call = np.isfinite(call_of_record)
    # Event synchronize: recorded work -> the host call.
    is_event_sync = (np.char.find(what, "event sync") >= 0) & has_call & (recorded >= 0)
    src.append(recorded[is_event_sync])
    dst.append(call_of_record[is_event_sync].astype(np.int64))

    # Every other sync call: the last work that ends inside it, on the narrowest known scope.
    handled = call_of_record[is_event_sync].astype(np.int64)
    rest = np.setdiff1d(calls, handled)
    scope = pd.Series("*", index=rest, dtype=object)
    stream_known = has_call & (np.char.find(what, "stream sync") >= 0) & np.isfinite(stream)
    stream_known &= ~np.isin(stream, _NO_STREAM)
    device_known = has_call & np.isfinite(device)
    for known, key in ((device_known, device_text), (stream_known, on_stream)):
        idx = call_of_record[known].astype(np.int64)
        sel = np.isin(idx, rest)
        scope.loc[idx[sel]] = key[known][sel]
    w_end = rows.end[work]
    w_scope = np.concatenate(
        [
            w_stream,
            _per_track_text(rows, work, lambda pid, _tid: str(pid)),
            np.full(len(work), "*", dtype=object),
        ]
    )
    w_rows = np.concatenate([work, work, work])
    last = _search(
        w_scope, np.tile(w_end, 3), scope.to_numpy(dtype=object), rows.end[rest], "at_or_before"
    )
    last_row = np.where(last >= 0, w_rows[np.maximum(last, 0)], -1)
    inside = (last_row >= 0) & (rows.end[np.maximum(last_row, 0)] >= rows.ts[rest])
    src.append(last_row[inside])
    dst.append(rest[inside])
    return _edges(src, dst)


def _per_track_text(rows: Rows, idx: np.ndarray, text) -> np.ndarray:
    """``text(pid, tid)`` of the given rows, built once per track (not per row)."""
    codes, first, inverse = np.unique(rows.thread[idx], return_index=True, return_inverse=True)
    per_track = np.array([text(rows.pid[idx[f]], rows.tid[idx[f]]) for f in first], dtype=object)
    return per_track[inverse] if len(codes) else np.zeros(0, dtype=object)


def _record_kind(rows: Rows, records: np.ndarray) -> np.ndarray:
    kind = rows.args.value("cuda_sync_kind", records)
    text = np.where(pd.notna(kind), kind, rows.name[records]).astype(str)
    return np.char.lower(text)


def _int_text(values: np.ndarray) -> np.ndarray:
    out = np.full(len(values), "?", dtype=object)
    ok = np.isfinite(values)
    out[ok] = values[ok].astype(np.int64).astype(str)
    return out


def _search(
    w_key: np.ndarray, w_val: np.ndarray, q_key: np.ndarray, q_val: np.ndarray, how: str
) -> np.ndarray:
    """Per query, the position in ``w_*`` of the entry with the same key that is the last with a
    value ``before`` (<) or ``at_or_before`` (<=) the query's value, or the first ``after`` (>);
    -1 where none. One loop step per key."""
    out = np.full(len(q_key), -1, dtype=np.int64)
    q_ok = np.isfinite(q_val)
    for key in pd.unique(q_key[q_ok]):
        q = np.flatnonzero(q_ok & (q_key == key))
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
