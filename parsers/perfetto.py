"""Reader of Perfetto protobuf traces (``.pftrace``, ``.perfetto-trace``, ``.pb``; gzip or not).

The pipeline: :mod:`perfetto_stream` (the file as a stream of packets, framing errors with byte
offsets), :mod:`perfetto_decode` (the one loop over packets: columns plus per-sequence interning
and defaults), :mod:`perfetto_tracks` (Neuron device/system conventions, thread and other tracks,
ranks), :mod:`perfetto_events` (clock conversion, begin/end pairing, annotations as fields, flows
and ``inst_dep_ids`` as edges), then :func:`neuron_part.finish_part` per rank (unusable times
dropped and counted, edges renumbered).

A file is one rank (from its name, ``rank_3``, else its folder's, ``profile_rank_3/ntff.pftrace``,
else 0) unless it is a Neuron system profile, whose ``gid<g>-...`` tracks give rank ``g``, or a
Neuron device trace holding several processes' device tracks, whose pids give the ranks. Instants are markers; see :mod:`perfetto_tracks` for
the kinds of slices.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from tracediag.model import own_export
from tracediag.model import schema as S
from tracediag.model.assembly import (
    TRACK_DEVICE,
    TRACK_ENGINE,
    TRACK_KIND_COL,
    TRACK_LABEL,
    RankPart,
)
from tracediag.model.errors import TraceInputError
from tracediag.parsers import perfetto_collectives as C
from tracediag.parsers import perfetto_device as device
from tracediag.parsers import perfetto_events as E
from tracediag.parsers import perfetto_own as own
from tracediag.parsers import perfetto_semaphores as semaphores
from tracediag.parsers.neuron_common import rank_from_name
from tracediag.parsers.neuron_part import Piece, finish_part
from tracediag.parsers.neuron_system_work import execution_work
from tracediag.parsers.perfetto_decode import decode
from tracediag.parsers.perfetto_rows import merge_serial_rows, name_engine_queues
from tracediag.parsers.perfetto_sniff import FORMAT, sniff  # noqa: F401 (the reader's declaration)
from tracediag.parsers.perfetto_system import (
    CPU_FIELD,
    NC_FIELD,
    SYSTEM_WANTED,
    hardware_to_host_clock,
    is_system_trace,
    system_slices,
)
from tracediag.parsers.perfetto_tracks import CATEGORY_PREFIXES, classify


def read(path: Path) -> list[RankPart]:
    """The file's ranks as canonical parts (see the module docstring)."""
    path = Path(path)
    wanted = E.WANTED | C.WANTED | SYSTEM_WANTED | own.WANTED | semaphores.WANTED | device.WANTED
    d = decode(path, wanted)
    counts = dict(d.counts)
    from_name, named_by = _rank_of_path(path)
    default_rank = from_name if from_name is not None else 0
    tracks = classify(d.tracks, d.events["track"].to_numpy(), default_rank)
    table = tracks.table.set_index("uuid")
    per_event = table.reindex(d.events["track"].to_numpy())
    skip = per_event["skip"].to_numpy(dtype=object)
    noted = {}
    for reason in pd.unique(skip[skip != ""]):
        if reason == "semaphore track events":  # state, not work: a count, as from Parquet
            noted["semaphore_update_count"] = int((skip == reason).sum())
        elif reason == "counter track events":  # metrics, not work: reported, not a loss
            counts["counter track events (metrics): not modelled"] = int((skip == reason).sum())
        elif reason != "tracediag findings":  # our export's diagnosis: not work, not a repair
            counts[f"{reason}: skipped"] = int((skip == reason).sum())
    ts = E.trace_times(d, counts)
    sl = E.slices(d, ts, skip == "", counts)
    if not len(sl):
        raise TraceInputError(path, "no slices (the trace holds no track events we can read)")
    owner = E.slice_of_event(sl, len(d.events))
    ann = E.annotation_table(d, owner)
    fields = E.fields(ann, len(sl))
    events = _events(d, sl, fields, table, owner)
    rank = table["rank"].reindex(sl["track"].to_numpy()).to_numpy(dtype=np.int64)
    if tracks.neuron == "device" and not tracks.ours:
        _device_tracks(events, ann, rank, counts)
    system: dict = {}
    if tracks.neuron == "system" or (not tracks.ours and is_system_trace(events[S.NAME])):
        tracks.neuron = "system"  # ranks, hardware slices: perfetto_system

        def values(name: str, n: int) -> np.ndarray:
            sub = ann[ann["name"] == name].drop_duplicates("slice", keep="last")
            per = pd.Series(sub["value"].to_numpy(dtype=object), index=sub["slice"].to_numpy())
            return per.reindex(np.arange(n)).to_numpy(dtype=object)

        rank, how, system = system_slices(
            events, ann, sl["track"].to_numpy(), d.tracks, table, values
        )
        system["rank_source"] = how
    if tracks.ours:  # our export: kinds, fields, dependencies and meta come back (perfetto_own)
        _from_categories(events, d.events["cat"].to_numpy(dtype=object)[sl["begin"].to_numpy()])
        own.event_fields(events, ann)
    collectives = C.collective_table(ann, events)  # of the kinds our export's categories restore
    flows = own.without_path_flows(d) if tracks.ours else d
    # Semaphore waits (perfetto_semaphores): device traces only; our export has its edges.
    waited, waits = (
        semaphores.semaphore_edges(d, ts, ann, events, rank, per_event)
        if tracks.neuron == "device" and not tracks.ours
        else (None, {})
    )
    edges = pd.concat(
        [
            E.flow_edges(flows, ts, owner, counts).assign(**{S.EDGE_KIND: "flow"}),
            _dependency_kinds(
                E.dependency_edges(ann, fields[S.SRC_ID], counts, fields["has_id"]), events
            ),
            waited,
            *([own.dependencies(ann, fields[S.SRC_ID], counts)] if tracks.ours else []),
        ],
        ignore_index=True,
    )
    linked: dict[int, dict] = {}  # what the inferred links counted, per rank
    if tracks.neuron == "device" and not tracks.ours:  # DMA and collective triggers
        inferred, linked = device.inferred_edges(events, ann, fields, rank, collectives, [edges])
        edges = pd.concat([edges, inferred], ignore_index=True)
    info: dict = (
        {"rank_source": "rank process", "written_by": "tracediag export"} if tracks.ours else {}
    )
    info.update(noted)
    info.update(system)
    if tracks.neuron == "system":
        sync = {f: E.exact_ints(ann, f, len(sl)) for f in (CPU_FIELD, NC_FIELD)}
        hardware_to_host_clock(events, rank, sync, info)
    own_meta = own.rank_entries(d) if tracks.ours else {}
    if tracks.by_pid:
        info["rank_source"] = "process pid"
    elif not tracks.ours and tracks.neuron != "system":
        info["rank_source"] = named_by
    parts = _parts(
        path, events, edges, collectives, rank, counts, tracks.neuron, from_name, info, own_meta
    )
    for part in parts:  # per rank, as the Parquet reader counts them
        part.meta.info.update(linked.get(part.meta.rank, {}))
        if part.meta.rank in waits:
            part.meta.info["semaphore_waits"] = waits[part.meta.rank]
    return parts


def _rank_of_path(path: Path) -> tuple[int | None, str]:
    """The rank the file name states, else its folder's (a per-rank folder holding
    ``ntff.pftrace`` or ``device_profile_model_<id>.pftrace``), and where it came from."""
    for name, source in ((path.name, "filename"), (path.parent.name, "folder name")):
        rank = rank_from_name(name)
        if rank is not None:
            return rank, source
    return None, "default"


def _device_tracks(events: pd.DataFrame, ann: pd.DataFrame, rank: np.ndarray, counts) -> None:
    """A device trace's engine rows as the other Neuron readers' tracks, in place: rows drawn
    round robin one serial stream again, a DMA engine's transfers on their queue's ring."""
    if moved := merge_serial_rows(events, rank):
        counts["slices on display rows of a serial engine: moved to its track"] = moved
    text = device.annotations(ann, device.QUEUE_FIELDS, len(events))
    name_engine_queues(events, rank, device.named_queues(text).to_numpy(dtype=object))


def _events(d, sl: pd.DataFrame, fields: dict, table: pd.DataFrame, owner) -> pd.DataFrame:
    """The canonical event columns of every slice (all ranks together)."""
    names = d.events["name"].to_numpy(dtype=object)
    name = names[sl["begin"].to_numpy()]
    has_end = sl["end"].to_numpy() >= 0
    unnamed = pd.isna(name)
    from_end = unnamed & has_end
    name[from_end] = names[sl["end"].to_numpy()[from_end]]
    name = np.where(pd.isna(name), fields["opcode"], name)
    name = np.where(pd.isna(name), "unnamed", name)
    track = table.reindex(sl["track"].to_numpy())
    kind = np.where(sl["instant"].to_numpy(), "marker", track["event_kind"].to_numpy(dtype=object))
    frame = pd.DataFrame(
        {
            S.KIND: pd.Categorical(kind),
            S.NAME: pd.Categorical(name),
            S.TS: sl["ts"].to_numpy(dtype=np.int64),
            S.DUR: sl["dur"].to_numpy(dtype=np.int64),
            S.BYTES: fields[S.BYTES],
            S.FLOPS: fields[S.FLOPS],
            S.WAIT: fields[S.WAIT],
            S.LAYER: pd.Categorical(fields[S.LAYER]),
            S.OP: pd.Categorical(fields[S.OP]),
            S.SOURCE: pd.Categorical(fields[S.SOURCE]),
            S.SRC_ID: _src_ids(fields[S.SRC_ID], fields["has_id"], d, sl),
            TRACK_LABEL: pd.Categorical(track["label"].to_numpy(dtype=object)),
            TRACK_KIND_COL: pd.Categorical(track["track_kind"].to_numpy(dtype=object)),
            TRACK_ENGINE: pd.Categorical(track["engine"].to_numpy(dtype=object)),
            TRACK_DEVICE: pd.Categorical(track["device"].to_numpy(dtype=object)),
        }
    )
    return frame


def _from_categories(events: pd.DataFrame, cats: np.ndarray) -> None:
    """Our export's categories (``kind,track:<kind>,engine:<e>,device:<d>``) restore each
    event's kind and its track's kind, engine and device; parsed once per distinct value."""
    codes, uniq = pd.factorize(pd.Series(cats, dtype=object))
    parsed = []
    for text in uniq:  # a loop over distinct category strings
        items = str(text).split(",")
        got = {"kind": items[0]} if items[0] in S.KINDS else {}
        for item in items[1:]:
            for prefix, key in CATEGORY_PREFIXES.items():
                if item.startswith(prefix):
                    got[key] = item[len(prefix) :]
        if got.get("track_kind") not in S.TRACK_KINDS:
            got.pop("track_kind", None)
        parsed.append(got)
    for col, key in (
        (S.KIND, "kind"),
        (TRACK_KIND_COL, "track_kind"),
        (TRACK_ENGINE, "engine"),
        (TRACK_DEVICE, "device"),
    ):
        values = np.array([p.get(key) for p in parsed] + [None], dtype=object)[codes]
        known = pd.notna(values)
        if known.any():
            current = events[col].to_numpy(dtype=object)
            events[col] = pd.Categorical(np.where(known, values, current))


def _src_ids(from_annotations: np.ndarray, has_id: np.ndarray, d, sl: pd.DataFrame) -> np.ndarray:
    """The ``id`` annotation (64-bit, negative ones too), else the event's ``correlation_id``,
    else -1."""
    corr = d.events["corr"].to_numpy()[sl["begin"].to_numpy()]
    return np.where(has_id, from_annotations, corr)


def _dependency_kinds(edges: pd.DataFrame, events: pd.DataFrame) -> pd.DataFrame:
    """An instruction's dependency on an instruction is ``dependency``; a DMA triggered by an
    instruction is ``dma_trigger``."""
    kind = events[S.KIND].to_numpy(dtype=object)
    trigger = (kind[edges[S.SRC].to_numpy()] == "compute") & (
        kind[edges[S.DST].to_numpy()] == "dma"
    )
    return edges.assign(**{S.EDGE_KIND: np.where(trigger, "dma_trigger", "dependency")})


def _parts(
    path: Path,
    events: pd.DataFrame,
    edges: pd.DataFrame,
    collectives: pd.DataFrame,
    rank: np.ndarray,
    counts: dict[str, int],
    neuron: str,
    from_name: int | None,
    info: dict,
    own_meta: dict | None = None,
) -> list[RankPart]:
    """One part per rank; edges across ranks cannot be kept and are counted."""
    src, dst = edges[S.SRC].to_numpy(dtype=np.int64), edges[S.DST].to_numpy(dtype=np.int64)
    across = rank[src] != rank[dst]
    ranks = np.unique(rank)
    parts = []
    for r in ranks:  # a loop over ranks
        rows = np.flatnonzero(rank == r)
        local = np.full(len(rank), -1, dtype=np.int64)
        local[rows] = np.arange(len(rows))
        mine = ~across & (rank[src] == r)
        meta = S.RankMeta(rank=int(r), sources=[str(path)], format=FORMAT)
        meta.info["rank_source"] = (
            info.get("rank_source", "worker_gid")
            if neuron == "system"
            else "filename"
            if from_name is not None
            else "default"
        )
        if neuron:
            meta.info["neuron_profile"] = neuron
        meta.info.update(info)
        own_export.restore(meta, (own_meta or {}).get(str(int(r))))
        if r == ranks[0]:
            for reason, n in counts.items():
                meta.count(reason, n)
            meta.count("edges between ranks: not kept", int(across.sum()))
        part_edges = pd.DataFrame(
            {
                S.SRC: local[src[mine]],
                S.DST: local[dst[mine]],
                S.EDGE_KIND: edges[S.EDGE_KIND].to_numpy()[mine],
            }
        )
        piece = Piece("track events", events.iloc[rows].reset_index(drop=True))
        coll = C.rank_collectives(collectives, local, int(r), meta)
        part = finish_part(meta, [piece], [part_edges], coll)
        parts.append(execution_work(part) if neuron == "system" else part)  # neuron_system_work
    return parts
