"""Legacy JSON: each DMA transfer's trigger from the triggers' bytes and queue order.

The legacy JSON names no trigger. The clean-room writer (``tests/cleanroom/neuron_device_writer``,
written from the reference alone) writes the same simulated run as Parquet, whose ``Flow``
``DGE_TRIGGER`` rows name every transfer's trigger: read here straight from the Parquet files,
they are the expected edges; the expected DMA101 saving is the writer's re-simulation. The small
hand-built profiles check the rules one at a time (back-to-back triggers of two queues, a busy
queue whose last transfer starts after the next trigger, a trigger without bytes).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

import tracediag
from tests.cleanroom import neuron_device_writer as device_writer
from tracediag.model import schema as S


@pytest.fixture(scope="module")
def slow_weight_dma(tmp_path_factory):
    """The preset in both formats; its truth; the JSON job."""
    root = tmp_path_factory.mktemp("slow_weight_dma")
    truth = device_writer.write_scenario("slow_weight_dma", root, formats=("json", "parquet"))
    return root, truth, tracediag.load(str(root / "json"), cache=False)


def _flow_triggers(profile) -> pd.DataFrame:
    """Per data packet of a Parquet profile (start, duration, bytes, variable relative to the
    first instruction): the start of the instruction its Flow ``DGE_TRIGGER`` row names."""
    read = lambda name: pq.read_table(profile / f"{name}.parquet").to_pandas()  # noqa: E731
    flow, instr = read("Flow"), read("Instruction")
    packets, blocks = read("DmaPacket"), read("DmaPacketAggregated")
    flow = flow[flow["dependency_type"] == "DGE_TRIGGER"]
    start = instr.set_index("id")["start_ts"]
    by_block = pd.Series(start.reindex(flow["in_id"]).to_numpy(), index=flow["out_id"].to_numpy())
    data = packets[packets["queue_type"] != "instruction"]
    base = instr["start_ts"].min()
    trig = by_block.reindex(data["packet_aggregation_id"]).to_numpy()
    assert np.isin(data["packet_aggregation_id"], blocks["id"]).all()
    return pd.DataFrame(
        {
            "ts": data["start_ts"].to_numpy() - base,
            "dur": data["duration_ns"].to_numpy(),
            "bytes": data["transfer_bytes"].to_numpy(dtype=np.float64),
            "name": data["variable"].astype(str).to_numpy(),
            "trigger": trig - base,
        }
    )


def _json_triggers(job, rank) -> pd.DataFrame:
    """The same per packet from the JSON job's ``dma_trigger`` edges."""
    ev, e = job.events, job.edges
    e = e[e[S.EDGE_KIND].astype(str) == "dma_trigger"]
    dst, src = ev.loc[e[S.DST].to_numpy()], ev.loc[e[S.SRC].to_numpy()]
    mine = (dst["rank"] == rank).to_numpy()
    base = ev.loc[(ev["rank"] == rank) & (ev["kind"].astype(str) != "dma"), S.TS].min()
    return pd.DataFrame(
        {
            "ts": dst[S.TS].to_numpy()[mine] - base,
            "dur": dst[S.DUR].to_numpy()[mine],
            "bytes": dst["bytes"].to_numpy(dtype=np.float64)[mine],
            "name": dst["name"].astype(str).to_numpy()[mine],
            "found": src[S.TS].to_numpy()[mine] - base,
        }
    )


@pytest.mark.parametrize("rank", [0, 1])
def test_every_data_transfer_gets_the_trigger_flow_names(slow_weight_dma, rank):
    root, truth, job = slow_weight_dma
    want = _flow_triggers(root / truth["files"]["parquet"][str(rank)])
    got = _json_triggers(job, rank)
    key = ["ts", "dur", "bytes", "name"]
    both = want.merge(got.drop_duplicates(), on=key, how="left")
    assert len(both) == len(want) == 460  # 16 weight loads x 4 blocks x 6 packets, 64 spill, 12 I/O
    assert both["found"].notna().all(), "a data packet without a trigger edge"
    wrong = both[both["found"] != both["trigger"]]
    assert wrong.empty, wrong.head().to_string()
    # The slow layer-2 MLP weight blocks, which start after the next weight trigger ended.
    slow = both[both["name"] == truth["findings"][0]["tensor"]]
    assert len(slow) == 8 * 6 and (slow["found"] == slow["trigger"]).all()
    info = job.meta[rank].info
    assert info["dma_triggers_by_bytes"] == 82  # 64 weight, 12 + 4 spill, 2 I/O transfers
    assert info["dma_trigger_queue_ambiguous"] == 0
    assert info["dma_triggers_inferred"] == 16  # the instruction queue's 16 transfers, by time


def test_dma101_saving_matches_the_simulation(slow_weight_dma):
    _, truth, job = slow_weight_dma
    want = truth["findings"][0]["saving_ns"]  # 32,830 ns: the writer's re-simulation
    found = [f for f in tracediag.diagnose(job).findings if f.code == "DMA101"]
    best = max(found, key=lambda f: f.saving_ns)
    assert best.ranks == (0, 1)
    assert abs(best.saving_ns - want) <= 0.05 * want
    # No DMA104 warning from transfers given to the wrong trigger (the Parquet has none).
    assert not [
        f for f in tracediag.diagnose(job).findings if f.code == "DMA104" and f.severity.value >= 2
    ]


# ---------------------------------------------------------------------------- hand-built
def _write(tmp_path, instructions, dma):
    rows = [
        {"timestamp": ts, "duration": dur, "subgroup": eng, "label": eng, "opcode": op,
         "id": i, "hbm_read_bytes": nbytes, "hbm_write_bytes": 0}
        for i, (ts, dur, eng, op, nbytes) in enumerate(instructions)
    ]  # fmt: skip
    packets = [
        {"timestamp": ts, "duration": dur, "subgroup": q, "transfer_size": n, "block_id": b,
         "engine_idx": ring, "queue_type": "data", "variable": q}
        for ts, dur, q, n, b, ring in dma
    ]  # fmt: skip
    # A compute instruction keeps the profile's span wider than the triggers alone.
    rows.append({"timestamp": 0, "duration": 50_000, "subgroup": "Tensor", "label": "Tensor",
                 "opcode": "MATMUL", "id": len(rows)})  # fmt: skip
    path = tmp_path / "profile_rank_0.json"
    path.write_text(json.dumps({"instruction": rows, "dma": packets}))
    return tracediag.load(str(path), cache=False)


def _trigger_of(job) -> dict[str, list[int]]:
    """Queue -> the trigger start per transfer, in start order."""
    ev, e = job.events, job.edges
    e = e[e[S.EDGE_KIND].astype(str) == "dma_trigger"]
    d, s = ev.loc[e[S.DST].to_numpy()], ev.loc[e[S.SRC].to_numpy()]
    frame = pd.DataFrame({"q": d["name"].astype(str).to_numpy(), "ts": d[S.TS].to_numpy(),
                          "trig": s[S.TS].to_numpy()}).drop_duplicates()  # fmt: skip
    frame = frame.sort_values(["q", "ts"]).drop_duplicates(["q", "ts"])
    return {q: g["trig"].tolist() for q, g in frame.groupby("q")}


def test_back_to_back_triggers_of_two_queues(tmp_path):
    # Sync issues a spill reload (256 KiB) and then a weight load (2 x 384 KiB) 60 ns apart;
    # both queues start after both triggers ended, so time alone gives both to the second.
    job = _write(
        tmp_path,
        [(1000, 60, "Sync", "WRITE", 262_144), (1060, 60, "Sync", "WRITE", 786_432)],
        [(2000, 2500, "qSyncSpillReload0", 262_144, 0, 8),
         (2060, 2800, "qSyncDynamicHW", 393_216, 0, 0),
         (2070, 2900, "qSyncDynamicHW", 393_216, 1, 1)],
    )  # fmt: skip
    assert _trigger_of(job) == {
        "qSyncSpillReload0": [1000],
        "qSyncDynamicHW": [1060, 1060],
    }
    assert job.meta[0].info["dma_triggers_by_bytes"] == 3


def test_busy_queue_keeps_its_trigger_order(tmp_path):
    # Two weight loads of 2 x 384 KiB; the first load's second block is slow to start (a busy
    # queue) and begins after the second trigger ended: it still uses the first trigger's bytes.
    job = _write(
        tmp_path,
        [(1000, 60, "Sync", "WRITE", 786_432), (5000, 60, "Sync", "WRITE", 786_432)],
        [(2000, 4000, "qSyncDynamicHW", 393_216, 0, 0),
         (5500, 3000, "qSyncDynamicHW", 393_216, 1, 1),
         (6100, 3000, "qSyncDynamicHW", 393_216, 2, 2),
         (6200, 3000, "qSyncDynamicHW", 393_216, 3, 3)],
    )  # fmt: skip
    assert _trigger_of(job) == {"qSyncDynamicHW": [1000, 1000, 5000, 5000]}


def test_trigger_without_bytes_falls_back_to_time(tmp_path):
    # No byte fields on the trigger: the transfer goes to the last Sync trigger ending before
    # it, counted as inferred by time.
    job = _write(
        tmp_path,
        [(1000, 60, "Sync", "WRITE", 0), (1500, 60, "Sync", "WRITE", 0)],
        [(2000, 2500, "qSyncSpillReload0", 262_144, 0, 8)],
    )  # fmt: skip
    assert _trigger_of(job) == {"qSyncSpillReload0": [1500]}
    info = job.meta[0].info
    assert info["dma_triggers_by_bytes"] == 0 and info["dma_triggers_inferred"] == 1


def _write_rows(tmp_path, triggers, dma):
    """A legacy JSON of the documented DMA row only (queue, transfer_size, times): no block id,
    no ring; triggers without byte fields."""
    rows = [
        {"timestamp": ts, "duration": dur, "subgroup": "Sync", "opcode": "DMA_TRIGGER", "id": i,
         "nki_source_location": f"model.py:{40 + i}", "hbm_read_bytes": 0}
        for i, (ts, dur) in enumerate(triggers)
    ]  # fmt: skip
    rows.append({"timestamp": 0, "duration": 50_000, "subgroup": "Tensor", "opcode": "MATMUL",
                 "id": len(rows)})  # fmt: skip
    packets = [
        {"timestamp": ts, "duration": dur, "subgroup": q, "transfer_size": n, "variable": q}
        for ts, dur, q, n in dma
    ]
    path = tmp_path / "profile_rank_0.json"
    path.write_text(json.dumps({"instruction": rows, "dma": packets}))
    return tracediag.load(str(path), cache=False)


def test_rows_without_blocks_take_their_triggers_in_issue_order(tmp_path):
    # Four 200 ns triggers back to back, each transfer issued 300 ns after its trigger ends: the
    # next trigger has ended before each transfer starts, so time alone gives each transfer the
    # one after its own (the first three) - issue order gives each its own.
    triggers = [(1000 + 200 * k, 200) for k in range(4)]
    dma = [(1500 + 200 * k, 10_000, "qSyncIO0", 1_600_000) for k in range(4)]
    job = _write_rows(tmp_path, triggers, dma)
    assert _trigger_of(job) == {"qSyncIO0": [1000, 1200, 1400, 1600]}
    info = job.meta[0].info
    assert info["dma_transfers_from_rows"] == 4
    assert info["dma_triggers_by_order"] == 4 and info["dma_triggers_inferred"] == 0


def test_rows_without_blocks_fall_back_to_time_when_counts_differ(tmp_path):
    # Two triggers, three transfers: no one-to-one order, each transfer takes the last trigger
    # ended by its start (1000 ends at 1200, 1300 at 1500).
    job = _write_rows(
        tmp_path,
        [(1000, 200), (1300, 200)],
        [(1250, 1000, "qSyncIO0", 65_536), (1600, 1000, "qSyncIO0", 65_536),
         (1700, 1000, "qSyncIO0", 65_536)],
    )  # fmt: skip
    assert _trigger_of(job) == {"qSyncIO0": [1000, 1300, 1300]}
    info = job.meta[0].info
    assert info["dma_triggers_by_order"] == 0 and info["dma_triggers_inferred"] == 3
