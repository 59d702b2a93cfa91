"""Self-tests of the clean-room Kineto fixture writer (the writer only; no tracediag import)."""

from __future__ import annotations

import gzip
import json
import statistics
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

import pytest

from tests.cleanroom import kineto_writer as kw

REQUIRED = {
    "clean",
    "straggler_compute",
    "straggler_host",
    "cross_stream_wait",
    "autograd_thread",
    "all_to_all_dlrm_like",
    "no_flows_no_dist_info",
}
KNOWN_CATS = {
    "cpu_op",
    "user_annotation",
    "python_function",
    "cuda_runtime",
    "cuda_sync",
    "kernel",
    "gpu_memcpy",
    "gpu_user_annotation",
    "ac2g",
    "fwdbwd",
    "Trace",
    None,
}


def _load(path: Path, exact: bool = False):
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        data = json.load(f, parse_float=Decimal) if exact else json.load(f)
    if isinstance(data, dict):
        return data["traceEvents"], data
    return data, None


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    root = tmp_path_factory.mktemp("kineto_cleanroom")
    out = {}
    for name in kw.SCENARIOS:
        d = root / name
        truth = kw.write_scenario(name, d, seed=0)
        out[name] = (d, truth)
    return out


def _rank_events(written, name, rank, exact=False):
    d, truth = written[name]
    return _load(d / truth["files"][str(rank)], exact)


def test_required_presets_exist():
    assert set(kw.SCENARIOS) >= REQUIRED
    assert set(kw.SCENARIO_NOTES) == set(kw.SCENARIOS)
    for opts in kw.SCENARIOS.values():
        assert set(opts) <= set(kw.DEFAULTS)


def test_truth_file_matches_return_value(written):
    for d, truth in written.values():
        assert json.loads((d / "truth.json").read_text()) == truth


def test_files_valid_json_container_and_size(written):
    for name, (d, truth) in written.items():
        o = truth["options"]
        assert sorted(p.name for p in d.iterdir()) == sorted(
            list(truth["files"].values()) + ["truth.json"]
        )
        for r in truth["ranks"]:
            fname = truth["files"][str(r)]
            assert fname.endswith(".gz") == bool(o["gzip"])
            events, meta = _rank_events(written, name, r)
            assert (meta is None) == (o["container"] == "list")
            assert len(events) < 5000, name
            if meta is not None:
                assert meta["schemaVersion"] == 1
                assert len(meta["deviceProperties"]) == 8
                if o["dist_info"] is None:
                    assert "distributedInfo" not in meta
                else:
                    di = meta["distributedInfo"]
                    assert di["rank"] == r and di["world_size"] == truth["world_size"]


def _check_nesting(spans):
    """X events of one CPU thread nest as a stack (no partial overlap)."""
    stack = []
    for a, b, name in sorted(spans, key=lambda x: (x[0], -x[1])):
        while stack and stack[-1][1] <= a:
            stack.pop()
        if stack:
            assert b <= stack[-1][1], f"{name} overlaps {stack[-1][2]}"
        stack.append((a, b, name))


def test_events_well_formed(written):
    for name, (_d, truth) in written.items():
        o = truth["options"]
        for r in truth["ranks"]:
            events, _ = _rank_events(written, name, r, exact=True)
            flows = defaultdict(list)
            cpu_spans = defaultdict(list)
            gpu_spans = defaultdict(list)
            steps = 0
            for e in events:
                assert e["ph"] in {"X", "M", "s", "f", "i"}
                assert e.get("cat") in KNOWN_CATS, e.get("cat")
                assert "pid" in e and "tid" in e
                if o["id_style"] == "int" and e.get("cat") in ("cpu_op", "kernel"):
                    assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
                if o["id_style"] == "str" and e.get("cat") in ("cpu_op", "kernel"):
                    assert isinstance(e["pid"], str) and isinstance(e["tid"], str)
                if o["ts_style"] == "int" and "ts" in e and e["pid"] not in ("", "Traces"):
                    assert isinstance(e["ts"], int)
                if e["ph"] == "X":
                    assert e["dur"] >= 0 and isinstance(e["args"], dict)
                    span = (e["ts"], e["ts"] + e["dur"], e["name"])
                    if e["cat"] in ("cpu_op", "user_annotation", "python_function", "cuda_runtime"):
                        cpu_spans[(e["pid"], e["tid"])].append(span)
                    elif e["cat"] in ("kernel", "gpu_memcpy"):
                        gpu_spans[(e["pid"], e["tid"])].append(span)
                        assert ("correlation" in e["args"]) == bool(o["correlation"])
                    if e["cat"] == "user_annotation" and e["name"].startswith("ProfilerStep#"):
                        steps += 1
                elif e["ph"] in ("s", "f"):
                    flows[(e["cat"], e["id"])].append(e)
            assert steps == o["steps"]
            if not o["flows"]:
                assert not any(c == "ac2g" for c, _ in flows)
            for (_cat, _id), pair in flows.items():
                assert sorted(x["ph"] for x in pair) == ["f", "s"]
                assert next(x for x in pair if x["ph"] == "f")["bp"] == "e"
            for spans in cpu_spans.values():
                _check_nesting(spans)
            for spans in gpu_spans.values():
                spans.sort()
                for (_a0, b0, _), (a1, _b1, _) in zip(spans, spans[1:], strict=False):
                    assert a1 >= b0, "two GPU ops overlap on one stream"


def test_kernels_start_after_their_launch(written):
    events, _ = _rank_events(written, "clean", 1, exact=True)
    rt = {e["args"]["correlation"]: e for e in events if e.get("cat") == "cuda_runtime"}
    n = 0
    for e in events:
        if e.get("cat") in ("kernel", "gpu_memcpy"):
            assert e["ts"] > rt[e["args"]["correlation"]]["ts"]
            n += 1
    assert n > 50


def _to_ns(ts):
    return int(Decimal(ts) * 1000)


def test_timestamps_carry_exact_truth_ns(written):
    for name, (_d, truth) in written.items():
        for r in truth["ranks"]:
            events, _ = _rank_events(written, name, r, exact=True)
            nccl = sorted(
                _to_ns(e["ts"])
                for e in events
                if e.get("cat") == "kernel" and e["name"].startswith("nccl")
            )
            arrivals = sorted(
                c["arrival_local_ns"][str(r)]
                for c in truth["collectives"]
                if r in c["participants"]
            )
            assert nccl == arrivals, name
            steps = sorted(
                _to_ns(e["ts"])
                for e in events
                if e.get("name", "").startswith("ProfilerStep#")
                and e.get("cat") == "user_annotation"
            )
            assert steps == [st["per_rank"][str(r)]["start_local_ns"] for st in truth["steps"]]
            # plain json parsing (float µs) rounds back to the same ns
            fevents, _ = _rank_events(written, name, r)
            fn = sorted(
                e["ts"] * 1000 if isinstance(e["ts"], int) else round(e["ts"] * 1000)
                for e in fevents
                if e.get("cat") == "kernel" and e["name"].startswith("nccl")
            )
            assert fn == arrivals


def test_truth_self_consistent(written):
    for name, (_d, truth) in written.items():
        assert truth["clock_offsets_ns"]["0"] == 0
        for st in truth["steps"]:
            per = st["per_rank"]
            assert st["step_time_ns"] == max(v["step_ns"] for v in per.values())
            for r, v in per.items():
                off = truth["clock_offsets_ns"][r]
                assert v["start_local_ns"] - v["start_true_ns"] == off
                assert v["end_true_ns"] - v["start_true_ns"] == v["step_ns"]
                assert 0.0 <= v["gpu_busy_fraction"] <= 1.0
                assert v["compute_busy_fraction"] <= v["gpu_busy_fraction"] + 1e-12
        for c in truth["collectives"]:
            arr = {int(k): v for k, v in c["arrival_true_ns"].items()}
            assert c["end_true_ns"] == max(arr.values()) + c["transfer_ns"]
            assert arr[c["last_rank"]] == max(arr.values())
            assert c["wait_ns"][str(c["last_rank"])] == 0
            assert all(w >= 0 for w in c["wait_ns"].values())
            others = [v for k, v in arr.items() if k != c["last_rank"]]
            assert c["lateness_ns"] == int(arr[c["last_rank"]] - statistics.median(others))
            for p in c["participants"]:
                off = truth["clock_offsets_ns"][str(p)]
                assert c["end_local_ns"][str(p)] - c["end_true_ns"] == off
        sv = truth["straggler_saving_ns"]
        assert len(sv["per_step"]) == len(truth["steps"])
        if truth["straggler"]["ranks"]:
            assert sv["typical"] > 0, name
        else:
            assert sv["typical"] == 0 and all(x == 0 for x in sv["per_step"])
        warm = truth["steps"][0]
        if truth["options"]["warmup"]:
            assert warm["warmup"]
            assert warm["step_time_ns"] > truth["steps"][-1]["step_time_ns"]


def _steady_colls(truth, op=None):
    warm = truth["warmup_step_index"]
    return [c for c in truth["collectives"] if c["step"] != warm and (op is None or c["op"] == op)]


def _first_per_step(colls):
    first = {}
    for c in colls:
        first.setdefault(c["step"], c)
    return list(first.values())


def test_injected_stragglers_show_in_truth(written):
    clean = written["clean"][1]
    assert clean["straggler"]["ranks"] == []
    assert max(c["lateness_ns"] for c in _steady_colls(clean)) < 100_000

    comp = written["straggler_compute"][1]
    assert comp["straggler"] == {**comp["straggler"], "ranks": [2], "cause": "gpu_compute_slowdown"}
    assert all(c["last_rank"] == 2 for c in _steady_colls(comp))
    assert comp["straggler_saving_ns"]["typical"] > 2_000_000

    host = written["straggler_host"][1]
    assert host["straggler"]["ranks"] == [1] and host["straggler"]["cause"] == "host_delay"
    for c in _first_per_step(_steady_colls(host)):
        assert c["last_rank"] == 1
        assert abs(c["lateness_ns"] - 5_000_000) < 200_000
    assert len(host["host_delays"]) == host["options"]["steps"]

    dlrm = written["all_to_all_dlrm_like"][1]
    assert dlrm["world_size"] == 8
    for c in _first_per_step(_steady_colls(dlrm)):
        assert c["op"] == "all_to_all" and c["last_rank"] == 5
        assert abs(c["lateness_ns"] - 1_500_000) < 150_000
    assert {c["op"] for c in dlrm["collectives"]} == {"all_to_all", "allreduce"}

    pp = written["pipeline_sendrecv_compute_stream"][1]
    assert {c["op"] for c in pp["collectives"]} == {"send_recv"}
    assert all(len(c["participants"]) == 2 and c["stream"] == 7 for c in pp["collectives"])


def test_cross_stream_wait_without_sync_records(written):
    truth = written["cross_stream_wait"][1]
    waits = truth["cross_stream_waits_without_sync"]
    assert len(waits) >= truth["world_size"] * truth["options"]["steps"]
    for w in waits:
        assert w["kernel_stream"] == 7 and w["waited_stream"] == 20 and w["waited_is_nccl"]
        assert w["launch_true_ns"] < w["waited_end_true_ns"] <= w["start_true_ns"]
        assert w["start_true_ns"] - w["waited_end_true_ns"] < 10_000
    for r in truth["ranks"]:
        events, _ = _rank_events(written, "cross_stream_wait", r)
        assert not any(e.get("cat") == "cuda_sync" for e in events)
        assert not any(e.get("name") == "cudaStreamWaitEvent" for e in events)
    # with cuda_sync on, the same waits carry a record
    clean = written["clean"][1]
    assert clean["cross_stream_waits"] and not clean["cross_stream_waits_without_sync"]
    events, _ = _rank_events(written, "clean", 0)
    assert any(e.get("name") == "Stream Wait Event" for e in events)


def test_autograd_thread_layout(written):
    truth = written["autograd_thread"][1]
    idle = truth["main_thread_idle"]
    assert len(idle) == truth["world_size"] * truth["options"]["steps"]
    for r in truth["ranks"]:
        info = truth["rank_info"][str(r)]
        events, _ = _rank_events(written, "autograd_thread", r, exact=True)
        names = [e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"]
        assert any("pt_autograd_0" in n for n in names)
        bwd = [
            e for e in events if e.get("cat") == "cuda_runtime" and e["tid"] == info["autograd_tid"]
        ]
        assert len(bwd) > 20
        for iv in (x for x in idle if x["rank"] == r):
            lo, hi = iv["start_local_ns"], iv["end_local_ns"]
            inside_main = [
                e
                for e in events
                if e.get("cat") in ("cpu_op", "cuda_runtime")
                and e["tid"] == info["main_tid"]
                and lo < _to_ns(e["ts"]) < hi
            ]
            assert inside_main == []


def test_no_flows_no_dist_info_layout(written):
    truth = written["no_flows_no_dist_info"][1]
    for r in truth["ranks"]:
        assert truth["files"][str(r)] == f"rank-{r}.json.gz"
        events, meta = _rank_events(written, "no_flows_no_dist_info", r)
        assert meta is None
        assert not any(e.get("cat") == "ac2g" for e in events)
        assert not any("correlation" in e.get("args", {}) for e in events)
        rpc = [e for e in events if e.get("name") == "record_param_comms"]
        assert rpc and not any("Collective name" in e["args"] for e in rpc)


def test_deterministic_for_a_seed(tmp_path):
    def blobs(d):
        return {p.name: p.read_bytes() for p in sorted(d.iterdir())}

    a = kw.write_scenario("straggler_compute", tmp_path / "a", seed=3)
    b = kw.write_scenario("straggler_compute", tmp_path / "b", seed=3)
    c = kw.write_scenario("straggler_compute", tmp_path / "c", seed=4)
    assert c["collectives"] != a["collectives"]
    assert a == b
    assert blobs(tmp_path / "a") == blobs(tmp_path / "b")
    assert blobs(tmp_path / "a") != blobs(tmp_path / "c")


def test_bad_options_rejected(tmp_path):
    with pytest.raises(TypeError):
        kw.write_job(tmp_path, no_such_option=1)
    with pytest.raises(ValueError):
        kw.write_job(tmp_path, model="moe")
    with pytest.raises(KeyError):
        kw.write_scenario("nope", tmp_path)
