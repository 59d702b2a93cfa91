"""Collectives of the Neuron Explorer CSV export (no ``CcOp`` table), on jobs the clean-room
writer (tests/cleanroom/neuron_device_writer.py) exported as CSV: the trigger instructions and
the CC cores' ``CcInstruction`` rows give every transfer, and the untriggered receives bind to
the senders' transfers. Truth: the writer's simulated ops (pairs, true start times) and its
re-simulated savings; clock offsets drawn by the writer."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tests.cleanroom.neuron_device_writer import write_scenario
from tracediag.engine.diagnose import diagnose
from tracediag.loading.loader import load
from tracediag.model import schema as S
from tracediag.model.findings import Severity
from tracediag.model.untriggered_receives import bind_untriggered, untriggered_key

TOLERANCE = 0.15


def _write(root, name):
    truth = write_scenario(name, root, formats=("csv",))
    return [root / p for p in truth["files"]["csv"].values()], truth


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    paths, truth = _write(tmp_path_factory.mktemp("p1f1b_csv"), "pipeline_1f1b_slow_stage")
    return load(paths, cache=False), truth


def test_every_receive_binds_to_the_transfer_sent_to_it(pipeline):
    trace, truth = pipeline
    co = trace.collectives
    assert (co[S.COLL_OP] == "CollectivePermute").all()
    written = truth["time"]["written_ts_offset_ns"]["csv"]
    # Each side on the true clock: its written start minus the writer's offset for the rank
    # (before alignment: load again without it).
    raw = load(_paths(trace), align=False, cache=False)
    rc = raw.collectives
    true_start = rc[S.START].to_numpy() - np.array([written[str(r)] for r in rc[S.RANK]])
    sides = pd.DataFrame(
        {"key": rc[S.COLL_KEY], "rank": rc[S.RANK], "group": rc[S.GROUP], "t": true_start}
    )
    ops = {(tuple(op["ranks"]), op["start_true_ns"]) for op in ops_of(truth)}
    assert len(ops) == 48 and sides["key"].nunique() == 48
    for _, inst in sides.groupby("key"):
        assert len(inst) == 2 and inst["group"].nunique() == 1
        pair = tuple(int(x) for x in inst["group"].iloc[0].split(","))
        assert set(inst["rank"]) == set(pair)
        # Both sides start at the op's true start (the writer's CC cores start together).
        assert {(pair, int(t)) for t in inst["t"]} == {(pair, int(inst["t"].min()))}
        assert (pair, int(inst["t"].min())) in ops
    for r in trace.ranks:
        received = [
            op for op in ops_of(truth) if op["per_rank"].get(str(r), {}).get("role") == "recv"
        ]
        assert trace.meta[r].info["untriggered_instances_bound"] == len(received) > 0


def ops_of(truth):
    return [op for op in truth["collectives"]["ops"] if op["operation"] == "CollectivePermute"]


def _paths(trace):
    return [s for m in trace.meta.values() for s in m.sources]


def test_slow_stage_saving_from_the_csv_export(pipeline):
    trace, truth = pipeline
    (fault,) = [f for f in truth["findings"] if f["kind"] == "slow_pipeline_stage"]
    (f,) = [f for f in diagnose(trace).findings if f.code == "PIP602"]
    assert f.ranks == (2,)
    assert abs(f.saving_ns - fault["saving_ns"]) <= TOLERANCE * fault["saving_ns"]


def test_straggler_from_the_csv_export(tmp_path):
    paths, truth = _write(tmp_path, "straggler")
    (fault,) = truth["findings"]
    d = diagnose(load(paths, cache=False))
    (f,) = [f for f in d.findings if f.code == "COL201" and f.severity >= Severity.WARNING]
    assert f.ranks == (fault["rank"],)
    assert abs(f.saving_ns - fault["saving_total_ns"]) <= TOLERANCE * fault["saving_total_ns"]


@pytest.mark.parametrize("fmt", ["csv", "parquet", "json"])
@pytest.mark.parametrize(
    "name", ["clean", "lnc2", "session_capture", "duplicate_dma_packets", "no_dma_tables"]
)
def test_clean_jobs_have_nothing_to_flag_in_any_format(tmp_path, name, fmt):
    """The writer's clean jobs (``expected_clean``), as each format: nothing at warning. The
    ``lnc2`` job's transposes read one address in four layers on two cores: not repeats."""
    truth = write_scenario(name, tmp_path, formats=(fmt,))
    paths = [tmp_path / p for p in truth["files"][fmt].values()]
    assert truth["expected_clean"]
    d = diagnose(load(paths, cache=False))
    assert [f.code for f in d.findings if f.severity >= Severity.WARNING] == []


def _side(rank, key, op, group, start, end):
    return {
        S.RANK: rank, S.MATCH_KEY: key, S.COLL_OP: op, S.GROUP: group,
        S.START: start, S.END: end, S.BYTES: 8.0, S.DTYPE: "bf16",
    }  # fmt: skip


def _anon(rank, k, start, end):
    key = untriggered_key(rank, np.array(["16-19"], dtype=object), np.array([k]))[0]
    return _side(rank, key, "unknown", "", start, end)


def test_interleaved_receives_bind_through_the_clock_their_other_peer_relates():
    """Rank 1 receives from rank 0 (at 100, 300 on rank 0's clock) and rank 2 (200, 400 on
    rank 2's); rank 1's clock is rank 0's + 1000, rank 2's is rank 0's - 500. Rank 0 receives
    only from rank 1, so that binds in order and relates clocks 0 and 1; then rank 1's
    receives from 0 are the ones at 1100 and 1300, and the rest are rank 2's."""
    rows = [
        _side(0, "permute|0,1|0", "CollectivePermute", "0,1", 100, 150),
        _side(0, "permute|0,1|1", "CollectivePermute", "0,1", 300, 350),
        _side(2, "permute|2,1|0", "CollectivePermute", "2,1", -300, -250),
        _side(2, "permute|2,1|1", "CollectivePermute", "2,1", -100, -50),
        _side(1, "permute|1,0|0", "CollectivePermute", "1,0", 1500, 1550),
        _anon(0, 0, 500, 550),
        *[_anon(1, k, t, t + 50) for k, t in enumerate((1100, 1200, 1300, 1400))],
    ]
    coll = pd.DataFrame(rows)
    metas = {r: S.RankMeta(rank=r) for r in range(3)}
    out = bind_untriggered(coll, metas)
    assert out[S.MATCH_KEY].tolist()[5:] == [
        "permute|1,0|0", "permute|0,1|0", "permute|2,1|0", "permute|0,1|1", "permute|2,1|1",
    ]  # fmt: skip
    assert out[S.COLL_OP].tolist()[5:] == ["CollectivePermute"] * 5
    assert out[S.GROUP].tolist()[5:] == ["1,0", "0,1", "2,1", "0,1", "2,1"]
    assert [metas[r].info["untriggered_instances_bound"] for r in (0, 1)] == [1, 4]


def test_receives_no_sender_accounts_for_stay_unbound_and_counted():
    rows = [
        _side(0, "permute|0,1|0", "CollectivePermute", "0,1", 100, 150),
        *[_anon(1, k, t, t + 50) for k, t in enumerate((1100, 1200))],
    ]
    metas = {r: S.RankMeta(rank=r) for r in range(2)}
    out = bind_untriggered(pd.DataFrame(rows), metas)
    # Two receives, one transfer sent: the order says nothing, so neither binds.
    assert out[S.MATCH_KEY].str.startswith("untriggered|").sum() == 2
    assert metas[1].info["untriggered_instances_bound"] == 0
    assert metas[1].repairs["collectives: untriggered CC-core work bound to no sender"] == 2


def test_spill_reloads_from_the_instruction_rows(pipeline):
    """The export has no Summary: NUM703's byte totals are the Instruction rows' own sums (what
    the Parquet Summary holds), read here with pandas."""
    trace, _ = pipeline
    (f,) = [f for f in diagnose(trace).findings if f.code == "NUM703"]
    for r in trace.ranks:
        rows = pd.read_csv(f"{trace.meta[r].sources[0]}/Instruction.csv")
        mine = f.evidence["by_rank"][str(r)]
        assert mine["spill_reload_bytes"] == rows["spill_reload_bytes"].sum() > 0
        assert mine["hbm_read_bytes"] == rows["hbm_read_bytes"].sum()


@pytest.mark.parametrize(
    ("name", "code"), [("straggler", "COL201"), ("pipeline_1f1b_slow_stage", "PIP602")]
)
def test_rows_that_do_not_name_their_trigger_bind_to_it_by_order(tmp_path, name, code):
    """``trigger_start_ts`` is optional in CcInstruction: the same export without it (column
    dropped with pandas) reads as with it. Each stream's triggers bind to the instances of one
    core set, k-th to k-th; the receives' core set, which no trigger explains, stays apart."""
    paths, truth = _write(tmp_path, name)
    (fault,) = [f for f in truth["findings"] if CODE_OF[f["kind"]] == code]
    want = fault.get("saving_total_ns", fault["saving_ns"])
    with_field = [f for f in diagnose(load(paths, cache=False)).findings if f.code == code]
    for p in paths:
        rows = pd.read_csv(p / "CcInstruction.csv")
        rows.drop(columns=["trigger_start_ts"]).to_csv(p / "CcInstruction.csv", index=False)
    trace = load(paths, cache=False)
    without = [f for f in diagnose(trace).findings if f.code == code]
    assert [(f.ranks, f.saving_ns) for f in without] == [(f.ranks, f.saving_ns) for f in with_field]
    assert abs(without[0].saving_ns - want) <= TOLERANCE * want
    bound = "CcInstruction: rows without trigger_start_ts bound to their trigger by order"
    assert all(trace.meta[r].repairs.get(bound, 0) > 0 for r in trace.ranks)


CODE_OF = {"straggler": "COL201", "slow_pipeline_stage": "PIP602", "pipeline_bubble": "PIP601"}


def test_an_export_written_with_byte_order_marks_and_crlf_reads_the_same(tmp_path):
    """Spreadsheet-style CSV writers start a file with a UTF-8 byte-order mark and end lines
    with CRLF: the export reads as without them."""
    paths, _ = _write(tmp_path, "straggler")
    plain = diagnose(load(paths, cache=False))
    for p in paths:
        for f in p.glob("*.csv"):
            text = f.read_bytes().replace(b"\n", b"\r\n")
            f.write_bytes(b"\xef\xbb\xbf" + text)
    marked = diagnose(load(paths, cache=False))
    assert [(f.code, f.ranks, f.saving_ns) for f in marked.findings] == [
        (f.code, f.ranks, f.saving_ns) for f in plain.findings
    ]


@pytest.mark.parametrize("seed", [3, 4, 5])
def test_rank_pace_jitter_on_a_clean_job_is_no_straggler_warning(tmp_path, seed):
    """The writer's clean 2-rank job draws a 0.5% pace per rank: one rank is last at every
    AllReduce, for 1.4-1.8% of the step on these seeds. That is the variance of identical
    hardware: COL201 says so at info, nothing is at warning."""
    truth = write_scenario("clean", tmp_path, seed=seed, formats=("parquet",))
    paths = [tmp_path / p for p in truth["files"]["parquet"].values()]
    d = diagnose(load(paths, cache=False))
    (late,) = [f for f in d.findings if f.code == "COL201"]
    g = d.analysis.graph
    step = int(g.end[g.window].max() - g.start[g.window].min())
    assert 0.01 < late.saving_ns / step < 0.03 and late.severity == Severity.INFO
    assert not [f for f in d.findings if f.severity >= Severity.WARNING]
