"""A diagnosed job as Chrome trace-event JSON (``tracediag export --format chrome``): the same
content as the Perfetto export, for chrome://tracing and other viewers of that format.

Ranks are processes (pid = rank), tracks threads (tid = track id, named by ``thread_name``
metadata), events complete ``X`` events with category = kind, the critical path a chain of flow
arrows (``s``/``f`` pairs binding to the path's slices) and every finding an ``X`` event with its
details in ``args`` on a thread of its own in a ``tracediag findings`` process. The top-level
``tracediag`` key (after ``traceEvents``) says the file is ours, maps each process id to its
rank and holds what the format has no place for, so that our reader gives the job back
(:mod:`tracediag.parsers.chrome_own`): each event's fields and track, the tracks, the
dependencies, the collectives and each rank's meta (:mod:`tracediag.model.own_export`). Times are
microseconds written with three decimals, so ns survive exactly; the records are built as text
column by column (no Python object per event).
"""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import orjson
import pandas as pd

from tracediag.export.perfetto_trace import critical_path_events
from tracediag.model import own_export
from tracediag.model import schema as S
from tracediag.parsers.perfetto_tracks import FINDINGS_PROCESS

if TYPE_CHECKING:
    from tracediag.engine.diagnosis import Diagnosis


def _json_text(values: pd.Series) -> pd.Series:
    """JSON string literals of text values, escaped once per distinct value."""
    cat = values.astype(str).astype("category")
    quoted = [orjson.dumps(c).decode() for c in cat.cat.categories]  # a loop over distinct values
    return pd.Series(np.array(quoted + [""], dtype=object)[cat.cat.codes.to_numpy()])


def _us(ns: np.ndarray) -> pd.Series:
    """ns as exact decimal microseconds text ("12.345")."""
    s = pd.Series(np.asarray(ns, dtype=np.int64))
    sign = np.where(s < 0, "-", "")
    a = s.abs()
    return sign + (a // 1000).astype(str) + "." + (a % 1000).astype(str).str.zfill(3)


def _records(**columns: pd.Series | str) -> pd.Series:
    """``{"key":value,...}`` per row from pre-encoded JSON value texts (Series or constants)."""
    text = None
    for i, (key, value) in enumerate(columns.items()):
        part = f'{"{" if i == 0 else ","}"{key}":'
        piece = part + value if isinstance(value, str) else part + value.astype(str)
        text = piece if text is None else text + piece
    return text + "}"


def write_chrome(diagnosis: Diagnosis, path: Path) -> None:
    """Write the diagnosed trace to ``path`` as Chrome trace-event JSON (gzip-compressed when
    the name ends in ``.gz``)."""
    trace = diagnosis.trace
    ev = trace.events
    pid = ev[S.RANK].astype(np.int64).astype(str).reset_index(drop=True)
    tid = ev[S.TRACK].astype(np.int64).astype(str).reset_index(drop=True)
    events = _records(
        name=_json_text(ev[S.NAME]), cat=_json_text(ev[S.KIND]), ph='"X"',
        ts=_us(ev[S.TS].to_numpy()), dur=_us(ev[S.DUR].to_numpy()), pid=pid, tid=tid,
    )  # fmt: skip
    lines = [*_metadata(trace, diagnosis), *events.tolist(), *_path_flows(trace, diagnosis)]
    lines += _finding_events(diagnosis, max(trace.ranks, default=-1) + 1)
    body = ",\n".join(lines)
    block = own_export.dumps(own_block(trace)).decode()
    data = f'{{"displayTimeUnit": "ns", "traceEvents": [\n{body}\n],\n"tracediag": {block}}}\n'
    data = data.encode()
    if Path(path).name.lower().endswith(".gz"):  # x.trace.json.gz: what the name says
        data = gzip.compress(data, compresslevel=6)
    Path(path).write_bytes(data)


def _metadata(trace: S.Trace, diagnosis: Diagnosis) -> list[str]:
    """process_name/thread_name metadata: a line per rank and per track (few)."""
    out = [
        orjson.dumps(
            {"ph": "M", "name": "process_name", "pid": r, "args": {"name": f"rank {r}"}}
        ).decode()
        for r in trace.ranks
    ]
    for track, row in enumerate(trace.tracks.itertuples(index=False)):
        args = {"name": str(row.name)}
        out.append(
            orjson.dumps(
                {"ph": "M", "name": "thread_name", "pid": int(row.rank), "tid": track, "args": args}
            ).decode()
        )
    findings_pid = max(trace.ranks, default=-1) + 1
    args = {"name": FINDINGS_PROCESS}
    out.append(
        orjson.dumps(
            {"ph": "M", "name": "process_name", "pid": findings_pid, "args": args}
        ).decode()
    )
    return out


def _path_flows(trace: S.Trace, diagnosis: Diagnosis) -> list[str]:
    """The critical path as flow arrows between consecutive path events (s at one, f at next)."""
    path = critical_path_events(diagnosis)
    if len(path) < 2:
        return []
    ev = trace.events
    src, dst = path[:-1], path[1:]
    flow_id = pd.Series(np.arange(1, len(src) + 1)).astype(str)

    def points(rows: np.ndarray, ph: str, extra: str) -> pd.Series:
        return _records(
            name='"critical path"', cat='"critical_path"', ph=f'"{ph}"', id=flow_id,
            ts=_us(ev[S.TS].to_numpy()[rows]),
            pid=pd.Series(ev[S.RANK].to_numpy()[rows].astype(np.int64)).astype(str),
            tid=pd.Series(ev[S.TRACK].to_numpy()[rows].astype(np.int64)).astype(str), bp=extra,
        )  # fmt: skip

    return [*points(src, "s", '"e"').tolist(), *points(dst, "f", '"e"').tolist()]


def _finding_events(diagnosis: Diagnosis, pid: int) -> list[str]:
    out = []
    for i, f in enumerate(diagnosis.findings):  # a loop over findings
        args = {
            "code": f.code, "severity": f.severity.name.lower(), "message": f.message,
            "ranks": list(f.ranks), "engine": f.engine, "layer": f.layer, "op": f.op,
            "impact_ns": f.impact_ns, "saving_ns": f.saving_ns, "suggestion": f.suggestion,
        }  # fmt: skip
        name = orjson.dumps(f"{f.code} {f.title}").decode()
        out.append(
            f'{{"name":{name},"cat":"finding","ph":"X","ts":{_us([f.start_ns])[0]},'
            f'"dur":{_us([max(f.end_ns - f.start_ns, 0)])[0]},"pid":{pid},"tid":{i},'
            f'"args":{orjson.dumps(args).decode()}}}'
        )
        meta = {
            "ph": "M",
            "name": "thread_name",
            "pid": pid,
            "tid": i,
            "args": {"name": f"{i + 1}. {f.code}"},
        }
        out.append(orjson.dumps(meta).decode())
    return out


def _codes(col: pd.Series) -> dict:
    """A text column as its distinct values and each row's index into them (-1: missing)."""
    values, codes = S.text_codes(col)
    return {"values": values, "codes": codes}


def own_block(trace: S.Trace) -> dict:
    """The ``tracediag`` key: schema, ranks' meta, the rank of each pid and the columns of the
    events (in the order of their ``X`` events), tracks, edges and collectives."""
    ev, co = trace.events, trace.collectives
    numbers = [S.BYTES, S.FLOPS, S.WAIT, S.STEP, S.TRANSPOSE_FLOPS]
    texts = [S.LAYER, S.OP, S.SOURCE, S.DTYPE]
    events = {c: ev[c].to_numpy(dtype=np.float64) for c in numbers if c in ev}
    events |= {c: _codes(ev[c]) for c in texts if c in ev}
    events |= {"n": len(ev), S.TRACK: ev[S.TRACK].to_numpy(), S.SRC_ID: ev[S.SRC_ID].to_numpy()}
    tracks = {
        c: _codes(trace.tracks[c])
        for c in (S.TRACK_NAME, S.TRACK_KIND, S.ENGINE, S.DEVICE, S.CLOCK)
    }
    tracks[S.RANK] = trace.tracks[S.RANK].to_numpy()
    edges = {S.SRC: trace.edges[S.SRC].to_numpy(), S.DST: trace.edges[S.DST].to_numpy()}
    edges[S.EDGE_KIND] = _codes(trace.edges[S.EDGE_KIND])
    coll = {}
    for col, dtype in S.COLLECTIVE_COLUMNS.items():
        coll[col] = _codes(co[col]) if dtype == "object" else co[col].to_numpy()
    return {
        "schema": own_export.SCHEMA,
        "ranks": own_export.rank_block(trace.meta),
        "pids": {str(r): r for r in trace.ranks},  # pid = rank (the findings pid is not one)
        "events": events, "tracks": tracks, "edges": edges, "collectives": coll,
    }  # fmt: skip
