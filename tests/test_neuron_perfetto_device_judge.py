"""Neuron Perfetto device traces as the profiler writes them (issue 15's judge, layout
``perfetto_device``): one small fixture per fix, built packet by packet from what the reference
shows (shared/reference/neuron-real-output.md, neuron-formats.md section 3, the device and CC-op
screenshots), read through the public reader and checked on real numbers."""

from __future__ import annotations

import numpy as np

from tests.test_perfetto import INSTANT, TraceBuilder
from tracediag.model import schema as S
from tracediag.parsers import perfetto

T0 = 1_000  # profile-relative device time (the screenshots' slices start near 0)


class Device:
    """One ``Instructions`` process per rank: thread tracks named as the screenshots show them
    (``thread_name``, or the TrackDescriptor's ``name`` with ``named=True``)."""

    def __init__(self, b: TraceBuilder | None = None):
        self.b = b or TraceBuilder()
        self.uuids: dict[tuple[int, str], int] = {}

    def process(self, pid: int, seq: int = 1) -> None:
        self.b.track(1000 * pid + 1, process=(pid, "Instructions"), seq=seq)

    def track(self, pid: int, name: str, named: bool = False, seq: int = 1) -> int:
        key = (pid, name)
        if key not in self.uuids:
            uuid = 1000 * pid + 2 + len(self.uuids)
            self.uuids[key] = uuid
            thread = (pid, uuid, "" if named else name)
            self.b.track(uuid, name if named else "", 1000 * pid + 1, thread=thread, seq=seq)
        return self.uuids[key]

    def slice(self, pid, track, ts, dur, name, annotations=(), seq: int = 1):
        self.b.slice(self.track(pid, track, seq=seq), ts, dur, name, seq, annotations)

    def instant(self, pid, track, ts, name, annotations=(), seq: int = 1):
        self.b.event(INSTANT, ts, self.track(pid, track, seq=seq), name, seq, annotations)


def _edges(part, kind: str) -> set[tuple[str, str]]:
    """(source name, destination name) of the part's edges of ``kind``."""
    ev, e = part.events, part.edges
    e = e[e[S.EDGE_KIND].astype(str) == kind]
    name = ev[S.NAME].astype(str).to_numpy()
    return set(zip(name[e[S.SRC].to_numpy()], name[e[S.DST].to_numpy()], strict=True))


def _load_step(dev: Device, pid: int, t: int, value: int = 1, seq: int = 1) -> None:
    """One step: a Sync DMA_TRIGGER, its weight DMA on ``qSyncIO0`` (the legacy JSON row keys
    only; its completion sets the queue's semaphore to ``value``), the matmul waiting for that
    value, then the collective's trigger."""
    dma_ns = 2_000
    dev.slice(
        pid,
        "Sync Engine - Row 0",
        t,
        200,
        "DMA_TRIGGER",
        [("opcode", "DMA_TRIGGER"), ("pc", 0), ("operands", "queue=qSyncIO0")],
        seq,
    )
    s = t + 500
    dev.slice(pid, "qSyncIO0 - Row 0", s, dma_ns, "weight_0",
              [("subgroup", "qSyncIO0"), ("transfer_size", 320_000), ("timestamp", s),
               ("duration", dma_ns)], seq)  # fmt: skip
    dev.instant(pid, "S[10] (qSyncIO0)", s + dma_ns, "S[10] (qSyncIO0)",
                [("value", value), ("update_source", "qSyncIO0")], seq)  # fmt: skip
    m = s + dma_ns + 100
    dev.slice(pid, "TensorMatrix Engine - Row 0", m, 30_000, "MATMUL",
              [("opcode", "MATMUL"), ("pc", 64),
               ("operands", f"S[10] (qSyncIO0)>={value} acc_flags=3")], seq)  # fmt: skip
    dev.slice(pid, "GpSimd Engine - Row 0", m + 30_000, 150, "PSEUDO_TRIGGER_COLLECTIVE",
              [("opcode", "PSEUDO_TRIGGER_COLLECTIVE"), ("pc", 128),
               ("operands", "ctype=ALL_REDUCE stream_id=0")], seq)  # fmt: skip


def test_dma_slices_with_legacy_keys_only_load_and_get_their_trigger_and_consumer(tmp_path):
    """The DMA slice carries the legacy JSON row keys only (no semaphore_id, no trigger): the
    load used to stop with an IndexError. Now its trigger is the Sync DMA_TRIGGER (the queue's
    engine, in issue order) and the matmul's wait on ``S[10] (qSyncIO0)`` binds to it."""
    dev = Device()
    dev.process(1)
    _load_step(dev, 1, T0)
    (part,) = perfetto.read(dev.b.write(tmp_path / "ntff.pftrace"))
    assert part.events[S.KIND].astype(str).value_counts().to_dict() == {"compute": 3, "dma": 1}
    assert ("DMA_TRIGGER", "weight_0") in _edges(part, "dma_trigger")
    assert ("weight_0", "MATMUL") in _edges(part, "dependency")
    assert part.meta.info["semaphore_waits"] == {"read": 1, "edges": 1, "unexplained": 0}
    assert part.meta.info["dma_triggers_by_order"] == 1
    dma = part.events[part.events[S.KIND].astype(str) == "dma"]
    assert dma[S.BYTES].tolist() == [320_000]


def test_dma_slices_naming_no_semaphore_next_to_other_semaphores_load(tmp_path):
    """No DMA slice names a semaphore and none is owned by its queue (the waits are on an
    engine's semaphore): the semaphore reader had no DMA semaphore at all and stopped with an
    IndexError; the wait binds to the matmul that increments ``S[5] (Tensor)``."""
    dev = Device()
    dev.process(1)
    dev.slice(1, "qSyncIO0 - Row 0", T0, 2_000, "weight_0",
              [("subgroup", "qSyncIO0"), ("transfer_size", 320_000)])  # fmt: skip
    dev.slice(1, "TensorMatrix Engine - Row 0", T0 + 2_100, 1_000, "MATMUL",
              [("opcode", "MATMUL"), ("operands", "S[5] (Tensor)++@complete")])  # fmt: skip
    dev.instant(1, "S[5] (Tensor)", T0 + 3_100, "S[5] (Tensor)",
                [("value", 1), ("update_source", "Tensor")])  # fmt: skip
    dev.slice(1, "Vector Engine - Row 0", T0 + 3_200, 500, "TENSOR_COPY",
              [("opcode", "TENSOR_COPY"), ("operands", "S[5] (Tensor)>=1")])  # fmt: skip
    (part,) = perfetto.read(dev.b.write(tmp_path / "ntff.pftrace"))
    assert _edges(part, "dependency") == {("MATMUL", "TENSOR_COPY")}
    assert part.meta.info["semaphore_waits"] == {"read": 1, "edges": 1, "unexplained": 0}


def test_collectives_from_cc_core_rows_with_the_ui_box_fields(tmp_path):
    """``CC-core 0`` and ``CC-core 0 - Row 0`` rows; one op titled ``CC Op 0 - AllReduce`` with
    the UI box's fields (``size``, ``trigger_timestamp``), one named ``AllReduce`` with the
    legacy ``cc_ops`` keys (``input_size``, ``cc_trigger_start_delay`` only)."""
    dev = Device()
    dev.process(1)
    trig1, trig2 = 40_000, 140_000
    dev.slice(1, "GpSimd Engine - Row 0", trig1, 150, "PSEUDO_TRIGGER_COLLECTIVE",
              [("opcode", "PSEUDO_TRIGGER_COLLECTIVE")])  # fmt: skip
    dev.slice(1, "CC-core 0", trig1 + 550, 6_000, "CC Op 0 - AllReduce",
              [("size", 262_144), ("algorithm", "Ring"), ("trigger_engine", "Pool"),
               ("trigger_timestamp", trig1), ("replica_group", "[]")])  # fmt: skip
    dev.slice(1, "GpSimd Engine - Row 0", trig2, 150, "PSEUDO_TRIGGER_COLLECTIVE",
              [("opcode", "PSEUDO_TRIGGER_COLLECTIVE")])  # fmt: skip
    dev.slice(1, "CC-core 0 - Row 0", trig2 + 550, 6_000, "AllReduce",
              [("operation", "AllReduce"), ("input_size", 131_072), ("trigger_engine", "Pool"),
               ("cc_trigger_start_delay", 550), ("replica_group", "[[0, 1]]")])  # fmt: skip
    (part,) = perfetto.read(dev.b.write(tmp_path / "profile_rank_0.pftrace"))
    c = part.collectives.sort_values(S.START)
    assert c[S.COLL_OP].astype(str).tolist() == ["AllReduce", "AllReduce"]
    assert c[S.ARRIVAL].tolist() == [trig1, trig2]  # the trigger: the rank's arrival
    assert c[S.START].tolist() == [trig1 + 550, trig2 + 550]
    assert c[S.BYTES].tolist() == [262_144, 131_072]
    cc = part.events[part.events[S.KIND].astype(str) == "collective"]
    assert cc[S.NAME].astype(str).tolist() == ["AllReduce", "AllReduce"]  # as Parquet names it
    assert _edges(part, "dependency") >= {("PSEUDO_TRIGGER_COLLECTIVE", "AllReduce")}
    assert part.meta.info["collective_trigger_unmatched"] == 0


def test_ranks_from_rank_folders_and_from_the_pids_of_a_whole_job_file(tmp_path):
    """``profile_rank_<g>/ntff.pftrace`` gives rank g; one file holding several ranks'
    ``Instructions`` processes (pid = worker_gid, a sequence each) gives each its pid; a lone
    process's pid (``Instructions [1]``) is not a rank."""
    for g in (32, 33):
        dev = Device()
        dev.process(1)
        _load_step(dev, 1, T0 + g)
        (tmp_path / f"profile_rank_{g}").mkdir()
        (part,) = perfetto.read(dev.b.write(tmp_path / f"profile_rank_{g}" / "ntff.pftrace"))
        assert (part.meta.rank, part.meta.info["rank_source"]) == (g, "folder name")
    dev = Device()
    for seq, g in enumerate((34, 35), start=100):
        dev.process(g, seq=seq)
        _load_step(dev, g, T0 + g, seq=seq)
    parts = perfetto.read(dev.b.write(tmp_path / "device_profile_model_10001.pftrace"))
    assert [(p.meta.rank, p.meta.info["rank_source"]) for p in parts] == [
        (34, "process pid"),
        (35, "process pid"),
    ]
    assert [len(p.events) for p in parts] == [4, 4]
    dev = Device()
    dev.process(1)
    _load_step(dev, 1, T0)
    (part,) = perfetto.read(dev.b.write(tmp_path / "device_profile_model_10002.pftrace"))
    assert (part.meta.rank, part.meta.info["rank_source"]) == (0, "default")
    dev.process(2)  # a second process with DMA rows only: no core of its own
    dev.slice(2, "qSyncIO0 - Row 0", T0 + 50_000, 1_000, "weight_9", [("subgroup", "qSyncIO0")])
    (part,) = perfetto.read(dev.b.write(tmp_path / "device_profile_model_10003.pftrace"))
    assert (part.meta.rank, len(part.events)) == (0, 5)


def test_negative_ids_and_unsigned_dependency_ids_are_one_id(tmp_path):
    """The screenshot prints ``id`` signed and ``inst_dep_ids`` unsigned: the same 64 bits."""
    dev = Device()
    dev.process(1)
    raw = 0x9E3779B97F4A7C15  # above 2**63
    signed = raw - (1 << 64)
    dev.slice(1, "TensorMatrix Engine - Row 0", T0, 100, "MATMUL", [("id", signed)])
    dev.slice(1, "Vector Engine - Row 0", T0 + 200, 50, "ACTIVATE",
              [("id", 5), ("inst_dep_ids", f"[{raw}]")])  # fmt: skip
    dev.slice(1, "Scalar Engine - Row 0", T0 + 300, 50, "ACTIVATE2",
              [("id", 6), ("inst_dep_ids", f"[{signed},5]")])  # fmt: skip
    (part,) = perfetto.read(dev.b.write(tmp_path / "ntff.pftrace"))
    assert _edges(part, "dependency") == {
        ("MATMUL", "ACTIVATE"),
        ("MATMUL", "ACTIVATE2"),
        ("ACTIVATE", "ACTIVATE2"),
    }
    assert sorted(part.events[S.SRC_ID].tolist()) == [signed, 5, 6]
    assert not any("inst_dep_ids" in reason for reason in part.meta.repairs)


def test_executions_split_where_the_whole_core_idles_and_are_tied_end_to_start(tmp_path):
    """Two executions of the program (the engines' first instructions come round again after
    the core idled): the second one's first instruction of every row and its first DMA depend on
    the first one's end, and the slices carry their step. A gap the collective spans is no
    boundary."""
    dev = Device()
    dev.process(1)
    for k, t in enumerate((T0, T0 + 100_000)):
        _load_step(dev, 1, t, value=k + 1)
        cc_start = t + 2_600 + 30_000 + 150 + 400
        dev.slice(1, "CC-core 0", cc_start, 6_000, "AllReduce",
                  [("operation", "AllReduce"), ("trigger_engine", "Pool"),
                   ("trigger_timestamp", t + 2_600 + 30_000)])  # fmt: skip
    (part,) = perfetto.read(dev.b.write(tmp_path / "ntff.pftrace"))
    ev = part.events
    assert len(part.meta.info["executions"]) == 2
    steps = ev.groupby(ev[S.TS] >= T0 + 100_000)[S.STEP].unique()
    assert [list(v) for v in steps] == [[0.0], [1.0]]
    e = part.edges[part.edges[S.EDGE_KIND].astype(str) == "dependency"]
    ts, name = ev[S.TS].to_numpy(), ev[S.NAME].astype(str).to_numpy()
    src, dst = e[S.SRC].to_numpy(), e[S.DST].to_numpy()
    across = (ts[src] < T0 + 100_000) & (ts[dst] >= T0 + 100_000)
    assert set(name[src[across]]) == {"AllReduce"}  # the first execution's last to end
    assert set(name[dst[across]]) == {
        "DMA_TRIGGER",
        "MATMUL",
        "PSEUDO_TRIGGER_COLLECTIVE",
        "weight_0",
    }

    dev = Device()
    dev.process(1)
    for k, t in enumerate((T0, T0 + 100_000)):
        _load_step(dev, 1, t, value=k + 1)
    dev.slice(1, "CC-core 0", T0 + 40_000, 70_000, "AllReduce", [("operation", "AllReduce")])
    (part,) = perfetto.read(dev.b.write(tmp_path / "covered.pftrace"))
    assert "executions" not in part.meta.info
    assert part.meta.info["execution_boundaries_without_idle_core"] == 1


def test_packets_of_one_tensor_on_two_dma_engines_are_one_transfer(tmp_path):
    """Four packet slices of ``weight_0`` (halves, on two rings: ``DMA Engine 64/65``), named
    ``unknown`` (no DGE notifications) with the tensor in ``variable``: one transfer, triggered
    once, every packet tied to the trigger."""
    dev = Device()
    dev.process(1)
    dev.slice(1, "Sync Engine - Row 0", T0, 200, "DMA_TRIGGER", [("opcode", "DMA_TRIGGER")])
    s = T0 + 500
    for half in (0, 1):
        for ring in (0, 1):
            dev.slice(1, f"DMA Engine {64 + ring} - Row 0", s + half * 1_000, 1_000, "unknown",
                      [("subgroup", "qSyncIO0"), ("transfer_size", 80_000),
                       ("variable", "weight_0")])  # fmt: skip
    (part,) = perfetto.read(dev.b.write(tmp_path / "ntff.pftrace"))
    info = part.meta.info
    assert info["dma_transfers_from_block_id"] == 1
    assert info["dma_triggers_by_order"] == 1
    e = part.edges[part.edges[S.EDGE_KIND].astype(str) == "dma_trigger"]
    assert len(e) == 4 and np.unique(e[S.SRC]).size == 1


def test_semaphore_tracks_named_by_thread_name_carry_their_updates(tmp_path):
    """A semaphore track named in its ThreadDescriptor (not the TrackDescriptor's ``name``):
    its instants are that semaphore's updates (they were read with an empty id)."""
    for named in (False, True):
        dev = Device()
        dev.process(1)
        dev.track(1, "S[10] (qSyncIO0)", named=named)
        _load_step(dev, 1, T0)
        (part,) = perfetto.read(dev.b.write(tmp_path / f"t{named}.pftrace"))
        assert part.meta.info["semaphore_waits"]["edges"] == 1, named
        assert part.meta.info["semaphore_update_count"] == 1
