"""XPlane reader: the real MI300 JAX profile, device planes as ranks, line kinds, stats through
metadata (ref_value, per-op metadata stats), ps precision, collectives, the run-folder layout and
corrupted input."""

from __future__ import annotations

import pytest

from tests.chrome_helpers import shared
from tracediag.cli.main import main
from tracediag.model import schema as S
from tracediag.model.assembly import assemble
from tracediag.model.errors import TraceInputError
from tracediag.parsers import perfetto, xplane
from tracediag.parsers.protos.xplane_pb2 import XSpace

MI300 = "xplane_jax_gemm_mi300.xplane.pb"
START = 1_700_000_000_000_000_000


class PlaneBuilder:
    """One XPlane with interned event and stat metadata."""

    def __init__(self, space: XSpace, name: str):
        self.plane = space.planes.add(name=name, id=len(space.planes))
        self.events: dict[str, int] = {}
        self.stats: dict[str, int] = {}

    def stat_id(self, name: str) -> int:
        if name not in self.stats:
            self.stats[name] = len(self.stats) + 1
            self.plane.stat_metadata[self.stats[name]].name = name
            self.plane.stat_metadata[self.stats[name]].id = self.stats[name]
        return self.stats[name]

    def set_stats(self, target, stats: dict) -> None:
        for name, value in stats.items():
            stat = target.add(metadata_id=self.stat_id(name))
            if isinstance(value, str):
                stat.ref_value = self.stat_id(value)  # interned text, as XLA writes it
            elif isinstance(value, float):
                stat.double_value = value
            else:
                stat.int64_value = value

    def event_id(self, name: str, **metadata_stats) -> int:
        if name not in self.events:
            self.events[name] = len(self.events) + 1
            meta = self.plane.event_metadata[self.events[name]]
            meta.id, meta.name = self.events[name], name
            self.set_stats(meta.stats, metadata_stats)
        return self.events[name]

    def line(self, name: str, ts_ns: int, line_id: int = 0):
        return self.plane.lines.add(
            name=name, timestamp_ns=ts_ns, id=line_id or len(self.plane.lines) + 1
        )

    def event(self, line, name, offset_ps, duration_ps, metadata=None, **stats):
        ev = line.events.add(metadata_id=self.event_id(name, **(metadata or {})))
        ev.offset_ps, ev.duration_ps = offset_ps, duration_ps
        self.set_stats(ev.stats, stats)
        return ev


def _tpu_space(devices: int = 2, skew_ps: int = 0) -> XSpace:
    space = XSpace(hostnames=["host0"])
    for d in range(devices):
        p = PlaneBuilder(space, f"/device:TPU:{d}")
        ops = p.line("XLA Ops", START)
        mods = p.line("XLA Modules", START)
        steps = p.line("Steps", START)
        p.event(mods, "jit_train_step(1)", 0, 10_000_000)
        p.event(steps, "0", 0, 10_000_000)
        fusion = {"flops": 2.0e9, "bytes_accessed": 1.0e6}
        p.event(
            ops,
            "fusion.1",
            1_500,
            2_000_000,
            fusion,
            hlo_module="jit_train_step",
            tf_op="jit(train_step)/dot",
        )
        p.event(
            ops, "all-reduce.3", 3_000_000 + d * skew_ps, 4_000_000 - d * skew_ps,
            {"bytes_accessed": 8.0e6}, hlo_module="jit_train_step",
        )  # fmt: skip
        p.event(ops, "all-gather-start.1", 7_200_000, 100_000, hlo_module="jit_train_step")
        p.event(ops, "all-gather-done.1", 8_000_000, 500_000, hlo_module="jit_train_step")
        agg = ops.events.add(metadata_id=p.event_id("fusion.1"))
        agg.num_occurrences = 5  # an aggregate, not a timeline event
    host = PlaneBuilder(space, "/host:CPU")
    thread = host.line("python", START, line_id=77)
    host.event(thread, "train_step", 0, 10_000_000, group_id=0)
    return space


def _write(space: XSpace, path):
    path.write_bytes(space.SerializeToString())
    return path


def test_sniff_by_content(tmp_path):
    path = _write(_tpu_space(), tmp_path / "host0.xplane.pb")
    renamed = _write(_tpu_space(), tmp_path / "trace.pb")
    assert xplane.sniff(path) and xplane.sniff(renamed)
    assert not perfetto.sniff(path)
    assert not xplane.sniff(shared("perfetto_nested_tracks.perfetto-trace"))
    (tmp_path / "x.json").write_text("{}")
    assert not xplane.sniff(tmp_path / "x.json")


def test_real_mi300_profile_tracks_events_and_launches():
    path = shared(MI300)
    assert xplane.sniff(path)
    parts = xplane.read(path)
    assert [p.meta.rank for p in parts] == [0]  # only GPU 0 ran anything
    part = parts[0]
    assert part.meta.info["device_planes_without_events"] == [
        f"/device:GPU:{k}" for k in range(1, 8)
    ]
    assert part.meta.hardware == "AMD GPU" and part.meta.repairs == {}
    ev = part.events
    by_track = ev.groupby(["track_label", S.KIND], observed=True).size().to_dict()
    assert by_track == {
        ("stream 16", "compute"): 30,
        ("stream 16", "dma"): 12,
        ("stream 17", "dma"): 12,
        ("Host Threads/1083", "host"): 42,
        ("Host Threads/1565", "host"): 12,
        ("py_xla_callback/879904895758363866", "host"): 15,
        ("python", "host"): 3568,
        ("tf_pjrt_thread_pool/4747829982129071201", "host"): 91,
    }
    first = ev[ev["track_label"] == "stream 16"].sort_values(S.TS).iloc[0]
    # profile_start_time 1771595650217823548 + line 711141 ns + 661861000 ps
    assert (first[S.TS], first[S.DUR], str(first[S.OP]), first[S.SRC_ID]) == (
        1771595650219196550, 4320, "copy.1", 22,
    )  # fmt: skip
    assert (part.edges[S.EDGE_KIND] == "launch").sum() == 54
    gemm = ev[ev[S.NAME].astype(str).str.startswith("Cijk")]
    assert set(gemm[S.LAYER].astype(str)) == {"jit(dot)/dot_general"}


def test_report_runs_on_the_mi300_profile(capsys):
    assert main(["report", str(shared(MI300))]) in (0, 1)
    out = capsys.readouterr().out
    assert "xplane" in out and "AMD GPU" in out


def test_tpu_planes_are_ranks_with_ops_markers_and_stats(tmp_path):
    parts = xplane.read(_write(_tpu_space(), tmp_path / "host0.xplane.pb"))
    assert [p.meta.rank for p in parts] == [0, 1]
    zero = parts[0]
    assert zero.meta.repairs == {"events with num_occurrences only (aggregates): skipped": 2}
    ev = zero.events.sort_values([S.TS, S.NAME]).reset_index(drop=True)
    rows = [
        (str(n), str(k), str(t))
        for n, k, t in zip(ev[S.NAME], ev[S.KIND], ev["track_label"], strict=True)
    ]
    assert rows == [
        ("0", "marker", "Steps"),
        ("jit_train_step(1)", "marker", "XLA Modules"),
        ("train_step", "host", "python"),
        ("fusion.1", "compute", "xla ops"),
        ("all-reduce.3", "collective", "xla ops"),
        ("all-gather-start.1", "collective", "xla ops"),
        ("all-gather-done.1", "collective", "xla ops"),
    ]
    fusion = ev.iloc[3]
    assert (fusion[S.TS], fusion[S.DUR]) == (
        START + 1,
        2_000,
    )  # 1.5 ns -> 1; (500 + 2e6) ps -> 2000 ns
    assert (fusion[S.FLOPS], fusion[S.BYTES], str(fusion[S.LAYER])) == (
        2.0e9,
        1.0e6,
        "jit(train_step)/dot",
    )
    assert str(fusion[S.OP]) == "fusion.1"
    assert "train_step" not in set(
        parts[1].events[S.NAME].astype(str)
    )  # host events: first rank only


def test_collectives_match_across_devices(tmp_path):
    parts = xplane.read(_write(_tpu_space(skew_ps=1_000_000), tmp_path / "h.xplane.pb"))
    trace = assemble(parts)
    co = trace.collectives.sort_values(["match_key", S.RANK])
    assert co[S.MATCH_KEY].tolist() == [
        "jit_train_step|all-gather-done.1|0", "jit_train_step|all-gather-done.1|0",
        "jit_train_step|all-reduce.3|0", "jit_train_step|all-reduce.3|0",
    ]  # fmt: skip
    assert co[S.COLL_OP].tolist() == ["AllGather", "AllGather", "AllReduce", "AllReduce"]
    ar = co[co[S.COLL_OP] == "AllReduce"]
    assert ar[S.BYTES].tolist() == [8.0e6, 8.0e6] and ar[S.COLL_KEY].nunique() == 1
    assert (ar[S.START] - START).tolist() == [3_000, 4_000]
    assert (ar[S.END] - START).tolist() == [7_000, 7_000]


def test_gpu_streams_nccl_kernels_and_xla_ops_line(tmp_path):
    space = XSpace()
    p = PlaneBuilder(space, "/device:GPU:0")
    stream = p.line("Stream #7(Kernel,MemcpyH2D)", START)
    ops = p.line("XLA Ops", START)
    p.event(stream, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 0, 5_000_000, correlation_id=9)
    p.event(stream, "MemcpyH2D", 6_000_000, 1_000_000, memcpy_details="kind:HtoD size:4096 dest:1")
    p.event(stream, "loop_fusion", 8_000_000, 1_000_000, hlo_op="loop_fusion.2")
    p.event(ops, "all-reduce.1", 0, 5_000_000)
    part = xplane.read(_write(space, tmp_path / "g.xplane.pb"))[0]
    ev = part.events.sort_values([S.TS, "track_label"]).reset_index(drop=True)
    got = [
        (str(n), str(k), str(t))
        for n, k, t in zip(ev[S.NAME], ev[S.KIND], ev["track_label"], strict=True)
    ]
    assert got == [
        ("all-reduce.1", "marker", "XLA Ops"),  # aggregates kernels on GPUs: a marker
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "collective", "stream 7"),
        ("MemcpyH2D", "dma", "stream 7"),
        ("loop_fusion", "compute", "stream 7"),
    ]
    assert ev[S.BYTES].iloc[2] == 4096.0 and ev[S.SRC_ID].iloc[1] == 9
    assert part.collectives[S.COLL_OP].tolist() == ["AllReduce"]
    assert str(ev["track_device"].iloc[0]) == "gpu0"


def test_profile_run_folder_layout(tmp_path):
    old = tmp_path / "logs" / "plugins" / "profile" / "2024_01_01_00_00_00"
    run = tmp_path / "logs" / "plugins" / "profile" / "2024_02_01_00_00_00"
    old.mkdir(parents=True)
    run.mkdir(parents=True)
    _write(_tpu_space(devices=1), old / "host0.xplane.pb")
    _write(_tpu_space(), run / "host0.xplane.pb")
    _write(_tpu_space(), run / "host1.xplane.pb")
    (run / "host0.trace.json.gz").write_bytes(b"")
    for folder in (tmp_path / "logs", run):
        assert xplane.sniff(folder)
        parts = xplane.read(folder)
        assert [p.meta.rank for p in parts] == [0, 1, 2, 3]
        assert {p.meta.sources[0].rsplit("/", 1)[-1] for p in parts[2:]} == {"host1.xplane.pb"}
    assert not xplane.sniff(tmp_path)


def test_truncated_and_corrupted_real_profile(tmp_path):
    data = shared(MI300).read_bytes()
    cut = tmp_path / "cut.xplane.pb"
    cut.write_bytes(data[:60000])
    with pytest.raises(TraceInputError) as err:
        xplane.read(cut)
    assert (
        err.value.problem
        == "truncated at byte offset 60000: the record at byte offset 31176 is cut"
    )
    bad = tmp_path / "bad.xplane.pb"
    bad.write_bytes(data[:50000] + b"\xff" * 8 + data[50008:])  # inside the /host:CPU plane
    with pytest.raises(TraceInputError) as err:
        xplane.read(bad)
    assert err.value.problem == "byte offset 31176: plane record does not decode as an XPlane"
    assert main(["report", str(cut)]) == 2


def test_times_keep_picosecond_offsets_exact(tmp_path):
    space = XSpace()
    p = PlaneBuilder(space, "/device:GPU:0")
    line = p.line("Stream #1(Kernel)", 2**61)  # epoch-scale ns: ns * 1000 would overflow int64
    p.event(line, "a", 999, 2)  # ends at 1001 ps: 0 ns + 1 ns
    p.event(line, "b", 1_000_000_000_001, 1_999)  # 1 s + 1 ps, ends 2000 ps later
    ev = xplane.read(_write(space, tmp_path / "t.xplane.pb"))[0].events.sort_values(S.TS)
    assert ev[S.TS].tolist() == [2**61, 2**61 + 1_000_000_000]
    assert ev[S.DUR].tolist() == [1, 2]
