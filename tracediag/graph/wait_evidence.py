"""What the wait inferences of :mod:`tracediag.graph.idle_waits` and
:mod:`tracediag.graph.device_waits` share: their thresholds, edge kinds and evidence columns, the
evidence frame, and the host processes that group threads and devices."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracediag.model import schema as S

#: An event wait resumes a GPU stream this soon after the awaited work ends (AMD's cross-stream
#: waits take ~20 µs on MI300; CUDA's a few µs).
STREAM_TOLERANCE_NS = 50_000
#: A woken thread issues its first recorded event this soon after the thread it waited for
#: finished (the autograd engine hands the main thread back in 0.1-0.2 ms on real traces).
THREAD_TOLERANCE_NS = 500_000
#: A host thread silent this long was idle, not between two ops (a silence shorter than the
#: tolerance could not tell a hand-off from an op boundary).
MIN_THREAD_SILENCE_NS = 2 * THREAD_TOLERANCE_NS
#: ... or this soon when nothing else of the process started in between: then no other thread
#: of it can have woken the thread. The first backward of
#: ``kineto_df_index_resolver_1rank`` starts on the autograd thread 587 µs after the main
#: thread's last launch (``aten::ones_like``'s fill), the later ones 250-400 µs after.
QUIET_THREAD_TOLERANCE_NS = 2_000_000

#: A host thread blocked on device work resumes this soon after the work ends: a blocking
#: synchronize wakes its thread in 30-100 µs on ROCm (MI300X XPlane: the Python thread 32-45 µs
#: after each GEMM it waited for, the runtime's launch line 57-99 µs), a few µs on CUDA.
DEVICE_WAKE_TOLERANCE_NS = 100_000
#: ... and was silent at least this long while the device ran. Shorter pauses are Python's
#: overhead between ops that a starved GPU's last kernel happens to span: the host-bound
#: ResNet-50 trace (the host never waits for its GPU; HTA: cpu_bound) has 18 pauses of 30-66 µs
#: that pass every other test here, none of 100 µs.
MIN_DEVICE_WAIT_NS = 100_000

#: Edge kinds these inferences add (``EDGE_KIND`` of their edges).
STREAM_WAIT = "stream_wait"
THREAD_HANDOFF = "thread_handoff"
DEVICE_WAIT = "device_wait"
DISPATCH_WAIT = "dispatch_wait"

#: Device work the host dispatches without a recorded launch starts this soon after the host's
#: call returns (the clean-room TPU job: 11-25 µs from the dispatch's end to the step's first
#: op); it stays below the host's wake-up tolerance, whose other side this is.
DISPATCH_TOLERANCE_NS = 100_000

#: Evidence kept with each inferred edge, besides SRC, DST and EDGE_KIND: the rank; the gap from
#: the source's end to the waiter's start; how long the waiter's resource idled (stream: from
#: its latest recorded predecessor's end; thread: its silence); the recorded predecessor the
#: edge beat (-1: none); the runner-up candidate (the next latest end on the same device or
#: process, -1: none) and its end.
EVIDENCE_COLUMNS = ("rank", "gap_ns", "idle_ns", "beaten", "runner_up", "runner_up_end_ns")


def empty_evidence_frame() -> pd.DataFrame:
    """An edge frame with the evidence columns and no rows."""
    return evidence_frame(*(np.zeros(0, np.int64) for _ in range(8)), kind="")


def evidence_frame(
    src, dst, rank, gap, idle, beaten, runner, runner_end, kind: str
) -> pd.DataFrame:
    """One row per inferred edge ``src -> dst`` of ``kind``, with its evidence (see
    :data:`EVIDENCE_COLUMNS`)."""
    n = len(src)
    return pd.DataFrame(
        {
            S.SRC: np.asarray(src, np.int64),
            S.DST: np.asarray(dst, np.int64),
            S.EDGE_KIND: np.full(n, kind, dtype=object),
            "rank": np.asarray(rank, np.int64),
            "gap_ns": np.asarray(gap, np.int64),
            "idle_ns": np.asarray(idle, np.int64),
            "beaten": np.asarray(beaten, np.int64),
            "runner_up": np.asarray(runner, np.int64),
            "runner_up_end_ns": np.asarray(runner_end, np.int64),
        }
    )


def rank_track(ev: pd.DataFrame) -> np.ndarray:
    """Per event: one code per (rank, track)."""
    track = ev[S.TRACK].to_numpy()
    return np.multiply(ev[S.RANK].to_numpy(), int(track.max(initial=0)) + 1, dtype=np.int64) + track


def search_pairs(key, val, q_key, q_val, side: str) -> np.ndarray:
    """Positions of (q_key, q_val) in the (key, val)-sorted arrays (np.searchsorted on pairs)."""
    if not len(key):
        return np.zeros(len(q_key), dtype=np.int64)
    v0 = int(min(val.min(), q_val.min(initial=val.min())))
    span = int(max(val.max(), q_val.max(initial=val.max()))) - v0 + 1
    return np.searchsorted(key * span + (val - v0), q_key * span + (q_val - v0), side=side)


def process_of_rank(trace: S.Trace) -> np.ndarray:
    """Per rank (indexed by rank): a code shared by the ranks one host process drives (the
    devices of one XPlane file: ``meta.info['host_process']``), else the rank's own."""
    ranks = sorted(set(int(r) for r in trace.meta) | set(np.unique(trace.events[S.RANK]).tolist()))
    keys = [
        ("process", trace.meta[r].info["host_process"])
        if r in trace.meta and "host_process" in trace.meta[r].info
        else ("rank", r)
        for r in ranks
    ]
    out = np.zeros(max(ranks, default=0) + 1, dtype=np.int64)
    out[ranks] = pd.factorize(pd.Series(keys, dtype=object))[0]
    return out
