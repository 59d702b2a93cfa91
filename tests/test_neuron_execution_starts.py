"""Execution starts that fall while the core runs are moved to where it starts running.

The clean-room writer (``tests/cleanroom/neuron_device_writer``, from the reference alone) once
wrote ``ExecutionInfo`` starts ~10 µs inside the executions (its profile start subtracted
twice); the reader's snap (:func:`snap_to_idle`) guards against such files, tested on hand-built
spans below. On the writer's ``straggler`` preset without ``Flow`` nothing but the execution
edge ties an execution to the previous one's end: COL201 must price both steps (110,855 ns),
not one (56,516 ns before the edge).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

import tracediag
from tests.cleanroom import neuron_device_writer as device_writer
from tracediag.model import schema as S
from tracediag.parsers.neuron_executions import snap_to_idle


@pytest.fixture(scope="module")
def straggler_without_flow(tmp_path_factory):
    root = tmp_path_factory.mktemp("straggler")
    truth = device_writer.write_scenario("straggler", root, formats=("parquet",))
    for f in root.rglob("*.parquet"):
        if f.name.lower().startswith("flow"):
            f.unlink()
    return root, truth, tracediag.load(str(root / "profiles" / "global"), cache=False)


def test_col201_saving_carries_into_the_next_execution(straggler_without_flow):
    _, truth, job = straggler_without_flow
    want = truth["findings"][0]["saving_total_ns"]  # 110,855 ns over both steps (simulated)
    found = [f for f in tracediag.diagnose(job).findings if f.code == "COL201"]
    best = max(found, key=lambda f: f.saving_ns)
    assert best.ranks == (truth["findings"][0]["rank"],)
    assert abs(best.saving_ns - want) <= 0.05 * want
    assert best.severity.name == "ERROR"


def test_used_starts_are_the_true_starts(straggler_without_flow):
    root, truth, job = straggler_without_flow
    clock = truth["time"]["clock_offset_ns"]
    for rank, rel in truth["files"]["parquet"].items():
        first = pq.read_table(root / rel / "Metadata.parquet").column("first_hw_timestamp")[0]
        stated = pq.read_table(root / rel / "ExecutionInfo.parquet").column("execution_start_ts")
        moved = job.meta[int(rank)].info.get("execution_starts_moved_ns", [0] * len(stated))
        true = [x["start_true_ns"][rank] + clock[rank] for x in truth["executions"]["simulated"]]
        got = [first.as_py() + s.as_py() + d for s, d in zip(stated, moved, strict=True)]
        # No instruction lies between the start used and the true one: each falls in its
        # execution, and starts stated right are not moved.
        starts = np.sort(pq.read_table(root / rel / "Instruction.parquet").column("start_ts"))
        between = np.searchsorted(starts, np.maximum(got, true)) - np.searchsorted(
            starts, np.minimum(got, true)
        )
        assert between.tolist() == [0] * len(true), (rank, got, true)
        assert moved == [0] * len(true), (rank, moved)


def _instr(rows):
    return pd.DataFrame(rows, columns=["start_ts", "duration_ns", "engine", "pc"]).astype(
        {"start_ts": "Int64", "duration_ns": "Int64", "pc": "Int64"}
    )


# Two executions of a two-engine program: the core idles 700-1000 (the host gap) and 250-300
# inside the second (Tensor waiting for a DMA); pc restarts at 1000.
ROWS = [
    (0, 200, "Sync", 0), (100, 300, "Tensor", 0), (400, 300, "Tensor", 1),
    (1000, 250, "Sync", 0), (1100, 150, "Tensor", 0), (1300, 200, "Tensor", 1),
]  # fmt: skip


def test_starts_that_agree_with_the_program_counters_stay():
    meta = S.RankMeta(rank=0)
    spans = (np.array([0, 900]), np.array([700, 1500]), np.array([0.0, 1.0]))
    assert snap_to_idle(spans, _instr(ROWS), meta) is spans
    assert "execution_starts_moved_ns" not in meta.info


def test_starts_inside_a_run_move_to_the_program_counters_restart():
    # Stated 40 ns and 280 ns late: past the first instructions, and past the short idle time.
    meta = S.RankMeta(rank=0)
    spans = (np.array([40, 1280]), np.array([740, 1780]), np.array([0.0, 1.0]))
    starts, ends, _ = snap_to_idle(spans, _instr(ROWS), meta)
    assert starts.tolist() == [0, 1000] and ends.tolist() == [700, 1500]
    assert meta.info["execution_starts_moved_ns"] == [-40, -280]
