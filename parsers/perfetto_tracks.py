"""Perfetto tracks -> our tracks: labels, kinds, engines and ranks, by Neuron's conventions where
the trace follows them and by the track tree otherwise.

Neuron device profiles (``neuron-explorer view --output-format perfetto``; naming inferred from
the tool's screenshots, see neuron-formats.md section 3):

- ``<Engine> Engine - Row <k>`` (``TensorMatrix``, ``Tensor``, ``Vector``, ``Scalar``, ``GpSimd``,
  ``Sync``, ...): instructions, kind ``compute`` on a ``compute_engine`` track. Rows of one engine
  hold overlapping instructions, so each row stays its own track: row 0 is labelled like the
  Parquet reader's track (``tensor``), row k > 0 ``tensor/row<k>``; the engine is ``tensor``.
- ``DMA Engine <n> - Row <k>`` and ``q<Queue> - Row <k>``: DMA transfers, kind ``dma`` on a
  ``dma_queue`` track labelled ``dma engine <n>`` (``/row<k>`` for k > 0) or the queue name
  (``/ring<k>`` for k > 0: the rows of a queue hold the transfers its rings run at once, and
  DMA rules read a queue back from its rings' tracks, :mod:`tracediag.model.dma_rings`).
- ``S[<n>] (<Engine>)``: semaphore values: state, not work; their number goes to
  ``meta.info["semaphore_update_count"]`` as the Parquet reader's ``SemaphoreUpdate`` rows do.
- ``CC-core <n> - Row <k>`` or a bare ``CC-core <n>`` (the rows the profiler's timeline shows
  for collectives, neuron-profile-user-guide "Timeline"), and ``CC Stream <n> - Row <k>`` (our
  generator's): collectives, kind ``collective`` on a ``cc_core`` track labelled ``cc core <n>``
  or ``cc stream <n>``, with the CcOp fields as annotations (see :mod:`perfetto_collectives`).

Ranks of a device trace: the file's (or its folder's) ``profile_rank_<g>`` name, given as
``default_rank``; a file holding the device tracks of several processes (one
``Instructions`` process per NeuronCore: a ``device_profile_model_<id>.pftrace`` of a whole job)
gives each process with engine rows the rank of its pid (the worker_gid: nothing else names
the core).

Neuron system profiles: thread tracks ``gid<g>-nc<n>-tid<t>-<source>`` belong to rank ``g``
(the worker_gid); ``neuron_rt`` (runtime calls) and framework tracks are ``host`` events on
``cpu_thread`` tracks, ``neuron_hw`` tracks hold hardware markers (``marker``).

Our own export (``tracediag export``): processes ``rank <r>`` give the ranks of their tracks;
each slice's categories carry its kind, track kind, engine and device (see
:data:`CATEGORY_PREFIXES`); the ``tracediag findings`` process holds the diagnosis, not work, and
is skipped (counted).

Any other trace: a slice on a thread track (the track, or a track below it, has a thread
descriptor) is ``host`` work on a ``cpu_thread`` track; a slice on any other track (process,
async or custom tracks) is a ``marker``, kept for drill-down but not a node of the dependency
graph, since nothing says what resource it occupies. Counter tracks hold no events.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracediag.model.dma_rings import ring_track_name
from tracediag.parsers.neuron_common import ENGINE_ALIASES

_ENGINE_ROW = re.compile(r"^\s*([A-Za-z]+)\s+Engine\s*-\s*Row\s*(\d+)\s*$", re.IGNORECASE)
_DMA_ROW = re.compile(r"^\s*(DMA\s+Engine\s+\d+|q\w+)\s*-\s*Row\s*(\d+)\s*$", re.IGNORECASE)
_SEMAPHORE = re.compile(r"^\s*S\[\d+\]")
#: Collectives: ``CC Stream <n> - Row <k>`` (the convention of our generator).
_CC_ROW = re.compile(r"^\s*CC\s+Stream\s+(\d+)\s*-\s*Row\s*(\d+)\s*$", re.IGNORECASE)
#: Neuron's collective rows: ``CC-core 0 - Row 0`` or ``CC-core 0`` (row 0).
_CC_CORE = re.compile(r"^\s*CC[-\s]?core\s*(\d+)(?:\s*-\s*Row\s*(\d+))?\s*$", re.IGNORECASE)
#: Neuron system threads: ``gid33-nc1-tid4-neuron_rt``, ``gid0-nrt-nc0-tid2077393-neuron_rt``,
#: ``nrt-nc0-tid200692-neuron_rt`` (the gid is optional; :mod:`perfetto_system` ranks them).
_SYSTEM_THREAD = re.compile(r"^(?:gid(\d+)-)?(?:nrt-)?nc(\d+)-tid(\d+)-(\w+)$")
#: Process names of our export: one process per rank, and one for the findings.
RANK_PROCESS = re.compile(r"^rank (\d+)$")
FINDINGS_PROCESS = "tracediag findings"
#: Category prefixes of our export's slices (after the event kind itself).
CATEGORY_PREFIXES = {"track:": "track_kind", "engine:": "engine", "device:": "device"}


@dataclass
class TrackMap:
    """Per Perfetto track uuid (``uuid``), where its events go.

    ``label`` is unique per rank; ``skip`` names why the track's events are not kept ("" if
    they are); ``event_kind`` is the kind of its slices (instants are always markers).
    """

    table: pd.DataFrame  # uuid, label, track_kind, engine, device, event_kind, rank, skip
    neuron: str  # "device", "system" or "" (not a Neuron trace)
    ours: bool = False  # written by tracediag export (ranks from "rank <r>" processes)
    by_pid: bool = False  # device tracks of several processes: each pid is a rank


def classify(tracks: pd.DataFrame, used: np.ndarray, default_rank: int) -> TrackMap:
    """Map every used track uuid (and uuid 0, the implicit global track) to our tracks."""
    info = {int(r.uuid): r for r in tracks.itertuples(index=False)}  # a loop over tracks
    rows = [_describe(int(u), info, default_rank) for u in np.unique(used)]
    table = pd.DataFrame(
        rows,
        columns=["uuid", "base", "track_kind", "engine", "device", "event_kind", "rank", "skip"],
    )
    table["ours"] = [_process_rank(int(u), info) is not None for u in table["uuid"]]
    table["uuid"] = table["uuid"].astype(np.uint64)
    system = table["base"].str.match(_SYSTEM_THREAD.pattern).any()
    device = table["track_kind"].isin(["compute_engine", "cc_core"]).any()
    ours = bool(table.pop("ours").any())
    neuron = "system" if system else "device" if device else ""
    by_pid = neuron == "device" and not ours and _ranks_by_pid(table, info)
    table["label"] = _unique_labels(table, info)
    return TrackMap(table.drop(columns="base"), neuron, ours, by_pid)


def _ranks_by_pid(table: pd.DataFrame, info: dict) -> bool:
    """Where engine rows sit in more than one process (each NeuronCore's ``Instructions``),
    every track of such a process takes the pid as its rank (in place); whether that was so.
    A process without engine rows is no core of its own."""
    pid = np.array([_pid(int(u), info) for u in table["uuid"]], dtype=np.int64)
    device = (table["track_kind"] == "compute_engine").to_numpy()
    pids = np.unique(pid[device & (pid >= 0)])
    if len(pids) < 2:
        return False
    mine = np.isin(pid, pids)
    table.loc[mine, "rank"] = pid[mine]
    return True


def _pid(uuid: int, info: dict) -> int:
    """The pid of the track's own or nearest ancestor's descriptor (-1: none)."""
    at = _ancestor(uuid, info, lambda r: r.pid >= 0)
    return int(info[at].pid) if at is not None else -1


def _describe(uuid: int, info: dict, default_rank: int) -> tuple:
    row = info.get(uuid)
    name = _own_name(row) if row is not None else ("global" if uuid == 0 else f"track {uuid}")
    thread = _ancestor(uuid, info, lambda r: r.tid >= 0 or bool(r.thread))
    if row is not None and row.counter:
        return uuid, name, "other", "", "", "", default_rank, "counter track events"
    if _SEMAPHORE.match(name):
        return uuid, name, "other", "", "", "", default_rank, "semaphore track events"
    engine_row = _ENGINE_ROW.match(name)
    if engine_row and engine_row.group(1).lower() in ENGINE_ALIASES:
        engine = ENGINE_ALIASES[engine_row.group(1).lower()]
        label = _row_label(engine, int(engine_row.group(2)))
        return uuid, label, "compute_engine", engine, "", "compute", default_rank, ""
    cc_row = _CC_ROW.match(name)
    cc_core = _CC_CORE.match(name)
    if cc_row or cc_core:
        n, k = (cc_row or cc_core).groups()
        label = _row_label(f"cc {'stream' if cc_row else 'core'} {n}", int(k or 0))
        return uuid, label, "cc_core", "cc", "", "collective", default_rank, ""
    dma_row = _DMA_ROW.match(name)
    if dma_row:
        queue = dma_row.group(1)
        engine_track = queue.lower().startswith("dma")
        queue = " ".join(queue.lower().split()) if engine_track else queue
        row = int(dma_row.group(2))
        # A queue's rows hold its overlapping transfers, the rings that serve it at once: named
        # as the other readers name rings (a DMA engine is one ring: its rows stay rows).
        label = ring_track_name(queue, row) if row and not engine_track else _row_label(queue, row)
        return uuid, label, "dma_queue", "dma", "", "dma", default_rank, ""
    system = _SYSTEM_THREAD.match(name) or (
        _SYSTEM_THREAD.match(_own_name(info[thread])) if thread is not None else None
    )
    if system:
        gid, nc, _, source = system.groups()
        hardware = source == "neuron_hw"
        return (
            uuid, name, "other" if hardware else "cpu_thread", "nc" if hardware else "cpu",
            f"nc{nc}", "marker" if hardware else "host",
            default_rank if gid is None else int(gid), "",
        )  # fmt: skip
    process = _ancestor(uuid, info, lambda r: bool(r.process))
    if process is not None and info[process].process == FINDINGS_PROCESS:
        return uuid, name, "other", "", "", "", default_rank, "tracediag findings"
    rank = _process_rank(uuid, info)
    rank = default_rank if rank is None else rank
    if thread is not None:
        return uuid, name, "cpu_thread", "cpu", "host", "host", rank, ""
    return uuid, name, "other", "", "", "marker", rank, ""


def _process_rank(uuid: int, info: dict) -> int | None:
    """The rank of a track below one of our export's ``rank <r>`` processes."""
    process = _ancestor(uuid, info, lambda r: bool(r.process))
    match = RANK_PROCESS.match(info[process].process) if process is not None else None
    return int(match.group(1)) if match else None


def _own_name(row) -> str:
    if row.name:
        return row.name
    if row.thread:
        return row.thread
    if row.tid >= 0:
        return f"thread {row.tid}"
    if row.process:
        return row.process
    return f"process {row.pid}" if row.pid >= 0 else f"track {row.uuid}"


def _ancestor(uuid: int, info: dict, test) -> int | None:
    """The nearest of the track and its ancestors passing ``test`` (cycles are cut)."""
    seen = set()
    while uuid in info and uuid not in seen:
        seen.add(uuid)
        if test(info[uuid]):
            return uuid
        uuid = int(info[uuid].parent)
    return None


def _row_label(base: str, row: int) -> str:
    return base if row == 0 else f"{base}/row{row}"


def _unique_labels(table: pd.DataFrame, info: dict) -> pd.Series:
    """Labels unique per rank: a repeated name gains the thread ids, else the track uuid.

    Neuron engine and DMA rows keep their shared labels: two tracks of one engine row (the
    ``Tensor`` and ``TensorMatrix`` rows) are one engine, as in the other Neuron readers.
    """
    labels = table["base"].copy()
    neuron = table["track_kind"].isin(["compute_engine", "dma_queue", "cc_core"]).to_numpy()
    dup = pd.DataFrame({"r": table["rank"], "l": labels}).duplicated(keep=False).to_numpy()
    for i in np.flatnonzero(dup & ~neuron):  # a loop over tracks
        row = info.get(int(table["uuid"].iat[i]))
        if row is not None and row.tid >= 0:
            labels.iat[i] = f"{labels.iat[i]} (pid {row.pid} tid {row.tid})"
        else:
            labels.iat[i] = f"{labels.iat[i]} [{table['uuid'].iat[i]}]"
    return labels
