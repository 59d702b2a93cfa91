"""Ranks of a Neuron system profile's events: from ``worker_gid``, else from where the worker ran.

Real ``system_profile.json`` (``neuron-explorer view --output-format json``), the runtime's own
trace JSON and older Perfetto system traces carry no ``worker_gid``; a worker is then one
NeuronCore of one process of one instance. The job's ranks are the workers in order:

- with ``worker_gid`` (an event without one takes its process's): rank = the gid itself. The
  documentation calls it "a unique global identifier for each NeuronCore across all instances"
  (the global worker id, as ``profile_rank_<i>`` names a device profile's), so a job's gids
  32..35 are ranks 32..35, as its device profiles ``profile_rank_32``.. and Metadata
  ``worker_gid`` say: renumbering them would split one rank's system and device parts;
- without (nothing identifies the rank, so ranks are numbered from 0): a worker is ``(instance_id, process_id, nc_idx)``; workers are ordered by instance
  (its id as text), then by the first ``device_core_idx`` the worker's hardware events name,
  then by process id, then by ``nc_idx``. An event without ``nc_idx`` (framework events) belongs
  to its process's first worker.

Everything is columnar: one ``groupby``/``factorize`` per key, no loop over events.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

#: The fields that place an event on a worker (any may be absent).
WORKER_FIELDS = ("worker_gid", "instance_id", "process_id", "nc_idx", "device_core_idx")


def _number(col: pd.Series | None, n: int) -> pd.Series:
    """Integers (ids may be strings) as float64 with NaN where missing; exact to 2**53, which
    every worker id is far below."""
    if col is None:
        return pd.Series(np.full(n, np.nan))
    col = pd.Series(np.asarray(col, dtype=object))
    return pd.to_numeric(col.astype("string"), errors="coerce").astype("float64")


def _first_per(key: np.ndarray, values: pd.Series) -> pd.Series:
    """Fill each row's missing value with the first known value of its key group."""
    return values.fillna(values.groupby(key).transform("first"))


def worker_ranks(fields: dict[str, pd.Series | None], n: int) -> tuple[np.ndarray, str, dict]:
    """Per event: its rank (-1 where no worker can be told), how ranks were found, and facts
    for ``meta.info`` (``worker_gid`` per rank when known). ``fields``: the
    :data:`WORKER_FIELDS` columns, each None when the profile lacks it."""
    gid = _number(fields.get("worker_gid"), n)
    instance = fields.get("instance_id")
    instance = (
        pd.Series(np.full(n, ""), dtype=object)
        if instance is None
        else pd.Series(np.asarray(instance, dtype=object))
        .astype("string")
        .fillna("")
        .astype(object)
    )
    process = _number(fields.get("process_id"), n)
    proc_key = pd.factorize(
        pd.MultiIndex.from_arrays([instance.to_numpy(), process.fillna(-1).to_numpy()])
    )[0]
    gid = _first_per(proc_key, gid)
    if gid.notna().any():
        rank = np.full(n, -1, dtype=np.int64)
        known = gid.notna().to_numpy()
        rank[known] = gid.to_numpy()[known].astype(np.int64)
        return rank, "worker_gid", {"worker_gid_of_rank": np.unique(rank[known]).tolist()}
    nc = _number(fields.get("nc_idx"), n)
    # Framework events have no NeuronCore: they go to their process's first worker.
    first_nc = nc.groupby(proc_key).transform("min")
    nc = nc.fillna(first_nc).fillna(0)
    worker_key = pd.factorize(pd.MultiIndex.from_arrays([proc_key, nc.to_numpy()]))[0]
    core = _number(fields.get("device_core_idx"), n)
    workers = pd.DataFrame(
        {"w": worker_key, "inst": instance.to_numpy(), "core": core, "pid": process, "nc": nc}
    ).groupby("w", sort=True)
    order = pd.DataFrame(
        {
            "inst": workers["inst"].first(),
            "core": workers["core"].min().fillna(np.inf),
            "pid": workers["pid"].first().fillna(np.inf),
            "nc": workers["nc"].first(),
        }
    ).sort_values(["inst", "core", "pid", "nc"], kind="stable")
    rank_of_worker = pd.Series(np.arange(len(order)), index=order.index)
    rank = rank_of_worker.reindex(worker_key).to_numpy(dtype=np.int64)
    how = (
        "instance_id/process_id/nc_idx"
        if fields.get("instance_id") is not None
        else ("process_id/nc_idx (no instance_id: the order across instances is a guess)")
    )
    return rank, how, {}
