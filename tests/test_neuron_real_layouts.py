"""Neuron profiles as the profiler really writes them, from the clean-room writers.

The fixtures come from ``tests/cleanroom/neuron_system_writer.py`` and
``neuron_device_writer.py``, written from the reference pages without reading our readers; the
expected ranks, times and the straggler are the writers' own truth (their simulation), never
values computed by the code under test.
"""

from __future__ import annotations

import json

import numpy as np
import orjson
import pytest

import tracediag
from tests.cleanroom import neuron_device_writer as device_writer
from tests.cleanroom import neuron_system_writer as system_writer
from tracediag.loading.loader import discover
from tracediag.model.errors import TraceInputError
from tracediag.parsers import (
    neuron_json,
    neuron_system_capture,
    neuron_system_json,
    neuron_system_runtime,
    perfetto,
)

#: The writer's thread styles without worker_gid (the older ``Thread <tid>`` traces).
OLD_THREAD_STYLES = ("thread", "thread_literal")
#: Clocks aligned within 2 µs (the bar of issue 15).
TOLERANCE_NS = 2_000
SYSTEM_SCENARIOS = (
    "clean",
    "straggler_worker",
    "lnc2",
    "legacy_trace_events",
    "lnc2_extra_attrs",
    "perfetto_gid_nrt",
    "perfetto_nrt",
    "perfetto_thread",
    "hw_device_clock",
    "skewed_clocks",
    "one_process_per_instance",
    "pid_collision",
    "gzip_interned",
)


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """Every system scenario, written once: name -> (directory, truth)."""
    root = tmp_path_factory.mktemp("neuron_system")
    return {n: (root / n, system_writer.write_scenario(n, root / n)) for n in SYSTEM_SCENARIOS}


def _inputs(directory, truth) -> dict:
    return {
        "system_json": directory / truth["files"]["system_json"],
        "runtime_json": directory / "runtime_trace",
        "perfetto": directory / truth["files"]["perfetto"],
    }


def _starts(job, rank: int, name: str) -> np.ndarray:
    ev = job.events
    sel = (ev["rank"] == rank) & (ev["name"].astype(str) == name)
    return np.sort(ev.loc[sel, "ts_ns"].to_numpy(dtype=np.int64))


def _named_rank(truth, layout: str) -> dict[int, int]:
    """Per truth rank, the rank the layout names it by: its ``worker_gid`` where the layout
    carries one (Perfetto's annotations, except the old ``Thread <tid>`` traces), else the
    writer's rank in worker order. The documentation calls ``worker_gid`` the global id of the
    NeuronCore worker, the rank the device profiles (``profile_rank_<i>``) are named by, so it
    is kept as the rank, not renumbered (this writer's gids 0, 1, 32, 33 are not dense)."""
    gid = layout == "perfetto" and truth["params"]["thread_style"] not in OLD_THREAD_STYLES
    return {r["rank"]: (r["worker_gid"] if gid else r["rank"]) for r in truth["ranks"]}


def _check_ranks_and_clocks(job, truth, layout: str) -> None:
    """Each truth rank's executions at its own rank, on rank 0's host clock within 2 µs."""
    named = _named_rank(truth, layout)
    assert job.ranks == [named[r["rank"]] for r in truth["ranks"]]
    skew0 = truth["ranks"][0]["host_skew_ns"]
    for r in truth["ranks"]:
        back = skew0 - r["host_skew_ns"]  # the truth is on each instance's own host clock
        want = np.array([x["nrt_execute_start_ns"] + back for x in r["executions"]])
        got = _starts(job, named[r["rank"]], "nrt_execute")
        np.testing.assert_allclose(got, want, atol=TOLERANCE_NS)
        _check_executions(job, r, named[r["rank"]], back)


def _check_executions(job, r: dict, rank: int, back: int) -> None:
    """Each execution's ``nc_exec_running`` is device work cut at its collective: per physical
    core a piece from the device start to the collective's start and one from its end to the
    device end (LNC>1: one execution per physical core)."""
    ev = job.events
    sel = (ev["rank"] == rank) & (ev["name"].astype(str) == "nc_exec_running")
    assert set(ev.loc[sel, "kind"].astype(str)) == {"compute"}
    start = ev.loc[sel, "ts_ns"].to_numpy(dtype=np.int64)
    end = start + ev.loc[sel, "dur_ns"].to_numpy(dtype=np.int64)
    cores = len(r["device_core_idx"])
    assert len(start) == 2 * cores * len(r["executions"])
    for x in r["executions"]:
        mine = (start >= x["nrt_execute_start_ns"] + back) & (end <= x["nrt_execute_end_ns"] + back)
        assert mine.sum() == 2 * cores
        got = [start[mine].min(), np.sort(end[mine])[0], end[mine].max()]
        want = [x[k] + back for k in ("device_start_ns", "cc_start_ns", "device_end_ns")]
        np.testing.assert_allclose(got, want, atol=TOLERANCE_NS)


@pytest.mark.parametrize("layout", ["system_json", "runtime_json", "perfetto"])
@pytest.mark.parametrize("name", SYSTEM_SCENARIOS)
def test_system_profiles_load_with_the_truths_ranks_and_clocks(written, name, layout):
    directory, truth = written[name]
    path = _inputs(directory, truth)[layout]
    _check_ranks_and_clocks(tracediag.load(str(path)), truth, layout)


def test_layouts_are_told_apart_by_their_readers(written):
    directory, truth = written["clean"]
    paths = _inputs(directory, truth)
    assert neuron_system_json.sniff(paths["system_json"])  # trace_event, no worker_gid
    assert neuron_system_runtime.sniff(paths["runtime_json"])
    assert perfetto.sniff(paths["perfetto"])
    legacy_dir, legacy = written["legacy_trace_events"]
    assert neuron_system_json.sniff(legacy_dir / legacy["files"]["system_json"])


def test_ranks_without_worker_gid_come_from_instance_process_and_core(written):
    directory, truth = written["one_process_per_instance"]
    (path,) = [_inputs(directory, truth)["system_json"]]
    parts = neuron_system_json.read(path)
    assert [p.meta.rank for p in parts] == [0, 1, 2, 3]
    assert parts[0].meta.info["rank_source"] == "instance_id/process_id/nc_idx"
    # Two workers share a process here: nc_idx tells them apart, in device_core_idx order.
    doc = json.loads(path.read_text())
    assert "worker_gid" not in doc["trace_event"][0]


def test_perfetto_ranks_are_the_worker_gids(written):
    directory, truth = written["clean"]
    parts = perfetto.read(_inputs(directory, truth)["perfetto"])
    gids = [r["worker_gid"] for r in truth["ranks"]]
    assert gids == [0, 1, 32, 33]
    assert [p.meta.rank for p in parts] == gids
    assert parts[0].meta.info["worker_gid_of_rank"] == gids
    labels = {str(x) for x in parts[3].events["track_label"].unique()}
    assert truth["ranks"][3]["perfetto_tracks"]["rt"] in labels


def test_neff_path_names_and_lnc2_rows(written):
    directory, truth = written["clean"]
    parts = perfetto.read(_inputs(directory, truth)["perfetto"])
    names = set(parts[0].events["name"].astype(str))
    assert "nc_exec_running" in names and not any(n.endswith(".neff") for n in names)
    assert parts[0].meta.info["neff_paths"] == [truth["ranks"][0]["model_name"]]
    lnc_dir, lnc = written["lnc2"]
    part = neuron_system_json.read(_inputs(lnc_dir, lnc)["system_json"])[1]
    ev = part.events[part.events["name"].astype(str) == "nc_exec_running"]
    # One execution per physical core (device_core_idx 2 and 3 of worker 1), each on its own
    # track named by the core's order on the worker (alike on every rank), each cut in two
    # pieces of device work at the execution's collective.
    assert sorted(ev["track_label"].astype(str).unique()) == [
        "nc_exec_running",
        "nc_exec_running pcore1",
    ]
    assert len(ev) == 2 * 2 * len(lnc["ranks"][1]["executions"])
    assert len(part.meta.info["execution_spans_ns"]) == 2 * len(lnc["ranks"][1]["executions"])


def test_device_clock_hardware_is_moved_with_rt_track_sync_points(written):
    directory, truth = written["hw_device_clock"]
    parts = perfetto.read(_inputs(directory, truth)["perfetto"])
    info = parts[0].meta.info
    assert info["hardware_clock"] == "device, moved to host with timestamp_sync_point"
    point = truth["ranks"][0]["executions"][0]["sync_point"]
    assert [0, point["nc_timestamp_ns"], point["cpu_timestamp_ns"]] in info["clock_sync_points"]


def test_device_memory_samples(written):
    directory, truth = written["straggler_worker"]
    parts = neuron_system_json.read(_inputs(directory, truth)["system_json"])
    info = parts[0].meta.info
    assert info["device_mem_usage_samples"] == sum(m["samples"] for m in truth["memory"])
    assert info["device_dram_spill_bytes_max"] == truth["straggler"]["dram_spill_bytes"]


@pytest.mark.parametrize("layout", ["system_json", "perfetto"])
def test_straggler_found_with_its_saving(written, layout):
    directory, truth = written["straggler_worker"]
    job = tracediag.load(str(_inputs(directory, truth)[layout]))
    found = tracediag.diagnose(job).findings_df
    col201 = found[found["code"] == "COL201"]
    assert list(col201["ranks"].iloc[0]) == [_named_rank(truth, layout)[truth["straggler"]["rank"]]]
    saving = float(col201["saving_ns"].iloc[0])
    # The replay's saving against the writer's re-simulation at the median pace.
    assert (
        0.5 * truth["median_pace"]["saving_ns"] <= saving <= 1.5 * truth["median_pace"]["saving_ns"]
    )


def test_raw_capture_is_refused_with_the_command(tmp_path):
    truth = system_writer.write_scenario("raw_capture", tmp_path / "raw")
    ntrace = tmp_path / "raw" / next(f for f in truth["files"]["raw"] if f.endswith("ntrace.pb"))
    assert neuron_system_capture.sniff(ntrace) and neuron_system_capture.sniff(ntrace.parent)
    [(_, reader)] = discover([ntrace])[0]
    assert reader is neuron_system_capture  # not Perfetto, which found "no slices"
    with pytest.raises(TraceInputError) as err:
        tracediag.load(str(ntrace.parent))
    text = str(err.value)
    assert "\n" not in text and str(ntrace.parent) in text
    assert "neuron-explorer view -d" in text


# ---- legacy device JSON ------------------------------------------------------------------


@pytest.fixture(scope="module")
def device_json(tmp_path_factory):
    root = tmp_path_factory.mktemp("neuron_device_json")
    truth = device_writer.write_scenario(
        "tp_exposed_allreduce", root, formats=("json",), json_wrong_neff_ranks=()
    )
    return root, truth


def test_legacy_json_reads_cc_ops_metadata_and_both_dma_queue_keys(device_json):
    root, truth = device_json
    parts = [neuron_json.read(root / truth["files"]["json"][r])[0] for r in ("0", "1")]
    for r, part in enumerate(parts):
        doc = orjson.loads((root / truth["files"]["json"][str(r)]).read_bytes())
        assert len(part.collectives) == len(doc["cc_ops"])
        assert "cc_trigger" in doc["cc_ops"][0]
        md = doc["metadata"][0]
        assert (
            part.meta.info["graph_total_ns"] == md["last_hw_timestamp"] - md["first_hw_timestamp"]
        )
        assert part.meta.info["profile_neff_path"] == doc["profile_info"][0]["neff_path"]
        assert set(part.meta.info["active_time_ns"]) >= {"tensor", "cc_instruction"}
        assert set(part.meta.info["layer_time_ns"]) == {
            row["layer"] for row in doc["layer_summary"]
        }
        key = "dma_queue" if r == 0 else "subgroup"  # the "alternate" variant
        assert key in doc["dma"][0]
        queues = {str(q).split("/")[0] for q in part.events["track_label"].unique()}
        assert {row[key] for row in doc["dma"]} <= queues


def test_cc_trigger_is_optional(device_json, tmp_path):
    """Back-to-back collectives carry no ``cc_trigger``: the op is read, arriving at its start."""
    root, truth = device_json
    doc = orjson.loads((root / truth["files"]["json"]["0"]).read_bytes())
    first = doc["cc_ops"][0]
    for row in doc["cc_ops"]:
        row.pop("cc_trigger", None)
        row.pop("cc_trigger_start_delay", None)
    path = tmp_path / "profile_rank_0.json"
    path.write_bytes(orjson.dumps(doc))
    (part,) = neuron_json.read(path)
    assert len(part.collectives) == len(doc["cc_ops"])
    row = part.collectives.sort_values("start_ns").iloc[0]
    assert row["arrival_ns"] == row["start_ns"] == first["timestamp"]


def test_profile_info_only_file_says_it_was_viewed_without_its_neff(tmp_path):
    truth = device_writer.write_scenario(
        "clean", tmp_path, formats=("json",), json_wrong_neff_ranks=(1,)
    )
    path = tmp_path / truth["files"]["json"]["1"]
    assert neuron_json.sniff(path)
    with pytest.raises(TraceInputError) as err:
        tracediag.load(str(path))
    text = str(err.value)
    assert str(path) in text and "without its NEFF" in text and "\n" not in text


def test_profile_relative_device_trace_joins_at_its_execution(written):
    """The device trace's times start near 0 while sync points are on the NeuronCore clock
    (~1.4e11 ns): two time bases. The join must not use the sync points for it."""
    directory, truth = written["clean"]
    device = directory / truth["files"]["device_profile"]
    job = tracediag.load([str(directory / truth["files"]["perfetto"]), str(device)])
    info = job.meta[0].info
    assert info["device_host_join"] == "execution match"
    # Device-profile time t is host time zero_host_ns + t (the writer's truth).
    assert abs(info["device_to_host_clock_ns"] - truth["device_profile"]["zero_host_ns"]) <= (
        TOLERANCE_NS
    )
