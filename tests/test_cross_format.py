"""The same generated scenario read from Parquet, legacy JSON and Perfetto (device traces alone,
and joined with the system trace) gives the same findings: the same (code, ranks) at warning
and above, and what-if savings within 1% of each other."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tracediag.engine.diagnose import diagnose
from tracediag.generator import generate
from tracediag.generator.write_perfetto import rows_of
from tracediag.loading.loader import load
from tracediag.model.findings import Severity

RANKS = 4
SCENARIOS = ("slow_dma", "straggler", "mixed", "clean")


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    root = tmp_path_factory.mktemp("cross")
    made = {}
    for scenario in SCENARIOS:
        out = root / scenario
        generate(scenario, out, formats=("parquet", "json", "perfetto"), ranks=RANKS, seed=1)
        made[scenario] = out
    return made


def _inputs(out: Path) -> dict[str, list[Path]]:
    devices = sorted((out / "perfetto").glob("rank_*.pftrace"))
    return {
        "parquet": [out / "parquet"],
        "json": [out / "json"],
        "perfetto": devices,
        "perfetto+system": [*devices, out / "perfetto" / "system_profile.pftrace"],
    }


def _findings(paths: list[Path]) -> dict[tuple, int]:
    """(code, ranks) -> what-if saving of every finding at warning or above."""
    d = diagnose(load(paths))
    return {(f.code, f.ranks): f.saving_ns for f in d.findings if f.severity >= Severity.WARNING}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_same_findings_in_every_format(jobs, scenario):
    got = {fmt: _findings(paths) for fmt, paths in _inputs(jobs[scenario]).items()}
    reference = got["parquet"]
    if scenario == "clean":
        assert reference == {}
    else:
        assert reference, "the fault must be found"
    for fmt, findings in got.items():
        assert findings.keys() == reference.keys(), fmt
        for key, saving in findings.items():
            assert saving == pytest.approx(reference[key], rel=0.01, abs=1_000), (fmt, key)


def test_joined_trace_keeps_device_times_relative(jobs):
    """Joining moves every device event of a rank by one offset: durations and gaps stay."""
    paths = _inputs(jobs["straggler"])
    alone = load(paths["perfetto"], align=False)
    joined = load(paths["perfetto+system"], align=False)
    for rank in range(RANKS):
        a = alone.events[alone.events["rank"] == rank]
        j = joined.events[(joined.events["rank"] == rank) & (joined.events["kind"] != "host")]
        j = j[j["kind"] != "marker"]
        shift = joined.meta[rank].info["device_to_host_clock_ns"]
        assert sorted(j["ts_ns"] - shift) == sorted(a["ts_ns"])
        assert joined.meta[rank].info["device_host_join"] == "timestamp_sync_point"


def test_perfetto_device_traces_carry_what_the_legacy_json_carries(jobs):
    """Instructions, DMA transfers (bytes, triggers) and collectives (matched across ranks,
    with their trigger times as arrivals) survive the Perfetto device trace."""
    paths = _inputs(jobs["mixed"])
    legacy = load(paths["json"], align=False)
    traced = load(paths["perfetto"], align=False)
    for t in (legacy, traced):
        t.events["kind"] = t.events["kind"].astype(str)
    counts = [t.events.groupby(["rank", "kind"]).size().to_dict() for t in (legacy, traced)]
    assert counts[0] == counts[1]
    assert counts[1][(0, "compute")] > 200 and counts[1][(3, "collective")] == 4
    sums = [t.events.groupby("kind")[["bytes", "flops", "wait_ns"]].sum() for t in (legacy, traced)]
    pd.testing.assert_frame_equal(sums[0], sums[1])
    edges = [t.edges["kind"].astype(str).value_counts().to_dict() for t in (legacy, traced)]
    # The operand text names semaphore waits ($S[15]>=1 on each collective trigger), read as
    # dependency edges from both (parsers/neuron_semaphores.py, perfetto_semaphores.py).
    semaphore = sum(legacy.meta[r].info["semaphore_waits"]["edges"] for r in legacy.ranks)
    assert semaphore == 4 * 3  # per rank: triggers 2-4 wait for the first one's increment
    assert all(traced.meta[r].info["semaphore_waits"] == legacy.meta[r].info["semaphore_waits"]
               for r in legacy.ranks)  # fmt: skip
    assert edges[0] == edges[1] and edges[1]["dma_trigger"] == 4 * 14
    cols = ["match_key", "op", "group", "seq", "bytes", "arrival_ns", "start_ns", "end_ns"]
    pd.testing.assert_frame_equal(legacy.collectives[cols], traced.collectives[cols])
    assert (traced.collectives["arrival_ns"] < traced.collectives["start_ns"]).all()


def test_overlapping_slices_go_to_further_rows():
    track = np.array([0, 0, 0, 1, 0])
    start = np.array([0, 5, 12, 0, 20])
    end = np.array([10, 15, 14, 100, 30])
    # [5,15) overlaps [0,10): row 1; [12,14) overlaps [5,15) in the first pass: row 2 (rows
    # are found one pass at a time: never overlapping, not necessarily the fewest).
    row = rows_of(track, start, end)
    assert row.tolist() == [0, 1, 2, 0, 0]
    for key in set(zip(track, row, strict=True)):
        mine = (track == key[0]) & (row == key[1])
        order = np.argsort(start[mine])
        assert (start[mine][order][1:] >= end[mine][order][:-1]).all()
