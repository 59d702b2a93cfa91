"""Mutation fuzzing of the Chrome/Kineto reader: byte damage, damaged events, odd documents.

Every input must meet :func:`fuzz_helpers.check_contract`: a report whose repaired or dropped rows
are counted (TRC501), or exit 2 with one ``tracediag: error: <file>: <problem>`` line. The base
trace is a small generated Kineto trace (one rank, two layers). Targeted cases below pin the
counts for each kind of damage.
"""

from __future__ import annotations

import copy
import gzip
import json
import math
import random
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz_helpers import fuzz_settings, mutate_bytes, run_report
from tracediag.generator import generate
from tracediag.model.errors import TraceInputError
from tracediag.parsers import chrome_json

KEYS = ("ph", "ts", "dur", "pid", "tid", "name")
WRONG_VALUES = ("12", "abc", [1, 2], {"a": 1}, True, None, 1.5, -3)
MUTATIONS = (
    "drop_key",
    "wrong_type",
    "non_finite",
    "huge_int",
    "negative_dur",
    "unmatched",
    "duplicate",
    "overlap",
    "args_not_object",
)


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> dict:
    """The parsed base document (a Kineto trace of one rank, two layers)."""
    out = tmp_path_factory.mktemp("chrome-base")
    generate("slow_dma", out, formats=("chrome",), ranks=1, scale=0.5)
    return json.loads(gzip.decompress((out / "chrome" / "rank_0.json.gz").read_bytes()))


def _write(tmp: Path, doc, name: str = "rank_0.json") -> Path:
    path = tmp / name
    path.write_bytes(doc if isinstance(doc, bytes) else json.dumps(doc).encode())
    return path


def _mutate(events: list, kind: str, i: int, j: int) -> None:
    """Apply one event-level mutation to ``events`` in place (``i``, ``j`` pick what)."""
    at = i % len(events)
    event = events[at]
    if kind == "drop_key":
        event.pop(KEYS[j % len(KEYS)], None)
    elif kind == "wrong_type":
        event[(*KEYS, "args", "cat")[j % 8]] = WRONG_VALUES[(j // 8) % len(WRONG_VALUES)]
    elif kind == "non_finite":
        event[("ts", "dur")[j % 2]] = (math.nan, math.inf, -math.inf)[(j // 2) % 3]
    elif kind == "huge_int":
        value = (10**25, -(10**22), 2**63, 2**64 + 1)[j % 4]
        if j % 3 == 2 and isinstance(event.get("args"), dict):
            event["args"]["correlation"] = value
        else:
            event[("ts", "dur", "pid", "tid")[j % 4]] = value
    elif kind == "negative_dur":
        event["dur"] = (
            -abs(event.get("dur") or 1) if isinstance(event.get("dur"), int | float) else -1
        )
    elif kind == "unmatched":
        events.insert(at, {**event, "ph": "BE"[j % 2]})
    elif kind == "duplicate":
        events.insert(at, copy.deepcopy(event))
    elif kind == "overlap":
        xs = [e for e in events if e.get("ph") == "X" and isinstance(e.get("dur"), int | float)]
        x = xs[i % len(xs)]
        events.append({**x, "ts": x["ts"] + x["dur"] / 2, "name": "overlapping"})
    elif kind == "args_not_object":
        event["args"] = (["a"], "text", 3)[j % 3]


@fuzz_settings(examples=12)
@given(
    st.lists(
        st.tuples(st.sampled_from(MUTATIONS), st.integers(0, 10**6), st.integers(0, 10**6)),
        min_size=1,
        max_size=4,
    )
)
def test_damaged_events_are_counted_or_refused(base, tmp_path_factory, mutations):
    doc = copy.deepcopy(base)
    for kind, i, j in mutations:
        _mutate(doc["traceEvents"], kind, i, j)
    path = _write(tmp_path_factory.mktemp("fuzz"), doc)
    run_report([path], path.parent, what=f"{mutations}")


@fuzz_settings(examples=8)
@given(st.integers(0, 2**32))
def test_byte_damage_is_counted_or_refused(base, tmp_path_factory, seed):
    data = json.dumps(base).encode()
    kind, damaged = mutate_bytes(data, random.Random(seed))
    path = _write(tmp_path_factory.mktemp("bytes"), damaged)
    run_report([path], path.parent, what=f"{kind} (seed {seed})")


@pytest.mark.parametrize(
    ("top", "problem"),
    [
        ({"traceEvents": {"ph": "X"}}, "'traceEvents' is a JSON object, not a list"),
        ({"traceEvents": "x"}, "'traceEvents' is a JSON string, not a list"),
        ({"traceEvents": None}, "'traceEvents' is a JSON null, not a list"),
        ({"traceEvents": []}, "trace has no events"),
        ({"traceEvents": [1, [2], "x"]}, "trace has no timed events"),
        ({"traceEvents": [{"ph": "M", "name": "thread_name", "pid": 1}]}, "no timed events"),
    ],
)
def test_unusable_documents_exit_2_naming_the_file(tmp_path, top, problem):
    path = _write(tmp_path, top)
    outcome = run_report([path], tmp_path)
    assert outcome.code == 2
    assert outcome.err.strip() == f"tracediag: error: {path}: {problem}" or problem in outcome.err


def test_truncated_json_names_the_position(base, tmp_path):
    data = json.dumps(base).encode()
    path = _write(tmp_path, data[: len(data) // 2])
    outcome = run_report([path], tmp_path)
    assert outcome.code == 2
    assert f"tracediag: error: {path}: not valid JSON" in outcome.err


def _events_doc(*events) -> dict:
    """A minimal Kineto-looking document: a CPU op around the given events."""
    return {
        "traceEvents": [
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "op",
                "pid": 1,
                "tid": 1,
                "ts": 0,
                "dur": 100,
                "args": {},
            },
            *events,
        ]
    }


def _x(**kw) -> dict:
    return {
        "ph": "X",
        "cat": "cpu_op",
        "name": "child",
        "pid": 1,
        "tid": 1,
        "ts": 10,
        "dur": 5,
        **kw,
    }


@pytest.mark.parametrize(
    ("event", "words", "kept"),
    [
        (_x(dur=-5), ("negative duration",), 2),  # clamped to 0, kept
        (_x(ts="soon"), ("no valid timestamp",), 1),
        (_x(ts=None), ("no valid timestamp",), 1),
        ({k: v for k, v in _x().items() if k != "ts"}, ("no valid timestamp",), 1),
        ({k: v for k, v in _x().items() if k != "dur"}, ("no valid timestamp",), 1),
        ({k: v for k, v in _x().items() if k != "ph"}, ("without a phase",), 1),
        (_x(ph="B"), ("begin without end",), 1),
        (_x(ph="E"), ("end without begin",), 1),
        (_x(args=["not", "a", "dict"]), ("args is not a JSON object",), 2),
        (_x(ts=math.inf), ("NaN/Infinity",), 1),
        (_x(dur=10**30), ("beyond 64 bits",), 1),
    ],
)
def test_damaged_rows_are_counted(tmp_path, event, words, kept):
    path = _write(tmp_path, _events_doc(event))
    (part,) = chrome_json.read(path)
    counted = sum(k for reason, k in part.meta.repairs.items() if all(w in reason for w in words))
    assert counted == 1, part.meta.repairs
    assert len(part.events) == kept


@pytest.mark.parametrize("key", (*KEYS, "args", "cat", "id", "bp"))
@pytest.mark.parametrize("value", WRONG_VALUES, ids=repr)
def test_wrong_types_are_read_or_refused(tmp_path, key, value):
    """Every key of a slice, a flow and a thread-name event given a value of the wrong type."""
    doc = _events_doc(
        _x(**{key: value}),
        {"ph": "s", "cat": "ac2g", "name": "f", "pid": 1, "tid": 1, "ts": 10, "id": 7, key: value},
        {"ph": "f", "cat": "fl", "name": "f", "pid": 1, "tid": 1, "ts": 20, "id": 7, "bp": "e"},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": value}},
    )
    path = _write(tmp_path, doc)
    try:
        (part,) = chrome_json.read(path)
    except TraceInputError as exc:
        assert str(exc).startswith(f"{path}: ")
    else:
        assert len(part.events) >= 1


def test_duplicate_and_overlapping_gpu_work_still_reports(base, tmp_path):
    doc = copy.deepcopy(base)
    events = doc["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    events.append(copy.deepcopy(kernels[0]))  # an exact duplicate
    events.append({**kernels[1], "ts": kernels[1]["ts"] + kernels[1]["dur"] / 2})  # overlaps
    path = _write(tmp_path, doc)
    outcome = run_report([path], tmp_path)
    assert outcome.code == 0
    assert outcome.report["ranks"][0]["step_time_ns"] > 0
