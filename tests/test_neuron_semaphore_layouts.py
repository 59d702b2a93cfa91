"""Semaphore edges from the layouts issue 15 names: the Parquet DMA ``semaphore_id`` column (a
DMA completing a transfer is the producer of the waits on its semaphore) and the Perfetto
device trace (semaphore tracks ``S[n] (owner)`` with one instant per update, operands and
``semaphore_id`` as debug annotations), read with the same rules as the Parquet tables.

Fixtures: small profiles written here by hand with the reference's field names, and the
clean-room writer's ``pipeline_1f1b*_semaphores`` presets, whose Parquet tables are rewritten
here as a Perfetto device trace in the screenshots' naming (the writer has no Perfetto device
format)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.cleanroom.neuron_device_writer import write_scenario
from tests.neuron_fixtures import METADATA, write_table
from tests.test_perfetto import BEGIN, END, INSTANT, TraceBuilder
from tracediag.model import schema as S
from tracediag.parsers import neuron_parquet, perfetto
from tracediag.parsers.protos.perfetto_trace_pb2 import Trace

# Two transfers on qSyncIO0 (semaphore S[4]), two packets each; the second transfer's last
# packet (id 4) ends at 2000, when S[4] reaches 2.
PACKETS = {
    "start_ts": [100, 150, 900, 1200], "end_ts": [400, 500, 1500, 2000],
    "duration_ns": [300, 350, 600, 800], "id": [1, 2, 3, 4], "packet_aggregation_id": [70, 70, 71, 71],
    "engine_idx": [0, 1, 0, 1], "transfer_bytes": [32768] * 4, "queue_name": ["qSyncIO0"] * 4,
    "queue_type": ["input"] * 4, "variable": ["x", "x", "y", "y"],
}  # fmt: skip
BLOCKS = {
    "start_ts": [100, 900], "end_ts": [500, 2000], "duration_ns": [400, 1100], "id": [70, 71],
    "queue_name": ["qSyncIO0"] * 2, "transfer_bytes": [65536] * 2,
    "semaphore_id": ["S[4] (qSyncIO0)"] * 2,
}  # fmt: skip
INSTRUCTIONS = {
    "start_ts": [2100, 2200, 600, 2300], "end_ts": [2150, 2250, 700, 2350],
    "duration_ns": [50, 50, 100, 50], "engine": ["Tensor", "Vector", "Scalar", "Sync"],
    "opcode": ["MATMUL", "TENSOR_TENSOR", "ACTIVATE", "NOP"], "id": [11, 12, 13, 14],
    "operands": ["", "S[4] (Vector)>=1 wait", "", ""],  # 12: another owner's S[4]
    "compiler_operands": ["$S[4]>=2 op=x", "", "$S[4]>=1", "$S[4]>=3"],
}  # fmt: skip
UPDATES = {
    "timestamp": [500, 2000], "id": ["S[4] (qSyncIO0)"] * 2, "value": [1, 2],
    "update_source": ["AXI", "AXI"],
}  # fmt: skip


def _profile(root: Path, with_updates: bool) -> Path:
    d = root / "rank_0"
    for name, table in (
        ("Metadata", METADATA), ("Instruction", INSTRUCTIONS), ("DmaPacket", PACKETS),
        ("DmaPacketAggregated", BLOCKS), ("SemaphoreUpdate", UPDATES if with_updates else None),
    ):  # fmt: skip
        if table is not None:
            write_table(d, name, table)
    return d


def _semaphore_edges(part, t0: int = 0, waiters=None) -> set[tuple]:
    """(producer kind, producer end - t0, waiter name) of the dependency edges into the
    ``waiters`` (instructions as (start - t0, name); None: every dependency edge)."""
    ev, e = part.events, part.edges
    dep = e[e[S.EDGE_KIND].astype(str) == "dependency"]
    src, dst = dep[S.SRC].to_numpy(), dep[S.DST].to_numpy()
    end = ev[S.TS].to_numpy() + ev[S.DUR].to_numpy() - t0
    start, name = ev[S.TS].to_numpy() - t0, ev[S.NAME].astype(str).to_numpy()
    return {
        (str(ev[S.KIND].iat[s]), int(end[s]), name[d])
        for s, d in zip(src, dst, strict=True)
        if waiters is None or (int(start[d]), name[d]) in waiters
    }


# The expected edges, from the fixture above (not from the reader): MATMUL's S[4]>=2 held
# from 2000 (packet 4); ACTIVATE's S[4]>=1 from 500 (packet 2, the first transfer's last);
# NOP's S[4]>=3 never; TENSOR_TENSOR waits on the Vector's S[4], which no DMA updates.
EXPECTED = {("dma", 2000, "MATMUL"), ("dma", 500, "ACTIVATE")}


@pytest.mark.parametrize("with_updates", [True, False], ids=["SemaphoreUpdate", "counted"])
def test_a_dma_block_semaphore_makes_its_last_packet_the_producer(tmp_path, with_updates):
    (part,) = neuron_parquet.read(_profile(tmp_path, with_updates))
    assert _semaphore_edges(part) == EXPECTED
    assert part.meta.info["semaphore_waits"] == {"read": 4, "edges": 2, "unexplained": 2}


def _device_trace(path: Path, instr, dma, cc, updates) -> Path:
    """A Perfetto device trace of Parquet-shaped tables, as the screenshots show it: tracks
    ``<Engine> Engine - Row <k>``, ``<queue> - Row <k>``, ``CC Stream <n> - Row <k>`` (rows
    hold overlapping slices), ``S[n] (owner)`` tracks with one instant per update; the fields
    as debug annotations."""
    b = TraceBuilder()
    b.track(1, process=(1, "Instructions [1]"))
    uuids: dict[str, int] = {}

    def track(name):
        if name not in uuids:
            uuids[name] = 10 + len(uuids)
            b.track(uuids[name], name, parent=1)
        return uuids[name]

    busy: dict[str, list[int]] = {}
    packets = []
    for base, frame, name_col, fields in (
        (instr["timeline_track"] + " Engine", instr, "opcode", ("id", "opcode", *TEXTS)),
        (dma["queue_name"], dma, "variable", ("id", "transfer_bytes", "semaphore_id")),
        ("CC Stream " + cc["stream_id"].astype(str), cc, "operation", CC_FIELDS),
    ):
        order = np.argsort(frame["start_ts"].to_numpy(), kind="stable")
        for i in order:  # a loop over a small fixture's rows
            r = frame.iloc[i]
            start, end = int(r["start_ts"]), int(r["end_ts"])
            ends = busy.setdefault(base.iat[i], [])
            row = next((k for k, e in enumerate(ends) if e <= start), len(ends))
            if row == len(ends):
                ends.append(end)
            ends[row] = end
            uuid = track(f"{base.iat[i]} - Row {row}")
            ann = [(f, _plain(r[f])) for f in fields if f in r and pd.notna(r[f]) and r[f] != ""]
            packets.append((start, 1, uuid, BEGIN, str(r[name_col]), ann))
            packets.append((end, 0, uuid, END, None, []))
    for r in updates.itertuples(index=False):
        ann = [("value", int(r.value)), ("update_source", str(r.update_source))]
        packets.append((int(r.timestamp), 2, track(str(r.id)), INSTANT, "sem_inc", ann))
    for ts, _, uuid, kind, name, ann in sorted(packets, key=lambda p: p[:2]):
        b.event(kind, ts, uuid, name, annotations=ann)
    return b.write(path)


TEXTS = ("operands", "compiler_operands", "instruction_chain")
CC_FIELDS = ("operation", "op_id", "stream_id", "replica_group", "trigger_start_ts", "input_size")


def _plain(value):
    return value.item() if isinstance(value, np.generic) else value


def test_a_perfetto_trace_of_the_same_tables_gives_the_same_edges(tmp_path):
    instr = pd.DataFrame(INSTRUCTIONS).assign(
        timeline_track=["TensorMatrix", "Vector", "Scalar", "Sync"]
    )
    dma = pd.DataFrame(BLOCKS).assign(variable=["x", "y"])
    cc = pd.DataFrame({"start_ts": [], "end_ts": [], "stream_id": [], "operation": []})
    path = _device_trace(tmp_path / "rank_0.pftrace", instr, dma, cc, pd.DataFrame(UPDATES))
    (part,) = perfetto.read(path)
    # One slice per transfer (its block): the producers' ends are the blocks' ends.
    assert _semaphore_edges(part) == EXPECTED
    assert part.meta.info["semaphore_waits"] == {"read": 4, "edges": 2, "unexplained": 2}


def test_perfetto_instants_without_values_count_as_increments(tmp_path):
    instr = pd.DataFrame(INSTRUCTIONS).assign(
        timeline_track=["TensorMatrix", "Vector", "Scalar", "Sync"]
    )
    dma = pd.DataFrame(BLOCKS).assign(variable=["x", "y"])
    cc = pd.DataFrame({"start_ts": [], "end_ts": [], "stream_id": [], "operation": []})
    b_path = _device_trace(tmp_path / "d.pftrace", instr, dma, cc, pd.DataFrame(UPDATES))
    trace = Trace()
    trace.ParseFromString(b_path.read_bytes())
    for p in trace.packet:  # the screenshot shows no argument on a semaphore instant
        if p.HasField("track_event") and p.track_event.type == INSTANT:
            del p.track_event.debug_annotations[:]
    b_path.write_bytes(trace.SerializeToString())
    (part,) = perfetto.read(b_path)
    assert _semaphore_edges(part) == EXPECTED


def _tables(directory: Path) -> dict[str, pd.DataFrame]:
    def read(name):
        files = sorted(directory.glob(f"{name}*.parquet"))
        return pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)

    return {n: read(n) for n in ("Instruction", "DmaPacketAggregated", "CcOp", "SemaphoreUpdate")}


@pytest.fixture(
    scope="module", params=["pipeline_1f1b_semaphores", "pipeline_1f1b_slow_stage_semaphores"]
)
def preset(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(request.param)
    truth = write_scenario(request.param, root, formats=("parquet",))
    out = {}
    for rank, rel in truth["files"]["parquet"].items():
        t = _tables(root / rel)
        path = _device_trace(
            root / f"rank_{rank}.pftrace", t["Instruction"], t["DmaPacketAggregated"],
            t["CcOp"], t["SemaphoreUpdate"],
        )  # fmt: skip
        out[int(rank)] = (root / rel, path, t)
    return out


def test_a_preset_as_perfetto_gives_the_parquet_semaphore_edges(preset, tmp_path):
    for rank, (parquet_dir, pftrace, tables) in preset.items():
        # Without its Flow table the profile's other dependency edges are few; the ones into
        # waiting instructions are the semaphore reader's.
        bare = tmp_path / f"rank_{rank}"
        bare.mkdir()
        for f in parquet_dir.iterdir():
            if not f.name.startswith("Flow"):
                (bare / f.name).symlink_to(f)
        (pq_part,) = neuron_parquet.read(bare)
        (pf_part,) = perfetto.read(pftrace)
        # The writer's waits are collective completions: the instructions naming a `>=`
        # condition, found here with pandas, are what both readers read.
        ins = tables["Instruction"]
        waiting = np.zeros(len(ins), dtype=bool)
        for c in ("operands", "compiler_operands"):
            waiting |= ins[c].fillna("").str.contains(r"S\[\d+\](?: \([^)]*\))?>=").to_numpy()
        t0 = int(ins["start_ts"].min())
        waiters = set(zip((ins["start_ts"] - t0)[waiting], ins["opcode"][waiting], strict=True))
        waits = pq_part.meta.info["semaphore_waits"]
        assert waits["read"] == int(waiting.sum()) and waits["edges"] > 0, rank
        assert pf_part.meta.info["semaphore_waits"] == waits, rank
        got = {
            fmt: _semaphore_edges(part, int(part.events[S.TS].min()), waiters)
            for fmt, part in (("parquet", pq_part), ("perfetto", pf_part))
        }
        assert got["perfetto"] == got["parquet"], rank
        assert len(got["parquet"]) == waits["edges"], rank
        # The waits are on collective completions, all 25 of rank 2 of
        # pipeline_1f1b_semaphores among them: a PSEUDO_TRIGGER_COLLECTIVE's `S[15]++@complete`
        # counts when the collective it triggered completes, not when the trigger ends.
        assert {k for k, _, _ in got["parquet"]} == {"collective"}, rank
        if rank == 2 and (174_097 - t0, "IOTA") in waiters:  # profile times, not from t0
            # Hand-checked: TENSOR_REDUCE and IOTA start at 174,097 waiting on $S[15]>=18, set
            # then by the CollectivePermute ending at 174,097 (the next trigger, 173,977-174,065,
            # only completes later).
            cc = tables["CcOp"]
            ended = cc[cc["end_ts"] == 174_097]
            assert list(ended["operation"]) == ["CollectivePermute"]
            t_pq = int(pq_part.events[S.TS].min())
            at = {(k, e + t_pq, n) for k, e, n in got["parquet"] if n in ("IOTA", "TENSOR_REDUCE")}
            assert {("collective", 174_097, "IOTA"), ("collective", 174_097, "TENSOR_REDUCE")} <= at
