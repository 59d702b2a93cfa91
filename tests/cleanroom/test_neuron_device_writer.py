"""Self-tests of the clean-room Neuron device-profile writer (no tracediag import).

They check the writer alone: the tables carry the documented columns and types, the truth is
consistent with what was written (recomputed here from the files with plain pandas), and the
output is deterministic per seed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import neuron_device_writer as ndw  # noqa: E402

_TYPES = {"i64": pa.int64(), "i32": pa.int32(), "b": pa.bool_()}


def _read(d, table):
    files = sorted(
        f
        for f in os.listdir(d)
        if f == f"{table}.parquet"
        or (f.startswith(f"{table}_") and f[len(table) + 1 :].split(".")[0].isdigit())
    )
    if not files:
        return None
    return pd.concat([pd.read_parquet(os.path.join(d, f)) for f in files], ignore_index=True)


def _union(iv):
    iv = sorted(iv)
    tot, cur_s, cur_e = 0, None, None
    for s, e in iv:
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                tot += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        tot += cur_e - cur_s
    return tot


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    """Each scenario written once per module (Parquet + JSON): name -> (out_dir, truth)."""
    cache = {}

    def get(name):
        if name not in cache:
            out = tmp_path_factory.mktemp(name)
            cache[name] = (
                str(out),
                ndw.write_scenario(name, str(out), formats=("parquet", "json")),
            )
        return cache[name]

    return get


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    out = tmp_path_factory.mktemp("clean")
    truth = ndw.write_scenario("clean", str(out), formats=("parquet", "json", "csv"))
    return str(out), truth


def _pdir(out, truth, r):
    return os.path.join(out, truth["files"]["parquet"][str(r)])


def test_layout_and_documented_columns(clean):
    out, truth = clean
    assert os.path.exists(os.path.join(out, "truth.json"))
    for r in truth["ranks"]:
        rel = truth["files"]["parquet"][str(r)]
        assert rel.startswith(os.path.join("profiles", "global")) and rel.endswith("@latest")
        d = _pdir(out, truth, r)
        for table in (
            "Instruction",
            "DmaPacket",
            "DmaPacketAggregated",
            "Flow",
            "CcOp",
            "CcInstruction",
            "CcStream",
            "Metadata",
            "ExecutionInfo",
            "TensorInfo",
            "ActiveTime",
            "Warning",
            "DmaQueuesInfo",
            "Summary",
            "SchemaFields",
        ):
            schema = pq.read_schema(os.path.join(d, f"{table}.parquet"))
            spec = {n: (t, req) for n, t, req in ndw.SPECS[table]}
            assert set(schema.names) <= set(spec), table
            for name, (typ, req) in spec.items():
                if req:
                    assert name in schema.names, (table, name)
                if name in schema.names and typ in _TYPES:
                    assert schema.field(name).type == _TYPES[typ], (table, name)
                if name in schema.names and typ == "f":
                    assert pa.types.is_floating(schema.field(name).type)
                if name in schema.names and typ == "s":
                    assert pa.types.is_string(schema.field(name).type)
        md = pd.read_parquet(os.path.join(d, "Metadata.parquet")).iloc[0]
        assert md["profile_schema_version"] == "7.4.0"
        assert md["dma_ddr_bandwidth"] > 1e11 and md["tensor_engine_num_rows"] == 128
        assert md["tensor_engine_clock_freq"] == pytest.approx(2.8)
        sf = pd.read_parquet(os.path.join(d, "SchemaFields.parquet"))
        assert {"Instruction", "DmaPacket", "Flow"} <= set(sf["table_name"])


def test_instructions_engines_serial_and_active_time(clean):
    out, truth = clean
    for r in truth["ranks"]:
        d = _pdir(out, truth, r)
        ins = _read(d, "Instruction")
        assert (ins["end_ts"] - ins["start_ts"] == ins["duration_ns"]).all()
        assert set(ins["engine"]) == {"Tensor", "Vector", "Scalar", "GpSimd", "Sync"}
        assert ins["id"].is_unique
        for _, g in ins.groupby(["engine", "pcore_idx"]):
            g = g.sort_values("start_ts")
            assert (g["start_ts"].values[1:] >= g["end_ts"].values[:-1]).all()
        mm = ins[ins["opcode"] == "MATMUL"]
        assert set(mm["timeline_track"]) == {"TensorMatrix"}
        assert set(mm["tensor_instruction_type"]) == {"REGULAR", "TRANSPOSE"}
        assert (mm["adjusted_flops"] == 2 * 128 * 128 * 512).all()
        act = _read(d, "ActiveTime")
        for eng, busy in truth["engine_busy_ns"][str(r)].items():
            assert act[act["engine"] == eng]["duration_ns"].sum() == busy
        assert len(ins) == truth["instruction_count"][str(r)]


def test_dma_queues_overlap_and_busy_union(clean):
    out, truth = clean
    for r in truth["ranks"]:
        d = _pdir(out, truth, r)
        pk = _read(d, "DmaPacket")
        agg = _read(d, "DmaPacketAggregated")
        assert pk["engine_idx"].between(0, 15).all()
        for q, busy in truth["dma"]["queue_busy_ns"][str(r)].items():
            g = pk[pk["queue_name"] == q]
            assert _union(zip(g["start_ts"], g["end_ts"], strict=True)) == busy
            assert g["transfer_bytes"].sum() == truth["dma"]["queue_bytes"][str(r)][q]
        # a queue is served by several rings at once: its packets overlap in time
        w = pk[pk["queue_name"] == "qSyncDynamicHW"].sort_values("start_ts")
        assert w["duration_ns"].sum() > 2 * _union(zip(w["start_ts"], w["end_ts"], strict=True))
        assert w["engine_idx"].nunique() == 16
        # aggregated rows span their packets and sum their bytes
        byagg = pk.groupby("packet_aggregation_id").agg(
            s=("start_ts", "min"), e=("end_ts", "max"), b=("transfer_bytes", "sum")
        )
        j = agg.set_index("id").join(byagg)
        assert (j["start_ts"] == j["s"]).all() and (j["end_ts"] == j["e"]).all()
        assert (j["transfer_bytes"] == j["b"]).all()
        assert set(agg["variable"]) >= {
            "input0",
            "output0",
            "layers.0.attn.weight",
            "layers.3.mlp.weight",
        }
        ti = _read(d, "TensorInfo")
        assert set(ti["type"]) == {"IN", "OUT"}
        assert (
            ti.loc[ti["variable_name"] == "layers.1.mlp.weight", "load_to_sbuf_repeat_factor"].iloc[
                0
            ]
            == 2
        )


def test_flow_edges_gap_time(clean):
    out, truth = clean
    d = _pdir(out, truth, 0)
    ins, agg, fl = _read(d, "Instruction"), _read(d, "DmaPacketAggregated"), _read(d, "Flow")
    tabs = {"Instruction": ins.set_index("id"), "DmaPacketAggregated": agg.set_index("id")}
    assert set(fl["dependency_type"]) == {"FLOW_DEPENDENCE", "DGE_TRIGGER", "ANTI_DEPENDENCE"}
    for row in fl.itertuples():
        a = tabs[row.in_table].loc[row.in_id]
        b = tabs[row.out_table].loc[row.out_id]
        assert row.gap_time == b["start_ts"] - a["end_ts"]
        assert row.gap_time >= 0
    trig = fl[(fl.in_table == "Instruction") & (fl.out_table == "DmaPacketAggregated")]
    assert set(trig["dependency_type"]) == {"DGE_TRIGGER"}
    # trigger instructions carry the span of the DMA they triggered
    t = ins.set_index("id").loc[trig["in_id"].unique()]
    assert t["dma_trigger_start_ts"].notna().all()
    assert (t["dma_wait_time_ns"] == t["dma_trigger_start_ts"] - t["end_ts"]).all()


def test_collectives_and_clocks(clean):
    out, truth = clean
    off = truth["time"]["written_ts_offset_ns"]["parquet"]
    ends = {}
    for r in truth["ranks"]:
        cc = _read(_pdir(out, truth, r), "CcOp")
        assert set(cc["operation"]) == {"AllReduce"}
        assert (cc["stream_id"] != cc["stream_index"]).all()
        ends[r] = sorted(cc["end_ts"] - off[str(r)])
    assert ends[0] == ends[1]  # one op ends at the same true time on every rank
    ex = _read(_pdir(out, truth, 0), "ExecutionInfo").iloc[0]
    assert ex["execution_end_ts"] - ex["execution_start_ts"] == truth["step_time_ns"]["0"]
    assert truth["step_time_ns_true"] >= max(truth["step_time_ns"].values())


def test_clean_truth_says_nothing_to_flag(clean):
    _, truth = clean
    assert truth["expected_clean"] is True and truth["findings"] == []
    assert truth["collectives"]["saving_if_removed_ns"]["dp"] < 0.05 * truth["step_time_ns_true"]
    assert truth["layout"] == {**truth["layout"], "dp": 2, "tp": 1, "pp": 1}


def test_json_layout(clean):
    out, truth = clean
    doc = _load(os.path.join(out, truth["files"]["json"]["0"]))
    assert {
        "instruction",
        "dma",
        "summary",
        "metadata",
        "cc_ops",
        "active_time",
        "layer_summary",
        "profile_info",
    } <= set(doc)
    assert isinstance(doc["summary"], list) and isinstance(doc["metadata"], list)
    ts = [i["timestamp"] for i in doc["instruction"]]
    assert min(ts) >= 0 and max(ts) < doc["metadata"][0]["last_hw_timestamp"]
    assert all("dma_queue" in d and "transfer_size" in d for d in doc["dma"])
    cc = doc["cc_ops"]
    for k in (
        "timestamp",
        "duration",
        "operation",
        "algorithm",
        "dtype",
        "input_size",
        "output_size",
        "replica_group",
        "trigger_engine",
    ):
        assert all(k in c for c in cc)
    assert any("cc_trigger" in c for c in cc)
    assert "cc_instruction" in {a["engine"] for a in doc["active_time"]}


def test_csv_export(clean):
    out, truth = clean
    d = os.path.join(out, truth["files"]["csv"]["0"])
    assert {
        "Instruction.csv",
        "DmaPacketAggregated.csv",
        "DmaPacket.csv",
        "CcInstruction.csv",
        "SemaphoreUpdate.csv",
    } <= set(os.listdir(d))
    ins = pd.read_csv(os.path.join(d, "Instruction.csv"))
    assert ins.columns[0] == "timeline_track" and "opcode" in ins.columns
    assert len(ins) == truth["instruction_count"]["0"]


def _load(path):
    with open(path) as f:
        return json.load(f)


def _text(path):
    with open(path) as f:
        return f.read()


def _digest(root):
    h = hashlib.sha256()
    for dp, _dn, fn in sorted(os.walk(root)):
        for f in sorted(fn):
            h.update(f.encode())
            with open(os.path.join(dp, f), "rb") as fh:
                h.update(fh.read())
    return h.hexdigest()


def test_deterministic_per_seed(tmp_path):
    a = ndw.write_scenario("tp_exposed_allreduce", str(tmp_path / "a"), seed=3)
    b = ndw.write_scenario("tp_exposed_allreduce", str(tmp_path / "b"), seed=3)
    c = ndw.simulate("tp_exposed_allreduce", seed=4)
    assert a == b
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b")
    assert c["step_time_ns_true"] != a["step_time_ns_true"]


def test_slow_weight_dma(scenario):
    tmp_path, t = scenario("slow_weight_dma")
    (f,) = t["findings"]
    assert f["kind"] == "slow_weight_dma" and f["layer"] == 2
    assert f["saving_ns"] > 0.08 * t["step_time_ns_true"]
    for tr in f["transfers"]:
        assert tr["variable"] == "layers.2.mlp.weight"
        assert tr["bandwidth_Bps"] < tr["normal_bandwidth_Bps"] / 3
    assert all(
        v > 10 * f["consumer_wait_ns_if_fixed"].get(k, 1) for k, v in f["consumer_wait_ns"].items()
    )
    ins = _read(os.path.join(tmp_path, t["files"]["parquet"]["0"]), "Instruction")
    assert "EVENT_SEMAPHORE" in set(ins["opcode"])  # variant: waits as explicit instructions
    fl = _read(os.path.join(tmp_path, t["files"]["parquet"]["0"]), "Flow")
    assert set(fl["in_table"]) == {"instruction", "dma_packet_aggregated"}


def test_straggler(scenario):
    tmp_path, t = scenario("straggler")
    (f,) = t["findings"]
    s = f["rank"]
    assert f["kind"] == "straggler" and t["world_size"] == 4
    assert 0.1 * t["step_time_ns_true"] < f["saving_ns"] < 0.4 * t["step_time_ns_true"]
    w = t["collectives"]["wait_ns"]
    assert w[str(s)] < min(v for k, v in w.items() if k != str(s)) / 10
    # device clocks differ per rank; ExecutionInfo stays relative to the profile start
    off = t["time"]["written_ts_offset_ns"]["parquet"]
    assert off == t["time"]["clock_offset_ns"]
    ins = _read(os.path.join(tmp_path, t["files"]["parquet"]["1"]), "Instruction")
    assert ins["start_ts"].min() > 10**10
    ex = _read(os.path.join(tmp_path, t["files"]["parquet"]["1"]), "ExecutionInfo")
    assert len(ex) == 2 and ex["execution_start_ts"].max() < 10**7
    # two gradient buckets per step: the second is queued back to back and has no trigger fields
    cc = _load(os.path.join(tmp_path, t["files"]["json"]["1"]))["cc_ops"]
    assert [("cc_trigger" in c) for c in cc] == [True, False, True, False]
    pcc = _read(os.path.join(tmp_path, t["files"]["parquet"]["1"]), "CcOp")
    assert pcc["cc_trigger_start_delay"].isna().tolist() == [False, True, False, True]


def test_tp_exposed_allreduce():
    t = ndw.simulate("tp_exposed_allreduce")
    (f,) = t["findings"]
    assert f["kind"] == "exposed_allreduce"
    assert 0.25 < f["fraction_of_step"] < 0.42 and 0.2 < f["saving_fraction"] < 0.42
    assert t["layout"]["tp_groups"] == [[0, 1]]


def test_pipeline(scenario):
    tmp_path, t = scenario("pipeline_1f1b")
    pl = t["pipeline"]
    assert pl["stages"] == 4 and set(pl["bubble_ns"]) == {"0", "1", "2", "3"}
    assert all(v > 0 for v in pl["bubble_ns"].values())
    assert [f["kind"] for f in t["findings"]] == ["pipeline_bubble"]
    d = os.path.join(tmp_path, t["files"]["parquet"]["1"])
    assert any(f.startswith("Instruction_") for f in os.listdir(d))  # split table
    cc = _read(d, "CcOp")
    assert set(cc["operation"]) == {"CollectivePermute"}
    assert {"[[0, 1]]", "[[1, 2]]"} <= set(cc["replica_group"])
    slow = ndw.simulate("pipeline_1f1b_slow_stage")
    kinds = {f["kind"]: f for f in slow["findings"]}
    assert (
        kinds["slow_pipeline_stage"]["ranks"] == [2]
        and kinds["slow_pipeline_stage"]["saving_ns"] > 0
    )


def test_no_dma_tables(scenario):
    tmp_path, t = scenario("no_dma_tables")
    d0 = os.path.join(tmp_path, t["files"]["parquet"]["0"])
    d1 = os.path.join(tmp_path, t["files"]["parquet"]["1"])
    assert not os.path.exists(os.path.join(d0, "DmaPacket.parquet"))
    assert len(pd.read_parquet(os.path.join(d1, "DmaPacketAggregated.parquet"))) == 0
    assert len(_read(d0, "Warning")) == 1
    fl = _read(d0, "Flow")
    assert set(fl["in_table"]) == {"Instruction"} and set(fl["out_table"]) == {"Instruction"}
    j0 = _load(os.path.join(tmp_path, t["files"]["json"]["0"]))
    j1 = _load(os.path.join(tmp_path, t["files"]["json"]["1"]))
    assert "dma" not in j0 and j1["dma"] == []
    assert t["expected_clean"]


def test_lnc2(scenario):
    tmp_path, t = scenario("lnc2")
    d = os.path.join(tmp_path, t["files"]["parquet"]["0"])
    ins = _read(d, "Instruction")
    assert set(ins["pcore_idx"]) == {0, 1}
    assert set(_read(d, "DmaPacket")["pcore_idx"]) == {0, 1}
    assert set(_read(d, "ActiveTime")["pcore_idx"]) == {0, 1}
    md = _read(d, "Metadata").iloc[0]
    assert (
        md["num_physical_cores"] == 2
        and bool(md["vnc_enabled"])
        and md["profile_schema_version"] == "12.0.1"
    )
    assert (
        pq.read_schema(os.path.join(d, "DmaPacket.parquet")).field("throughput").type
        == pa.float32()
    )
    assert isinstance(ins["nki_source_location"].dropna().iloc[0], (list, np.ndarray))


def test_session_capture_and_unrelated(scenario):
    tmp_path, t = scenario("session_capture")
    assert "_session_" in t["files"]["parquet"]["0"]
    assert len(t["files"]["unrelated_profiles"]) == 1
    ex = _read(os.path.join(tmp_path, t["files"]["parquet"]["0"]), "ExecutionInfo")
    assert list(ex["neff_name"]) == ["barrier_0.neff", "model.neff"] * 2
    assert [e["kind"] for e in t["executions"]["simulated"]] == ["barrier", "model"] * 2
    assert t["expected_clean"]


def test_duplicates_and_json_variants(tmp_path):
    t = ndw.write_scenario(
        "duplicate_dma_packets",
        str(tmp_path),
        json_dma_queue_key="subgroup",
        json_time_unit="ps",
        json_wrong_neff_ranks=(1,),
    )
    d = os.path.join(tmp_path, t["files"]["parquet"]["0"])
    pk = _read(d, "DmaPacket")
    assert pk["id"].duplicated().sum() == t["dma"]["duplicate_packets"]["0"] > 0
    q = "qSyncDynamicHW"
    g = pk[pk["queue_name"] == q].drop_duplicates()
    assert g["transfer_bytes"].sum() == t["dma"]["queue_bytes"]["0"][q]
    txt = _text(os.path.join(tmp_path, t["files"]["json"]["0"]))
    assert "NaN" in txt
    doc = json.loads(txt)
    assert all("subgroup" in x and "dma_queue" not in x for x in doc["dma"])
    assert min(i["id"] for i in doc["instruction"]) > 2**63  # unsigned 64-bit ids
    span = max(i["timestamp"] + i["duration"] for i in doc["instruction"])
    assert span > 500 * doc["summary"][0]["total_time"] * 1e9  # picoseconds
    assert set(_load(os.path.join(tmp_path, t["files"]["json"]["1"]))) == {"profile_info"}


def test_flat_layout_lower_engines_and_variants(tmp_path):
    t = ndw.write_job(
        str(tmp_path),
        ranks=2,
        layers=2,
        parquet_layout="flat",
        engine_case="lower",
        flow_dma_ids="packet",
        table_file_names="snake",
        id_spaces="disjoint",
        dma_wait_on="consumer",
        sparse_columns=True,
        string_type="large_string",
        rename_fields={"DmaPacket": {"duration_ns": "duration"}},
        schema_version="99.0.0",
    )
    d = os.path.join(tmp_path, t["files"]["parquet"]["0"])
    assert t["files"]["parquet"]["0"] == os.path.join("parquet", "rank0")
    assert os.path.exists(os.path.join(d, "dma_packet_aggregated.parquet"))
    ins = pd.read_parquet(os.path.join(d, "instruction.parquet"))
    assert set(ins["engine"]) == {"tensor", "vector", "scalar", "gpsimd", "sync"}
    pk = pd.read_parquet(os.path.join(d, "dma_packet.parquet"))
    assert "duration" in pk.columns and "duration_ns" not in pk.columns
    fl = pd.read_parquet(os.path.join(d, "flow.parquet"))
    to_pk = fl[fl["out_table"] == "DmaPacket"]
    assert len(to_pk) and to_pk["out_id"].min() >= 90_000_000
    pki = pk.set_index("id")
    insi = ins.set_index("id")
    for row in to_pk.head(20).itertuples():
        assert row.gap_time == pki.loc[row.out_id, "start_ts"] - insi.loc[row.in_id, "end_ts"]
    ld = ins[ins["opcode"] == "LDWEIGHTS"]
    assert ld["dma_trigger_end_ts"].notna().all() and (ld["dma_wait_time_ns"] >= 0).all()


def test_scale_is_vectorised(tmp_path):
    t = ndw.write_job(str(tmp_path), ranks=2, layers=2, formats=("parquet",), scale="20k")
    assert t["executions"]["repeats"] > 10
    d = os.path.join(tmp_path, t["files"]["parquet"]["0"])
    ins = _read(d, "Instruction")
    assert len(ins) == t["instruction_count"]["0"] >= 20_000
    assert ins["id"].is_unique and ins.sort_values("start_ts")["id"].is_monotonic_increasing
    ex = _read(d, "ExecutionInfo")
    assert len(ex) == t["executions"]["total_executions"] and ex["execution_index"].is_unique
    pk = _read(d, "DmaPacket")
    assert set(pk["packet_aggregation_id"]) <= set(_read(d, "DmaPacketAggregated")["id"])
    for q, busy in t["dma"]["queue_busy_ns"]["0"].items():
        g = pk[pk["queue_name"] == q]
        assert _union(zip(g["start_ts"], g["end_ts"], strict=True)) == busy


def test_unknown_variation_rejected():
    with pytest.raises(TypeError):
        ndw.write_job(None, no_such_option=1)
    with pytest.raises(KeyError):
        ndw.write_scenario("nope", "/nonexistent")


@pytest.mark.parametrize("name", sorted(ndw.SCENARIOS))
def test_every_scenario_is_self_consistent(scenario, name):
    tmp_path, t = scenario(name)
    assert t["scenario"] == name and t["expected_clean"] == (not t["findings"])
    for f in t["findings"]:
        assert f["saving_ns"] > 0 and 0 < f["saving_fraction"] < 1
    off = t["time"]["written_ts_offset_ns"]["parquet"]
    for r in t["ranks"]:
        d = os.path.join(tmp_path, t["files"]["parquet"][str(r)])
        ins = _read(d, "Instruction")
        assert len(ins) == t["instruction_count"][str(r)]
        ex = _read(d, "ExecutionInfo")
        assert len(ex) == t["executions"]["total_executions"]
        assert (ex["execution_end_ts"] > ex["execution_start_ts"]).all()
        md = _read(d, "Metadata").iloc[0]
        true_first = ins["start_ts"].min() - off[str(r)]
        assert true_first + t["time"]["clock_offset_ns"][str(r)] >= md["first_hw_timestamp"]
        pk = _read(d, "DmaPacket")
        if pk is not None and len(pk):
            for q, busy in t["dma"]["queue_busy_ns"][str(r)].items():
                qn = q.split("@pcore")[0]
                g = pk[pk["queue_name"] == qn]
                if "@pcore" in q:
                    g = g[g["pcore_idx"] == int(q.split("@pcore")[1])]
                assert _union(zip(g["start_ts"], g["end_ts"], strict=True)) == busy
        # every Flow edge's gap_time matches the rows its ids name
        fl = _read(d, "Flow")
        starts, ends = {}, {}
        for tab, df in (
            ("Instruction", ins),
            ("DmaPacketAggregated", _read(d, "DmaPacketAggregated")),
            ("DmaPacket", pk),
        ):
            if df is not None and len(df):
                u = df.drop_duplicates("id").set_index("id")
                starts[tab], ends[tab] = u["start_ts"], u["end_ts"]
        canon = {
            "instruction": "Instruction",
            "dma_packet_aggregated": "DmaPacketAggregated",
            "dma_block": "DmaPacketAggregated",
            "dma_packet": "DmaPacket",
        }
        for (it, ot), g in fl.groupby(["in_table", "out_table"]):
            it, ot = canon.get(it, it), canon.get(ot, ot)
            gap = starts[ot].loc[g["out_id"]].values - ends[it].loc[g["in_id"]].values
            assert (gap == g["gap_time"].values).all(), (it, ot)
        cc = _read(d, "CcOp")
        if cc is not None:
            assert (cc["end_ts"] >= cc["start_ts"]).all()
            assert cc["stream_id"].nunique() >= 1 and set(cc["stream_index"]) <= {0, 1, 2}
        doc = _load(os.path.join(tmp_path, t["files"]["json"][str(r)]))
        if t["variation"]["json_time_base"] == "zero":
            assert min(i["timestamp"] for i in doc["instruction"]) >= 0
        assert doc["metadata"][0]["last_hw_timestamp"] >= max(
            i["timestamp"] + i["duration"] for i in doc["instruction"]
        )
    # one collective ends at the same true time on all its ranks
    for op in t["collectives"]["ops"]:
        assert op["end_true_ns"] >= op["start_true_ns"]


# --- consumer_semaphores: waits on collective completions named in the operand text

_WAIT = re.compile(r"(?<![\w\]])\$?S\[(\d+)\](?: \([^)]*\))?>=(\d+)")


def _named_waits(ins, col):
    """(semaphore number, value, start_ts) of every `$S[k]>=v` / `S[k] (X)>=v` in a column."""
    out = []
    if col not in ins:
        return out
    for txt, s0 in zip(ins[col], ins["start_ts"], strict=True):
        if isinstance(txt, str):
            out += [(int(k), int(v), int(s0)) for k, v in _WAIT.findall(txt)]
    return out


@pytest.mark.parametrize(
    "name,col,dollar",
    [
        ("pipeline_1f1b_semaphores", "compiler_operands", True),
        ("pipeline_1f1b_slow_stage_semaphores", "operands", False),
    ],
)
def test_consumer_semaphores_backed_by_semaphore_updates(scenario, name, col, dollar):
    tmp_path, t = scenario(name)
    other = "operands" if col == "compiler_operands" else "compiler_operands"
    for r in t["ranks"]:
        d = _pdir(tmp_path, t, r)
        ins = _read(d, "Instruction")
        su = _read(d, "SemaphoreUpdate")
        su = su.assign(k=su["id"].str.extract(r"^S\[(\d+)\]")[0].astype(int))
        waits = _named_waits(ins, col)
        assert waits, (name, r)  # every stage waits on a receive or an all-reduce result
        # the wait sits in the chosen column only, in the chosen spelling
        assert not _named_waits(ins, other) and not _named_waits(ins, "instruction_chain")
        txt = ins[col].dropna()
        named = txt[txt.str.contains(">=")]
        assert named.str.contains(r"\$S\[15\]>=" if dollar else r"S\[15\] \(Pool\)>=").all()
        # every named wait: a SemaphoreUpdate row on S[k] reaches v at or before the start
        for k, v, s0 in waits:
            hit = su[(su["k"] == k) & (su["value"] == v) & (su["timestamp"] <= s0)]
            assert len(hit) == 1, (name, r, k, v, s0)
        # and a CollectivePermute receive's data is waited for on every stage that receives
        assert {k for k, _v, _s in waits} == {15}


def _bytes(path):
    with open(path, "rb") as f:
        return f.read()


@pytest.mark.parametrize("base", ["pipeline_1f1b", "pipeline_1f1b_slow_stage"])
def test_consumer_semaphores_same_job_same_truth(tmp_path, base):
    name = base + "_semaphores"
    a = ndw.simulate(base)
    b = ndw.simulate(name)
    for k in ("scenario", "variation"):
        a.pop(k), b.pop(k)
    assert a == b  # the same job: only more is recorded
    # option on vs off on the same preset: only the Instruction tables (and the JSON's, which
    # carries operands) and the truth's variation change
    on = {k: v for k, v in ndw.SCENARIOS[name]["variation"].items() if "consumer_sem" in k}
    ndw.write_scenario(base, str(tmp_path / "off"), formats=("parquet", "json", "csv"))
    ndw.write_scenario(base, str(tmp_path / "on"), formats=("parquet", "json", "csv"), **on)
    for dp, _dn, fn in os.walk(tmp_path / "off"):
        for f in fn:
            p = os.path.join(dp, f)
            q = p.replace(str(tmp_path / "off"), str(tmp_path / "on"), 1)
            same = _bytes(p) == _bytes(q)
            expect_change = f.startswith("Instruction") or f == "truth.json" or p.endswith(".json")
            assert same or expect_change, p


def test_consumer_semaphores_off_is_byte_identical(tmp_path):
    """With the option off its sub-options change nothing, and the truth does not name them.
    Every preset in Parquet (where the option writes its waits); the JSON and CSV writers once,
    on the clean preset (they share the instruction rows the option would change)."""
    for name in ndw.SCENARIOS:
        if ndw.SCENARIOS[name]["variation"].get("consumer_semaphores"):
            continue
        formats = ("parquet", "json", "csv") if name == "clean" else ("parquet",)
        t = ndw.write_scenario(name, str(tmp_path / name / "a"), formats=formats)
        ndw.write_scenario(
            name,
            str(tmp_path / name / "b"),
            formats=formats,
            consumer_semaphores=False,
            consumer_semaphore_column="operands",
            consumer_semaphore_spelling="named",
        )
        assert _digest(tmp_path / name / "a") == _digest(tmp_path / name / "b"), name
        assert not any(k.startswith("consumer_semaphore") for k in t["variation"])
        # no instruction of an existing preset carries a wait on the CC completion semaphore
        for r in t["ranks"]:
            ins = _read(_pdir(str(tmp_path / name / "a"), t, r), "Instruction")
            ins = ins[ins["opcode"] != "PSEUDO_TRIGGER_COLLECTIVE"]  # fixed "$S[15]>=1" text
            for col in ("operands", "compiler_operands"):
                assert not [w for w in _named_waits(ins, col) if w[0] == 15]


# ------------------------------------------------------------- ExecutionInfo time base


def _exec_offset(t, r):
    """Written ExecutionInfo time minus true time, from the truth (simulation)."""
    tm = t["time"]
    if "execution_ts_offset_ns" in tm:
        return tm["execution_ts_offset_ns"][str(r)]
    return -tm["profile_start_true_ns"][str(r)]  # default: relative to the profile start


def _rows_in_exec_time(d, t, r, tables=("Instruction",)):
    """start/end of the rows of `tables` moved onto ExecutionInfo's time base."""
    shift = _exec_offset(t, r) - t["time"]["written_ts_offset_ns"]["parquet"][str(r)]
    parts = [_read(d, tb) for tb in tables]
    df = pd.concat([p[["start_ts", "end_ts"]] for p in parts if p is not None and len(p)])
    return df["start_ts"].to_numpy() + shift, df["end_ts"].to_numpy() + shift


def _assert_spans_hold_rows(d, t, r):
    """Each instruction lies in exactly one execution span; counts match row_count; the spans
    are tight over instructions + DMA packets + collectives when the DMA tables are there."""
    ex = _read(d, "ExecutionInfo").sort_values("execution_index")
    a, b = ex["execution_start_ts"].to_numpy(), ex["execution_end_ts"].to_numpy()
    assert (a[1:] > b[:-1]).all()  # executions do not overlap
    s, e = _rows_in_exec_time(d, t, r)
    inside = (s[:, None] >= a) & (e[:, None] <= b)
    assert (inside.sum(axis=1) == 1).all(), f"{(inside.sum(axis=1) != 1).sum()} rows outside"
    # row_count leaves out the EVENT_SEMAPHORE wait rows of the semaphore_instructions variant
    per, want = inside.sum(axis=0), ex["row_count"].to_numpy()
    assert (per >= want).all() and per.sum() == want.sum() + t["semaphore_wait_rows"][str(r)]
    pk = _read(d, "DmaPacket")
    if pk is not None and len(pk):
        s, e = _rows_in_exec_time(d, t, r, ("Instruction", "DmaPacket", "CcOp", "CcInstruction"))
        k = np.searchsorted(a, s, side="right") - 1
        g = pd.DataFrame({"k": k, "s": s, "e": e}).groupby("k").agg(s=("s", "min"), e=("e", "max"))
        assert g["s"].tolist() == a.tolist() and g["e"].tolist() == b.tolist()


@pytest.mark.parametrize("name", sorted(ndw.SCENARIOS))
def test_execution_spans_on_profile_start_base(scenario, name):
    """Default base: execution times = true time - profile start (not minus it twice), so on the
    relative Parquet base an execution's span holds exactly its instructions."""
    tmp_path, t = scenario(name)
    assert "execution_time_base" not in t["variation"]  # default: truth as before the option
    sim = t["executions"]["simulated"]
    assert t["executions"]["repeats"] == 1
    for r in t["ranks"]:
        d = _pdir(tmp_path, t, r)
        ex = _read(d, "ExecutionInfo").sort_values("execution_index")
        ps = t["time"]["profile_start_true_ns"][str(r)]
        assert ex["execution_start_ts"].tolist() == [x["start_true_ns"][str(r)] - ps for x in sim]
        assert ex["execution_end_ts"].tolist() == [x["end_true_ns"][str(r)] - ps for x in sim]
        # the profile start is Metadata.first_hw_timestamp (device clock)
        md = _read(d, "Metadata").iloc[0]
        assert md["first_hw_timestamp"] == ps + t["time"]["clock_offset_ns"][str(r)]
        ins = _read(d, "Instruction")
        first = ins["start_ts"].min() - t["time"]["written_ts_offset_ns"]["parquet"][str(r)]
        assert ex["execution_start_ts"].iloc[0] == first - ps > 0  # the lead before the rows
        _assert_spans_hold_rows(d, t, r)


@pytest.mark.parametrize("name", ["clean", "straggler", "session_capture", "pipeline_1f1b"])
def test_execution_time_base_first_event(tmp_path, scenario, name):
    """first_event: execution 0 starts at 0 (the first written row); only ExecutionInfo (and
    the truth's time notes) differ from the default."""
    out_def, t_def = scenario(name)
    t = ndw.write_scenario(
        name, str(tmp_path), formats=("parquet", "json"), execution_time_base="first_event"
    )
    assert t["variation"]["execution_time_base"] == "first_event"
    assert t["time"]["execution_time_base"] == "first_event"
    sim = t["executions"]["simulated"]
    for r in t["ranks"]:
        d, d_def = _pdir(str(tmp_path), t, r), _pdir(out_def, t_def, r)
        ex = _read(d, "ExecutionInfo").sort_values("execution_index")
        ex_def = _read(d_def, "ExecutionInfo").sort_values("execution_index")
        first_true = sim[0]["start_true_ns"][str(r)]
        assert t["time"]["execution_ts_offset_ns"][str(r)] == -first_true
        assert ex["execution_start_ts"].iloc[0] == 0
        assert ex["execution_end_ts"].tolist() == [
            x["end_true_ns"][str(r)] - first_true for x in sim
        ]
        # earlier than the default by the lead: first row minus Metadata.first_hw_timestamp
        lead = first_true - t["time"]["profile_start_true_ns"][str(r)]
        assert lead > 0
        for c in ("execution_start_ts", "execution_end_ts"):
            assert (ex_def[c].to_numpy() - ex[c].to_numpy() == lead).all()
        for c in ("execution_index", "neff_name", "num_subgraphs", "row_count"):
            assert ex[c].tolist() == ex_def[c].tolist()
        # 0 is the earliest timestamp of any written row of the rank
        off = t["time"]["written_ts_offset_ns"]["parquet"][str(r)]
        mins = [
            df[c].min()
            for f in ("Instruction", "DmaPacket", "DmaPacketAggregated", "CcOp", "ActiveTime")
            if (df := _read(d, f)) is not None and len(df)
            for c in ("start_ts",)
        ]
        assert min(mins) - off == first_true
        _assert_spans_hold_rows(d, t, r)
    # every other file is byte-identical to the default preset
    for root, _dirs, files in os.walk(tmp_path):
        for f in files:
            if f.startswith("ExecutionInfo") or f == "truth.json":
                continue
            p = os.path.join(root, f)
            q = os.path.join(out_def, os.path.relpath(p, tmp_path))
            assert _bytes(p) == _bytes(q), p
    with pytest.raises(ValueError):
        ndw.simulate("clean", execution_time_base="capture")


def test_execution_spans_tiled_copies(tmp_path):
    """Repeated executions (scale): each copy's span holds that copy's instructions."""
    for base in ("first_hw_timestamp", "first_event"):
        t = ndw.write_job(
            str(tmp_path / base),
            ranks=2,
            layers=2,
            formats=("parquet",),
            scale="5k",
            parquet_time_base="device",
            execution_time_base=base,
        )
        assert t["executions"]["repeats"] > 2
        for r in t["ranks"]:
            d = _pdir(str(tmp_path / base), t, r)
            assert len(_read(d, "ExecutionInfo")) == t["executions"]["total_executions"]
            _assert_spans_hold_rows(d, t, r)


@pytest.mark.parametrize("name", ["slow_weight_dma", "tp_exposed_allreduce", "session_capture"])
def test_json_layer_summary_per_execution(scenario, name):
    """layer_summary: per layer, the sum over executions of the span of its instructions in
    that execution (executions placed with the truth, in JSON time)."""
    tmp_path, t = scenario(name)
    sim = t["executions"]["simulated"]
    for r in t["ranks"]:
        doc = _load(os.path.join(tmp_path, t["files"]["json"][str(r)]))
        off = t["time"]["written_ts_offset_ns"]["json"][str(r)]
        ins = pd.DataFrame(doc["instruction"]).dropna(subset=["layer"])
        ins["end"] = ins["timestamp"] + ins["duration"]
        starts = np.array([x["start_true_ns"][str(r)] + off for x in sim])
        ins["k"] = np.searchsorted(starts, ins["timestamp"].to_numpy(), side="right") - 1
        per = ins.groupby(["layer", "k"]).agg(s=("timestamp", "min"), e=("end", "max"))
        want = (per["e"] - per["s"]).groupby(level=0).sum()
        got = pd.DataFrame(doc["layer_summary"]).set_index("layer")
        assert got["duration"].to_dict() == want.to_dict()
        assert got["instruction_count"].to_dict() == ins.groupby("layer").size().to_dict()
