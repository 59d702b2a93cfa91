"""XPlane tables of one rank -> its canonical part: track and event kinds per line, fields from
stats, ``launch`` edges by correlation id, ``flow`` edges by producer/consumer context and one
collective row per collective op.

See :mod:`xplane` for the rules. Fields: ``op`` = ``hlo_op`` (the op's own name on an ``XLA
Ops`` line), ``layer`` = the framework op (``tf_op``, else the ``name`` stat, e.g.
``jit(f)/dot_general``), ``bytes`` = ``bytes_accessed`` (else ``raw_bytes_accessed``, the size
in ``memcpy_details``/``memset_details``, ``bytes``, ``size``), ``flops`` = ``flops`` (else
``model_flops``), ``step`` = ``group_id`` (else ``step_num``), ``src_id`` = ``correlation_id``.

Collective rows: every collective event except async ``*-start`` ops whose ``*-done`` op is
recorded (the done is where the ranks meet; a GPU stream's NCCL kernel named after its start
op, with no done beside it, is the collective); the match key is
``"{hlo_module}|{hlo op or kernel name}|{ordinal}"``, the ordinal counting that op's runs on
this rank in time order, which assumes every device runs the same program (SPMD).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracediag.model import schema as S
from tracediag.model.assembly import (
    TRACK_DEVICE,
    TRACK_ENGINE,
    TRACK_KIND_COL,
    TRACK_LABEL,
    RankPart,
)
from tracediag.parsers.neuron_events import TRIGGER_TS
from tracediag.parsers.neuron_part import Piece, finish_part
from tracediag.parsers.xplane_events import detail_bytes

_STREAM = re.compile(r"^Stream #(\d+)")
#: A device plane's name: kind, ordinal and anything after the ordinal.
DEVICE_PLANE = re.compile(r"^/device:([A-Z_]+):(\d+)(.*)$")
_XLA_OPS = "XLA Ops"
#: Collective operations by the letters of an op or kernel name, tried in order.
_COLLECTIVE_OPS = (
    ("allreduce", "AllReduce"),
    ("allgather", "AllGather"),
    ("reducescatter", "ReduceScatter"),
    ("collectivepermute", "CollectivePermute"),
    ("alltoall", "AllToAll"),
    ("collectivebroadcast", "Broadcast"),
    ("sendrecv", "SendRecv"),
)
_COMMUNICATION_KERNEL = re.compile(r"^_*(?:nccl|rccl)", re.IGNORECASE)
_COPY = re.compile(r"memcpy|memset", re.IGNORECASE)
_ASYNC_START = re.compile(r"-start(?:\.\d+)?$")
_MODULE = "_module"
#: TSL producer / consumer contexts, (type, id) per event: temporary columns (see ID_STATS).
_CONTEXTS = ("_pt", "_p", "_ct", "_c")


def collective_op(name: str) -> str:
    """The normalised collective operation a name denotes ("" when none)."""
    letters = re.sub(r"[^a-z]", "", name.lower())
    op = next((norm for key, norm in _COLLECTIVE_OPS if key in letters), "")
    return op or ("Unknown" if _COMMUNICATION_KERNEL.match(name) else "")


def _per_distinct(values: np.ndarray, fn) -> np.ndarray:
    """``fn`` of each distinct text (missing: ""), spread back without a call per row."""
    text = pd.Series(values, dtype=object).fillna("").astype(str).to_numpy(dtype=object)
    if not len(text):
        return text
    uniq, inverse = np.unique(text, return_inverse=True)
    return np.array([fn(u) for u in uniq], dtype=object)[inverse]


def _line_tracks(plane, suffix: str) -> list[tuple[str, str, str, str]]:
    """Per line of a device plane: (label, track kind, engine, event kind)."""
    streams = any(_STREAM.match(line.name) for line in plane.lines)
    out = []
    for line in plane.lines:  # a loop over lines
        stream = _STREAM.match(line.name)
        if stream:
            out.append((f"stream {stream.group(1)}{suffix}", "gpu_stream", "gpu", "compute"))
        elif line.name == _XLA_OPS and not streams:
            out.append((f"xla ops{suffix}", "compute_engine", "tensorcore", "compute"))
        else:
            name = line.display_name or line.name or f"line {line.id}"
            out.append((f"{name}{suffix}", "other", "", "marker"))
    return out


def _stat(table: pd.DataFrame, name: str) -> np.ndarray:
    return table[f"stat.{name}"].to_numpy()


def _first_present(*columns: np.ndarray) -> np.ndarray:
    out = np.asarray(columns[0], dtype=np.float64)
    for col in columns[1:]:
        out = np.where(np.isnan(out), np.asarray(col, dtype=np.float64), out)
    return out


def _frame(table: pd.DataFrame, tracks: list[tuple], device: str) -> pd.DataFrame:
    """Canonical event columns of one plane's table (see :func:`plane_table`)."""
    line = table["line"].to_numpy()
    label, track_kind, engine, kind = (
        np.array([t[i] for t in tracks] + [""], dtype=object)[line] for i in range(4)
    )
    name = table["name"].to_numpy(dtype=object)
    hlo = _stat(table, "hlo_op")
    work = kind == "compute"
    named_coll = (_per_distinct(name, collective_op) != "") | (
        _per_distinct(hlo, collective_op) != ""
    )
    details = pd.Series(_stat(table, "memcpy_details"), dtype=object)
    details = details.fillna(pd.Series(_stat(table, "memset_details"), dtype=object)).to_numpy()
    copy = pd.notna(details) | pd.Series(name, dtype=object).str.contains(_COPY).to_numpy(bool)
    kind = np.where(work & named_coll, "collective", np.where(work & copy, "dma", kind))
    tf_op = pd.Series(_stat(table, "tf_op"), dtype=object)
    usable = tf_op.notna() & ~tf_op.fillna("").str.endswith(":") & (tf_op.fillna("") != "")
    layer = tf_op.where(usable).fillna(pd.Series(_stat(table, "name"), dtype=object))
    op = np.where(pd.notna(hlo), hlo, np.where(track_kind == "compute_engine", name, None))
    return pd.DataFrame(
        {
            S.KIND: pd.Categorical(kind),
            S.NAME: pd.Categorical(name),
            S.TS: table["ts_ns"].to_numpy(dtype=np.int64),
            S.DUR: table["dur_ns"].to_numpy(dtype=np.int64),
            S.BYTES: _first_present(
                _stat(table, "bytes_accessed"),
                _stat(table, "raw_bytes_accessed"),
                detail_bytes(details),
                _stat(table, "bytes"),
                _stat(table, "size"),
            ),  # fmt: skip
            S.FLOPS: _first_present(_stat(table, "flops"), _stat(table, "model_flops")),
            S.LAYER: pd.Categorical(layer.to_numpy(dtype=object)),
            S.OP: pd.Categorical(op),
            S.SOURCE: pd.Categorical(_stat(table, "source")),
            S.STEP: _first_present(_stat(table, "group_id"), _stat(table, "step_num")),
            S.SRC_ID: _stat(table, "correlation_id").astype(np.int64),
            TRACK_LABEL: pd.Categorical(label),
            TRACK_KIND_COL: pd.Categorical(track_kind),
            TRACK_ENGINE: pd.Categorical(engine),
            TRACK_DEVICE: pd.Categorical(np.full(len(table), device, dtype=object)),
            _MODULE: _stat(table, "hlo_module"),
            **{c: _stat(table, c) for c in _CONTEXTS},
        }
    )


def host_frame(hosts: list[tuple], meta: S.RankMeta) -> pd.DataFrame | None:
    """Events of the host planes: ``host`` work on one ``cpu_thread`` track per line."""
    frames = []
    for plane, table in hosts:  # a loop over planes
        prefix = f"{plane.name} " if len(hosts) > 1 else ""
        labels = [f"{prefix}{ln.display_name or ln.name or f'line {ln.id}'}" for ln in plane.lines]
        repeated = {x for x in labels if labels.count(x) > 1}
        tracks = [
            (f"{x} [{ln.id}]" if x in repeated else x, "cpu_thread", "cpu", "host")
            for x, ln in zip(labels, plane.lines, strict=True)
        ]
        frame = _frame(table, tracks, "host")
        frame[S.KIND] = pd.Categorical(np.full(len(frame), "host", dtype=object))
        frames.append(frame)
    if frames:
        meta.info["host_planes"] = [plane.name for plane, _ in hosts]
    return pd.concat(frames, ignore_index=True) if frames else None


def host_owners(hosts: list[tuple], devices: dict[int, list], default: int) -> list[np.ndarray]:
    """Per host plane ``(plane, table)``: the device ordinal each of its events goes to.

    A line goes to the device most of its launches reach (the device events with its events'
    ``correlation_id``); a line that launches nothing goes to the device with the most launches
    that are not copies (host calls named memcpy/memset), the one that computes, else to
    ``default``."""
    corr, ordinal = [], []
    for k, planes in devices.items():  # a loop over device planes
        for _, table, _ in planes:
            c = _stat(table, "correlation_id").astype(np.int64)
            corr.append(c[c >= 0])
            ordinal.append(np.full(int((c >= 0).sum()), k, dtype=np.int64))
    device_of = (
        pd.Series(np.concatenate(ordinal), index=np.concatenate(corr))
        if corr
        else pd.Series([], dtype=np.int64)
    )
    device_of = device_of[~device_of.index.duplicated()]
    launches = []  # (plane index, line, device, is a copy) per launch
    for i, (_, table) in enumerate(hosts):  # a loop over host planes
        c = _stat(table, "correlation_id").astype(np.int64)
        target = device_of.reindex(c).to_numpy(dtype=np.float64)
        hit = np.isfinite(target)
        copy = pd.Series(table["name"].to_numpy(dtype=object)[hit], dtype=object)
        launches.append(
            pd.DataFrame(
                {
                    "plane": i,
                    "line": table["line"].to_numpy()[hit],
                    "device": target[hit].astype(np.int64),
                    "copy": copy.fillna("").astype(str).str.contains(_COPY).to_numpy(bool),
                }
            )
        )
    found = pd.concat(launches, ignore_index=True) if launches else pd.DataFrame()
    computing = default
    if len(found) and (~found["copy"]).any():
        computing = int(found.loc[~found["copy"], "device"].value_counts().idxmax())
    out = []
    for i, (_, table) in enumerate(hosts):
        mine = found[found["plane"] == i] if len(found) else found
        by_line = (
            mine.groupby("line")["device"].agg(lambda d: d.value_counts().idxmax())
            if len(mine)
            else pd.Series(dtype=np.int64)
        )  # one value per line, not per event
        line = table["line"].to_numpy()
        out.append(by_line.reindex(line).fillna(computing).to_numpy(dtype=np.int64))
    return out


def device_part(meta: S.RankMeta, planes: list[tuple], host: pd.DataFrame | None) -> RankPart:
    """One rank from its device planes (``(plane, table, plane stats, kind)``) and, for the
    file's first rank, its host events."""
    frames = []
    for plane, table, own in planes:  # a loop over planes
        kind, ordinal, rest = DEVICE_PLANE.match(plane.name).groups()
        suffix = f" ({rest.strip()})" if rest.strip() else ""
        device = f"{kind.lower()}{ordinal}"
        frames.append(_frame(table, _line_tracks(plane, suffix), device))
        if own.get("device_vendor"):
            meta.hardware = f"{own['device_vendor']} {kind}"
        meta.info.setdefault("device_planes", []).append(plane.name)
        meta.info.setdefault("device_stats", {}).update(
            {k: v for k, v in own.items() if isinstance(v, (int, float, str))}
        )
    device_rows = sum(len(f) for f in frames)
    if host is not None:
        frames.append(host)
    events = pd.concat(frames, ignore_index=True)
    is_device = np.arange(len(events)) < device_rows
    edges = _launch_edges(events, is_device, meta)
    _copies_by_launch(events, edges)
    collectives = _collectives(events)
    piece = Piece("events", events.drop(columns=[_MODULE, *_CONTEXTS]))
    return finish_part(meta, [piece], [edges, _context_flows(events)], collectives)


def _context_flows(events: pd.DataFrame) -> pd.DataFrame:
    """``flow`` edges producer -> consumer of one TSL context (type and id): the event that
    enqueued a thread pool's task (``ThreadpoolListener::Record``) -> the worker's start of it
    (``ThreadpoolListener::StartRegion``), and XLA's other hand-offs (a launch to each device's
    thread). A worker that idled until its task came binds to the enqueue that released it."""
    producer = pd.DataFrame(
        {"t": events["_pt"], "id": events["_p"], S.SRC: np.arange(len(events), dtype=np.int64)}
    )
    consumer = pd.DataFrame(
        {"t": events["_ct"], "id": events["_c"], S.DST: np.arange(len(events), dtype=np.int64)}
    )
    pairs = producer[producer["id"] >= 0].merge(consumer[consumer["id"] >= 0], on=["t", "id"])
    pairs = pairs[pairs[S.SRC] != pairs[S.DST]]
    return pd.DataFrame(
        {
            S.SRC: pairs[S.SRC].to_numpy(dtype=np.int64),
            S.DST: pairs[S.DST].to_numpy(dtype=np.int64),
            S.EDGE_KIND: "flow",
        }
    )


def _launch_edges(events: pd.DataFrame, is_device: np.ndarray, meta: S.RankMeta) -> pd.DataFrame:
    """Host event -> device event with the same correlation id (the innermost host event)."""
    corr = events[S.SRC_ID].to_numpy()
    rows = np.arange(len(events))
    host = pd.DataFrame({"corr": corr, "src": rows, "ts": events[S.TS].to_numpy()})[
        ~is_device & (corr >= 0)
    ]
    host = host.sort_values("ts").drop_duplicates("corr", keep="last")
    device = pd.DataFrame({"corr": corr, "dst": rows})[is_device & (corr >= 0)]
    pairs = device.merge(host, on="corr")
    if len(host):
        meta.info["launches_unmatched"] = int(len(device) - len(pairs))
    return pd.DataFrame(
        {
            S.SRC: pairs["src"].to_numpy(dtype=np.int64),
            S.DST: pairs["dst"].to_numpy(dtype=np.int64),
            S.EDGE_KIND: "launch",
        }
    )


def _copies_by_launch(events: pd.DataFrame, launches: pd.DataFrame) -> None:
    """Device work launched by a host memcpy/memset call is a copy (``dma``), whatever the
    kernel's name (e.g. ROCm's ``__amd_rocclr_copyBuffer``); it takes the call's byte count."""
    src, dst = launches[S.SRC].to_numpy(), launches[S.DST].to_numpy()
    host_names = events[S.NAME].to_numpy(dtype=object)[src]
    copy = pd.Series(host_names, dtype=object).str.contains(_COPY).to_numpy(bool).copy()
    copy &= events[S.KIND].to_numpy(dtype=object)[dst] == "compute"
    if not copy.any():
        return
    kind = events[S.KIND].to_numpy(dtype=object).copy()
    kind[dst[copy]] = "dma"
    events[S.KIND] = pd.Categorical(kind)
    nbytes = events[S.BYTES].to_numpy().copy()
    fill = dst[copy][np.isnan(nbytes[dst[copy]])]
    nbytes[fill] = nbytes[src[copy][np.isnan(nbytes[dst[copy]])]]
    events[S.BYTES] = nbytes


def _collectives(events: pd.DataFrame) -> pd.DataFrame | None:
    """One row per collective event but async starts (see the module docstring)."""
    name = events[S.NAME].astype(object).to_numpy()
    op_name = pd.Series(
        np.where(events[S.OP].notna(), events[S.OP].astype(object), name), dtype=object
    ).astype(str)
    coll = events[S.KIND].to_numpy(dtype=object) == "collective"
    # An async start whose done op is recorded meets the other ranks at the done; one without
    # (a GPU stream's NCCL kernel carries its start op's name) is the collective itself.
    start = op_name.str.contains(_ASYNC_START).to_numpy(bool)
    done_names = set(op_name[coll & ~start])
    done_of = op_name.str.replace(r"-start(\.\d+)?$", r"-done\1", regex=True)
    has_done = done_of.isin(done_names).to_numpy()
    rows = np.flatnonzero(coll & ~(start & has_done))
    op_name = op_name.to_numpy(dtype=object)
    if not len(rows):
        return None
    rows = rows[np.argsort(events[S.TS].to_numpy()[rows], kind="stable")]
    module = pd.Series(events[_MODULE].to_numpy(dtype=object)[rows]).fillna("").astype(str)
    base = pd.Series(op_name[rows], dtype=object).astype(str)
    ordinal = pd.DataFrame({"m": module, "b": base}).groupby(["m", "b"]).cumcount()
    key = module + "|" + base + "|" + ordinal.astype(str)
    n = len(rows)
    return pd.DataFrame(
        {
            S.EVENT: rows.astype(np.int64),
            S.MATCH_KEY: key.to_numpy(dtype=object),
            S.COLL_OP: _per_distinct(base.to_numpy(dtype=object), collective_op),
            S.GROUP: np.full(n, "", dtype=object),
            S.SEQ: ordinal.to_numpy(dtype=np.int64),
            S.BYTES: events[S.BYTES].to_numpy()[rows],
            S.ALGORITHM: np.full(n, "", dtype=object),
            S.ALGBW: np.full(n, np.nan),
            S.BUSBW: np.full(n, np.nan),
            S.DTYPE: np.full(n, "", dtype=object),
            TRIGGER_TS: pd.array([pd.NA] * n, dtype="Int64"),  # arrival = start
        }
    )
