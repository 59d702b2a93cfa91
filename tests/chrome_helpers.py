"""Helpers for the Chrome/Kineto reader tests: shared traces, tiny trace files, lookups."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from tracediag.model import schema as S
from tracediag.model.assembly import assemble
from tracediag.parsers import chrome_json

TRACES = Path(__file__).parents[2] / "shared" / "traces"


def shared(name: str) -> Path:
    path = TRACES / name
    if not path.exists():
        pytest.skip(f"{path} not available")
    return path


def write(path: Path, doc, gz: bool = False) -> Path:
    data = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def X(cat, name, ts, dur, pid=100, tid=100, **args):
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": pid,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": args,
    }


def read_one(path: Path):
    parts = chrome_json.read(path)
    assert len(parts) == 1
    return parts[0], assemble(parts)


def named(trace: S.Trace, name: str):
    ev = trace.events
    rows = ev.index[ev[S.NAME].astype(str) == name]
    assert len(rows) == 1, f"{name}: {len(rows)} rows"
    return ev.loc[rows[0]]
