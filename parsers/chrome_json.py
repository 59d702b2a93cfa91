"""Reader of Chrome trace-event JSON as PyTorch/Kineto writes it (``*.pt.trace.json[.gz]``).

One file is one rank, except our own export's (every rank: :mod:`chrome_own`). The pipeline:
:mod:`chrome_decode` (bytes -> metadata + events with exact ns times), :mod:`chrome_events`
(columns, B/E pairing, flows), :func:`builder.sanitize_events` (unusable times dropped and counted), :mod:`kineto` (kinds, tracks, launches, ops, steps),
:mod:`kineto_layers` (layers from ``record_function`` and module ranges), :mod:`kineto_sync`
(waits) and :mod:`kineto_collectives` (collective rows); a trace without GPU events is read by
:mod:`kineto_host` (CPU ops as work, gloo/c10d collectives).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from tracediag.io.release_memory import release_free_memory
from tracediag.model import schema as S
from tracediag.model.assembly import RankPart, sanitize_events
from tracediag.model.errors import TraceInputError
from tracediag.parsers import chrome_own, kineto, kineto_host, kineto_layers, kineto_sampling
from tracediag.parsers.chrome_decode import paused_gc
from tracediag.parsers.chrome_events import flow_edges, tabulate
from tracediag.parsers.chrome_json_sniff import (  # noqa: F401 (the reader's declaration)
    FORMAT,
    sniff,
)
from tracediag.parsers.chrome_stream import read_columns
from tracediag.parsers.kineto_collectives import collective_rows
from tracediag.parsers.kineto_source import add_source_lines
from tracediag.parsers.kineto_sync import sync_edges

_RANK_IN_NAME = re.compile(r"(?:rank|worker)[-_]?(\d+)", re.IGNORECASE)
_INFO_KEYS = ("schemaVersion", "baseTimeNanoseconds", "traceName", "displayTimeUnit")


def read(path: Path) -> list[RankPart]:
    """The file's rank as one canonical part (see the module docstring)."""
    # Cyclic GC stays paused until the millions of decoded objects are freed again (see decode).
    with paused_gc():
        return _read(Path(path))


def _read(path: Path) -> list[RankPart]:
    # TensorFlow/JAX trace-viewer JSON ends traceEvents with an empty object: a terminator the
    # format's writers add, not an event (read_columns leaves it out, uncounted).
    columns = read_columns(path)
    if chrome_own.is_ours(columns.metadata):  # our own export: every rank, by process id
        return chrome_own.read_parts(path, columns)
    meta = S.RankMeta(rank=0, sources=[str(path)], format=FORMAT)
    _rank_and_info(meta, columns.metadata, path)
    for reason, n in columns.rewritten.items():
        meta.count(reason, n)
    if not columns.entries:
        raise TraceInputError(path, "trace has no events ('traceEvents' is empty)")
    # Kineto's ac2g flows repeat the launch correlation: launch edges carry them.
    table = tabulate(columns, skip_flows=("ac2g",))
    args = columns.args
    del columns  # the per-event text, times and flow ids: the slices hold what is kept
    for reason, n in table.counts.items():
        meta.count(reason, n)
    slices = table.slices = sanitize_events(table.slices, meta)
    if not len(slices):
        raise TraceInputError(path, "trace has no timed events (only metadata, counters or flows)")
    rows = kineto.describe(slices, args)
    for cat, n in rows.unread.items():  # nothing is dropped silently: named in TRC501
        meta.count(f"events of unknown category {cat!r} off a device process: kept as markers", n)
    kineto_sampling.note_sampling(rows, meta)  # a sampled subset's gaps are not idle
    host_only = kineto_host.is_host_only(rows)
    kind = kineto_host.host_kinds(rows) if host_only else kineto.event_kinds(rows)
    launches, launcher = kineto.launch_edges(rows)
    op_row = kineto.launching_ops(rows, launcher)
    step = kineto.steps(rows, launcher)
    layer = kineto_layers.layers(rows, launcher, op_row)
    if host_only:  # CPU ops are the work; gloo/c10d ranges the collectives (kineto_host)
        if meta.info.get("host_name"):  # processes of one host share its clock (epoch ns)
            meta.info["clock_domain"] = f"host {meta.info['host_name']}"
        collectives, host_edges = kineto_host.host_collectives(rows, kind, meta.info, meta)
    else:
        collectives, host_edges = collective_rows(rows, kind, launcher), None
    edges = pd.concat(
        [
            launches,
            sync_edges(rows, kind),
            _flow_edges(table, slices, rows, launches, meta),
            *([host_edges] if host_edges is not None else []),
        ],
        ignore_index=True,
    )
    events = _events_frame(slices, rows, kind, op_row, step, layer, table.thread_names)
    add_source_lines(events, rows, launcher, op_row)  # with_stack frames: kineto_source
    part = RankPart(meta=meta, events=events, edges=edges, collectives=collectives)
    del table, slices, rows, args
    release_free_memory()  # the reader's temporaries, before the job is assembled from the part
    return [part]


def _rank_and_info(meta: S.RankMeta, info: dict, path: Path) -> None:
    dist = info.get("distributedInfo") if isinstance(info.get("distributedInfo"), dict) else {}
    rank = dist.get("rank")
    from_name = _RANK_IN_NAME.findall(path.name) or _RANK_IN_NAME.findall(path.parent.name)
    if isinstance(rank, int) and not isinstance(rank, bool) and rank >= 0:
        meta.rank, meta.info["rank_source"] = rank, "metadata"
    elif from_name:
        meta.rank, meta.info["rank_source"] = int(from_name[-1]), "filename"
    else:
        meta.info["rank_source"] = "default"
    for key in _INFO_KEYS:
        if key in info:
            meta.info[key] = info[key]
    if isinstance(info.get("host_name"), str) and info["host_name"]:
        meta.info["host_name"] = info["host_name"]
    for key in ("world_size", "backend", "pg_config"):  # pg_config: process groups (layout.py)
        if key in dist:
            meta.info[key] = dist[key]
    devices = info.get("deviceProperties")
    if isinstance(devices, list) and devices and isinstance(devices[0], dict):
        meta.hardware = str(devices[0].get("name", ""))


def _flow_edges(
    table, slices: pd.DataFrame, rows: kineto.Rows, launches: pd.DataFrame, meta: S.RankMeta
) -> pd.DataFrame:
    """Flow arrows between kept slices, less those that repeat a launch edge."""
    edges = flow_edges(table.flows, slices, rows.thread)
    meta.count("flow points bound to no slice: skipped", edges.attrs.get("unbound", 0))
    if not len(edges):  # e.g. only ac2g flows, left out: no launch edge to compare with
        return pd.DataFrame(
            {S.SRC: np.zeros(0, np.int64), S.DST: np.zeros(0, np.int64), S.EDGE_KIND: "flow"}
        )
    pairs = edges[[S.SRC, S.DST]].merge(
        launches[[S.SRC, S.DST]].drop_duplicates(), how="left", on=[S.SRC, S.DST], indicator=True
    )
    new = (pairs["_merge"] == "left_only").to_numpy()
    return pd.DataFrame(
        {
            S.SRC: edges[S.SRC].to_numpy()[new],
            S.DST: edges[S.DST].to_numpy()[new],
            S.EDGE_KIND: "flow",
        }
    )


def _events_frame(
    slices, rows: kineto.Rows, kind, op_row, step, layer, thread_names
) -> pd.DataFrame:
    n = len(slices)
    bytes_ = np.full(n, np.nan)
    dma = np.flatnonzero(kind == kineto.KIND["dma"])
    bytes_[dma] = rows.args.number("bytes", dma)
    src_id = rows.corr.copy()
    no_corr = np.flatnonzero(~np.isfinite(src_id))
    src_id[no_corr] = rows.args.number("External id", no_corr)
    src_id = np.where(np.isfinite(src_id) & (np.abs(src_id) < 2**62), src_id, -1).astype(np.int64)
    frame = pd.DataFrame(
        {
            S.KIND: pd.Categorical.from_codes(kind, categories=S.KINDS),
            S.NAME: kineto.names_of(rows),
            S.TS: rows.ts,
            S.DUR: rows.end - rows.ts,
            S.BYTES: bytes_,
            S.LAYER: layer,
            S.OP: kineto.names_of(rows, op_row),
            S.STEP: step,
            S.SRC_ID: src_id,
            **kineto.track_columns(rows, thread_names),
        },
        copy=False,  # fresh arrays (or the reader's own, dropped after): neither copied nor
        # consolidated into 2-D blocks
    )
    return frame
