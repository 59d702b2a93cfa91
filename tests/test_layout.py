"""Layout inference: generated dp x tp x pp jobs, hand-built traces, Kineto process groups,
explicit layouts and the notes on what the inference cannot settle."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.chrome_helpers import X, write
from tests.gate_runs import cli
from tests.trace_factory import RankSpec, build
from tracediag.analysis.parallel_layout import (
    explicit_layout,
    infer_layout,
    parse_layout,
    resolve_layout,
)
from tracediag.cli.common import layout_sizes
from tracediag.engine.config import Config, from_mapping
from tracediag.engine.diagnose import diagnose
from tracediag.generator import generate
from tracediag.generator.parallel_layout import ParallelLayout
from tracediag.generator.parallel_write import generate_parallel
from tracediag.loading.loader import load
from tracediag.model.errors import UsageError

run = cli  # ``run(*argv) -> (exit code, stdout, stderr)`` in an empty directory


def _truth_layout(truth: dict) -> tuple:
    t = truth["layout"]
    return (t["dp"], t["tp"], t["pp"], t["ep"]), t["ranks"]


def _layout_of(layout) -> tuple:
    d = layout.to_dict()
    return (d["dp"], d["tp"], d["pp"], d["ep"]), d["ranks"]


@pytest.mark.parametrize(
    ("scenario", "ranks", "sizes"),
    [
        ("pipeline_clean", 4, (1, 1, 4, 1)),
        ("pipeline_slow_stage", 8, (2, 1, 4, 1)),
        ("tp_exposed", 4, (2, 2, 1, 1)),
    ],
)
def test_generated_layouts_are_inferred(tmp_path, scenario, ranks, sizes):
    truth = generate(scenario, tmp_path, formats=("parquet",), ranks=ranks, seed=2, scale=0.5)
    layout = infer_layout(load([tmp_path / "parquet"]))
    assert _layout_of(layout) == _truth_layout(truth)
    assert _layout_of(layout)[0] == sizes
    assert layout.source == "inferred" and layout.notes == ()


@pytest.mark.parametrize("fmt", ["parquet", "json"])
def test_two_middle_stages_of_a_neuron_pipeline_are_an_incomplete_layout(tmp_path, fmt):
    """Ranks 1 and 2 of a 4-stage Neuron pipeline (no world size: the replica groups list the
    job's 4 ranks). Before: pp=2 from the one whole pair, rank 1 read as stage 0, and the
    4-rank AllReduce (model-parallel, across the stages) as dp=4."""
    truth = generate("pipeline_clean", tmp_path, formats=(fmt,), ranks=4, seed=2, scale=0.5)
    assert (truth["layout"]["pp"], truth["layout"]["dp"]) == (4, 1)
    names = {"parquet": "rank_{}", "json": "rank_{}.json"}[fmt]
    d = diagnose(load([tmp_path / fmt / names.format(r) for r in (1, 2)]))
    layout = d.analysis.layout
    assert (layout.dp, layout.tp, layout.pp, layout.ep) == (1, 1, 1, 1)
    assert layout.notes == (
        "2 of the job's 4 ranks given (the collectives' groups name 4 ranks)",
        "pipeline stages not inferred: Send/Recv groups with ranks not given",
        "groups not assigned to a dimension: they may span the unknown stages",
    )
    codes = [f.code for f in d.findings]
    assert "TRC502" in codes  # the same ranks the layout misses are reported missing
    assert not {"PIP601", "PIP602"} & set(codes)  # no pipeline guessed, none diagnosed
    # the whole job still infers its pipeline
    assert infer_layout(load([tmp_path / fmt])).pp == 4


def test_one_rank_of_a_neuron_pair_says_its_group_is_incomplete():
    """A Neuron profile's replica group [[0,1]] with only rank 0 given: the listed group
    stands (dp=2) and the note names the missing rank's group instead of a size mismatch."""
    root = Path(__file__).resolve().parents[1] / "sample_traces" / "neuron_parquet_straggler"
    layout = infer_layout(load([root / "parquet" / "rank_0"]))
    assert (layout.dp, layout.pp) == (2, 1)
    assert layout.notes == ("1 of the job's 2 ranks given (the collectives' groups name 2 ranks)",)


def test_combined_layout_is_inferred_from_legacy_json(tmp_path):
    truth = generate_parallel(
        "pipeline_clean", tmp_path, ("json",), 8, 4, 0.5, layout=ParallelLayout(2, 2, 2)
    )
    layout = infer_layout(load([tmp_path / "json"]))
    assert _layout_of(layout) == _truth_layout(truth)
    assert layout.stages() == {0: [0, 1, 2, 3], 1: [4, 5, 6, 7]}


def _pipeline_by_hand(order: list[int]) -> RankSpec:
    """Ranks in pipeline ``order`` (first = stage 0), one forward transfer per link."""
    specs = {r: RankSpec(r) for r in order}
    for i, (a, b) in enumerate(zip(order, order[1:], strict=False)):
        t = 100 * (i + 1)
        sa = specs[a].add("Send", "cc", "collective", t, t + 10)
        specs[a].collective(sa, f"p{i}", t, op="Send")
        rb = specs[b].add("Recv", "cc", "collective", t, t + 10)
        specs[b].collective(rb, f"p{i}", 0, op="Recv")
    for spec in specs.values():
        spec.add("MATMUL", "tensor", "compute", 0, 50)
        if not spec.colls:
            spec.add("MATMUL", "tensor", "compute", 60, 70)
    return [specs[r] for r in sorted(specs)]


def test_stages_follow_the_send_direction_not_rank_order():
    trace = build(*_pipeline_by_hand([3, 1, 0, 2]))
    layout = infer_layout(trace)
    assert (layout.pp, layout.dp, layout.tp) == (4, 1, 1)
    assert layout.coords["pp"].to_dict() == {0: 2, 1: 1, 2: 3, 3: 0}


def _kineto_rank(rank: int, pg_config: list, events: list) -> dict:
    return {
        "distributedInfo": {
            "backend": "nccl",
            "rank": rank,
            "world_size": 4,
            "pg_config": pg_config,
        },
        "traceEvents": events,
    }


def _nccl(name, ts, ranks, seq, pg, **extra):
    return X(
        "kernel",
        f"ncclDevKernel_{name}(ncclDevComm*)",
        ts,
        20,
        pid=0,
        tid=13,
        **{
            "Collective name": extra.pop("coll", name.split("_")[0].lower()),
            "Process Group Ranks": ranks,
            "Process Group Name": pg,
            "Seq": seq,
            "In msg nelems": 1024,
            "dtype": "BFloat16",
        },
    )


def test_kineto_process_group_descriptions_decide(tmp_path):
    """TP groups of non-consecutive ranks ({0, 2}, {1, 3}): only their description says TP; the
    pipeline pairs {0, 1} and {2, 3} come from Send/Recv."""
    pg_config = [
        {"pg_name": "0", "pg_desc": "default_pg", "ranks": [0, 1, 2, 3]},
        {"pg_name": "1", "pg_desc": "TENSOR_MODEL_PARALLEL_GROUP", "ranks": [0, 2]},
        {"pg_name": "2", "pg_desc": "TENSOR_MODEL_PARALLEL_GROUP", "ranks": [1, 3]},
        {"pg_name": "3", "pg_desc": "PIPELINE_MODEL_PARALLEL_GROUP", "ranks": [0, 1]},
        {"pg_name": "4", "pg_desc": "PIPELINE_MODEL_PARALLEL_GROUP", "ranks": [2, 3]},
    ]
    tp = {0: ([0, 2], "1"), 2: ([0, 2], "1"), 1: ([1, 3], "2"), 3: ([1, 3], "2")}
    pipe = {0: ([0, 1], "3", "Send"), 1: ([0, 1], "3", "Recv"), 2: ([2, 3], "4", "Send")}
    pipe[3] = ([2, 3], "4", "Recv")
    paths = []
    for rank in range(4):
        group, pg = tp[rank]
        events = [_nccl("AllReduce_Sum_bf16_RING_LL", 10, group, 1, pg)]
        ranks, ppg, op = pipe[rank]
        events.append(_nccl(f"SendRecv_{op}", 100, ranks, 1, ppg, coll=op.lower()))
        paths.append(write(tmp_path / f"rank_{rank}.json", _kineto_rank(rank, pg_config, events)))
    layout = infer_layout(load(paths))
    assert (layout.dp, layout.tp, layout.pp) == (1, 2, 2)
    assert layout.coords.to_dict("index") == {
        0: {"dp": 0, "tp": 0, "pp": 0, "ep": 0},
        1: {"dp": 0, "tp": 0, "pp": 1, "ep": 0},
        2: {"dp": 0, "tp": 1, "pp": 0, "ep": 0},
        3: {"dp": 0, "tp": 1, "pp": 1, "ep": 0},
    }
    assert layout.notes == ()


def test_kineto_send_recv_named_by_the_whole_pipeline_group(tmp_path):
    """Send/Recv carry the pipeline group's ranks ([0, 1, 2]); the pairs come from matching."""
    pg_config = [{"pg_name": "7", "pg_desc": "PIPELINE_MODEL_PARALLEL_GROUP", "ranks": [0, 1, 2]}]
    sides = {0: [("Send", 1)], 1: [("Recv", 1), ("Send", 2)], 2: [("Recv", 2)]}
    paths = []
    for rank, ops in sides.items():
        events = [
            _nccl(f"SendRecv_{op}", 100 * seq, [0, 1, 2], seq, "7", coll=op.lower())
            for op, seq in ops
        ]
        paths.append(write(tmp_path / f"rank_{rank}.json", _kineto_rank(rank, pg_config, events)))
    layout = infer_layout(load(paths))
    assert layout.pp == 3 and layout.coords["pp"].tolist() == [0, 1, 2]


def _grouped(groups_by_rank: dict[int, list[tuple[str, str, int]]], layers: int = 0):
    """Hand-built ranks with one AllReduce per (key, group) entry; ``layers`` compute layers."""
    specs = []
    for rank, colls in groups_by_rank.items():
        spec = RankSpec(rank)
        for i in range(layers):
            spec.add("MATMUL", "tensor", "compute", 1000 * i, 1000 * i + 500, layer=f"layer_{i}")
        for n, (key, group, t) in enumerate(colls):
            e = spec.add("AllReduce", "cc", "collective", t, t + 10)
            spec.collective(e, key, t)
            spec.colls[-1]["group"] = group
            assert n == len(spec.colls) - 1
        specs.append(spec)
    return build(*specs)


def test_two_families_consecutive_ranks_are_tp():
    trace = _grouped(
        {
            0: [("a", "0,1", 10), ("c", "0,2", 50)],
            1: [("a", "0,1", 10), ("d", "1,3", 50)],
            2: [("b", "2,3", 10), ("c", "0,2", 50)],
            3: [("b", "2,3", 10), ("d", "1,3", 50)],
        }
    )
    layout = infer_layout(trace)
    assert (layout.dp, layout.tp, layout.pp) == (2, 2, 1) and layout.notes == ()
    assert layout.coords["tp"].tolist() == [0, 1, 0, 1]
    assert layout.coords["dp"].tolist() == [0, 0, 1, 1]


def test_single_family_with_per_layer_traffic_is_tp_with_a_note():
    many = [(f"k{i}", "0,1", 100 * i) for i in range(6)]
    trace = _grouped({0: many, 1: many}, layers=2)
    layout = infer_layout(trace)
    assert (layout.dp, layout.tp) == (1, 2)
    assert len(layout.notes) == 1 and "read as tensor parallel" in layout.notes[0]


def test_single_family_once_per_layer_is_data_parallel():
    few = [("k0", "0,1", 10), ("k1", "0,1", 20)]
    layout = infer_layout(_grouped({0: few, 1: few}, layers=2))
    assert (layout.dp, layout.tp) == (2, 1) and layout.notes == ()


def test_a_trace_without_collectives_has_the_trivial_layout():
    spec = RankSpec(0)
    spec.add("MATMUL", "tensor", "compute", 0, 10)
    layout = infer_layout(build(spec))
    assert layout.to_dict() == {
        "dp": 1,
        "tp": 1,
        "pp": 1,
        "ep": 1,
        "source": "inferred",
        "ranks": {"0": {"dp": 0, "tp": 0, "pp": 0, "ep": 0}},
        "notes": [],
    }


# ---- explicit layouts ----------------------------------------------------------------------


def test_parse_layout():
    assert parse_layout("dp=4, tp=8,pp=4") == {"dp": 4, "tp": 8, "pp": 4}
    assert parse_layout({"tp": 2}) == {"tp": 2}
    for bad, message in (("xp=2", "unknown dimension"), ("dp=0", "positive"), ("", "give")):
        with pytest.raises(ValueError, match=message):
            parse_layout(bad)
    with pytest.raises(Exception, match="positive"):
        layout_sizes("tp=two")


def test_explicit_layout_numbers_ranks_like_megatron():
    layout = explicit_layout(list(range(8)), {"dp": 2, "tp": 2, "pp": 2})
    assert layout.coords.loc[6].to_dict() == {"dp": 1, "tp": 0, "pp": 1, "ep": 0}
    assert layout.source == "explicit" and layout.notes == ()
    assert "dp*tp*pp = 4" in explicit_layout(list(range(8)), {"tp": 2, "pp": 2}).notes[0]


@pytest.fixture(scope="module")
def pipeline_trace(tmp_path_factory):
    out = tmp_path_factory.mktemp("pipe")
    generate("pipeline_clean", out, formats=("parquet",), ranks=4, seed=3, scale=0.5)
    return load([out / "parquet"])


def test_explicit_layout_overrides_and_says_where_the_trace_disagrees(pipeline_trace):
    agree = resolve_layout(pipeline_trace, {"pp": 4})
    assert agree.source == "explicit" and agree.notes == ()
    wrong = resolve_layout(pipeline_trace, {"dp": 2, "pp": 2})
    assert (wrong.dp, wrong.pp) == (2, 2)
    assert wrong.notes == ("the trace's collectives suggest dp=1, pp=4",)


def test_report_carries_the_layout(pipeline_trace):
    report = diagnose(pipeline_trace, Config(select=["PIP"])).to_dict()
    assert report["layout"]["pp"] == 4 and report["layout"]["source"] == "inferred"
    assert report["layout"]["ranks"]["2"]["pp"] == 2
    explicit = diagnose(pipeline_trace, Config(select=["PIP"], layout={"pp": 4})).to_dict()
    assert explicit["layout"]["source"] == "explicit"
    json.dumps(explicit["layout"])  # serialisable


def test_config_key_layout():
    assert from_mapping({"layout": "dp=2,pp=2"}).layout == {"dp": 2, "pp": 2}
    assert from_mapping({"layout": {"tp": 4}}).layout == {"tp": 4}
    with pytest.raises(UsageError, match="layout"):
        from_mapping({"layout": "dp=-1"}, "x.toml")


def test_cli_layout_option(run, tmp_path):
    job = tmp_path / "job"
    generate("pipeline_clean", job, formats=("parquet",), ranks=4, seed=3, scale=0.5)
    args = ("report", job / "parquet", "-q", "--select", "PIP", "--no-cache")
    code, out, _ = run(*args, "--format", "json", "--layout", "pp=4")
    assert code == 0
    layout = json.loads(out)["layout"]
    assert (layout["pp"], layout["source"], layout["notes"]) == (4, "explicit", [])
    code, out, _ = run(*args)
    assert code == 0 and "Parallel layout: dp=1 tp=1 pp=4 ep=1 (inferred)" in out
    code, out, _ = run(*args, "--format", "markdown")
    assert code == 0 and "| Parallel layout | dp=1 tp=1 pp=4 ep=1 (inferred) |" in out
    code, _, err = run(*args, "--layout", "pp=four")
    assert code == 2 and "pp needs a positive integer" in err
