"""CMP304 and NUM703 on the clean-room 1F1B preset: the writer's truth lists only the pipeline
bubble, but its tables really repeat transposes and reload spills, read here with pandas.

Per rank (one attention layer per stage, 8 microbatches), the writer's Instruction table holds
8 tensor-engine TRANSPOSEs of one weight tile (``src=bf16@0x5d00``, 128*128, moving 512), all
after the layer's weights finished loading, and no DMA writes that address: 7 of the 8
transpose data the kernel already transposed. Its HBM reads are mostly spill reloads: 24
reload triggers of 256 KiB (``spill_reload_bytes``, on the SpillReload queues) of 9-9.5 MiB.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import tracediag
from tests.cleanroom.neuron_device_writer import write_scenario


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    root = tmp_path_factory.mktemp("p1f1b")
    truth = write_scenario("pipeline_1f1b", root, formats=("parquet",))
    dirs = {int(r): root / rel for r, rel in truth["files"]["parquet"].items()}
    diagnosis = tracediag.load([str(p) for p in dirs.values()], cache=False).diagnose()
    return dirs, truth, diagnosis


def _instructions(d) -> pd.DataFrame:
    return pd.concat(
        [pd.read_parquet(p) for p in sorted(d.glob("Instruction_*.parquet"))], ignore_index=True
    )


def test_the_tables_repeat_each_ranks_weight_transpose(written):
    dirs, truth, diagnosis = written
    assert truth["expected_findings"] == ["pipeline_bubble"]
    repeats = 0
    for d in dirs.values():
        inst = _instructions(d)
        t = inst[inst["tensor_instruction_type"].astype(str) == "TRANSPOSE"]
        assert len(t) == 8
        assert set(t["operands"].str.extract(r"src=\w+@(0x[0-9a-f]+)")[0]) == {"0x5d00"}
        assert t["operands"].str.strip().str.endswith("128*128").all()
        dma = pd.read_parquet(d / "DmaPacketAggregated.parquet")
        weights = dma[dma["variable"].astype(str).str.endswith("attn.weight")]
        assert weights["end_ts"].max() < t["start_ts"].min()
        assert len(weights) == 4  # the layer's weights load once in the step, in 4 blocks
        # No transfer writes the address the transposes read: its data never changes.
        assert not dma["write_offset"].astype(str).str.contains("0x5d00").any()
        repeats += len(t) - 1
    (f,) = [f for f in diagnosis.findings if f.code == "CMP304"]
    # The rule compares transposes within a step; with the writer's ExecutionInfo spans right
    # (they once began after rank 0's first transpose, leaving it in no step: 27) all 28.
    assert repeats == 28 and f.evidence["repeats"] == 28
    assert f.ranks == (0, 1, 2, 3) and 0 < f.saving_ns <= f.impact_ns


def test_the_tables_reload_spills_for_most_of_the_hbm_reads(written):
    dirs, _, diagnosis = written
    (f,) = [f for f in diagnosis.findings if f.code == "NUM703"]
    for r, d in dirs.items():
        inst = _instructions(d)
        reload = float(inst["spill_reload_bytes"].sum())
        hbm = float(inst["hbm_read_bytes"].sum())
        assert reload == 24 * 256 * 1024
        assert (inst["spill_reload_bytes"] > 0).sum() == 24
        assert reload / hbm > 0.6  # far above NUM703's 25% threshold
        dma = pd.read_parquet(d / "DmaPacketAggregated.parquet")
        spill = dma["queue_name"].astype(str).str.contains("SpillReload")
        assert dma.loc[spill, "transfer_bytes"].sum() == 8 * 1024 * 1024
        mine = f.evidence["by_rank"][str(r)]
        assert mine["spill_reload_bytes"] == reload
        assert mine["hbm_read_bytes"] == hbm
        assert mine["reload_pct"] == pytest.approx(100 * reload / hbm, abs=0.01)
    assert f.evidence["reload_dmas"] == 512
    assert np.isfinite(f.saving_ns) and 0 < f.saving_ns <= f.impact_ns
