"""Kineto meaning of Chrome traces: kinds, tracks, launch/sync/flow edges, ops, steps, collectives."""

from __future__ import annotations

import numpy as np

from tests.chrome_helpers import X, named, read_one, shared, write
from tracediag.loading.loader import load
from tracediag.model import schema as S

# ---- kinds and tracks ------------------------------------------------------------------------


def test_every_category_family_maps_to_its_kind(tmp_path):
    gpu = {"pid": 0, "tid": 7}
    events = [
        X("kernel", "void gemm_kernel<float>()", 100, 10, **gpu, correlation=1, stream=7, device=0),
        X(
            "kernel",
            "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)",
            120,
            10,
            **gpu,
            correlation=2,
        ),
        X(
            "kernel",
            "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevComm*)",
            140,
            10,
            **gpu,
            correlation=3,
        ),
        X("kernel", "RCCLGenericKernel", 160, 10, **gpu, correlation=4),
        X(
            "gpu_memcpy",
            "Memcpy HtoD (Pageable -> Device)",
            180,
            10,
            **gpu,
            correlation=5,
            bytes=4096,
        ),
        X("gpu_memset", "Memset (Device)", 200, 10, **gpu, correlation=6, bytes=64),
        X("cuda_runtime", "cudaLaunchKernel", 95, 3, correlation=1),
        X("cuda_driver", "cuLaunchKernel", 115, 3, correlation=2),
        X("hip_runtime", "hipLaunchKernel", 135, 3, correlation=3),
        X("cuda_runtime", "cudaStreamSynchronize", 300, 20, correlation=7),
        X("cuda_runtime", "cudaDeviceSynchronize", 330, 20, correlation=8),
        X("hip_runtime", "hipEventSynchronize", 360, 20, correlation=9),
        X("cuda_runtime", "cudaStreamWaitEvent", 390, 2, correlation=10),
        X("cpu_op", "aten::mm", 90, 30),
        X("user_annotation", "ProfilerStep#3", 80, 400),
        X("python_function", "forward", 85, 50),
        X("gpu_user_annotation", "my range", 100, 50, **gpu),
        X("fwdbwd", "fwdbwd", 90, 1),
        X("Trace", "PyTorch Profiler (0)", 0, 1000, pid="Spans", tid="PyTorch Profiler"),
        X("something_new", "vendor thing", 90, 1),
    ]
    _, trace = read_one(write(tmp_path / "kinds.json", {"traceEvents": events}))
    kinds = dict(
        zip(trace.events[S.NAME].astype(str), trace.events[S.KIND].astype(str), strict=True)
    )
    assert kinds == {
        "void gemm_kernel<float>()": "compute",
        "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)": "collective",
        "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevComm*)": "collective",
        "RCCLGenericKernel": "collective",
        "Memcpy HtoD (Pageable -> Device)": "dma",
        "Memset (Device)": "dma",
        "cudaLaunchKernel": "host",
        "cuLaunchKernel": "host",
        "hipLaunchKernel": "host",
        "cudaStreamSynchronize": "sync",
        "cudaDeviceSynchronize": "sync",
        "hipEventSynchronize": "sync",
        "cudaStreamWaitEvent": "host",
        "aten::mm": "marker",
        "ProfilerStep#3": "marker",
        "forward": "marker",
        "my range": "marker",
        "fwdbwd": "marker",
        "PyTorch Profiler (0)": "marker",
        "vendor thing": "marker",
    }
    assert named(trace, "Memcpy HtoD (Pageable -> Device)")[S.BYTES] == 4096
    assert named(trace, "Memset (Device)")[S.BYTES] == 64
    tracks = trace.tracks.set_index(S.TRACK_NAME)
    gpu_track = tracks.loc["gpu0/stream 7"]
    assert (
        gpu_track[S.TRACK_KIND],
        gpu_track[S.ENGINE],
        gpu_track[S.DEVICE],
        gpu_track[S.CLOCK],
    ) == (
        "gpu_stream",
        "gpu",
        "gpu0",
        "host",
    )
    cpu_track = tracks.loc["cpu 100/100"]
    assert (cpu_track[S.TRACK_KIND], cpu_track[S.ENGINE], cpu_track[S.DEVICE]) == (
        "cpu_thread",
        "cpu",
        "host",
    )
    # Launches by correlation; the ProfilerStep and the enclosing cpu_op name GPU work.
    kernel = named(trace, "void gemm_kernel<float>()")
    assert (kernel[S.OP], kernel[S.STEP]) == ("aten::mm", 3.0)
    assert trace.events[S.LAYER].isna().all()
    launches = trace.edges[trace.edges[S.EDGE_KIND] == "launch"]
    pairs = {
        (trace.events[S.NAME].iat[s], trace.events[S.NAME].iat[d])
        for s, d in zip(launches[S.SRC], launches[S.DST], strict=True)
    }
    assert pairs == {
        ("cudaLaunchKernel", "void gemm_kernel<float>()"),
        ("cuLaunchKernel", "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"),
        ("hipLaunchKernel", "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevComm*)"),
    }


def test_thread_names_label_cpu_tracks(tmp_path):
    events = [
        {"ph": "M", "name": "thread_name", "pid": 5, "tid": 9, "args": {"name": "dataloader"}},
        {
            "ph": "M",
            "name": "thread_name",
            "pid": 5,
            "tid": 10,
            "args": {"name": "thread 10 (python)"},
        },
        X("cpu_op", "a", 1, 1, pid=5, tid=9),
        X("cpu_op", "b", 1, 1, pid=5, tid=10),
    ]
    _, trace = read_one(write(tmp_path / "names.json", {"traceEvents": events}))
    # Kineto's "thread 10 (python)": the part after the id, which is what users know.
    assert sorted(trace.tracks[S.TRACK_NAME]) == ["cpu 5/10 (python)", "cpu 5/9 (dataloader)"]


# ---- edges on real traces ----------------------------------------------------------------------


def test_alexnet_launch_edges():
    part, trace = read_one(shared("kineto_alexnet_1rank.json.gz"))
    ev, ed = trace.events, trace.edges
    launches = ed[ed[S.EDGE_KIND] == "launch"]
    assert len(launches) == 98  # 79 kernels + 16 memcpy + 3 memset, each with its runtime call
    assert (ed[S.EDGE_KIND] == "flow").sum() == 0  # ac2g flows are not added twice
    by_corr = ev.reset_index().set_index([S.SRC_ID, S.KIND])
    call, kernel = by_corr.loc[(218, "host"), "index"], by_corr.loc[(218, "compute"), "index"]
    assert ((launches[S.SRC] == call) & (launches[S.DST] == kernel)).sum() == 1
    assert ev.loc[call, S.NAME] == "cudaLaunchKernel" and ev.loc[call, S.TS] == 1695835573023578000
    assert ev.loc[kernel, S.TS] == 1695835573023613000 and ev.loc[kernel, S.DUR] == 71000
    assert ev.loc[kernel, S.OP] == "aten::uniform_"
    assert trace.tracks.loc[ev.loc[kernel, S.TRACK], S.TRACK_NAME] == "gpu0/stream 7"
    assert part.meta.repairs == {}


def _edge_names(trace: S.Trace, kind: str) -> list[tuple[int, int]]:
    ed = trace.edges[trace.edges[S.EDGE_KIND] == kind]
    ids = trace.events[S.SRC_ID].to_numpy()
    return sorted(zip(ids[ed[S.SRC]].tolist(), ids[ed[S.DST]].tolist(), strict=True))


def test_event_sync_edges():
    _, trace = read_one(shared("kineto_event_sync.json.gz"))
    # cudaEventSynchronize (corr 1536) waits for the event recorded by corr 1533 on stream 7:
    # the spin kernel launched by corr 1526. The stream and device syncs had nothing running.
    assert _edge_names(trace, "sync") == [(1526, 1536)]
    ev = trace.events
    assert sorted(ev.loc[ev[S.SRC_ID] == 1536, S.KIND].astype(str)) == [
        "marker",
        "sync",
    ]  # record, call


def test_sync_records_without_launched_gpu_work_give_no_edge(tmp_path):
    """A sync call and record with GPU work none of which was launched (no correlation): no
    edge to draw (this raised IndexError in the search for the recorded work)."""
    doc = {
        "traceEvents": [
            X("kernel", "ncclKernel_AllReduce_RING_LL_Sum_float(x)", 1070.5, 5, pid=0, tid=7),
            X("cuda_runtime", "cudaDeviceSynchronize", 1071, -1, pid=0, tid=22),
            X("cuda_sync", "Device Synchronize", 1089.001, 0, pid=1234, tid=0),
        ]
    }
    part, trace = read_one(write(tmp_path / "t.json", doc))
    assert _edge_names(trace, "sync") == []
    assert trace.events[S.KIND].astype(str).tolist() == ["collective", "sync", "marker"]
    assert part.meta.repairs == {"events: negative duration clamped to 0": 1}


def test_alexnet_stream_wait_and_synchronize_edges():
    _, trace = read_one(shared("kineto_alexnet_1rank.json.gz"))
    sync = _edge_names(trace, "sync")
    assert len(sync) == 23
    # cudaStreamWaitEvent (5183) on stream 20 waits for the record (5180) of fft2d_r2c (5178)
    # on stream 7; the next work on stream 20 is the gemm launched by 5188.
    assert (5178, 5188) in sync
    # cudaStreamSynchronize (15) returns when the memcpy (14) it waited for completes.
    assert (14, 15) in sync
    syncs = trace.events[trace.events[S.KIND] == "sync"]
    assert len(syncs) == 21  # 16 cudaStreamSynchronize + 5 cudaDeviceSynchronize


def test_amd_traces_read():
    part, trace = read_one(shared("kineto_amd_mi250_minitoy.json.gz"))
    assert (
        part.meta.hardware == "AMD Radeon Graphics" and part.meta.info["rank_source"] == "default"
    )
    assert part.meta.info["baseTimeNanoseconds"] == 1735632360000000000
    counts = trace.events[S.KIND].value_counts()
    assert (counts["compute"], counts["dma"], counts["host"], counts["sync"]) == (14, 2, 20, 1)
    assert (trace.edges[S.EDGE_KIND] == "launch").sum() == 16
    flows = trace.edges[trace.edges[S.EDGE_KIND] == "flow"]
    names = trace.events[S.NAME].astype(str).to_numpy()
    assert sorted(zip(names[flows[S.SRC]], names[flows[S.DST]], strict=True)) == [
        ("aten::addmm", "AddmmBackward0"),
        ("aten::mse_loss", "MseLossBackward0"),
        ("aten::relu", "ReluBackward0"),
        ("aten::t", "TBackward0"),
    ]
    gpu = trace.events[trace.events[S.KIND].isin(["compute", "dma"])]
    assert set(gpu[S.STEP].dropna()) == {1.0}
    part, trace = read_one(shared("kineto_torch_compile_triton.json.gz"))
    assert part.meta.hardware == "AMD Instinct MI300X"
    assert (trace.events[S.KIND] == "compute").sum() == 12
    assert (trace.edges[S.EDGE_KIND] == "launch").sum() == 12


# ---- collectives -------------------------------------------------------------------------------


def test_sampled_ranks_collectives_match_across_files():
    paths = [shared("kineto_sampled_rank-0.json.gz"), shared("kineto_sampled_rank-1.json.gz")]
    trace = load(paths, align=False)
    assert trace.ranks == [0, 1]
    co = trace.collectives
    assert len(co) == 20
    # Every kernel is NCCL's generic ncclKernel_SendRecv_*: the operation is the CPU-side
    # nccl:* range enclosing its launch (read by hand: 4 all_to_all, 4 all_reduce and 2
    # _all_gather_base on each rank).
    assert set(co[S.ALGORITHM]) == {"RING"}
    assert set(co[S.DTYPE]) == {"int8_t"} and (co[S.SEQ] == -1).all()
    for rank in (0, 1):
        ops = co.loc[co[S.RANK] == rank, S.COLL_OP].value_counts().to_dict()
        assert ops == {"AllToAll": 4, "AllReduce": 4, "AllGather": 2}
    assert sorted(co.loc[co[S.RANK] == 0, S.MATCH_KEY]) == sorted(
        [f"|AllToAll|{i}" for i in range(4)]
        + [f"|AllReduce|{i}" for i in range(4)]
        + [f"|AllGather|{i}" for i in range(2)]
    )
    # The instances both sampled files hold end within 0.5 ms of each other on the same stream
    # (one host, one clock). Their keys coincide, except where rank 0's sample kept a SendRecv
    # whose rank-1 side was sampled away (an all_to_all): ordinal keys cannot see that gap.
    ev = trace.events
    co = co.assign(
        stream=trace.tracks[S.TRACK_NAME].to_numpy()[ev[S.TRACK].to_numpy()[co[S.EVENT]]]
    )
    co["stream"] = co["stream"].str.split("/").str[1]
    r0, r1 = co[co[S.RANK] == 0], co[co[S.RANK] == 1]
    shared_pairs = [
        (a[S.MATCH_KEY], b[S.MATCH_KEY])
        for _, a in r0.iterrows()
        for _, b in r1.iterrows()
        if a["stream"] == b["stream"] and abs(int(a[S.END]) - int(b[S.END])) < 500_000
    ]
    assert len(shared_pairs) == 5
    assert sum(a == b for a, b in shared_pairs) == 4
    assert ("|AllToAll|1", "|AllToAll|0") in shared_pairs
    matched = co.groupby(S.COLL_KEY)[S.RANK].nunique()
    assert (matched == 2).all()  # every key is present on both ranks


def test_collective_metadata_from_args(tmp_path):
    meta = {
        "Collective name": "allreduce",
        "In msg nelems": 1024,
        "Out msg nelems": 1024,
        "dtype": "BFloat16",
        "Process Group Name": "3",
        "Process Group Ranks": "[2, 0, 1, 3]",
        "Seq": 17,
    }
    events = [
        X("cpu_op", "record_param_comms", 10, 20, **{"External id": 55}, **meta),
        X("cuda_runtime", "cudaLaunchKernel", 12, 2, correlation=9, **{"External id": 55}),
        X(
            "kernel",
            "ncclDevKernel_AllReduce_Sum_bf16_TREE_LL(ncclDevComm*)",
            20,
            40,
            pid=0,
            tid=13,
            correlation=9,
            **{"External id": 55},
        ),
        X(
            "kernel",
            "ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclWorkElem)",
            100,
            40,
            pid=0,
            tid=13,
            correlation=11,
            **{
                "Collective name": "_allgather_base",
                "Out msg size": 4096,
                "In msg size": 512,
                "Process Group Ranks": [0, 1],
            },
        ),
        X(
            "kernel",
            "ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclWorkElem)",
            200,
            40,
            pid=0,
            tid=13,
            correlation=12,
            **{"Collective name": "_allgather_base", "Process Group Ranks": [0, 1]},
        ),
    ]
    _, trace = read_one(write(tmp_path / "rank_2.json", {"traceEvents": events}))
    co = trace.collectives.sort_values(S.START).reset_index(drop=True)
    assert co[S.MATCH_KEY].tolist() == ["3|17", "0,1|AllGather|0", "0,1|AllGather|1"]
    assert co[S.COLL_OP].tolist() == ["AllReduce", "AllGather", "AllGather"]
    assert co[S.GROUP].tolist() == ["0,1,2,3", "0,1", "0,1"]
    assert co[S.SEQ].tolist() == [17, -1, -1]
    assert co[S.BYTES].tolist()[:2] == [2048.0, 4096.0] and np.isnan(co[S.BYTES].iat[2])
    assert co[S.ALGORITHM].tolist() == ["TREE", "RING", "RING"]
    assert co[S.DTYPE].tolist() == ["BFloat16", "int8_t", "int8_t"]
    assert (co[S.ARRIVAL] == co[S.START]).all() and co[S.END].tolist() == [60_000, 140_000, 240_000]
    assert co[S.ALGBW].isna().all() and co[S.BUSBW].isna().all()


def test_generic_flows_bind_to_enclosing_or_next_slices(tmp_path):
    def flow(ph, fid, ts, tid, **extra):
        return {
            "ph": ph,
            "id": fid,
            "cat": "x",
            "name": "f",
            "pid": 1,
            "tid": tid,
            "ts": ts,
            **extra,
        }

    events = [
        X("cpu_op", "A", 10, 10, pid=1, tid=1),
        X("cpu_op", "A.child", 12, 3, pid=1, tid=1),
        X("cpu_op", "B", 30, 10, pid=1, tid=2),
        X("cpu_op", "C", 50, 10, pid=1, tid=2),
        flow("s", 1, 13, 1),  # inside A.child
        flow("t", 1, 35, 2),  # inside B
        flow("f", 1, 45, 2),  # no bp: the next slice, C
        flow("s", 2, 18, 1),  # A (its child ended at 15)
        flow("f", 2, 30, 2, bp="e"),  # B starts here
        flow("s", 3, 100, 1),  # no slice there
        flow("f", 3, 31, 2, bp="e"),
        {"ph": "s", "id": 9, "cat": "ac2g", "name": "ac2g", "pid": 1, "tid": 1, "ts": 13},
        {
            "ph": "f",
            "id": 9,
            "cat": "ac2g",
            "name": "ac2g",
            "pid": 1,
            "tid": 2,
            "ts": 30,
            "bp": "e",
        },
    ]
    part, trace = read_one(write(tmp_path / "flows.json", {"traceEvents": events}))
    flows = trace.edges[trace.edges[S.EDGE_KIND] == "flow"]
    names = trace.events[S.NAME].astype(str).to_numpy()
    assert sorted(zip(names[flows[S.SRC]], names[flows[S.DST]], strict=True)) == [
        ("A", "B"),
        ("A.child", "B"),
        ("B", "C"),
    ]
    assert part.meta.repairs == {"flow points bound to no slice: skipped": 1}
