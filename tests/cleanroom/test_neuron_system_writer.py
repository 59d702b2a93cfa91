"""Self-tests of the clean-room Neuron system-profile writer alone (no tracediag import).

The Perfetto bytes are decoded back with a tiny decoder written here and cross-checked with
google.protobuf's descriptor-free unknown-field parsing.
"""

from __future__ import annotations

import gzip
import json
import re
import statistics
import struct
import sys
from collections import defaultdict
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import neuron_system_writer as nsw  # noqa: E402

EPOCH_MIN = 1_700_000_000_000_000_000
DEVICE_MAX = 10**13  # device clock ~1.4e11 .. 1.8e11
PROFILE_MAX = 10**9

# --------------------------------------------------------------------------------------------
# tiny protobuf decoder
# --------------------------------------------------------------------------------------------


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, i
        shift += 7


def fields(buf: bytes) -> list[tuple[int, int, object]]:
    out, i = [], 0
    while i < len(buf):
        key, i = _varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            val, i = _varint(buf, i)
        elif wt == 1:
            val = struct.unpack_from("<Q", buf, i)[0]
            i += 8
        elif wt == 2:
            n, i = _varint(buf, i)
            val = buf[i : i + n]
            i += n
            assert len(val) == n, "truncated length-delimited field"
        elif wt == 5:
            val = struct.unpack_from("<I", buf, i)[0]
            i += 4
        else:
            raise ValueError(f"wire type {wt}")
        out.append((num, wt, val))
    return out


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def decode_pftrace(data: bytes) -> dict:
    """Descriptors and track events of a TrackEvent trace (interning per sequence)."""
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    tracks: dict[int, dict] = {}
    events: list[dict] = []
    names: dict[tuple[int, int], str] = {}
    ann_names: dict[tuple[int, int], str] = {}
    packets = 0
    for num, wt, pkt in fields(data):
        assert num == 1 and wt == 2
        packets += 1
        f = defaultdict(list)
        for n, _w, v in fields(pkt):
            f[n].append(v)
        seq = f[10][0] if f[10] else 0
        if f[13] and f[13][0] & 1:
            for table in (names, ann_names):
                for key in [k for k in table if k[0] == seq]:
                    del table[key]
        for blob in f[12]:
            for n, _w, v in fields(blob):
                entry = {a: b for a, _x, b in fields(v)}
                target = names if n == 2 else ann_names if n == 3 else None
                if target is not None:
                    target[(seq, entry[1])] = entry[2].decode()
        if f[60]:
            d = {n: v for n, _w, v in fields(f[60][0])}
            row = {"uuid": d[1], "parent": d.get(5), "name": d.get(2, b"").decode() or None}
            if 3 in d:
                p = {n: v for n, _w, v in fields(d[3])}
                row.update(kind="process", pid=p.get(1), process_name=p.get(6, b"").decode())
            if 4 in d:
                t = {n: v for n, _w, v in fields(d[4])}
                row.update(kind="thread", pid=t.get(1), tid=t.get(2))
                row["thread_name"] = t[5].decode() if 5 in t else None
            tracks[d[1]] = row
        if f[11]:
            te = defaultdict(list)
            for n, _w, v in fields(f[11][0]):
                te[n].append(v)
            name = te[23][0].decode() if te[23] else None
            if te[10]:
                name = names[(seq, te[10][0])]
            args = {}
            for blob in te[4]:
                a = {n: v for n, _w, v in fields(blob)}
                key = a[10].decode() if 10 in a else ann_names[(seq, a[1])]
                if 4 in a:
                    args[key] = _signed(a[4])
                elif 6 in a:
                    args[key] = a[6].decode()
                elif 5 in a:
                    args[key] = struct.unpack("<d", struct.pack("<Q", a[5]))[0]
                elif 2 in a:
                    args[key] = bool(a[2])
            events.append(
                {
                    "ts": f[8][0],
                    "type": te[9][0],
                    "track": te[11][0],
                    "name": name,
                    "args": args,
                    "flows": list(te[47]),
                }
            )
    return {"tracks": tracks, "events": events, "packets": packets}


def slices(trace: dict) -> list[dict]:
    """BEGIN/END paired per track (a stack); INSTANTs as zero-length. Asserts proper nesting."""
    stacks: dict[int, list[dict]] = defaultdict(list)
    out = []
    for ev in trace["events"]:
        if ev["type"] == 1:
            stacks[ev["track"]].append(dict(ev, depth=len(stacks[ev["track"]])))
        elif ev["type"] == 2:
            assert stacks[ev["track"]], "SLICE_END without a BEGIN"
            b = stacks[ev["track"]].pop()
            assert ev["ts"] >= b["ts"]
            out.append(dict(b, end=ev["ts"]))
        elif ev["type"] == 3:
            out.append(dict(ev, end=ev["ts"], depth=len(stacks[ev["track"]])))
    assert all(not s for s in stacks.values()), "unclosed slices"
    return out


def thread_label(trace: dict, uuid: int) -> str:
    t = trace["tracks"][uuid]
    return t["thread_name"] or f"Thread {t['tid']}"


# --------------------------------------------------------------------------------------------
# fixtures
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = {}
    for name in nsw.SCENARIOS:
        d = tmp_path_factory.mktemp(name)
        out[name] = (d, nsw.write_scenario(name, d))
    return out


def _load(d: Path, rel: str):
    return json.loads((d / rel).read_text())


# --------------------------------------------------------------------------------------------
# wire format
# --------------------------------------------------------------------------------------------


def test_varint_round_trip():
    for v in (0, 1, 127, 128, 300, 2**32, 2**63 - 1, 1_755_115_507_555_244_227):
        assert _varint(nsw.encode_varint(v), 0)[0] == v
    assert _signed(_varint(nsw.encode_varint(-5), 0)[0]) == -5
    assert len(nsw.encode_varint(-1)) == 10


def test_google_protobuf_agrees_with_tiny_decoder(written):
    from google.protobuf import empty_pb2
    from google.protobuf.unknown_fields import UnknownFieldSet

    for name in ("clean", "lnc2", "perfetto_thread"):
        d, truth = written[name]
        data = (d / truth["files"]["perfetto"]).read_bytes()
        msg = empty_pb2.Empty()
        msg.ParseFromString(data)
        ufs = UnknownFieldSet(msg)
        assert all(f.field_number == 1 and f.wire_type == 2 for f in ufs)
        assert len(ufs) == decode_pftrace(data)["packets"]
        pkt = empty_pb2.Empty()
        pkt.ParseFromString(ufs[len(ufs) - 1].data)
        assert {f.field_number for f in UnknownFieldSet(pkt)} >= {8, 10, 11}


# --------------------------------------------------------------------------------------------
# system_profile.json
# --------------------------------------------------------------------------------------------


def test_system_json_current_layout(written):
    d, truth = written["clean"]
    doc = _load(d, "system_profile.json")
    assert set(doc) == {"trace_event", "device_mem_usage"}
    rows = doc["trace_event"]
    names = {r["name"] for r in rows}
    assert {"nrt_execute", "nc_exec_running", "cc_running", "timestamp_sync_point"} <= names
    for r in rows:
        assert "worker_gid" not in r
        assert isinstance(r["process_id"], str)
        assert r["timestamp_unit"] == "ns" and r["timestamp"] > EPOCH_MIN
    nc = [r for r in rows if r["name"] == "nc_exec_running"]
    need = {"exec_id", "model_id", "device_core_idx", "lnc_idx", "nc_idx", "model_name"}
    assert all(need <= set(r) for r in nc)
    assert len(nc) == truth["shape"]["ranks"] * truth["shape"]["executions"]
    sync = [r for r in rows if r["name"] == "timestamp_sync_point"]
    assert all(
        r["cpu_timestamp_ns"] > EPOCH_MIN and r["nc_timestamp_ns"] < DEVICE_MAX for r in sync
    )
    mem = doc["device_mem_usage"]
    assert all({"hbm_idx", "total_bytes", "dram_spill_bytes"} <= set(m) for m in mem)


def test_system_json_legacy_layout(written):
    d, _truth = written["legacy_trace_events"]
    doc = _load(d, "system_profile.json")
    assert "trace_event" not in doc and {"trace_events", "mem_usage", "cpu_util"} <= set(doc)
    rows = doc["trace_events"]
    assert all(isinstance(r["type"], int) for r in rows)
    assert {r["type"] for r in rows if r["name"] == "nrt_tensor_write"} == {11}
    assert {r["type"] for r in rows if r["name"] == "train_step"} == {99999}
    assert all(r["group"].startswith(("nrt-nc-", "framework-")) for r in rows)
    assert "dlr_infer" in {r["name"] for r in rows}
    by_id = {r["id"]: r for r in rows}
    for r in rows:  # parent ids point at an enclosing row
        if r.get("parent_id"):
            p = by_id[r["parent_id"]]
            assert p["timestamp"] <= r["timestamp"]
            assert r["timestamp"] + r["duration"] <= p["timestamp"] + p["duration"]


def test_system_json_minimal_and_string_variants(written):
    d, _ = written["minimal_json"]
    doc = _load(d, "system_profile.json")
    r = next(r for r in doc["trace_event"] if r["name"] == "nc_exec_running")
    assert "instance_id" not in r and "id" not in r and isinstance(r["timestamp"], str)
    assert all(isinstance(m["hbm_idx"], str) for m in doc["device_mem_usage"])


def _ranks_from_system_json(rows, truth):
    """Recover ranks the way truth.rank_derivation says, then compare."""
    keyed = defaultdict(list)
    for r in rows:
        if r["name"] == "nc_exec_running":
            keyed[(r.get("instance_id"), r["process_id"], r["nc_idx"])].append(r)
    got = {}
    for key, items in keyed.items():
        core = min(r["device_core_idx"] for r in items)
        match = [
            t["rank"]
            for t in truth["ranks"]
            if t["process_id"] == key[1]
            and t["nc_idx"] == key[2]
            and min(t["device_core_idx"]) == core
            and key[0] in (None, t["instance_id"])
        ]
        assert len(match) == 1, key
        got[match[0]] = items
    # the documented rule alone (sorted instance ids, then device_core_idx) gives the same ranks
    if all(k[0] is not None for k in keyed):
        insts = sorted({k[0] for k in keyed})
        wpi = truth["shape"]["workers_per_instance"]
        for rank, items in got.items():
            inst = items[0]["instance_id"]
            cores = sorted(
                {min(r["device_core_idx"] for r in v) for k, v in keyed.items() if k[0] == inst}
            )
            local = cores.index(min(r["device_core_idx"] for r in items))
            assert insts.index(inst) * wpi + local == rank
    return got


@pytest.mark.parametrize(
    "name", ["clean", "straggler_worker", "lnc2", "skewed_clocks", "one_process_per_instance"]
)
def test_system_json_matches_truth(written, name):
    d, truth = written[name]
    rows = _load(d, "system_profile.json")["trace_event"]
    per_rank = _ranks_from_system_json(rows, truth)
    assert sorted(per_rank) == list(range(truth["shape"]["ranks"]))
    tol = abs(truth["params"]["sync_error_ns"]) + 1 + 10_000  # lnc2 pcore lag/tail, drift
    for t in truth["ranks"]:
        by_exec = defaultdict(list)
        for r in per_rank[t["rank"]]:
            by_exec[r["exec_id"]].append(r)
        for x in t["executions"]:
            items = by_exec[x["exec_id"]]
            assert len(items) == truth["params"]["lnc"]
            start = min(r["timestamp"] for r in items)
            end = max(r["timestamp"] + r["duration"] for r in items)
            assert abs(start - x["device_start_ns"]) <= tol
            assert abs(end - x["device_end_ns"]) <= tol
            if truth["params"]["lnc"] > 1:
                assert len({r["device_core_idx"] for r in items}) == 2
                assert len({tuple(r["flow_id"]) for r in items}) == 1


def test_model_id_in_extra_attributes(written):
    d, _ = written["lnc2_extra_attrs"]
    rows = _load(d, "system_profile.json")["trace_event"]
    nc = [r for r in rows if r["name"] == "nc_exec_running"]
    assert all(
        "model_id" not in r and "model_id" in json.loads(r["extra_attributes_json"]) for r in nc
    )


def test_memory_truth(written):
    d, truth = written["straggler_worker"]
    mem = _load(d, "system_profile.json")["device_mem_usage"]
    for m in truth["memory"]:
        rows = [
            r
            for r in mem
            if (r["instance_id"], r["device_idx"], r["hbm_idx"])
            == (m["instance_id"], m["device_idx"], m["hbm_idx"])
        ]
        assert len(rows) == m["samples"]
        assert max(r["total_bytes"] for r in rows) == m["peak_total_bytes"]
        assert max(r["dram_spill_bytes"] for r in rows) == m["dram_spill_bytes"]
    spill = [m["rank"] for m in truth["memory"] if m["dram_spill_bytes"]]
    assert spill == [truth["straggler"]["rank"]]


# --------------------------------------------------------------------------------------------
# runtime trace JSON
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["clean", "lnc2", "skewed_clocks", "gzip_interned", "pid_collision"]
)
def test_runtime_json_pairs_and_sync_formula(written, name):
    d, truth = written[name]
    by_file = {t["runtime_json_file"]: [] for t in truth["ranks"]}
    for t in truth["ranks"]:
        by_file[t["runtime_json_file"]].append(t)
    for rel, members in by_file.items():
        doc = _load(d, rel)
        assert doc["data_version"] == 2 and set(doc) == {"events", "data_version"}
        open_, spans = {}, defaultdict(list)
        sync = {}
        for ev in doc["events"]:
            assert ev["phase"] in ("start", "stop")
            key = (ev["event_type"], ev["nc_idx"], ev["tracking_id"])
            if ev["phase"] == "start":
                assert key not in open_
                open_[key] = ev
                continue
            b = open_.pop(key)
            if ev["event_type"] == "timestamp_sync_point":
                sync[(ev["nc_idx"], b["data"]["exec_id"])] = b["data"]
            if ev["event_type"] == "nc_exec_running":
                assert {"nc_timestamp_ns", "exec_id", "device_core_idx"} <= set(b["data"])
                spans[(ev["nc_idx"], b["data"]["exec_id"])].append((b, ev))
        assert not open_
        for t in members:
            for x in t["executions"]:
                pair = spans[(t["nc_idx"], x["exec_id"])]
                assert len(pair) == truth["params"]["lnc"]
                sp = sync[(t["nc_idx"], x["exec_id"])]
                assert (
                    sp["cpu_timestamp_ns"] - sp["nc_timestamp_ns"]
                    == (t["clock"]["host_minus_device_per_exec_ns"][x["exec_id"] - 1])
                )
                b, _e = min(pair, key=lambda p: p[0]["data"]["nc_timestamp_ns"])
                adjusted = (
                    sp["cpu_timestamp_ns"] + b["data"]["nc_timestamp_ns"] - sp["nc_timestamp_ns"]
                )
                assert adjusted == x["device_start_adjusted_ns"]
                drift = truth["params"]["device_drift_ppm"] * 1e-6 * 10_000_000
                bound = abs(truth["params"]["sync_error_ns"]) + drift + 1
                assert abs(adjusted - x["device_start_ns"]) <= bound
                if truth["params"]["runtime_hw_host_ts"]:
                    assert b["timestamp_ns"] == adjusted
                else:
                    assert "timestamp_ns" not in b


# --------------------------------------------------------------------------------------------
# perfetto
# --------------------------------------------------------------------------------------------

TRACK_RES = {
    "gid": r"^gid\d+-nc\d+-tid\d+-neuron_(rt|hw)$",
    "gid_nrt": r"^gid\d+-nrt-nc\d+-tid\d+-neuron_(rt|hw)$",
    "nrt": r"^nrt-nc\d+-tid\d+-neuron_(rt|hw)$",
    "thread": r"^Thread \d+$",
    "thread_literal": r"^Thread \d+$",
}


@pytest.mark.parametrize(
    "name", ["clean", "perfetto_gid_nrt", "perfetto_nrt", "perfetto_thread", "legacy_trace_events"]
)
def test_perfetto_track_names(written, name):
    d, truth = written[name]
    trace = decode_pftrace((d / truth["files"]["perfetto"]).read_bytes())
    style = truth["params"]["thread_style"]
    procs = [t for t in trace["tracks"].values() if t.get("kind") == "process"]
    assert procs and all(re.match(r"^i-0[0-9a-f]{16}-pid\d+$", p["process_name"]) for p in procs)
    threads = [t for t in trace["tracks"].values() if t.get("kind") == "thread"]
    labels = {thread_label(trace, t["uuid"]) for t in threads}
    runtime = {lab for lab in labels if not lab.startswith("Thread ")} or labels
    assert all(re.match(TRACK_RES[style], lab) for lab in runtime), runtime
    if style == "thread":
        assert all(t["thread_name"] is None for t in threads)
    if style == "thread_literal":
        assert all(t["thread_name"] == f"Thread {t['tid']}" for t in threads)
    for t in truth["ranks"]:
        assert t["perfetto_tracks"]["rt"] in labels
    if style == "gid":
        assert any(re.match(r"^gid32-nc0-tid3-neuron_rt$", lab) for lab in labels)


def test_perfetto_slices_sync_points_and_time_bases(written):
    d, truth = written["clean"]
    trace = decode_pftrace((d / truth["files"]["perfetto"]).read_bytes())
    sl = slices(trace)
    hw = [s for s in sl if s["name"].startswith("nc_exec_running")]
    assert hw and all(re.match(r"^nc_exec_running /tmp/tmp\w+/file\.neff$", s["name"]) for s in hw)
    assert all(thread_label(trace, s["track"]).endswith("-neuron_hw") for s in hw)
    sync = [s for s in sl if s["name"] == "timestamp_sync_point"]
    assert len(sync) == truth["shape"]["ranks"] * truth["shape"]["executions"]
    for s in sync:
        assert s["type"] == 3 and s["end"] == s["ts"]
        assert thread_label(trace, s["track"]).endswith("-neuron_rt")
        assert s["args"]["cpu_timestamp_ns"] > EPOCH_MIN
        assert s["args"]["nc_timestamp_ns"] < DEVICE_MAX
    assert all(s["ts"] > EPOCH_MIN for s in sl)
    nrt = [s for s in sl if s["name"] == "nrt_execute"]
    assert {"worker_gid", "lnc_idx", "nc_idx", "model_name", "timestamp_unit"} <= set(
        nrt[0]["args"]
    )
    assert nrt[0]["args"]["timestamp"] == nrt[0]["ts"]
    # the device profile is on a third, profile-relative base
    dp = decode_pftrace((d / truth["files"]["device_profile"]).read_bytes())
    dsl = slices(dp)
    assert dsl and all(0 <= s["ts"] < PROFILE_MAX for s in dsl)
    assert "MATMUL" in {s["name"] for s in dsl}
    assert any(t.get("process_name") == "Instructions" for t in dp["tracks"].values())
    assert "TensorMatrix Engine - Row 0" in {
        thread_label(dp, u) for u in dp["tracks"] if dp["tracks"][u].get("kind") == "thread"
    }
    assert any(s["args"].get("device_profile") == truth["files"]["device_profile"] for s in nrt)


def test_perfetto_matches_truth_by_worker_gid(written):
    d, truth = written["straggler_worker"]
    trace = decode_pftrace((d / truth["files"]["perfetto"]).read_bytes())
    sl = slices(trace)
    gid_rank = {t["worker_gid"]: t["rank"] for t in truth["ranks"]}
    assert sorted(gid_rank) != list(range(len(gid_rank)))  # worker_gid is not the rank
    dur = defaultdict(list)
    for s in sl:
        if s["name"] == "nrt_execute":
            dur[gid_rank[s["args"]["worker_gid"]]].append(s["end"] - s["ts"])
    for t in truth["ranks"]:
        want = [x["nrt_execute_end_ns"] - x["nrt_execute_start_ns"] for x in t["executions"]]
        assert dur[t["rank"]] == want
    compute = {t["rank"]: sum(x["compute_ns"] for x in t["executions"]) for t in truth["ranks"]}
    assert max(compute, key=compute.get) == truth["straggler"]["rank"]


def test_perfetto_lnc2_flows_and_two_hw_tracks(written):
    d, truth = written["lnc2"]
    trace = decode_pftrace((d / truth["files"]["perfetto"]).read_bytes())
    sl = slices(trace)
    hw = [s for s in sl if s["name"].startswith("nc_exec_running")]
    by_flow = defaultdict(list)
    for s in hw:
        assert len(s["flows"]) == 1
        by_flow[s["flows"][0]].append(s)
    assert len(by_flow) == truth["shape"]["ranks"] * truth["shape"]["executions"]
    for items in by_flow.values():
        assert len(items) == 2 and len({s["track"] for s in items}) == 2
        assert len({thread_label(trace, s["track"]) for s in items}) == 1  # same row name twice
        low = items[0]["args"]["device_core_idx"] // 2 * 2
        assert {s["args"]["device_core_idx"] for s in items} == {low, low + 1}
    nrt_flows = {s["flows"][0] for s in sl if s["name"] == "nrt_execute"}
    assert nrt_flows == set(by_flow)


def test_perfetto_interned_gzip_and_device_clock(written):
    d, truth = written["gzip_interned"]
    assert truth["files"]["perfetto"].endswith(".pftrace.gz")
    trace = decode_pftrace((d / truth["files"]["perfetto"]).read_bytes())
    sl = slices(trace)
    assert {"nrt_execute", "timestamp_sync_point"} <= {s["name"] for s in sl}
    d, truth = written["hw_device_clock"]
    trace = decode_pftrace((d / truth["files"]["perfetto"]).read_bytes())
    sl = slices(trace)
    hw = [s for s in sl if s["name"].startswith(("nc_exec_running", "cc_running"))]
    rt = [s for s in sl if s["name"] == "nrt_execute"]
    assert all(s["ts"] < DEVICE_MAX for s in hw) and all(s["ts"] > EPOCH_MIN for s in rt)
    starts = sorted(x["device_start_nc_ns"] for t in truth["ranks"] for x in t["executions"])
    got = sorted(s["ts"] for s in hw if s["name"].startswith("nc_exec_running"))
    assert got == starts


def test_perfetto_thread_style_zero_length_sync(written):
    d, truth = written["perfetto_thread"]
    trace = decode_pftrace((d / truth["files"]["perfetto"]).read_bytes())
    sl = slices(trace)
    sync = [s for s in sl if s["name"] == "timestamp_sync_point"]
    assert sync and all(s["type"] == 1 and s["end"] == s["ts"] for s in sync)
    assert all("worker_gid" not in s["args"] for s in sl)
    hw = [s for s in sl if s["name"] == "nc_exec_running"]
    assert all(s["depth"] >= 2 for s in hw)  # nested in the runtime stack of the same thread


# --------------------------------------------------------------------------------------------
# truth, raw capture, API
# --------------------------------------------------------------------------------------------


def test_truth_pace_and_median(written):
    clean = written["clean"][1]
    strag = written["straggler_worker"][1]
    assert clean["straggler"] is None and clean["median_pace"]["saving_fraction"] < 0.02
    assert strag["straggler"]["rank"] == 2 and strag["straggler"]["factor"] == 1.3
    assert strag["median_pace"]["saving_fraction"] > 0.1
    assert (
        strag["job"]["span_ns"] - strag["median_pace"]["span_ns"]
        == (strag["median_pace"]["saving_ns"])
    )
    for truth in (clean, strag):
        for k in range(truth["shape"]["executions"]):
            ends = {t["executions"][k]["cc_end_ns"] for t in truth["ranks"]}
            assert len(ends) == 1  # synchronous collective, no host skew
            waits = [t["executions"][k]["cc_wait_ns"] for t in truth["ranks"]]
            assert min(waits) == 0
    waits = [t["executions"][0]["cc_wait_ns"] for t in strag["ranks"]]
    assert waits[2] == 0 and statistics.median(waits) > 400_000
    skew = written["skewed_clocks"][1]
    a, b = (skew["ranks"][0], skew["ranks"][-1])
    assert b["executions"][0]["cc_end_ns"] - a["executions"][0]["cc_end_ns"] == 41_000
    assert len(set(b["clock"]["host_minus_device_per_exec_ns"])) > 1  # drift


def test_raw_capture(written):
    d, truth = written["raw_capture"]
    assert truth["raw_capture"]["expect_refusal"]
    assert not (d / "system_profile.json").exists()
    names = {Path(f).name for f in truth["files"]["raw"]}
    assert {"ntrace.pb", "trace_info.pb", "cpu_util.pb", "host_mem.pb"} <= names
    assert any(n.endswith(".neff") for n in names) and any(n.endswith(".ntff") for n in names)
    for rel in truth["files"]["raw"]:
        assert 0 < (d / rel).stat().st_size < 64
        assert re.match(r"^i-0[0-9a-f]{16}_pid_\d+/\d+/", rel)
    ntrace = next(d / f for f in truth["files"]["raw"] if f.endswith("ntrace.pb"))
    misread = decode_pftrace(ntrace.read_bytes())  # parses as protobuf, yet holds nothing
    assert misread["packets"] == 2 and not misread["tracks"] and not misread["events"]


def test_api_errors_and_flat_raw(tmp_path):
    with pytest.raises(TypeError):
        nsw.write_job(tmp_path, bogus=1)
    with pytest.raises(ValueError):
        nsw.write_job(tmp_path, layouts=("nope",))
    with pytest.raises(KeyError):
        nsw.write_scenario("nope", tmp_path)
    truth = nsw.write_job(tmp_path, layouts=("raw",), raw_layout="flat", instances=1)
    assert all(re.match(r"^i-0[0-9a-f]{16}_pid_\d+/[^/]+$", f) for f in truth["files"]["raw"])
    assert any(re.search(r"_instid_0_vnc_0\.ntff$", f) for f in truth["files"]["raw"])
    again = nsw.write_job(tmp_path / "b", layouts=("raw",), raw_layout="flat", instances=1)
    assert again["ranks"][0]["executions"] == truth["ranks"][0]["executions"]  # deterministic
    json.loads((tmp_path / "truth.json").read_text())
