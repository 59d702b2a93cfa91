"""The Chrome flavour's layer annotations: record_function ranges named like the device layers."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tracediag.generator import generate
from tracediag.generator.chrome_sync import call_ids
from tracediag.generator.gpu_flavour import run_gpu
from tracediag.generator.program import WorkloadShape
from tracediag.generator.scenarios import scenario_faults
from tracediag.generator.simulate import run_device
from tracediag.loading.loader import load
from tracediag.model import schema as S

RANKS = 2
SEED = 3
LAYERS = {"layer_0", "layer_1", "layer_2", "layer_3", "loss", "optimizer"}
WORK_PER_RANK = 228  # kernels, memcpys and NCCL kernels of one step (4 layers)


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    made = {}

    def get(scenario: str) -> tuple[Path, dict, dict[int, str]]:
        """Output, truth, and the program layer of every CUDA call / GPU work by correlation."""
        if scenario not in made:
            out = tmp_path_factory.mktemp(scenario)
            truth = generate(scenario, out, ("chrome",), RANKS, SEED)
            faults = scenario_faults(scenario, RANKS, truth["layers"])
            gpu = run_gpu(run_device(WorkloadShape(), faults, RANKS, SEED), faults, SEED)
            node = call_ids(gpu).node
            launched = np.flatnonzero((node >= 0) & (gpu.origin >= 0))
            layer_of = dict(zip(node[launched].tolist(), gpu.layer[launched], strict=True))
            made[scenario] = (out, truth, layer_of)
        return made[scenario]

    return get


def _events(out: Path, rank: int) -> pd.DataFrame:
    doc = json.loads(gzip.decompress((out / "chrome" / f"rank_{rank}.json.gz").read_bytes()))
    x = pd.DataFrame(doc["traceEvents"])
    x = x[x["ph"] == "X"].reset_index(drop=True)
    x = pd.concat([x.drop(columns="args"), pd.DataFrame(list(x["args"]))], axis=1)
    x["ts"] = np.round(x["ts"] * 1000).astype(np.int64)  # ns
    x["end"] = x["ts"] + np.round(x["dur"] * 1000).astype(np.int64)
    return x


def _layer_ranges(x: pd.DataFrame) -> pd.DataFrame:
    ann = x[x["cat"] == "user_annotation"]
    return ann[~ann["name"].str.startswith("ProfilerStep")].sort_values("ts")


def _enclosing_range(ranges: pd.DataFrame, ts: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Name of the layer range holding each interval whole (None where none does)."""
    k = np.searchsorted(ranges["ts"].to_numpy(), ts, side="right") - 1
    kk = np.maximum(k, 0)
    inside = (k >= 0) & (end <= ranges["end"].to_numpy()[kk])
    return np.where(inside, ranges["name"].to_numpy()[kk], None)


@pytest.mark.parametrize("scenario", ["mixed", "host_gaps"])
def test_every_launching_op_sits_in_the_range_of_its_layer(jobs, scenario):
    out, _, layer_of = jobs(scenario)
    for rank in range(RANKS):
        x = _events(out, rank)
        ranges = _layer_ranges(x)
        assert set(ranges["name"]) == LAYERS
        # As record_function writes them: complete events on the CPU thread with their own ids.
        assert (ranges["pid"] == ranges["tid"]).all() and (ranges["ph"] == "X").all()
        ops = x[x["cat"] == "cpu_op"]
        assert ranges["External id"].is_unique
        assert not set(ranges["External id"]) & set(x["External id"].drop(ranges.index))
        # Ranges follow one another inside the profiled step, never overlapping.
        step = x[x["name"].str.startswith("ProfilerStep")].iloc[0]
        assert (ranges["ts"].to_numpy()[1:] >= ranges["end"].to_numpy()[:-1]).all()
        assert ranges["ts"].min() >= step["ts"] and ranges["end"].max() <= step["end"]
        # The device layers repeat: the next layer's weight prefetch runs between two ranges.
        assert (ranges["name"] == "layer_1").sum() == 4
        work = x[x["cat"].isin(["kernel", "gpu_memcpy"])]
        op = ops.drop_duplicates("External id").set_index("External id").loc[work["External id"]]
        got = _enclosing_range(ranges, op["ts"].to_numpy(), op["end"].to_numpy())
        want = work["correlation"].map(layer_of).to_numpy()
        assert len(work) == WORK_PER_RANK and (got == want).all()
        # Every host op is in a range; the final synchronisation is in none.
        assert pd.notna(_enclosing_range(ranges, ops["ts"].to_numpy(), ops["end"].to_numpy())).all()
        sync = x[x["name"] == "cudaDeviceSynchronize"]
        assert _enclosing_range(ranges, sync["ts"].to_numpy(), sync["end"].to_numpy())[0] is None


def test_a_host_stall_sits_in_the_range_of_the_layer_it_delays(jobs):
    out, truth, _ = jobs("host_gaps")
    x = _events(out, 0)  # rank 0's clock is the truth windows' clock
    ops = x[x["cat"] == "cpu_op"].sort_values("ts")
    gap_start, gap_end = ops["end"].to_numpy()[:-1], ops["ts"].to_numpy()[1:]
    found = []
    for fault in truth["chrome"]["faults"]:
        lo, hi = fault["window_ns"]
        stall = fault["params"]["stall_ns"]
        gap = np.flatnonzero((gap_end - gap_start >= stall) & (gap_start < hi) & (gap_end > lo))
        assert len(gap) == 1
        ranges = _layer_ranges(x)
        found.append(_enclosing_range(ranges, gap_start[gap], gap_end[gap])[0])
    assert found == [f["layers"][0] for f in truth["chrome"]["faults"]] == ["layer_1", "layer_2"]


@pytest.mark.parametrize("scenario", ["slow_dma", "host_gaps"])
def test_the_reader_gives_gpu_work_and_launch_calls_their_program_layer(jobs, scenario):
    out, _, layer_of = jobs(scenario)
    ev = load([out / "chrome"]).events
    kind = ev[S.KIND].astype(str).to_numpy()
    layer = S.strings(ev[S.LAYER])
    work = np.isin(kind, ["compute", "dma", "collective"])
    calls = np.isin(ev[S.NAME].astype(str), ["cudaLaunchKernel", "cudaMemcpyAsync"])
    for rows in (work, calls):
        want = pd.Series(ev[S.SRC_ID].to_numpy()[rows]).map(layer_of).to_numpy()
        assert rows.sum() == WORK_PER_RANK * RANKS and (layer[rows] == want).all()
    assert set(layer[work]) == LAYERS
