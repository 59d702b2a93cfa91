"""Neuron system profiles (JSON, Explorer Parquet, Perfetto) and their join with device profiles."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pandas as pd
import pytest

from tracediag.cli.main import main
from tracediag.generator import generate
from tracediag.generator.clocks import device_offsets
from tracediag.generator.write_system_profile import HOST_EPOCH_NS
from tracediag.loading.loader import discover, load
from tracediag.model.errors import TraceInputError
from tracediag.parsers import neuron_system_json, neuron_system_parquet, perfetto

RANKS, SEED = 4, 2


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("system") / "job"
    generate("straggler", out, formats=("parquet", "perfetto", "system"), ranks=RANKS, seed=SEED)
    return out


def _json(job: Path) -> Path:
    return job / "system_json" / "system_profile.json"


def _host_view(parts) -> pd.DataFrame:
    """rank, name, ts, dur of every event, in a stable order."""
    frames = [
        p.events[["name", "ts_ns", "dur_ns", "kind", "track_label"]].assign(rank=p.meta.rank)
        for p in parts
    ]
    out = pd.concat(frames, ignore_index=True).astype(
        {"name": str, "kind": str, "track_label": str}
    )
    return out.sort_values(["rank", "ts_ns", "name"], ignore_index=True)


def test_json_fields_and_ranks_from_worker_gid(job):
    path = _json(job)
    assert neuron_system_json.sniff(path)
    assert [r.FORMAT for _, r in discover([path])[0]] == ["neuron-system-json"]
    parts = neuron_system_json.read(path)
    assert [p.meta.rank for p in parts] == [0, 1, 2, 3]
    doc = orjson.loads(path.read_bytes())
    assert isinstance(doc["trace_events"][0]["process_id"], str)  # coerced on reading
    view = _host_view(parts)
    rank2 = view[view["rank"] == 2].set_index("name")
    written = pd.DataFrame(doc["trace_events"], dtype=object)  # exact ns
    written = written[written["worker_gid"] == 2].set_index("name")
    # Runtime calls: host events on the worker's runtime thread, times as written (host clock).
    for call in ("nrt_tensor_write", "nrt_execute", "nrt_tensor_read"):
        assert rank2.at[call, "kind"] == "host"
        assert rank2.at[call, "track_label"] == "gid2-nc2-tid52002-neuron_rt"
        assert rank2.at[call, "ts_ns"] == written.at[call, "timestamp"] > HOST_EPOCH_NS - 10**6
        assert rank2.at[call, "dur_ns"] == written.at[call, "duration"]
    # Hardware events, moved from the NeuronCore clock with the sync point: the execution is
    # device work cut at its collectives (pieces before, between and after them).
    sync = written.loc["timestamp_sync_point"]
    shift = sync["cpu_timestamp_ns"] - sync["nc_timestamp_ns"]
    pieces = rank2.loc[["nc_exec_running"]].sort_values("ts_ns")
    assert set(pieces["kind"]) == {"compute"}
    assert pieces["ts_ns"].iat[0] == written.at["nc_exec_running", "timestamp"] + shift
    end = written.at["nc_exec_running", "timestamp"] + written.at["nc_exec_running", "duration"]
    assert (pieces["ts_ns"] + pieces["dur_ns"]).iat[-1] == end + shift
    assert len(pieces) == 1 + (written.index == "cc_running").sum()
    assert parts[2].meta.info["clock_sync_points"] == [
        [2, int(sync["nc_timestamp_ns"]), int(sync["cpu_timestamp_ns"])]
    ]
    assert parts[0].meta.info["cpu_util_samples"] == 1


def test_parquet_and_perfetto_system_profiles_read_the_same_events(job):
    directory = job / "system_parquet"
    assert neuron_system_parquet.sniff(directory)
    assert [r.FORMAT for _, r in discover([directory])[0]] == ["neuron-system-parquet"]
    from_json = _host_view(neuron_system_json.read(_json(job)))
    from_parquet = neuron_system_parquet.read(directory)
    from_perfetto = perfetto.read(job / "perfetto" / "system_profile.pftrace")
    pd.testing.assert_frame_equal(_host_view(from_parquet), from_json)
    pd.testing.assert_frame_equal(_host_view(from_perfetto), from_json)
    # The input copy and the execution share a flow_id: one flow edge per worker.
    first = from_parquet[0]
    (edge,) = first.edges[first.edges["kind"] == "flow"].itertuples(index=False)
    names = first.events["name"].astype(str).to_numpy()
    assert (names[edge.src], names[edge.dst], edge.kind) == (
        "nrt_tensor_write",
        "nrt_execute",
        "flow",
    )


@pytest.mark.parametrize(
    "system",
    ["system_json/system_profile.json", "system_parquet", "perfetto/system_profile.pftrace"],
)
def test_join_moves_the_device_onto_the_known_host_clock(job, system):
    """Device clock = true + device offset, host clock = true + HOST_EPOCH_NS: the join must
    shift every device event by exactly the difference."""
    device = load([job / "parquet"], align=False)
    joined = load([job / "parquet", job / system], align=False)
    offsets = device_offsets(RANKS, SEED)
    for rank in range(RANKS):
        info = joined.meta[rank].info
        assert info["device_host_join"] == "timestamp_sync_point"
        assert info["device_to_host_clock_ns"] == HOST_EPOCH_NS - int(offsets[rank])
        ev = joined.events[joined.events["rank"] == rank]
        dev = ev[ev["kind"].astype(str).isin(["compute", "dma", "collective"])]
        before = device.events[device.events["rank"] == rank]
        assert np.array_equal(
            np.sort(dev["ts_ns"].to_numpy()),
            np.sort(before["ts_ns"].to_numpy() + info["device_to_host_clock_ns"]),
        )
        # The input copy launches the execution: host -> first device event.
        launch = joined.edges[joined.edges["kind"] == "launch"]
        mine = launch[joined.events["rank"].to_numpy()[launch["dst"]] == rank]
        (src, dst) = mine[["src", "dst"]].to_numpy()[0]
        assert str(joined.events.at[src, "name"]) == "nrt_tensor_write"
        assert joined.events.at[dst, "ts_ns"] == dev["ts_ns"].min()
        assert len(joined.meta[rank].sources) == 2


def test_join_without_sync_points_matches_the_execution(job, tmp_path):
    """A profile whose hardware events are already on the host clock and has no sync point:
    the execution (nc_exec_running) is matched to the device profile's span."""
    doc = orjson.loads(_json(job).read_bytes())
    events = []
    for e in doc["trace_events"]:
        if e["name"] == "timestamp_sync_point":
            shift = {e["worker_gid"]: e["cpu_timestamp_ns"] - e["nc_timestamp_ns"]}
            doc.setdefault("_shift", {}).update(shift)
    for e in doc["trace_events"]:
        if e["name"] == "timestamp_sync_point":
            continue
        if e["type"] == "neuron_hw":
            e = e | {"timestamp": e["timestamp"] + doc["_shift"][e["worker_gid"]]}
        events.append(e)
    path = tmp_path / "system_profile.json"
    path.write_bytes(orjson.dumps({"trace_events": events}))
    joined = load([job / "parquet", path], align=False)
    offsets = device_offsets(RANKS, SEED)
    for rank in range(RANKS):
        info = joined.meta[rank].info
        assert info["device_host_join"] == "execution match"
        assert info["device_to_host_clock_ns"] == HOST_EPOCH_NS - int(offsets[rank])


def _one_line(capsys) -> str:
    """The error line (progress lines may precede it): exactly one."""
    lines = [x for x in capsys.readouterr().err.splitlines() if "error" in x]
    assert len(lines) == 1
    return lines[0]


def test_corrupt_json_exits_2_with_one_line(job, tmp_path, capsys):
    data = _json(job).read_bytes()
    cut = tmp_path / "system_profile.json"
    cut.write_bytes(data[: len(data) // 2])
    assert main(["report", str(cut)]) == 2
    line = _one_line(capsys)
    assert line.startswith(f"tracediag: error: {cut}: invalid JSON at byte ")
    bad = tmp_path / "bad_field.json"
    doc = orjson.loads(data)
    doc["trace_events"][3]["timestamp"] = "soon"
    bad.write_bytes(orjson.dumps(doc))
    assert main(["report", str(bad)]) == 2
    assert _one_line(capsys) == (
        f"tracediag: error: {bad}: event 3: field 'start_ts' is not an integer ('soon')"
    )
    with pytest.raises(TraceInputError, match="'trace_events' is not a list"):
        neuron_system_json.read(_write(tmp_path / "x.json", b'{"trace_events": {"a": 1}}'))


def test_corrupt_parquet_exits_2_with_one_line(job, tmp_path, capsys):
    directory = tmp_path / "system"
    directory.mkdir()
    data = (job / "system_parquet" / "SystemProfileEvents.parquet").read_bytes()
    table = _write(directory / "SystemProfileEvents.parquet", data[:40] + b"\0" * 64 + data[104:])
    assert main(["report", str(directory)]) == 2
    assert _one_line(capsys).startswith(f"tracediag: error: {table}: ")


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_events_without_worker_gid_take_their_process_worker(tmp_path):
    events = [
        {"name": "nrt_execute", "timestamp": 1000, "duration": 50, "process_id": "7",
         "thread_id": 8, "lnc_idx": 1, "type": "neuron_rt", "worker_gid": 5},
        {"name": "train_step", "timestamp": 900, "duration": 300, "process_id": 7,
         "thread_id": 8, "type": "framework"},
        {"name": "stray", "timestamp": 950, "duration": 5, "process_id": "99", "thread_id": 1,
         "type": "framework"},
        {"name": "nc_exec_running", "timestamp": 1010, "duration": 30, "process_id": "7",
         "thread_id": 8, "group": "nrt-nc-001", "type": "neuron_hw", "worker_gid": 5},
    ]  # fmt: skip
    path = _write(tmp_path / "system_profile.json", orjson.dumps({"trace_events": events}))
    (part,) = neuron_system_json.read(path)
    # The rank is the worker's global id (worker_gid 5), as a device profile names it.
    assert part.meta.rank == 5
    assert part.meta.info["worker_gid_of_rank"] == [5]
    assert part.meta.repairs == {"events without worker_gid (nor a process with one): skipped": 1}
    ev = part.events.assign(name=part.events["name"].astype(str)).set_index("name")
    assert ev.at["train_step", "kind"] == "host"
    assert ev.at["train_step", "track_label"] == "gid5-nc?-tid8-framework"
    # No sync point: the hardware event keeps its time (it cannot be moved); without a
    # collective the execution is one span of device work.
    assert (ev.at["nc_exec_running", "kind"], ev.at["nc_exec_running", "ts_ns"]) == (
        "compute",
        1010,
    )
    assert ev.at["nc_exec_running", "dur_ns"] == 30
    assert ev.at["nc_exec_running", "track_label"] == "nc_exec_running"
