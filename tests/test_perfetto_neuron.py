"""Perfetto traces in Neuron's conventions: engine rows, DMA rows, semaphores, instruction fields
from debug annotations, inst_dep_ids edges, and system-profile ranks."""

from __future__ import annotations

import numpy as np

from tests.test_perfetto import COUNTER, TraceBuilder
from tracediag.model import schema as S
from tracediag.model.assembly import assemble
from tracediag.parsers import perfetto

T0 = 5_000_000_000


def _device_trace() -> TraceBuilder:
    b = TraceBuilder()
    b.track(1, process=(7, "Instructions [1]"))
    names = {
        10: "TensorMatrix Engine - Row 0",
        11: "Vector Engine - Row 0",
        12: "Vector Engine - Row 1",
        13: "qSyncIO0 - Row 0",
        14: "DMA Engine 64 - Row 2",
        15: "S[5] (Tensor)",
        16: "Pending DMA Count",
    }
    for uuid, name in names.items():
        b.track(uuid, name, parent=1, counter=uuid == 16)
    p = b.packet(1, sequence_flags=1)
    p.interned_data.debug_annotation_names.add(iid=1, name="id")
    b.slice(
        10, T0, 100, "MATMUL",
        annotations=[
            (1, 100), ("opcode", "MATMUL"), ("hlo_name", "%dot.1 = dot(a, b)"), ("layer", "layer_0"),
            ("hbm_read_bytes", 4096), ("hbm_write_bytes", 1024), ("evt_wait_time", 7),
            ("nki_source_location", "kernel.py:12"),
        ],
    )  # fmt: skip
    b.slice(
        11, T0 + 150, 50, None,
        annotations=[(1, 101), ("opcode", "ACTIVATE"), ("inst_dep_ids", [100])],
    )  # fmt: skip
    b.slice(
        12, T0 + 160, 30, "TENSOR_COPY",
        annotations=[(1, 102), ("inst_dep_ids", "[100, 101, 999]")],
    )  # fmt: skip
    b.slice(
        13,
        T0 + 210,
        40,
        "weights_0",
        annotations=[("transfer_size", 65536), ("inst_dep_ids", [101])],
    )
    b.slice(14, T0 + 220, 10, "act_tile")
    b.slice(15, T0 + 100, 1, "S[5]")
    for ts in (T0, T0 + 100):
        b.event(COUNTER, ts, 16).track_event.counter_value = 3
    return b


def test_engine_rows_dma_rows_and_semaphores(tmp_path):
    part = perfetto.read(_device_trace().write(tmp_path / "device_profile_model_1.pftrace"))[0]
    ev = part.events.sort_values(S.TS).reset_index(drop=True)
    got = [
        (str(n), str(k), str(label), str(kind), str(engine))
        for n, k, label, kind, engine in zip(
            ev[S.NAME], ev[S.KIND], ev["track_label"], ev["track_kind"], ev["track_engine"],
            strict=True,
        )
    ]  # fmt: skip
    assert got == [
        ("MATMUL", "compute", "tensor", "compute_engine", "tensor"),
        ("ACTIVATE", "compute", "vector", "compute_engine", "vector"),
        ("TENSOR_COPY", "compute", "vector/row1", "compute_engine", "vector"),
        ("weights_0", "dma", "qSyncIO0", "dma_queue", "dma"),
        # the engine's only slice, drawn on row 2: a serial engine is one track
        ("act_tile", "dma", "dma engine 64", "dma_queue", "dma"),
    ]
    assert part.meta.repairs == {
        "counter values (metrics, not events): not modelled": 2,
        "inst_dep_ids: id matches no instruction": 1,
        "slices on display rows of a serial engine: moved to its track": 1,
    }
    assert part.meta.info["neuron_profile"] == "device"
    # Semaphore values are state, not work: counted as the Parquet reader counts its
    # SemaphoreUpdate rows.
    assert part.meta.info["semaphore_update_count"] == 2


def test_instruction_fields_come_from_annotations(tmp_path):
    part = perfetto.read(_device_trace().write(tmp_path / "d.pftrace"))[0]
    ev = part.events.sort_values(S.TS).reset_index(drop=True)
    mm = ev.iloc[0]
    assert (mm[S.SRC_ID], mm[S.BYTES], mm[S.WAIT]) == (100, 5120.0, 7.0)
    assert (str(mm[S.OP]), str(mm[S.LAYER]), str(mm[S.SOURCE])) == (
        "%dot.1 = dot(a, b)",
        "layer_0",
        "kernel.py:12",
    )
    assert ev[S.SRC_ID].tolist() == [100, 101, 102, -1, -1]
    assert ev[S.BYTES].iloc[3] == 65536.0 and np.isnan(ev[S.BYTES].iloc[1])


def test_inst_dep_ids_become_dependency_and_trigger_edges(tmp_path):
    part = perfetto.read(_device_trace().write(tmp_path / "d.pftrace"))[0]
    names = part.events[S.NAME].astype(str).to_numpy()
    edges = {(names[s], names[d], str(k)) for s, d, k in part.edges.itertuples(index=False)}
    assert edges == {
        ("MATMUL", "ACTIVATE", "dependency"),
        ("MATMUL", "TENSOR_COPY", "dependency"),
        ("ACTIVATE", "TENSOR_COPY", "dependency"),
        ("ACTIVATE", "weights_0", "dma_trigger"),
    }
    trace = assemble([part])
    assert sorted(trace.tracks[S.TRACK_NAME]) == [
        "dma engine 64",
        "qSyncIO0",
        "tensor",
        "vector",
        "vector/row1",
    ]


def test_system_profile_tracks_give_ranks(tmp_path):
    b = TraceBuilder()
    b.track(1, process=(4242, "i-0abc-pid4242"))
    b.track(2, parent=1, thread=(4242, 11, "gid0-nc0-tid11-neuron_rt"))
    b.track(3, parent=1, thread=(4242, 12, "gid1-nc1-tid12-neuron_rt"))
    b.track(4, "gid1-nc1-tid12-neuron_hw", parent=1)
    b.slice(2, T0, 1000, "nrt_execute", annotations=[("worker_gid", 0)])
    b.slice(3, T0 + 10, 1200, "nrt_execute", annotations=[("worker_gid", 1)])
    b.slice(4, T0 + 20, 900, "nc_exec_running")
    parts = perfetto.read(b.write(tmp_path / "system_profile.pftrace"))
    assert [p.meta.rank for p in parts] == [0, 1]
    assert all(p.meta.info["rank_source"] == "worker_gid" for p in parts)
    one = parts[1].events.sort_values(S.TS)
    # nc_exec_running is the span of device work (parsers.neuron_system_work).
    assert one[S.KIND].astype(str).tolist() == ["host", "compute"]
    assert one["track_device"].astype(str).tolist() == ["nc1", "nc1"]
    assert one["track_kind"].astype(str).tolist() == ["cpu_thread", "compute_engine"]


def test_system_profile_hardware_events_move_to_the_host_clock(tmp_path):
    host0, device0 = 1_700_000_000_000_000_000, 50_000
    b = TraceBuilder()
    b.track(2, thread=(1, 11, "gid0-nc0-tid11-neuron_rt"))
    b.track(3, "gid0-nc0-tid11-neuron_hw")
    b.slice(2, host0 + 100, 5_000, "nrt_execute")
    sync = [("cpu_timestamp_ns", host0), ("nc_timestamp_ns", device0)]
    b.slice(3, device0, 1, "timestamp_sync_point", annotations=sync)
    b.slice(3, device0 + 300, 4_000, "nc_exec_running")
    later = [("cpu_timestamp_ns", host0 + 10_000_007), ("nc_timestamp_ns", device0 + 10_000_000)]
    b.slice(3, device0 + 10_000_000, 1, "timestamp_sync_point", annotations=later)
    b.slice(3, device0 + 10_000_500, 100, "cc_running")
    part = perfetto.read(b.write(tmp_path / "system_profile.pftrace"))[0]
    ts = dict(zip(part.events[S.NAME].astype(str), part.events[S.TS], strict=False))
    assert ts["nrt_execute"] == host0 + 100
    assert ts["nc_exec_running"] == host0 + 300
    assert ts["cc_running"] == host0 + 10_000_507  # moved by the later sync point
    assert part.meta.info["hardware_clock"].startswith("device, moved to host")


def test_rows_drawn_round_robin_of_a_serial_engine_are_one_track(tmp_path):
    """A profiler may draw an engine's slices on its rows round robin whether or not they
    overlap: the Tensor engine's four serial slices on rows 0-3 are one track again, the
    Vector engine's two overlapping slices keep their rows."""
    b = TraceBuilder()
    b.track(1, process=(7, "Instructions [1]"))
    for k in range(4):
        b.track(20 + k, f"TensorMatrix Engine - Row {k}", parent=1)
    b.track(30, "Vector Engine - Row 0", parent=1)
    b.track(31, "Vector Engine - Row 1", parent=1)
    for k in range(4):  # back to back, 100 ns each, one per row
        b.slice(20 + k, T0 + 100 * k, 100, "MATMUL")
    b.slice(30, T0, 300, "ACTIVATE")
    b.slice(31, T0 + 50, 100, "TENSOR_COPY")  # inside the ACTIVATE: the rows overlap
    part = perfetto.read(b.write(tmp_path / "device_profile_model_1.pftrace"))[0]
    labels = part.events.groupby("track_label", observed=True).size().to_dict()
    assert labels == {"tensor": 4, "vector": 1, "vector/row1": 1}
    assert part.meta.repairs["slices on display rows of a serial engine: moved to its track"] == 3


def test_dma_engine_tracks_take_the_queue_their_slices_name(tmp_path):
    """``DMA Engine <n>`` tracks whose transfers name their queue (``subgroup``) become that
    queue's rings, as the Parquet reader names them (``qSyncIO0/ring<n>``); a queue one engine
    serves is the queue alone; an engine serving two queues stays one serial track."""
    b = TraceBuilder()
    b.track(1, process=(7, "Instructions [1]"))
    b.track(39, "TensorMatrix Engine - Row 0", parent=1)
    for uuid, n in ((40, 3), (41, 4), (42, 5), (43, 6)):
        b.track(uuid, f"DMA Engine {n} - Row 0", parent=1)
    b.slice(39, T0 + 400, 100, "MATMUL")
    b.slice(40, T0, 100, "w", annotations=[("subgroup", "qSyncIO0"), ("transfer_size", 4096)])
    b.slice(41, T0, 100, "w", annotations=[("subgroup", "qSyncIO0"), ("transfer_size", 4096)])
    b.slice(42, T0, 100, "a", annotations=[("subgroup", "qSyncIO1"), ("transfer_size", 4096)])
    for t, q in ((T0, "qSyncIO2"), (T0 + 200, "qSyncIO3")):
        b.slice(43, t, 100, "x", annotations=[("subgroup", q), ("transfer_size", 4096)])
    part = perfetto.read(b.write(tmp_path / "device_profile_model_1.pftrace"))[0]
    labels = part.events.groupby("track_label", observed=True).size().to_dict()
    assert labels == {
        "tensor": 1, "qSyncIO0/ring3": 1, "qSyncIO0/ring4": 1, "qSyncIO1": 1, "dma engine 6": 2,
    }  # fmt: skip
