"""Neuron device profiles written by the clean-room writer (tests/cleanroom/neuron_device_writer.py,
made without reading our readers): the diagnosis against the truth its simulation computed.

The writer serves one DMA queue by 16 rings whose packets overlap; the truth's savings come from
re-running the simulation without the injected cause, never from our code.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.cleanroom.neuron_device_writer import write_scenario
from tracediag.analysis.context import analyse
from tracediag.analysis.dma import queue_busy_ns, typical_bandwidth
from tracediag.engine.diagnose import diagnose
from tracediag.graph.replay import replay
from tracediag.loading.loader import load
from tracediag.model import schema as S
from tracediag.model.findings import Severity
from tracediag.whatif import dma_restore


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    """name -> (parquet path, truth) for the scenarios these tests read (written once)."""
    out = {}
    for name in ("slow_weight_dma", "clean", "straggler"):
        root = tmp_path_factory.mktemp(name)
        truth = write_scenario(name, root, formats=("parquet",))
        out[name] = (root / "profiles" / "global", truth)
    return out


def _load(jobs, name):
    path, truth = jobs[name]
    return load([path], cache=False), truth


def test_slow_weight_dma_is_named_with_the_true_saving(jobs):
    trace, truth = _load(jobs, "slow_weight_dma")
    fault = truth["findings"][0]
    d = diagnose(trace)
    top = [f for f in d.findings if f.code == "DMA101" and f.severity >= Severity.WARNING]
    assert len(top) == 1
    f = top[0]
    assert (f.track, f.layer) == (fault["queue"], f"layer_{fault['layer']}")
    assert f.evidence["tensor"] == fault["tensor"]
    assert f.ranks == tuple(fault["ranks"])
    assert abs(f.saving_ns - fault["saving_ns"]) <= 0.15 * fault["saving_ns"]


def test_a_queue_is_parallel_rings_busy_as_their_union(jobs):
    trace, truth = _load(jobs, "slow_weight_dma")
    tracks = trace.tracks[S.TRACK_NAME].astype(str)
    weights = tracks[tracks.str.startswith("qSyncDynamicHW") & (trace.tracks[S.RANK] == 0)]
    assert len(weights) == truth["dma"]["ring_count"]  # one serial track per ring
    a = analyse(trace)
    # No track chains overlapping packets: every DMA track is serial.
    dma = a.dma.sort_values(["track", "ts"])
    prev_end = (dma["ts"] + dma["dur"]).groupby(dma["track"]).shift()
    assert not (dma["ts"] < prev_end).any()
    busy = queue_busy_ns(a.dma)
    for rank, queues in truth["dma"]["queue_busy_ns"].items():
        for queue, ns in queues.items():
            assert abs(busy[(int(rank), queue)] - ns) <= 0.01 * ns, (rank, queue)


def test_each_weight_dma_takes_its_tensors_layer(jobs):
    trace, _ = _load(jobs, "slow_weight_dma")
    dma = analyse(trace).dma
    weights = dma[dma["queue"] == "qSyncDynamicHW"]
    layer_of = weights.groupby("tensor")["layer"].unique()
    for k in range(4):
        for part in ("attn", "mlp"):
            assert list(layer_of[f"layers.{k}.{part}.weight"]) == [f"layer_{k}"]


def test_replay_invariants_on_rings(jobs):
    trace, truth = _load(jobs, "slow_weight_dma")
    a = analyse(trace)
    g = a.graph
    same = replay(g)
    assert np.array_equal(same.start, g.start) and np.array_equal(same.end, g.end)
    dma = a.dma
    nodes = a.nodes_of(dma["event"].to_numpy())
    assert (g.gap[nodes] >= 0).all()  # no chain of overlapping packets
    rows = dma[dma["tensor"] == truth["findings"][0]["tensor"]]
    change = dma_restore.restore(a, rows, typical_bandwidth(dma, 32768))
    moved = replay(g, change)
    assert moved.start[g.window].min() >= g.start[g.window].min()
    removed = int((g.dur[change.dur_nodes] - change.dur_values).sum())
    saving = same.length_ns - moved.length_ns
    assert 0 < saving <= removed


def test_clean_job_has_nothing_to_flag(jobs):
    trace, _ = _load(jobs, "clean")
    d = diagnose(trace)
    assert not d.at_or_above(Severity.WARNING), [f.message for f in d.at_or_above(Severity.WARNING)]


def test_straggler_names_the_late_rank(jobs):
    trace, truth = _load(jobs, "straggler")
    fault = truth["findings"][0]
    d = diagnose(trace)
    late = [f for f in d.findings if f.code == "COL201" and f.severity >= Severity.WARNING]
    assert [f.ranks for f in late] == [(fault["rank"],)]
    # The capture holds two steps: the saving is over both (the truth's saving_total_ns).
    assert abs(late[0].saving_ns - fault["saving_total_ns"]) <= 0.15 * fault["saving_total_ns"]
