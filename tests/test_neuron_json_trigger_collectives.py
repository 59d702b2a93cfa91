"""Legacy Neuron JSON without a collective table: the collectives the trigger instructions name
(``ctype=...``), arrival at the trigger, completion inferred three ways, matched across ranks by
group, stream and order. Times worked by hand from the rows below."""

from __future__ import annotations

from tests.neuron_fixtures import write_json
from tracediag.loading.loader import load
from tracediag.parsers import neuron_json

TRIGGER = "$S[15]++@complete ctype={op} op=ADD dtype=bfloat16 group_id=0 channel_id=0 stream_id=0"


def _row(ts, dur, engine, opcode, operands="", **extra):
    return {
        "timestamp": ts,
        "duration": dur,
        "subgroup": engine,
        "opcode": opcode,
        "operands": operands,
        **extra,
    }


def _doc(late: int = 0) -> dict:
    """One rank: compute, an AllReduce trigger at 1,000 + ``late`` whose completion a later
    ACTIVATE waits on (``$S[15]>=1`` at 6,000), more compute, an AllGather trigger at 8,000
    after which the core idles and resumes at 12,000, and a last AllReduce trigger at 13,000
    with nothing after it (the profile ends at 20,000)."""
    return {
        "summary": [{"total_time": 20e-6}],
        "metadata": [{"last_hw_timestamp": 20_000}],
        "instruction": [
            _row(0, 1_000 + late, "Tensor", "MATMUL"),
            _row(1_000 + late, 100, "Pool", "PSEUDO_TRIGGER_COLLECTIVE", TRIGGER.format(op="ALL_REDUCE")),
            _row(6_000, 500, "Act", "ACTIVATE", "$S[15]>=1 func=copy"),
            _row(6_500, 1_500, "Tensor", "MATMUL"),
            _row(8_000, 100, "Pool", "PSEUDO_TRIGGER_COLLECTIVE", TRIGGER.format(op="ALL_GATHER")),
            _row(12_000, 1_000, "Tensor", "MATMUL"),
            _row(13_000, 100, "Pool", "PSEUDO_TRIGGER_COLLECTIVE", TRIGGER.format(op="ALL_REDUCE")),
        ],
    }  # fmt: skip


def test_collectives_come_from_the_triggers_with_inferred_completions(tmp_path):
    (part,) = neuron_json.read(write_json(tmp_path / "profile_rank_0.json", _doc()))
    co = part.collectives.sort_values("start_ns").reset_index(drop=True)
    assert co["op"].tolist() == ["AllReduce", "AllGather", "AllReduce"]
    assert co["arrival_ns"].tolist() == [1_000, 8_000, 13_000]  # at the trigger
    assert co["start_ns"].tolist() == [1_100, 8_100, 13_100]  # once issued
    # the waiting ACTIVATE's start, the core's resumption, the profile's end
    assert co["end_ns"].tolist() == [6_000, 12_000, 20_000]
    assert co["match_key"].tolist() == ["#0|0|0", "#0|0|1", "#0|0|2"]
    assert part.meta.info["collectives_from_triggers"] == 3
    assert part.meta.info["collective_completion_inferred"] == {
        "semaphore": 1, "core_resumed": 1, "profile_end": 1, "unknown": 0,
    }  # fmt: skip
    reasons = part.meta.repairs
    assert reasons["collectives: from trigger instructions, completion inferred (semaphore)"] == 1


def test_a_collective_table_wins_over_the_triggers(tmp_path):
    doc = _doc()
    doc["cc_ops"] = [
        {"timestamp": 1_200, "duration": 4_000, "operation": "AllReduce", "replica_group": "[[0]]"}
    ]
    (part,) = neuron_json.read(write_json(tmp_path / "profile_rank_0.json", doc))
    assert len(part.collectives) == 1 and "collectives_from_triggers" not in part.meta.info


def test_ranks_are_matched_and_the_late_one_arrives_last(tmp_path):
    for rank, late in ((0, 0), (1, 700)):
        write_json(tmp_path / f"profile_rank_{rank}.json", _doc(late))
    job = load([tmp_path], cache=False, jobs=1)
    co = job.collectives
    assert co.groupby("coll_key")["rank"].nunique().tolist() == [2, 2, 2]
    first = co[co["op"] == "AllReduce"].sort_values("arrival_ns").groupby("rank").head(1)
    lateness = first.set_index("rank")["arrival_ns"].diff().iloc[-1]
    # aligned at the inferred completions (6,000 on both), rank 1 arrives 700 ns later
    assert int(lateness) == 700
