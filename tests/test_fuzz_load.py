"""Hostile input for the collective timeline reader and the cross-rank path (load, assemble,
align, match), through the CLI: byte mutations, damaged records drawn by hypothesis, duplicate
records, collectives that do not match across ranks, missing ranks, ranks out of range, several
inputs with one bad, and the console script itself (see :mod:`tests.fuzz_helpers`)."""

from __future__ import annotations

import copy
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz_helpers import fresh_dir, fuzz_settings, mutate_bytes, run_report, sweep
from tests.neuron_fixtures import write_profile
from tests.test_collective_timeline import _records

UNMATCHED = "collectives: unmatched across ranks (end far from the other participants')"


def _write(path: Path, records: list, header: bool = True) -> Path:
    """JSON Lines with Python's json (it writes integers beyond 64 bits, and NaN)."""
    head = [{"format": "tracediag-collective-timeline", "version": 1}] if header else []
    path.write_text("".join(json.dumps(r) + "\n" for r in head + records))
    return path


@pytest.fixture(scope="module")
def records() -> list[dict]:
    """Four ranks, five AllReduce instances, rank 2 late to each."""
    return _records(ranks=4, instances=5)


@pytest.mark.parametrize("seed", range(sweep(6)))
def test_timeline_byte_mutations(seed, records, tmp_path):
    rng = random.Random(seed)
    kind, data = mutate_bytes(_write(tmp_path / "t.jsonl", records).read_bytes(), rng)
    (tmp_path / "t.jsonl").write_bytes(data)
    run_report([tmp_path / "t.jsonl"], tmp_path, f"timeline {kind} (seed {seed})")


ODD = [None, "x", "12", 1.5, -1, 0, 2**63, 2**64 + 1, -(2**63), 2**40, [], {}, [0, 1], True]
KEYS = ["rank", "op", "seq", "start_ns", "end_ns", "arrival_ns", "group", "bytes", "communicator"]


@fuzz_settings(10)
@given(
    damages=st.lists(
        st.tuples(
            st.integers(0, 19),  # the record
            st.sampled_from(KEYS),
            st.sampled_from(["value", "drop", "duplicate"]),
            st.sampled_from(ODD),
        ),
        min_size=1,
        max_size=4,
    )
)
def test_timeline_record_damage(damages, records, tmp_path):
    recs = copy.deepcopy(records)
    for index, key, how, value in damages:
        if how == "value":
            recs[index][key] = value
        elif how == "drop":
            recs[index].pop(key, None)
        else:
            recs.append(copy.deepcopy(recs[index]))
    case = fresh_dir(tmp_path)
    run_report([_write(case / "t.jsonl", recs)], case, f"timeline {damages}")


def test_timeline_repairs_are_counted(records, tmp_path):
    recs = copy.deepcopy(records)
    recs[0]["end_ns"] = recs[0]["start_ns"] - 100  # negative duration
    del recs[5]["seq"]
    recs[6]["start_ns"] = None
    recs += [copy.deepcopy(recs[3]), copy.deepcopy(recs[7])]  # duplicates: read as given
    outcome = run_report([_write(tmp_path / "t.jsonl", recs)], tmp_path)
    assert outcome.code == 0
    assert outcome.repairs() == {
        "records missing a required value: skipped": 2,
        "records: negative duration clamped to 0": 1,
        UNMATCHED: 1,  # the clamped record now ends at its start, far from the others
    }


def test_collectives_that_do_not_match_across_ranks(records, tmp_path):
    """Rank 2 missed instance 2 and numbers the rest on from 2: its rows 2 and 3 pair with
    the wrong instances. Its clock offset comes out half an instance off, so all its 4 rows end
    far from the others'. The two that land half an instance early still overlap every other
    participant's [arrival, end] (a busy host's completion jitter looks the same: the real
    gloo traces finish one all-reduce up to 14 ms apart); the two that land late arrive after
    the others ended: they are split off and counted, and TRC501 says so."""
    recs = [copy.deepcopy(r) for r in records if not (r["rank"] == 2 and r["seq"] == 2)]
    for r in recs:
        if r["rank"] == 2 and r["seq"] > 2:
            r["seq"] -= 1
    outcome = run_report([_write(tmp_path / "t.jsonl", recs)], tmp_path)
    assert outcome.code == 0
    assert outcome.repairs() == {UNMATCHED: 2}
    assert "TRC501" in {f["code"] for f in outcome.report["findings"]}


def test_missing_ranks_in_a_group_are_reported(records, tmp_path):
    recs = [r for r in records if r["rank"] != 3]
    outcome = run_report([_write(tmp_path / "t.jsonl", recs)], tmp_path)
    assert outcome.code == 0 and outcome.repairs() == {}
    missing = [f for f in outcome.report["findings"] if f["code"] == "TRC502"]
    assert len(missing) == 1 and "3" in missing[0]["message"]


@pytest.mark.parametrize(("value", "problem"), [(2**40, "rank 1099511627776 is out of range"),
                                                (-1, "rank -1 is out of range")])  # fmt: skip
def test_rank_out_of_range_is_one_error_line(value, problem, records, tmp_path):
    recs = copy.deepcopy(records)
    recs[0]["rank"] = value
    path = _write(tmp_path / "t.jsonl", recs)
    outcome = run_report([path], tmp_path)
    assert outcome.code == 2 and outcome.err.startswith(f"tracediag: error: {path}: {problem}")


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [
        ("communicator", [], "field 'communicator' must be text (found list<item: null>)"),
        (
            "group",
            {"a": 1},
            "field 'group' must be a list of ranks or text (found struct<a: int64>)",
        ),
        ("group", [[0, 1]], "field 'group' must be a list of ranks or text (found list<item: list"),
        ("bytes", [1], "field 'bytes' must be a number (found list<item: int64>)"),
        ("rank", 1.5, "field 'rank' must be an integer (found double)"),
    ],
)
def test_field_of_the_wrong_type_is_one_error_line(key, value, problem, records, tmp_path):
    recs = copy.deepcopy(records)
    for r in recs:
        r[key] = value
    path = _write(tmp_path / "t.jsonl", recs)
    outcome = run_report([path], tmp_path)
    assert outcome.code == 2 and outcome.err.startswith(f"tracediag: error: {path}: {problem}")


def test_invalid_utf8_names_its_byte_offset(records, tmp_path):
    data = bytearray(_write(tmp_path / "t.jsonl", records).read_bytes())
    at = data.index(b'"op"') + 1
    data[at] = 0xFC  # inside a field name
    (tmp_path / "t.jsonl").write_bytes(bytes(data))
    outcome = run_report([tmp_path / "t.jsonl"], tmp_path)
    assert outcome.err == f"tracediag: error: {tmp_path / 't.jsonl'}: invalid UTF-8 at byte {at}\n"


def test_one_bad_input_among_several_is_named(records, tmp_path):
    good = write_profile(tmp_path / "rank_0")
    bad = tmp_path / "rank_1.jsonl"
    bad.write_bytes(_write(tmp_path / "x.jsonl", records).read_bytes()[:-40])  # cut mid-record
    outcome = run_report([good, bad], tmp_path)
    assert outcome.code == 2 and outcome.err.startswith(f"tracediag: error: {bad}: ")


def test_two_inputs_giving_one_rank(records, tmp_path):
    first = write_profile(tmp_path / "a" / "rank_0")
    second = write_profile(tmp_path / "b" / "rank_0")
    outcome = run_report([first, second], tmp_path)
    assert outcome.code == 2
    assert outcome.err == f"tracediag: error: {second}: rank 0 is also given by {first}\n"


def test_console_script_prints_one_line_for_a_damaged_file(records, tmp_path):
    """The installed entry point (not just ``main``): exit 2, one line, no traceback."""
    path = tmp_path / "t.jsonl"
    path.write_bytes(_write(path, records).read_bytes()[:100])
    env = {"TRACEDIAG_CACHE_DIR": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"}
    run = subprocess.run(
        [sys.executable, "-m", "tracediag", "report", "-q", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=env,
    )
    assert run.returncode == 2 and run.stdout == ""
    assert len(run.stderr.splitlines()) == 1
    assert run.stderr.startswith(f"tracediag: error: {path}: ") and "internal" not in run.stderr
