"""Hostile input for the Neuron readers (Explorer Parquet and legacy JSON), through the CLI.

Byte mutations (truncation, flipped bytes, spliced slices) of table files and JSON documents,
column damage of Parquet tables and key/value damage of JSON rows drawn by hypothesis, and exact
counts for the damage a reader repairs (see :mod:`tests.fuzz_helpers` for the contract).
"""

from __future__ import annotations

import copy
import json
import random
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz_helpers import (
    TABLE_DAMAGE,
    damage_table,
    fresh_dir,
    fuzz_settings,
    mutate_bytes,
    run_report,
    sweep,
)
from tests.neuron_fixtures import legacy_doc, write_profile

#: The Parquet tables of the fixture profile (tests.neuron_fixtures).
TABLES = ("Instruction", "DmaPacket", "CcOp", "Flow", "ActiveTime", "Metadata", "Summary")


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> Path:
    """A two-rank Explorer Parquet job of the small fixture profile."""
    root = tmp_path_factory.mktemp("neuron_job") / "job"
    for rank in (0, 1):
        write_profile(root / f"rank_{rank}")
    return root


def _copy(job: Path, where: Path) -> Path:
    return Path(shutil.copytree(job, where / "job"))


def _rewrite(path: Path, edit) -> None:
    pq.write_table(edit(pq.read_table(path)), path)


def _set(column: str, values: list, type_=None):
    """An edit that replaces (or adds) one column of a table."""

    def edit(table: pa.Table) -> pa.Table:
        array = pa.array(values, type_)
        if column not in table.schema.names:
            return table.append_column(column, array)
        return table.set_column(table.schema.names.index(column), column, array)

    return edit


# ---- Explorer Parquet ---------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(sweep(10)))
def test_parquet_byte_mutations(seed, job, tmp_path):
    rng = random.Random(seed)
    copy_ = _copy(job, tmp_path)
    target = rng.choice(sorted(copy_.rglob("*.parquet")))
    kind, data = mutate_bytes(target.read_bytes(), rng)
    target.write_bytes(data)
    run_report([copy_], tmp_path, f"{target.relative_to(tmp_path)} {kind} (seed {seed})")


@fuzz_settings(12)
@given(
    damages=st.lists(
        st.tuples(
            st.sampled_from(TABLES),
            st.sampled_from(TABLE_DAMAGE),
            st.sampled_from(
                [
                    "start_ts",
                    "end_ts",
                    "duration_ns",
                    "id",
                    "engine",
                    "op_id",
                    "replica_group",
                    "in_table",
                    "out_id",
                    "profile_schema_version",
                    "worker_gid",
                    "queue_name",
                ]
            ),  # fmt: skip
        ),
        min_size=1,
        max_size=3,
    ),
    seed=st.integers(0, 2**16),
    rank=st.sampled_from(["rank_0", "rank_1"]),
)
def test_parquet_column_damage(damages, seed, rank, job, tmp_path):
    rng = random.Random(seed)
    case = fresh_dir(tmp_path)
    copy_ = _copy(job, case)
    for table, kind, column in damages:
        path = copy_ / rank / f"{table}.parquet"
        pq.write_table(damage_table(pq.read_table(path), rng, kind, column), path)
    run_report([copy_], case, f"{rank}: {damages} (seed {seed})")


def test_negative_durations_are_clamped_and_counted(job, tmp_path):
    copy_ = _copy(job, tmp_path)
    durations = [-100, 50, -10, None]  # the last one has no duration: end_ts - start_ts
    _rewrite(copy_ / "rank_0" / "Instruction.parquet", _set("duration_ns", durations))
    outcome = run_report([copy_], tmp_path)
    assert outcome.code == 0
    assert outcome.repairs()["Instruction: negative duration clamped to 0"] == 2


def test_rows_without_a_usable_time_are_dropped_and_counted(job, tmp_path):
    copy_ = _copy(job, tmp_path)
    starts = [1000, None, 2**63 - 1, 1300]  # no time, and a time past 2**62 ns (overflows)
    _rewrite(copy_ / "rank_1" / "Instruction.parquet", _set("start_ts", starts))
    outcome = run_report([copy_], tmp_path)
    assert outcome.code == 0
    (trc,) = [f["evidence"] for f in outcome.report["findings"] if f["code"] == "TRC501"]
    dropped = "Instruction: dropped, no valid timestamp or duration"
    assert trc["by_rank"]["1"][dropped] == 2 and dropped not in trc["by_rank"].get("0", {})
    # ...and the Flow edges of the dropped instruction 11 (it is an end of 2 resolved ones, one
    # into a block of two packets: an edge to each).
    assert trc["by_rank"]["1"]["edges: dropped, an end event had no valid time"] == 3


def test_duplicate_rows_are_counted(job, tmp_path):
    copy_ = _copy(job, tmp_path)
    _rewrite(copy_ / "rank_0" / "DmaPacket.parquet", lambda t: t.take([0, 1, 2, 1, 2]))
    outcome = run_report([copy_], tmp_path)
    assert outcome.code == 0
    # Rows repeated whole are the profiler's duplicate-packet defect: removed and counted.
    assert outcome.repairs()["DmaPacket: duplicate packet removed (a known profiler defect)"] == 2


@pytest.mark.parametrize("version", ["8.0.0", "v13", "garbage", None])
def test_unknown_schema_major_version_is_counted(version, job, tmp_path):
    copy_ = _copy(job, tmp_path)
    _rewrite(
        copy_ / "rank_0" / "Metadata.parquet",
        _set("profile_schema_version", [version], pa.string()),
    )
    outcome = run_report([copy_], tmp_path)
    assert outcome.code == 0
    assert outcome.repairs()["unknown schema major version"] == 1


@pytest.mark.parametrize(
    ("table", "column", "values", "found"),
    [
        ("Instruction", "start_ts", ["x", "1", "", None], "string"),
        ("Instruction", "duration_ns", [1.5, 2.0, 3.0, 4.0], "double"),
        ("ActiveTime", "end_ts", [1.5, 2.5, 3.5], "double"),
        ("Flow", "out_id", [[1]] * 7, "list<element: int64>"),
        ("Flow", "in_table", [b"\xec\x01"] * 7, "binary"),
        ("DmaPacket", "transfer_bytes", ["a", "b", "c"], "string"),
    ],
)
def test_wrong_column_type_is_one_error_line(table, column, values, found, job, tmp_path):
    copy_ = _copy(job, tmp_path)
    path = copy_ / "rank_1" / f"{table}.parquet"
    _rewrite(path, _set(column, values))
    outcome = run_report([copy_], tmp_path)
    assert outcome.code == 2
    expected = {"transfer_bytes": "numbers", "in_table": "text or numbers"}.get(column, "integers")
    assert outcome.err == (
        f"tracediag: error: {path}: column {column!r} holds {found}, expected {expected}\n"
    )


def test_huge_unsigned_ids_and_overlaps_on_one_engine_are_read(job, tmp_path):
    copy_ = _copy(job, tmp_path)
    ids = [2**64 - 4, 2**64 - 3, 2**64 - 2, 2**64 - 1]  # written by the device as uint64
    starts = [1000, 1010, 1020, 1030]  # every instruction overlaps the one before on its engine
    path = copy_ / "rank_0" / "Instruction.parquet"
    _rewrite(path, _set("id", ids, pa.uint64()))
    _rewrite(path, _set("start_ts", starts))
    outcome = run_report([copy_], tmp_path)
    # Every Flow row naming an instruction of rank 0 (6) matches none now; rank 1 keeps the
    # fixture's one edge from instruction 99, which does not exist.
    assert outcome.code == 0 and outcome.repairs()["Flow: edges whose id matches no event"] == 7


def test_rank_outside_every_replica_group_and_a_missing_peer(job, tmp_path):
    """Rank 9 alone, its CcOp groups naming ranks 0-7: read, the peers reported missing."""
    copy_ = Path(shutil.copytree(job / "rank_1", tmp_path / "job" / "rank_9"))
    outcome = run_report([copy_.parent], tmp_path)
    assert outcome.code == 0
    assert [r["rank"] for r in outcome.report["ranks"]] == [9]
    assert "TRC502" in {f["code"] for f in outcome.report["findings"]}


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Path:
    """A small generated two-rank job (``tracediag generate clean``), Parquet and legacy JSON."""
    from tracediag.generator import generate

    out = tmp_path_factory.mktemp("generated")
    generate("clean", out, formats=("parquet", "json"), ranks=2, seed=0, scale=0.05)
    return out


@pytest.mark.parametrize(
    "damage", ["truncate Instruction", "shift CcOp op_id", "drop CcOp", "JSON cut"]
)
def test_generated_job_damage(damage, generated, tmp_path):
    """Collectives that stop matching across ranks: op ids shifted on one rank pair the wrong
    instances (the Flow edges into its CcOps match nothing: counted); one rank's CcOp table gone
    leaves it unaligned (TRC503). A cut file is one error line."""
    job = Path(shutil.copytree(generated / "parquet", tmp_path / "parquet"))
    cc = job / "rank_1" / "CcOp.parquet"
    if damage == "truncate Instruction":
        target = sorted((job / "rank_0").glob("Instruction*.parquet"))[0]
        target.write_bytes(target.read_bytes()[:-100])
    elif damage == "shift CcOp op_id":
        _rewrite(cc, lambda t: _set("op_id", [v + 1 for v in t["op_id"].to_pylist()])(t))
    elif damage == "drop CcOp":
        cc.unlink()
    else:
        data = (generated / "json" / "rank_1.json").read_bytes()
        job = tmp_path / "rank_1.json"
        job.write_bytes(data[: len(data) // 2])
    outcome = run_report([job], tmp_path, damage)
    if damage in ("truncate Instruction", "JSON cut"):
        assert outcome.code == 2
        return
    assert outcome.code == 0
    # Two Flow rows name each of rank 1's CcOps (ids 0 and 1): shifted, id 0 is gone; dropped,
    # both are.
    lost = 2 if damage == "shift CcOp op_id" else 4
    assert outcome.repairs() == {"Flow: edges whose id matches no event": lost}
    clocks = [r["clock"] for r in outcome.report["ranks"]]
    codes = {f["code"] for f in outcome.report["findings"]}
    if damage == "drop CcOp":
        assert clocks == ["reference", "unaligned"] and "TRC503" in codes
    else:
        assert clocks == ["reference", "collectives"] and "TRC501" in codes


def test_out_of_range_rank_in_a_directory_name(job, tmp_path):
    copy_ = Path(shutil.copytree(job / "rank_0", tmp_path / "job" / "rank_4294967296"))
    outcome = run_report([copy_], tmp_path)
    assert outcome.code == 2
    assert outcome.err == (
        f"tracediag: error: {copy_}: rank 4294967296 is out of range (0 to 2147483647; "
        "from filename)\n"
    )


# ---- legacy JSON --------------------------------------------------------------------------------

#: Values that break a JSON field's expected type or range.
ODD_VALUES = [
    "x", "", "12", None, True, [], [1, "a"], {"a": 1}, 1.5, -1, 0, 2**63, 2**64 - 1, 2**64 + 5,
    10**30, -(2**70), float("nan"), float("inf"), 1e308,
]  # fmt: skip


@pytest.fixture(scope="module")
def legacy() -> dict:
    """The fixture legacy document with a CcOp and a DMA trigger (ids that edges refer to)."""
    return legacy_doc()


@pytest.mark.parametrize("seed", range(sweep(10)))
def test_json_byte_mutations(seed, legacy, tmp_path):
    rng = random.Random(seed)
    kind, data = mutate_bytes(json.dumps(legacy).encode(), rng)
    path = tmp_path / "rank_0.json"
    path.write_bytes(data)
    run_report([path], tmp_path, f"legacy JSON {kind} (seed {seed})")


def _damage_rows(doc: dict, table: str, key: str, how: str, value, rng: random.Random) -> dict:
    doc = copy.deepcopy(doc)
    rows = doc.get(table)
    if how == "table":
        doc[table] = value
        return doc
    if not isinstance(rows, list) or not rows:
        return doc
    picked = sorted(rng.sample(range(len(rows)), k=max(1, len(rows) // 2)))
    for i in picked:
        row = rows[i]
        if how != "row" and not isinstance(row, dict):  # an earlier damage replaced it
            continue
        if how == "row":
            rows[i] = value
        elif how == "drop_key":
            row.pop(key, None)
        elif how == "value":
            row[key] = value
        elif how == "duplicate":
            rows.append(copy.deepcopy(row))
    return doc


@fuzz_settings(12)
@given(
    damages=st.lists(
        st.tuples(
            st.sampled_from(["instruction", "dma", "cc_op", "summary", "metadata"]),
            st.sampled_from(
                [
                    "timestamp",
                    "duration",
                    "id",
                    "subgroup",
                    "label",
                    "inst_dep_ids",
                    "trigger_id",
                    "start_ts",
                    "end_ts",
                    "op_id",
                    "replica_group",
                    "total_time",
                    "worker_gid",
                ]
            ),  # fmt: skip
            st.sampled_from(["value", "value", "drop_key", "row", "duplicate", "table"]),
            st.sampled_from(ODD_VALUES),
        ),
        min_size=1,
        max_size=3,
    ),
    seed=st.integers(0, 2**16),
)
def test_json_field_damage(damages, seed, legacy, tmp_path):
    rng = random.Random(seed)
    doc = legacy
    for table, key, how, value in damages:
        doc = _damage_rows(doc, table, key, how, value, rng)
    case = fresh_dir(tmp_path)
    path = case / "rank_0.json"
    path.write_text(json.dumps(doc))  # Python's json writes NaN/Infinity and big integers
    run_report([path], case, f"legacy JSON {damages} (seed {seed})")


def test_json_nan_literals_and_negative_durations_are_counted(legacy, tmp_path):
    doc = copy.deepcopy(legacy)
    doc["instruction"][0]["duration"] = -5
    doc["instruction"][1]["duration"] = float("nan")
    path = tmp_path / "rank_0.json"
    path.write_text(json.dumps(doc))
    outcome = run_report([path], tmp_path)
    assert outcome.code == 0
    assert outcome.repairs()["NaN/Infinity literals read as null"] == 1
    assert outcome.repairs()["instruction: negative duration clamped to 0"] == 1


def test_json_integers_beyond_64_bits_are_one_error_line(legacy, tmp_path):
    doc = copy.deepcopy(legacy)
    doc["instruction"][0]["timestamp"] = 10**30
    path = tmp_path / "rank_0.json"
    path.write_text(json.dumps(doc))
    outcome = run_report([path], tmp_path)
    assert outcome.code == 2
    assert outcome.err.startswith(f"tracediag: error: {path}: instruction.timestamp ")
