"""Whether a Kineto trace holds every operator the profiler recorded, or a sampled subset.

The PyTorch profiler numbers every operator it records (``args["External id"]`` of a
``cpu_op``, one sequence per process, threads included): in a whole trace, consecutive recorded
operators' ids differ by one steady stride (1 on every real trace in ``../shared/traces``, V100
to MI300 and MTIA, for 94-100% of the neighbours; the rest are the profiling window's edges; 2
in this project's generator). A file cut down after the capture (HTA's sampled test traces keep
~1.4% of the ids; the commonest difference, 1, holds for 37% of the neighbours) misses the
operators, launches and kernels between the ones it kept: its gaps are not idle time, and
nothing priced on them (a host stall, an idle device) is real.

:func:`note_sampling` adds a ``profile_notes`` entry (TRC507 reports it) and
``meta.info["sampled_subset"]`` (what HST401 reads) when the operators' ids say so.
"""

from __future__ import annotations

import numpy as np

from tracediag.model import schema as S
from tracediag.parsers import kineto

#: Fewer recorded operators than this say nothing either way.
MIN_OPS = 100
#: A trace is a sampled subset when fewer of its consecutive operators than this differ by the
#: commonest stride (whole traces: 0.94 and above; sampled ones: 0.37).
MIN_STEADY_SHARE = 0.5

INFO_KEY = "sampled_subset"


def note_sampling(rows: kineto.Rows, meta: S.RankMeta) -> None:
    """Record in ``meta`` that the trace is a sampled subset, when its operators' ids say so."""
    ops = rows.where("cpu_op", gpu=False)
    ids = rows.args.number("External id", ops)
    ids = np.unique(ids[np.isfinite(ids) & (ids >= 0)])  # sorted: the profiler's order
    if len(ids) < MIN_OPS:
        return
    strides, counts = np.unique(np.diff(ids), return_counts=True)
    steady = float(counts.max() / counts.sum())
    if steady >= MIN_STEADY_SHARE:
        return
    stride = int(strides[np.argmax(counts)])
    spanned = int((ids[-1] - ids[0]) // stride + 1)
    kept = len(ids)
    meta.info[INFO_KEY] = {
        "ops_recorded": kept,
        "op_ids_spanned": spanned,
        "steady_share": round(steady, 3),
    }
    meta.info.setdefault("profile_notes", []).append(
        {
            "kind": "sampled trace",
            "severity": "warning",
            "message": (
                f"the trace is a sampled subset: it holds {kept:,} of the {spanned:,} operators "
                f"the profiler numbered from its first to its last ({100 * kept / spanned:.1f}%), "
                f"and only {100 * steady:.0f}% of its operators follow each other in that "
                "numbering. The operators, launches and kernels between them are missing, so "
                "the gaps between recorded events are not idle time: HST401 prices no host "
                "stall on this rank, and its idle times (CMP301, the breakdown's idle) are upper "
                "bounds."
            ),
        }
    )
