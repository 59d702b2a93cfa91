"""Clean-room writer of PyTorch profiler (Kineto) Chrome-trace fixtures with a known truth.

Written only from ``shared/reference/chrome-trace.md`` (plus ``peers.md``) and from the layout of
the real public traces in ``shared/traces/`` (key names, categories, arg names, metadata events),
WITHOUT reading the project's readers, parsers, rules or tests. It imports nothing from
tracediag: only the standard library and numpy.

What it does: it simulates a small distributed training job with a discrete-event schedule and
writes one Kineto trace per rank (``rank-<r>.json`` or ``.json.gz``) plus ``truth.json``.

The simulation, per rank:

* a CPU main thread runs nested ``cpu_op`` ranges (``aten::...``) that call ``cudaLaunchKernel``
  / ``cudaMemcpyAsync`` (``cuda_runtime``); optionally the backward pass runs on an autograd
  thread (``pt_autograd_0``) while the main thread is blocked in ``run_backward``;
* GPU work goes to FIFO streams: compute stream 7, NCCL stream 20 (or stream 7 itself). A GPU op
  starts at ``max(launch + launch latency, end of the previous op on its stream, end of every op
  it waits for on other streams + event latency)``;
* a collective (``allreduce``, ``all_to_all``, ``send``/``recv``) is one NCCL kernel per
  participant. Its arrival on a rank is the kernel start; on every participant it ENDS at the same
  true instant ``max(arrivals) + transfer time``. A late rank therefore makes the others wait
  inside their NCCL kernels;
* ``cudaStreamSynchronize`` / ``cudaDeviceSynchronize`` block the CPU until the GPU drains;
  the ranks are simulated together, so a blocked rank resumes only when the collectives it waits
  for have been reached by all peers.

Everything in the truth is computed from the simulation, never by reading the written files.
``straggler_saving_ns`` comes from re-running the same simulation (same random draws) with the
injected slowdown removed.

Times: the simulation works in integer nanoseconds of a "true" clock. A rank's own clock is
``true + clock_offset_ns[rank]`` and its trace's ``ts``/``dur`` are that local clock in
microseconds (float with 3 decimals, or integers when ``ts_style="int"``, in which case every
simulated duration is a whole microsecond so nothing is rounded). Rank 0's offset is always 0, so
the true clock is rank 0's clock. ``baseTimeNanoseconds`` is metadata only; truth ignores it.

Public API: :func:`write_job`, :data:`SCENARIOS`, :data:`SCENARIO_NOTES`, :func:`write_scenario`.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import statistics
from collections import deque

import numpy as np

__all__ = ["DEFAULTS", "SCENARIOS", "SCENARIO_NOTES", "write_job", "write_scenario"]

COMPUTE_STREAM = 7

# Every keyword write_job accepts (besides out_dir), with its default.
DEFAULTS: dict = {
    "ranks": 4,
    "steps": 3,
    "seed": 0,
    # workload
    "model": "ddp",  # "ddp" (all_reduce buckets) | "dlrm" (all_to_all + all_reduce) | "pipeline"
    "layers": 6,
    "dtype": "f32",  # "f32" | "bf16"
    "buckets": 2,  # DDP gradient buckets per step
    "metric_allreduce": True,  # DDP: 1-element all_reduce of the loss after the optimizer
    "warmup": True,  # first step is a slower warm-up
    "loss_sync": True,  # loss.item() after the forward (cudaStreamSynchronize)
    "step_end_sync": True,  # torch.cuda.synchronize() at the end of every step
    "first_step": 10,  # N of the first ProfilerStep#N
    # injected slowness
    "straggler_rank": None,  # this rank's compute kernels are slowed by straggler_factor
    "straggler_factor": 1.0,
    "host_delay_rank": None,  # this rank sleeps host_delay_ns on the CPU before each backward
    "host_delay_ns": 0,
    "host_delay_steps": None,  # None: every step; else a list of step indexes (0-based)
    "late_rank": None,  # this rank's last kernel before the step's first collective is longer
    "late_ns": 0,
    "clock_offsets": None,  # None (all 0) | "random" | list of ns per rank (rank 0 forced to 0)
    # streams and collectives
    "coll_stream": 20,  # NCCL stream; 7 puts collectives on the compute stream
    "nccl_naming": "dev",  # "dev": ncclDevKernel_*; "legacy": ncclKernel_*
    "coll_args": "full",  # "full" (with Seq) | "minimal" (no Seq) | "none" (no collective args)
    "kernel_coll_args": True,  # also put the collective args on the NCCL kernels
    # what the profiler recorded
    "cuda_sync": True,  # cuda_sync activity records ("Stream Wait Event", "Stream Sync", ...)
    "wait_event_runtime": True,  # cudaEventRecord / cudaStreamWaitEvent runtime calls
    "flows": True,  # ac2g s/f flow events
    "correlation": True,  # "correlation" args on runtime and GPU events
    "external_id": "op",  # GPU/runtime "External id": "op" (enclosing op) | "corr" | None
    "gpu_user_annotation": True,
    "autograd_thread": False,  # backward on a second thread (pt_autograd_0)
    "python_stack": False,  # python_function events (main thread blocked in run_backward)
    "fwdbwd_flows": False,
    # file format
    "dist_info": "full",  # "full" | "basic" | None (no distributedInfo: rank from file name)
    "container": "object",  # "object": {"traceEvents": [...]} | "list": bare list
    "ts_style": "float",  # "float" (sub-µs fractions) | "int" (whole µs)
    "id_style": "int",  # "int" | "str" (pid/tid strings) | "str_stream" (GPU tid "stream 7")
    "gzip": False,
    "file_pattern": "rank-{rank}.json",  # ".gz" is appended when gzip
    "event_order": "kineto",  # "kineto" | "sorted" | "shuffled"
}

SCENARIOS: dict[str, dict] = {
    "clean": {},
    "straggler_compute": {
        "straggler_rank": 2,
        "straggler_factor": 1.35,
        "clock_offsets": "random",
        "nccl_naming": "legacy",
        "gzip": True,
    },
    "straggler_host": {
        "host_delay_rank": 1,
        "host_delay_ns": 5_000_000,
        "clock_offsets": "random",
        "ts_style": "int",
        "id_style": "str",
        "cuda_sync": False,
        "coll_args": "minimal",
        "external_id": "corr",
    },
    "cross_stream_wait": {
        "cuda_sync": False,
        "wait_event_runtime": False,
        "dtype": "bf16",
        "event_order": "sorted",
    },
    "autograd_thread": {
        "autograd_thread": True,
        "python_stack": True,
        "fwdbwd_flows": True,
        "dist_info": "basic",
        "kernel_coll_args": False,
    },
    "all_to_all_dlrm_like": {
        "ranks": 8,
        "model": "dlrm",
        "late_rank": 5,
        "late_ns": 1_500_000,
        "clock_offsets": "random",
        "gzip": True,
    },
    "no_flows_no_dist_info": {
        "flows": False,
        "correlation": False,
        "dist_info": None,
        "container": "list",
        "cuda_sync": False,
        "coll_args": "none",
        "gzip": True,
        "event_order": "shuffled",
    },
    "pipeline_sendrecv_compute_stream": {
        "model": "pipeline",
        "coll_stream": COMPUTE_STREAM,
        "layers": 3,
        "warmup": False,
        "first_step": 1,
        "external_id": None,
    },
    "legacy_worker_files": {
        "file_pattern": "worker{rank}.pt.trace.json",
        "dist_info": None,
        "id_style": "str_stream",
        "ts_style": "int",
        "nccl_naming": "legacy",
        "coll_args": "none",
        "gpu_user_annotation": False,
        "cuda_sync": False,
        "straggler_rank": 3,
        "straggler_factor": 1.2,
    },
}

SCENARIO_NOTES: dict[str, str] = {
    "clean": "4-rank DDP, balanced, no straggler; all records present, float ts, object container",
    "straggler_compute": "rank 2 GPU kernels x1.35; clock offsets; legacy ncclKernel_ names; gzip",
    "straggler_host": "rank 1 sleeps 5 ms on the CPU before every backward; int ts; string "
    "pid/tid; no cuda_sync; collective args without Seq; External id == correlation",
    "cross_stream_wait": "optimizer kernels wait for the last all_reduce on the NCCL stream with "
    "no cuda_sync record and no cudaStreamWaitEvent call; bf16; time-sorted events",
    "autograd_thread": "backward launched by a pt_autograd_0 thread while the main thread is "
    "blocked in run_backward; python_function + fwdbwd flows; basic distributedInfo",
    "all_to_all_dlrm_like": "8-rank DLRM-like step: all_to_all fwd/bwd + all_reduce; rank 5 "
    "arrives 1.5 ms late at the first all_to_all (longer embedding lookup); clock offsets",
    "no_flows_no_dist_info": "no ac2g flows, no correlation args, no distributedInfo (bare list, "
    "rank only from the file name), no cuda_sync, no collective args, shuffled events, gzip",
    "pipeline_sendrecv_compute_stream": "4-stage pipeline: send/recv NCCL kernels on the compute "
    "stream 7; no GPU External id",
    "legacy_worker_files": "worker<r>.pt.trace.json names, no distributedInfo, GPU tid "
    "'stream 7' strings, int ts, legacy NCCL names, rank 3 compute x1.2",
}

_DTYPES = {
    # name: (torch dtype, bytes per element, NCCL short name, legacy NCCL C type, Input type)
    "f32": ("Float", 4, "f32", "float", "float"),
    "bf16": ("BFloat16", 2, "bf16", "__nv_bfloat16", "c10::BFloat16"),
}

_RT_CBID = {
    "cudaLaunchKernel": 211,
    "cudaLaunchKernelExC": 430,
    "cudaMemcpyAsync": 41,
    "cudaStreamSynchronize": 131,
    "cudaDeviceSynchronize": 165,
    "cudaEventRecord": 135,
    "cudaStreamWaitEvent": 147,
    "cudaMalloc": 20,
}

_SM90 = "sm90_xmma_gemm_{d}{d}_{d}f32_f32_{t}_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"  # noqa: E501
_K_RELU = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::"
    "launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, "
    "at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}::operator()"
    "() const::{lambda(float)#1}, std::array<char*, 2ul> >(int, at::native::(anonymous namespace)"
    "::launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::native::detail"
    "::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}::operator()() const::"
    "{lambda(float)#1}, std::array<char*, 2ul>)"
)
_K_THRESH = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::"
    "threshold_kernel_impl<float>(at::TensorIteratorBase&, float, float)::{lambda(float, float)"
    "#1}, std::array<char*, 3ul> >(int, at::native::(anonymous namespace)::threshold_kernel_impl"
    "<float>(at::TensorIteratorBase&, float, float)::{lambda(float, float)#1}, std::array<char*, "
    "3ul>)"
)
_K_SUM = (
    "void at::native::reduce_kernel<128, 4, at::native::ReduceOp<float, at::native::"
    "func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::"
    "TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4, 4> >(at::native::"
    "ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, "
    "float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4, "
    "4>)"
)
_K_MSE = (
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<"
    "float, float, float, float>, unsigned int, float, 4, 4> >(at::native::ReduceOp<float, "
    "at::native::MeanOps<float, float, float, float>, unsigned int, float, 4, 4>)"
)
_K_MSE_BWD = (
    "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::"
    "mse_backward_cuda_kernel(at::TensorIterator&, c10::Scalar const&)::{lambda()#1}::operator()"
    "() const::{lambda()#4}::operator()() const::{lambda(float, float, float)#1}>(at::"
    "TensorIteratorBase&, at::native::mse_backward_cuda_kernel(at::TensorIterator&, c10::Scalar "
    "const&)::{lambda()#1}::operator()() const::{lambda()#4}::operator()() const::{lambda(float, "
    "float, float)#1} const&)::{lambda(int)#1}>(int, at::native::gpu_kernel_impl_nocast<at::"
    "native::mse_backward_cuda_kernel(at::TensorIterator&, c10::Scalar const&)::{lambda()#1}::"
    "operator()() const::{lambda()#4}::operator()() const::{lambda(float, float, float)#1}>(at::"
    "TensorIteratorBase&, at::native::mse_backward_cuda_kernel(at::TensorIterator&, c10::Scalar "
    "const&)::{lambda()#1}::operator()() const::{lambda()#4}::operator()() const::{lambda(float, "
    "float, float)#1} const&)::{lambda(int)#1})"
)
_K_ADAM = (
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous "
    "namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<"
    "float, 4, (at::native::ADAM_MODE)0, false>, double*, double, double, double, double, double,"
    " bool, bool*, bool*>(at::native::(anonymous namespace)::TensorListMetadata<4>, at::native::"
    "(anonymous namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)0, false>, "
    "double*, double, double, double, double, double, bool, bool*, bool*)"
)
_K_EMB_FWD = (
    "void fbgemm_gpu::split_embedding_codegen_forward_unweighted_kernel<float, float, float, "
    "long, 256, 32, 4>(at::GenericPackedTensorAccessor<float, 1ul, at::RestrictPtrTraits, long>,"
    " at::GenericPackedTensorAccessor<long, 1ul, at::RestrictPtrTraits, int>, long, at::"
    "GenericPackedTensorAccessor<float, 2ul, at::RestrictPtrTraits, int>)"
)
_K_EMB_BWD = (
    "void fbgemm_gpu::split_embedding_backward_codegen_sgd_unweighted_kernel_cta_per_row_1<"
    "float, float, float, long, 4, 32>(at::GenericPackedTensorAccessor<float, 2ul, at::"
    "RestrictPtrTraits, int>, at::GenericPackedTensorAccessor<float, 1ul, at::RestrictPtrTraits,"
    " long>, long)"
)
_K_BMM = "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize64x64x32_warpgroupsize1x1x1_batched_execute_segment_k_off_kernel__5x_cublas"  # noqa: E501

_DEVICE_PROPS = {
    "name": "NVIDIA H100 80GB HBM3",
    "totalGlobalMem": 85018279936,
    "computeMajor": 9,
    "computeMinor": 0,
    "maxThreadsPerBlock": 1024,
    "maxThreadsPerMultiprocessor": 2048,
    "regsPerBlock": 65536,
    "warpSize": 32,
    "sharedMemPerBlock": 49152,
    "numSms": 132,
    "regsPerMultiprocessor": 65536,
    "sharedMemPerBlockOptin": 232448,
    "sharedMemPerMultiprocessor": 233472,
}


class _Op:
    """One GPU activity (kernel, memcpy) on one stream of one rank."""

    __slots__ = (
        "rank",
        "stream",
        "name",
        "cat",
        "kind",
        "dur",
        "ready",
        "lat",
        "deps",
        "start",
        "end",
        "corr",
        "ext",
        "args",
        "coll",
        "step",
        "rt",
        "bound_by_wait",
        "annot",
        "waits",
        "prev",
    )

    def __init__(self, **kw):
        for k in self.__slots__:
            setattr(self, k, kw.get(k))


class _Rank:
    """CPU-side state of one rank while its program runs."""

    def __init__(self, job, r):
        self.job = job
        self.r = r
        self.o = job.o
        self.q = job.q
        self.rng = np.random.default_rng([job.seed, 11, r])
        self.t = 0
        self.thread = "main"
        self.stack: list[dict] = []
        self.cpu: list[dict] = []
        self.rt: list[dict] = []
        self.gpu: list[_Op] = []
        self.syncs: list[dict] = []
        self.queues: dict[int, deque] = {}
        self.last_on: dict[int, _Op] = {}
        self.pending: dict[int, list] = {}
        self.corr = 3000 + 17 * r
        self.ext = 0
        self.ev_idx = 0
        self.seq: dict[str, int] = {}
        self.p2p_count: dict[tuple, int] = {}
        self.p2p_seq = 0
        self.step = -1
        self.warm = False
        self.waits: list[dict] = []
        self.idle: list[dict] = []
        self.host_delays: list[dict] = []
        self.fwd_seq: dict[int, dict] = {}
        self.fwdbwd: list[tuple] = []
        self.seqnr = 100
        self.late_armed = False
        self.colls: list[_Op] = []

    # ------------------------------------------------------------------ random draws
    def u(self, lo_us, hi_us):
        return self.q(self.rng.uniform(lo_us, hi_us) * 1000.0)

    def cpu_cost(self, lo_us, hi_us):
        c = self.u(lo_us, hi_us)
        if self.warm:
            c = self.q(c * 2.5)
        return c

    # ------------------------------------------------------------------ CPU ranges
    @contextlib.contextmanager
    def op(self, name, cat="cpu_op", args=None, pre=(2.0, 7.0), post=(1.0, 4.0)):
        self.ext += 1
        ev = {
            "name": name,
            "cat": cat,
            "thread": self.thread,
            "start": self.t,
            "ext": self.ext,
            "idx": self.ev_idx,
            "args": dict(args or {}),
            "step": self.step,
        }
        self.ev_idx += 1
        self.t += self.cpu_cost(*pre)
        self.stack.append(ev)
        try:
            yield ev
        finally:
            self.stack.pop()
            self.t += self.cpu_cost(*post)
            ev["end"] = self.t
            self.cpu.append(ev)

    def _next_corr(self):
        self.corr += 1 + int(self.rng.integers(0, 3))
        return self.corr

    def _ext_for(self, corr):
        mode = self.o["external_id"]
        if mode == "corr":
            return corr
        if mode == "op" and self.stack:
            return self.stack[-1]["ext"]
        return None

    def runtime(self, name, lo=2.0, hi=6.0):
        corr = self._next_corr()
        ev = {
            "name": name,
            "thread": self.thread,
            "start": self.t,
            "corr": corr,
            "ext": self._ext_for(corr),
            "gpu": None,
            "sync": None,
            "step": self.step,
        }
        self.t += self.cpu_cost(lo, hi)
        ev["end"] = self.t
        self.rt.append(ev)
        return ev

    # ------------------------------------------------------------------ GPU launches
    def launch(
        self,
        name,
        dur_ns,
        stream=COMPUTE_STREAM,
        kind="kernel",
        rt_name="cudaLaunchKernel",
        coll=None,
        late_target=False,
        nbytes=None,
        grid=(1024, 1, 1),
        block=(256, 1, 1),
    ):
        rt_start = self.t
        jitter = 1.0 + self.rng.uniform(-0.01, 0.01)
        lat = self.u(4.0, 11.0)
        ev_lat = self.u(0.8, 2.5)
        rt = self.runtime(rt_name, 3.0, 9.0)
        if dur_ns is not None:
            d = dur_ns * jitter
            if self.warm:
                d *= 1.25
            if kind == "kernel" and self.r == self.o["straggler_rank"]:
                d *= self.o["straggler_factor"]
            if late_target and self.r == self.o["late_rank"]:
                d += self.o["late_ns"]
            dur_ns = max(self.q(d), self.q(1000))
        cat = {"kernel": "kernel", "nccl": "kernel", "memcpy": "gpu_memcpy"}[kind]
        op = _Op(
            rank=self.r,
            stream=stream,
            name=name,
            cat=cat,
            kind=kind,
            dur=dur_ns,
            ready=rt_start + lat,
            lat=ev_lat,
            deps=[],
            corr=rt["corr"],
            ext=rt["ext"],
            coll=coll,
            step=self.step,
            rt=rt,
            args={"grid": list(grid), "block": list(block), "bytes": nbytes},
            waits=[],
        )
        for target, wrec in self.pending.pop(stream, []):
            op.deps.append(target)
            op.waits.append(wrec)
            wrec["first"] = op
        rt["gpu"] = op
        op.prev = self.last_on.get(stream)
        self.last_on[stream] = op
        self.queues.setdefault(stream, deque()).append(op)
        self.gpu.append(op)
        if coll is not None:
            self.colls.append(op)
            self.job.register_coll(op)
        return op

    def kernel(self, name, dur_us, late_target=False, **kw):
        return self.launch(name, dur_us * 1000.0, late_target=late_target, **kw)

    def memcpy(self, direction, nbytes, gbps):
        name = {
            "HtoD": "Memcpy HtoD (Pageable -> Device)",
            "DtoH": "Memcpy DtoH (Device -> Pageable)",
        }[direction]
        dur = max(nbytes / gbps, 1500.0)
        return self.launch(
            name, dur, kind="memcpy", rt_name="cudaMemcpyAsync", nbytes=nbytes, grid=(0, 0, 0)
        )

    def stream_wait(self, waiter, waited, what=""):
        """The next op launched on `waiter` waits for the last op launched so far on `waited`."""
        if waiter == waited:
            return
        target = self.last_on.get(waited)
        if target is None:
            return
        o = self.o
        rec = None
        has_rt = bool(o["wait_event_runtime"] or o["cuda_sync"])
        if has_rt:
            rec = self.runtime("cudaEventRecord", 1.0, 4.0)
            wt = self.runtime("cudaStreamWaitEvent", 1.0, 4.0)
            if o["cuda_sync"]:
                wt["sync"] = {
                    "name": "Stream Wait Event",
                    "stream": waiter,
                    "start": wt["start"] + self.q(1000),
                    "end": wt["end"] + self.q(1000),
                    "args": {
                        "cuda_sync_kind": "Stream Wait Event",
                        "wait_on_stream": waited,
                        "wait_on_cuda_event_record_corr_id": rec["corr"],
                        "wait_on_cuda_event_id": len(self.waits) + 1,
                    },
                }
        wrec = {
            "waiter_stream": waiter,
            "waited_stream": waited,
            "target": target,
            "first": None,
            "call_ns": self.t,
            "has_sync_record": bool(o["cuda_sync"]),
            "has_wait_event_runtime": has_rt,
            "what": what,
            "step": self.step,
        }
        self.waits.append(wrec)
        self.pending.setdefault(waiter, []).append((target, wrec))

    def blocking_sync(self, stream=None):
        """cudaStreamSynchronize(stream) or, with stream None, cudaDeviceSynchronize()."""
        name = "cudaStreamSynchronize" if stream is not None else "cudaDeviceSynchronize"
        start = self.t
        corr = self._next_corr()
        drain = yield ("stream", stream) if stream is not None else ("device", None)
        end = max(start + self.u(2.0, 5.0), drain + self.u(2.0, 6.0))
        ev = {
            "name": name,
            "thread": self.thread,
            "start": start,
            "end": end,
            "corr": corr,
            "ext": self._ext_for(corr),
            "gpu": None,
            "sync": None,
            "step": self.step,
        }
        if self.o["cuda_sync"]:
            kind = "Stream Sync" if stream is not None else "Context Sync"
            ev["sync"] = {
                "name": kind,
                "stream": stream if stream is not None else -1,
                "start": start + self.q(1000),
                "end": end,
                "args": {"cuda_sync_kind": kind},
            }
        self.rt.append(ev)
        self.t = end


class _Job:
    """One simulation of the whole job (all ranks together)."""

    def __init__(self, o):
        self.o = o
        self.seed = int(o["seed"])
        self.W = int(o["ranks"])
        self.quantum = 1000 if o["ts_style"] == "int" else 1
        self.model_rng = np.random.default_rng([self.seed, 22])
        self.coll_table: dict[tuple, dict] = {}
        self.ranks = [_Rank(self, r) for r in range(self.W)]
        self._build_model()

    def q(self, x):
        qn = self.quantum
        return int(round(float(x) / qn)) * qn

    # ------------------------------------------------------------------ model
    def _build_model(self):
        o, g = self.o, self.model_rng
        L = int(o["layers"])
        self.h = 2048
        self.batch = 4096
        self.fwd_us = [float(g.uniform(450, 650)) for _ in range(L)]
        self.relu_us = [float(g.uniform(40, 60)) for _ in range(L)]
        self.params = [self.h * self.h + self.h for _ in range(L)]
        nb = max(1, min(int(o["buckets"]), L))
        order = list(range(L - 1, -1, -1))
        size = -(-L // nb)
        self.bucket_layers = [order[i : i + size] for i in range(0, L, size)]
        self.adam_us = float(g.uniform(300, 450))
        # dlrm parts
        self.emb_us = float(g.uniform(650, 800))
        self.emb_bwd_us = float(g.uniform(700, 900))
        self.bot_us = [float(g.uniform(120, 180)) for _ in range(3)]
        self.top_us = [float(g.uniform(200, 300)) for _ in range(3)]
        self.a2a_nelems = 2048 * 26 * 128
        self.dense_params = [1_200_000, 3_400_000]

    def transfer_ns(self, op, nbytes, n):
        if op == "allreduce":
            t = 18_000 + 2.0 * (n - 1) / n * nbytes / 150.0
        elif op == "all_to_all":
            t = 25_000 + (n - 1) / n * nbytes / 120.0
        else:
            t = 12_000 + nbytes / 200.0
        return self.q(t)

    def register_coll(self, op):
        inst = self.coll_table.setdefault(op.coll["key"], {"ops": {}, "meta": op.coll})
        inst["ops"][op.rank] = op

    # ------------------------------------------------------------------ engine
    def run(self):
        gens = [self._program(rk) for rk in self.ranks]
        req: list = [None] * self.W
        done = [False] * self.W

        def advance(r, value):
            try:
                req[r] = gens[r].send(value)
            except StopIteration:
                done[r] = True
                req[r] = None

        for r in range(self.W):
            advance(r, None)
        while not all(done):
            self._resolve()
            progressed = False
            for r in range(self.W):
                if done[r]:
                    continue
                what, stream = req[r]
                rk = self.ranks[r]
                streams = [stream] if what == "stream" else list(rk.queues)
                if any(rk.queues.get(s) for s in streams):
                    continue
                ends = [rk.last_on[s].end for s in streams if s in rk.last_on]
                advance(r, max(ends) if ends else 0)
                progressed = True
            if not progressed and not all(done):
                raise RuntimeError("simulation deadlock (collective order differs across ranks?)")
        self._resolve()
        for rk in self.ranks:
            if any(rk.queues.values()):
                raise RuntimeError("unresolved GPU work at the end of the simulation")
        return self

    def _resolve(self):
        changed = True
        while changed:
            changed = False
            for rk in self.ranks:
                for q in rk.queues.values():
                    while q:
                        op = q[0]
                        if op.start is None:
                            if not self._try_start(op, rk):
                                break
                            changed = True
                        if op.end is None:
                            if op.coll is None:
                                op.end = op.start + op.dur
                            else:
                                inst = self.coll_table[op.coll["key"]]
                                parts = op.coll["participants"]
                                ops = inst["ops"]
                                if len(ops) < len(parts) or any(
                                    ops[p].start is None for p in parts
                                ):
                                    break
                                end = max(ops[p].start for p in parts) + op.coll["transfer"]
                                for p in parts:
                                    ops[p].end = end
                                    ops[p].dur = end - ops[p].start
                            changed = True
                        q.popleft()

    @staticmethod
    def _try_start(op, rk):
        for d in op.deps:
            if d.end is None:
                return False
        # FIFO stream: op is at the head of its queue, so the previous op there has ended
        prev_end = op.prev.end if op.prev is not None else 0
        c_dep = max((d.end + op.lat for d in op.deps), default=0)
        op.start = max(op.ready, prev_end, c_dep)
        op.bound_by_wait = bool(op.deps) and c_dep > max(op.ready, prev_end)
        return True

    # ------------------------------------------------------------------ programs
    def _program(self, rk):
        o = self.o
        model = o["model"]
        step_fn = {"ddp": self._ddp_step, "dlrm": self._dlrm_step, "pipeline": self._pp_step}[model]
        rk.t = self.q(rk.rng.uniform(80, 160) * 1000.0)
        for s in range(int(o["steps"])):
            rk.step = s
            rk.warm = bool(o["warmup"]) and s == 0
            name = f"ProfilerStep#{int(o['first_step']) + s}"
            with rk.op(name, "user_annotation", pre=(8, 20), post=(1, 3)) as st:
                st["is_step"] = True
                yield from step_fn(rk, s)
            rk.t += rk.u(3, 9)

    # shared building blocks -------------------------------------------------------
    def _data(self, rk, nbytes=4 << 20):
        with rk.op(
            "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "user_annotation"
        ):
            rk.t += rk.cpu_cost(60, 120)
        with rk.op("aten::to"), rk.op("aten::_to_copy"), rk.op("aten::copy_"):
            rk.memcpy("HtoD", nbytes, 24.0)

    def _gemm_name(self, t):
        return _SM90.format(d=_DTYPES[self.o["dtype"]][2], t=t)

    def _seqnr(self, rk):
        rk.seqnr += 1
        return rk.seqnr

    def _linear_fwd(self, rk, li, us, name="aten::linear"):
        sn = self._seqnr(rk)
        with rk.op(name, args={"Sequence number": sn, "Fwd thread id": 0}) as ev:
            with rk.op("aten::t"), rk.op("aten::transpose"):
                pass
            dims = [[self.batch, self.h], [self.h, self.h], [self.h]]
            itype = _DTYPES[self.o["dtype"]][4]
            with rk.op("aten::addmm", args={"Input Dims": dims, "Input type": [itype] * 3}):
                if rk.warm and li < 2:
                    rk.runtime("cudaMalloc", 150, 400)
                rk.kernel(self._gemm_name("tn"), us, grid=(16, 32, 1), block=(384, 1, 1))
        rk.fwd_seq[sn] = ev
        return sn

    def _relu_fwd(self, rk, us):
        sn = self._seqnr(rk)
        with (
            rk.op("aten::relu", args={"Sequence number": sn, "Fwd thread id": 0}) as ev,
            rk.op("aten::clamp_min"),
        ):
            rk.kernel(_K_RELU, us, grid=(8192, 1, 1), block=(128, 1, 1))
        rk.fwd_seq[sn] = ev
        return sn

    def _eval_fn(self, rk, bwd_name, sn):
        return rk.op(
            f"autograd::engine::evaluate_function: {bwd_name}",
            args={"Sequence number": sn, "Fwd thread id": 1},
        )

    def _bwd_link(self, rk, sn, ev):
        fwd = rk.fwd_seq.get(sn)
        if fwd is not None:
            rk.fwdbwd.append((fwd, ev))

    def _relu_bwd(self, rk, sn, us):
        with self._eval_fn(rk, "ReluBackward0", sn) as ev:
            self._bwd_link(rk, sn, ev)
            with (
                rk.op("ReluBackward0", args={"Sequence number": sn, "Fwd thread id": 1}),
                rk.op("aten::threshold_backward"),
            ):
                rk.kernel(_K_THRESH, us * 1.2, grid=(8192, 1, 1), block=(128, 1, 1))

    def _linear_bwd(self, rk, sn, li, us, late_target=False, dgrad=True):
        with self._eval_fn(rk, "AddmmBackward0", sn) as ev:
            self._bwd_link(rk, sn, ev)
            with rk.op("AddmmBackward0", args={"Sequence number": sn, "Fwd thread id": 1}):
                if dgrad:
                    with rk.op("aten::mm"):
                        rk.kernel(self._gemm_name("nn"), us, grid=(16, 32, 1), block=(384, 1, 1))
                with rk.op("aten::mm"):
                    rk.kernel(
                        self._gemm_name("nt"),
                        us * 1.05,
                        late_target=late_target,
                        grid=(16, 16, 1),
                        block=(384, 1, 1),
                    )
                with rk.op("aten::sum"):
                    rk.kernel(_K_SUM, 25.0, grid=(512, 1, 1), block=(128, 1, 1))
        for _ in range(2):
            with (
                rk.op("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad"),
                rk.op("torch::autograd::AccumulateGrad"),
                rk.op("aten::detach"),
            ):
                pass

    def _loss(self, rk):
        sn = self._seqnr(rk)
        with rk.op("aten::mse_loss", args={"Sequence number": sn, "Fwd thread id": 0}) as ev:
            rk.kernel(_K_MSE, 18.0, grid=(1, 1, 1), block=(512, 1, 1))
        rk.fwd_seq[sn] = ev
        return sn

    def _loss_bwd(self, rk, sn):
        with self._eval_fn(rk, "MseLossBackward0", sn) as ev:
            self._bwd_link(rk, sn, ev)
            with rk.op("MseLossBackward0"), rk.op("aten::mse_loss_backward"):
                rk.kernel(_K_MSE_BWD, 22.0, grid=(4096, 1, 1), block=(128, 1, 1))

    def _item(self, rk):
        with rk.op("aten::item"), rk.op("aten::_local_scalar_dense"):
            rk.memcpy("DtoH", 4, 0.002)
            yield from rk.blocking_sync(COMPUTE_STREAM)

    def _host_delay(self, rk, s):
        o = self.o
        if rk.r != o["host_delay_rank"] or not o["host_delay_ns"]:
            return
        steps = o["host_delay_steps"]
        if steps is not None and s not in steps:
            return
        start = rk.t
        rk.t += self.q(o["host_delay_ns"])
        rk.host_delays.append({"step": s, "start": start, "end": rk.t})

    @contextlib.contextmanager
    def _backward_ctx(self, rk, s):
        """Main thread enters run_backward; with autograd_thread the ops go to a second tid."""
        o = self.o
        block_start = rk.t
        with contextlib.ExitStack() as es:
            if o["python_stack"]:
                es.enter_context(rk.op("torch/_tensor.py(570): backward", "python_function"))
                es.enter_context(
                    rk.op("torch/autograd/__init__.py(242): backward", "python_function")
                )
                es.enter_context(
                    rk.op(
                        "<built-in method run_backward of torch._C._EngineBase object at "
                        "0x7f4f85497ec0>",
                        "python_function",
                    )
                )
            if o["autograd_thread"]:
                rk.t += rk.u(15, 40)
                rk.thread = "autograd"
            try:
                yield
            finally:
                if o["autograd_thread"]:
                    rk.thread = "main"
                    rk.t += rk.u(10, 30)
                    rk.idle.append({"step": s, "start": block_start, "end": rk.t})

    def _collective(self, rk, op, nelems, stream, peer=None, splits=None):
        o = self.o
        W = self.W
        tname, esize, nshort, nlegacy, itype = _DTYPES[o["dtype"]]
        nbytes = nelems * esize
        legacy = o["nccl_naming"] == "legacy"
        pg = "0"
        if op in ("send", "recv"):
            lo, hi = min(rk.r, peer), max(rk.r, peer)
            pair = (lo, hi)
            n = rk.p2p_count.get(pair, 0)
            rk.p2p_count[pair] = n + 1
            key = ("p2p", lo, hi, n)
            parts = [lo, hi]
            seq = rk.p2p_seq
            rk.p2p_seq += 1
            transfer = self.transfer_ns("p2p", nbytes, 2)
            kname = (
                "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)"
                if legacy
                else "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
            )
            if op == "send":
                outer, annot = "c10d::send", f"nccl:send {rk.r}->{peer}"
            else:
                outer, annot = "c10d::recv_", f"nccl:recv {rk.r}<-{peer}"
            cname = op
        else:
            seq = rk.seq.get(pg, int(o["first_step"]) * 8 + 1)
            rk.seq[pg] = seq + 1
            key = (pg, seq)
            parts = list(range(W))
            transfer = self.transfer_ns(op, nbytes, W)
            if op == "allreduce":
                proto = "LL" if nbytes < 65536 else ("LL128" if nbytes < (8 << 20) else "SIMPLE")
                if legacy:
                    kname = (
                        f"ncclKernel_AllReduce_RING_{proto}_Sum_{nlegacy}"
                        "(ncclDevComm*, unsigned long, ncclWork*)"
                    )
                else:
                    kname = (
                        f"ncclDevKernel_AllReduce_Sum_{nshort}_RING_{proto}"
                        "(ncclDevKernelArgsStorage<4096ul>)"
                    )
                outer, annot, cname = "c10d::allreduce_", "nccl:all_reduce", "allreduce"
            else:
                kname = (
                    "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, "
                    "ncclWork*)"
                    if legacy
                    else "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
                )
                outer, annot, cname = "c10d::alltoall_base_", "nccl:all_to_all", "all_to_all"
        ranks_str = "[" + ", ".join(str(x) for x in range(W)) + "]"
        split_str = "[]" if not splits else "[" + ", ".join(str(x) for x in splits) + "]"
        style = o["coll_args"]
        cargs: dict = {}
        if style in ("full", "minimal"):
            cargs = {
                "Collective name": cname,
                "dtype": tname,
                "In msg nelems": nelems,
                "Out msg nelems": nelems,
                "Group size": W,
                "Process Group Name": pg,
                "Process Group Ranks": ranks_str,
            }
            if style == "full":
                cargs.update(
                    {
                        "In msg size": nbytes,
                        "Out msg size": nbytes,
                        "In split size": split_str,
                        "Out split size": split_str,
                        "Global rank start": 0,
                        "Global rank stride": 1,
                        "Process Group Description": "default_pg",
                        "Rank": rk.r,
                        "Seq": seq,
                    }
                )
                if op == "send":
                    cargs["Dst Rank"] = peer
                elif op == "recv":
                    cargs["Src Rank"] = peer
        rpc_args = dict(cargs)
        rpc_args["Input Dims"] = [[nelems]]
        rpc_args["Input type"] = [itype]
        coll = {
            "key": key,
            "participants": parts,
            "transfer": transfer,
            "op": op if op not in ("send", "recv") else "send_recv",
            "cname": cname,
            "pg": pg,
            "seq": seq,
            "nelems": nelems,
            "nbytes": nbytes,
            "kernel_args": cargs if o["kernel_coll_args"] else {},
            "peer": peer,
        }
        with rk.op(outer), rk.op("record_param_comms", args=rpc_args):
            rk.stream_wait(stream, COMPUTE_STREAM, what=f"{cname} waits for compute")
            with rk.op(annot, "user_annotation") as ua:
                kop = rk.launch(
                    kname,
                    None,
                    stream=stream,
                    kind="nccl",
                    rt_name="cudaLaunchKernel" if legacy else "cudaLaunchKernelExC",
                    coll=coll,
                    grid=(16 if op != "allreduce" else 24, 1, 1),
                    block=(640, 1, 1),
                )
                kop.annot = ua
        return kop

    def _optimizer(self, rk, wait_stream):
        with rk.op("Optimizer.step#Adam.step", "user_annotation"):
            if wait_stream != COMPUTE_STREAM:
                rk.stream_wait(COMPUTE_STREAM, wait_stream, what="optimizer waits for all_reduce")
            with rk.op("aten::_fused_adam_"):
                rk.kernel(_K_ADAM, self.adam_us, grid=(320, 1, 1), block=(512, 1, 1))

    # DDP ------------------------------------------------------------------------
    def _ddp_step(self, rk, s):
        o = self.o
        L = int(o["layers"])
        cs = int(o["coll_stream"])
        with rk.op("Optimizer.zero_grad#Adam.zero_grad", "user_annotation"):
            pass
        self._data(rk)
        fsn = {}
        with rk.op("DistributedDataParallel.forward", "user_annotation"):
            for li in range(L):
                fsn[("lin", li)] = self._linear_fwd(rk, li, self.fwd_us[li])
                fsn[("relu", li)] = self._relu_fwd(rk, self.relu_us[li])
        lsn = self._loss(rk)
        if o["loss_sync"]:
            yield from self._item(rk)
        self._host_delay(rk, s)
        with self._backward_ctx(rk, s):
            self._loss_bwd(rk, lsn)
            for bi, bucket in enumerate(self.bucket_layers):
                for j, li in enumerate(bucket):
                    self._relu_bwd(rk, fsn[("relu", li)], self.relu_us[li])
                    self._linear_bwd(
                        rk,
                        fsn[("lin", li)],
                        li,
                        self.fwd_us[li],
                        late_target=(bi == 0 and j == len(bucket) - 1),
                        dgrad=(li != 0),
                    )
                nel = sum(self.params[x] for x in bucket)
                self._collective(rk, "allreduce", nel, cs)
        self._optimizer(rk, cs)
        if o["metric_allreduce"]:
            # dist.all_reduce(loss) for logging: a 1-element all_reduce (an LL-protocol kernel)
            self._collective(rk, "allreduce", 1, cs)
        if o["step_end_sync"]:
            yield from rk.blocking_sync(None)

    # DLRM -----------------------------------------------------------------------
    def _dlrm_step(self, rk, s):
        o = self.o
        cs = int(o["coll_stream"])
        W = self.W
        self._data(rk, 2 << 20)
        with rk.op("## forward ##", "user_annotation"):
            with (
                rk.op("## sparse_arch ##", "user_annotation"),
                rk.op("fbgemm::split_embedding_codegen_lookup_sgd_function"),
            ):
                rk.kernel(_K_EMB_FWD, self.emb_us, late_target=True, grid=(3328, 1, 1))
            with rk.op("## alltoall_fwd_single ##", "user_annotation"):
                splits = [self.a2a_nelems // W] * W
                self._collective(rk, "all_to_all", self.a2a_nelems, cs, splits=splits)
            bsn = [self._linear_fwd(rk, i, self.bot_us[i]) for i in range(3)]
            with rk.op("## PooledEmbeddingsAwaitable wait() ##", "user_annotation"):
                rk.stream_wait(COMPUTE_STREAM, cs, what="interaction waits for all_to_all")
            with rk.op("aten::bmm"):
                rk.kernel(_K_BMM, 110.0, grid=(64, 64, 1), block=(128, 1, 1))
            tsn = [self._linear_fwd(rk, i, self.top_us[i]) for i in range(3)]
        lsn = self._loss(rk)
        if o["loss_sync"]:
            yield from self._item(rk)
        self._host_delay(rk, s)
        with self._backward_ctx(rk, s):
            self._loss_bwd(rk, lsn)
            for i in (2, 1, 0):
                self._linear_bwd(rk, tsn[i], i, self.top_us[i])
            self._collective(rk, "allreduce", self.dense_params[1], cs)
            with self._eval_fn(rk, "BmmBackward0", self._seqnr(rk)), rk.op("aten::bmm"):
                rk.kernel(_K_BMM, 180.0, grid=(64, 64, 1), block=(128, 1, 1))
            with rk.op("## alltoall_bwd_single ##", "user_annotation"):
                splits = [self.a2a_nelems // W] * W
                self._collective(rk, "all_to_all", self.a2a_nelems, cs, splits=splits)
            for i in (2, 1, 0):
                self._linear_bwd(rk, bsn[i], i, self.bot_us[i], dgrad=(i != 0))
            self._collective(rk, "allreduce", self.dense_params[0], cs)
            with rk.op("## PooledEmbeddingsAwaitable wait() ##", "user_annotation"):
                rk.stream_wait(COMPUTE_STREAM, cs, what="embedding backward waits for all_to_all")
            with self._eval_fn(rk, "SplitLookupFunction_sgd_OpBackward", self._seqnr(rk)):
                rk.kernel(_K_EMB_BWD, self.emb_bwd_us, grid=(3328, 1, 1))
        self._optimizer(rk, cs)
        if o["step_end_sync"]:
            yield from rk.blocking_sync(None)

    # pipeline -------------------------------------------------------------------
    def _pp_step(self, rk, s):
        o = self.o
        cs = int(o["coll_stream"])
        W = self.W
        r = rk.r
        L = int(o["layers"])
        act = 2048 * 2048
        self._data(rk, 1 << 20)
        fsn = {}
        if r > 0:
            self._collective(rk, "recv", act, cs, peer=r - 1)
            rk.stream_wait(COMPUTE_STREAM, cs, what="stage waits for recv")
        with rk.op("## forward ##", "user_annotation"):
            for li in range(L):
                fsn[("lin", li)] = self._linear_fwd(rk, li, self.fwd_us[li])
                fsn[("relu", li)] = self._relu_fwd(rk, self.relu_us[li])
        lsn = None
        if r < W - 1:
            self._collective(rk, "send", act, cs, peer=r + 1)
        else:
            lsn = self._loss(rk)
            if o["loss_sync"]:
                yield from self._item(rk)
        self._host_delay(rk, s)
        with self._backward_ctx(rk, s):
            if r < W - 1:
                self._collective(rk, "recv", act, cs, peer=r + 1)
                rk.stream_wait(COMPUTE_STREAM, cs, what="stage backward waits for recv")
            else:
                self._loss_bwd(rk, lsn)
            for li in range(L - 1, -1, -1):
                self._relu_bwd(rk, fsn[("relu", li)], self.relu_us[li])
                self._linear_bwd(
                    rk, fsn[("lin", li)], li, self.fwd_us[li], late_target=(li == L - 1)
                )
            if r > 0:
                self._collective(rk, "send", act, cs, peer=r - 1)
        self._optimizer(rk, COMPUTE_STREAM)
        if o["step_end_sync"]:
            yield from rk.blocking_sync(None)


# ---------------------------------------------------------------------- interval helpers
def _union_len(intervals, lo, hi):
    """Length of the union of [a, b) intervals clipped to [lo, hi)."""
    iv = sorted((max(a, lo), min(b, hi)) for a, b in intervals if b > lo and a < hi)
    total = 0
    cur_a = cur_b = None
    for a, b in iv:
        if b <= a:
            continue
        if cur_b is None or a > cur_b:
            if cur_b is not None:
                total += cur_b - cur_a
            cur_a, cur_b = a, b
        else:
            cur_b = max(cur_b, b)
    if cur_b is not None:
        total += cur_b - cur_a
    return total


def _median(xs):
    xs = list(xs)
    return statistics.median(xs) if xs else 0


# ---------------------------------------------------------------------- truth
def _step_windows(rk):
    wins = {}
    for ev in rk.cpu:
        if ev.get("is_step"):
            wins[ev["step"]] = (ev["start"], ev["end"], ev["name"])
    return wins


def _step_metrics(job):
    """Per step, per rank: window and GPU occupancy, all in simulation ns."""
    out = {}
    for rk in job.ranks:
        wins = _step_windows(rk)
        for s, (a, b, name) in wins.items():
            ops = rk.gpu
            allv = [(op.start, op.end) for op in ops]
            comp = [(op.start, op.end) for op in ops if op.kind != "nccl"]
            nccl = [(op.start, op.end) for op in ops if op.kind == "nccl"]
            busy = _union_len(allv, a, b)
            cbusy = _union_len(comp, a, b)
            nbusy = _union_len(nccl, a, b)
            wait = sum(
                op.end - op.start - op.coll["transfer"]
                for op in ops
                if op.kind == "nccl" and op.step == s
            )
            delay = sum(d["end"] - d["start"] for d in rk.host_delays if d["step"] == s)
            idle = sum(d["end"] - d["start"] for d in rk.idle if d["step"] == s)
            out.setdefault(s, {})[rk.r] = {
                "name": name,
                "start": a,
                "end": b,
                "dur": b - a,
                "gpu_busy_ns": busy,
                "compute_busy_ns": cbusy,
                "nccl_busy_ns": nbusy,
                "exposed_comm_ns": busy - cbusy,
                "coll_wait_ns": wait,
                "host_delay_ns": delay,
                "main_thread_idle_ns": idle,
            }
    return out


def _step_times(job):
    m = _step_metrics(job)
    return [max(v["dur"] for v in m[s].values()) for s in sorted(m)]


class _Writer:
    """Turns a finished simulation into trace files and the truth dict."""

    def __init__(self, job, out_dir, scenario):
        self.job = job
        self.o = job.o
        self.out_dir = out_dir
        self.scenario = scenario
        g = np.random.default_rng([job.seed, 33])
        o = self.o
        W = job.W
        if o["ts_style"] == "int":
            self.T0 = int(g.integers(1_690_000_000, 1_760_000_000)) * 1_000_000_000
        else:
            self.T0 = int(g.integers(1_000_000, 3_500_000)) * 1_000_000_000 + int(
                g.integers(0, 10**9)
            )
        offs = o["clock_offsets"]
        if offs is None:
            self.offsets = [0] * W
        elif offs == "random":
            self.offsets = [0] + [job.q(g.uniform(-2.5e6, 2.5e6)) for _ in range(W - 1)]
        else:
            offs = [int(x) for x in offs]
            if len(offs) != W:
                raise ValueError("clock_offsets needs one value per rank")
            self.offsets = [0] + [job.q(x) for x in offs[1:]]
        base_pid = int(g.integers(2000, 60000))
        self.pids = [base_pid + 13 * r for r in range(W)]
        self.trace_ids = [
            "".join(f"{int(x):02X}" for x in g.integers(0, 256, 16)) for _ in range(W)
        ]
        self.base_time_ns = int(g.integers(1_700_000_000, 1_760_000_000)) * 1_000_000_000
        self.shuffle_seeds = [int(x) for x in g.integers(0, 2**31, W)]

    # ------------------------------------------------------------------ clocks & ids
    def local(self, r, sim_ns):
        return self.T0 + sim_ns + self.offsets[r]

    def true(self, sim_ns):
        return self.T0 + sim_ns

    def ts(self, r, sim_ns):
        ns = self.local(r, sim_ns)
        if self.o["ts_style"] == "int":
            return ns // 1000
        return round(ns / 1000.0, 3)

    def dur(self, a, b):
        if self.o["ts_style"] == "int":
            return (b - a) // 1000
        return round((b - a) / 1000.0, 3)

    def cpu_pid(self, r):
        p = self.pids[r]
        return str(p) if self.o["id_style"] == "str" else p

    def cpu_tid_num(self, r, thread):
        return self.pids[r] if thread == "main" else self.pids[r] + 97

    def cpu_tid(self, r, thread):
        t = self.cpu_tid_num(r, thread)
        return str(t) if self.o["id_style"] in ("str", "str_stream") else t

    def device(self, r):
        return r % 8

    def gpu_pid(self, r):
        d = self.device(r)
        return str(d) if self.o["id_style"] == "str" else d

    def gpu_tid(self, stream):
        st = self.o["id_style"]
        if st == "str":
            return str(stream)
        if st == "str_stream":
            return f"stream {stream}"
        return stream

    def file_name(self, r):
        name = self.o["file_pattern"].format(rank=r)
        return name + ".gz" if self.o["gzip"] else name

    # ------------------------------------------------------------------ events
    def rank_events(self, rk):
        o = self.o
        r = rk.r
        cpu_p = self.cpu_pid(r)
        gpu_p = self.gpu_pid(r)
        dev = self.device(r)
        g = np.random.default_rng([self.job.seed, 44, r])
        cpu_evs = []
        for ev in sorted(rk.cpu, key=lambda e: (e["start"], -e["end"], e["idx"])):
            if ev["cat"] == "python_function":
                args = {"Python parent id": None, "Python id": ev["idx"] + 1, "Ev Idx": ev["idx"]}
            else:
                args = {"External id": ev["ext"], "Record function id": 0}
                args.update(ev["args"])
                args["Ev Idx"] = ev["idx"]
            cpu_evs.append(
                {
                    "ph": "X",
                    "cat": ev["cat"],
                    "name": ev["name"],
                    "pid": cpu_p,
                    "tid": self.cpu_tid(r, ev["thread"]),
                    "ts": self.ts(r, ev["start"]),
                    "dur": self.dur(ev["start"], ev["end"]),
                    "args": args,
                }
            )
        act = []
        for rt in sorted(rk.rt, key=lambda e: e["corr"]):
            cpu_t = self.cpu_tid(r, rt["thread"])
            rargs = {}
            if rt["ext"] is not None:
                rargs["External id"] = rt["ext"]
            rargs["cbid"] = _RT_CBID.get(rt["name"], 0)
            if o["correlation"]:
                rargs["correlation"] = rt["corr"]
            rt_ev = {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": rt["name"],
                "pid": cpu_p,
                "tid": cpu_t,
                "ts": self.ts(r, rt["start"]),
                "dur": self.dur(rt["start"], rt["end"]),
                "args": rargs,
            }
            dev_ev = None
            dev_start = None
            op = rt["gpu"]
            sy = rt["sync"]
            if op is not None:
                dev_start = op.start
                a = {}
                if op.ext is not None:
                    a["External id"] = op.ext
                if op.kind == "memcpy":
                    a.update({"device": dev, "context": 1, "stream": op.stream})
                    if o["correlation"]:
                        a["correlation"] = op.corr
                    nb = op.args["bytes"]
                    a["bytes"] = nb
                    a["memory bandwidth (GB/s)"] = nb / max(op.end - op.start, 1)
                else:
                    a.update({"queued": 0, "device": dev, "context": 1, "stream": op.stream})
                    if o["correlation"]:
                        a["correlation"] = op.corr
                    regs = int(g.choice([16, 32, 64, 96, 128, 168]))
                    a.update(
                        {
                            "registers per thread": regs,
                            "shared memory": int(g.choice([0, 2064, 41744, 65536, 232448])),
                            "blocks per SM": round(float(g.uniform(0.1, 60.0)), 6),
                            "warps per SM": round(float(g.uniform(0.5, 64.0)), 6),
                            "grid": op.args["grid"],
                            "block": op.args["block"],
                            "est. achieved occupancy %": int(g.integers(0, 100)),
                        }
                    )
                    if op.kind == "nccl":
                        a.update(op.coll["kernel_args"])
                dev_ev = {
                    "ph": "X",
                    "cat": op.cat,
                    "name": op.name,
                    "pid": gpu_p,
                    "tid": self.gpu_tid(op.stream),
                    "ts": self.ts(r, op.start),
                    "dur": self.dur(op.start, op.end),
                    "args": a,
                }
            elif sy is not None:
                dev_start = sy["start"]
                a = {}
                if rt["ext"] is not None:
                    a["External id"] = rt["ext"]
                a.update(sy["args"])
                a["stream"] = sy["stream"]
                if o["correlation"]:
                    a["correlation"] = rt["corr"]
                a.update({"device": dev, "context": 1})
                dev_ev = {
                    "ph": "X",
                    "cat": "cuda_sync",
                    "name": sy["name"],
                    "pid": gpu_p,
                    "tid": self.gpu_tid(sy["stream"]),
                    "ts": self.ts(r, sy["start"]),
                    "dur": self.dur(sy["start"], sy["end"]),
                    "args": a,
                }
            if dev_ev is not None:
                act.append(dev_ev)
                if o["flows"]:
                    act.append(
                        {
                            "ph": "f",
                            "id": rt["corr"],
                            "pid": gpu_p,
                            "tid": dev_ev["tid"],
                            "ts": self.ts(r, dev_start),
                            "cat": "ac2g",
                            "name": "ac2g",
                            "bp": "e",
                        }
                    )
            act.append(rt_ev)
            if dev_ev is not None and o["flows"]:
                act.append(
                    {
                        "ph": "s",
                        "id": rt["corr"],
                        "pid": cpu_p,
                        "tid": cpu_t,
                        "ts": self.ts(r, rt["start"]),
                        "cat": "ac2g",
                        "name": "ac2g",
                    }
                )
        extra = []
        if o["gpu_user_annotation"]:
            by_step = {}
            for op in rk.gpu:
                lo, hi = by_step.get(op.step, (op.start, op.end))
                by_step[op.step] = (min(lo, op.start), max(hi, op.end))
            for ev in rk.cpu:
                if ev.get("is_step") and ev["step"] in by_step:
                    lo, hi = by_step[ev["step"]]
                    extra.append(self._gua(r, ev, COMPUTE_STREAM, lo, hi))
            for op in rk.gpu:
                if op.kind == "nccl" and op.annot is not None:
                    extra.append(self._gua(r, op.annot, op.stream, op.start, op.end))
        if o["fwdbwd_flows"]:
            for i, (fwd, bwd) in enumerate(rk.fwdbwd):
                fid = i + 1
                extra.append(
                    {
                        "ph": "s",
                        "id": fid,
                        "pid": cpu_p,
                        "tid": self.cpu_tid(r, fwd["thread"]),
                        "ts": self.ts(r, fwd["start"]),
                        "cat": "fwdbwd",
                        "name": "fwdbwd",
                    }
                )
                extra.append(
                    {
                        "ph": "f",
                        "id": fid,
                        "pid": cpu_p,
                        "tid": self.cpu_tid(r, bwd["thread"]),
                        "ts": self.ts(r, bwd["start"]),
                        "cat": "fwdbwd",
                        "name": "fwdbwd",
                        "bp": "e",
                    }
                )
        meta, tail = self._meta_events(rk)
        events = cpu_evs + act + extra
        if o["event_order"] == "sorted":
            events = meta + sorted(events, key=lambda e: float(e["ts"])) + tail
        elif o["event_order"] == "shuffled":
            events = events + meta + tail
            perm = np.random.default_rng(self.shuffle_seeds[r]).permutation(len(events))
            events = [events[int(i)] for i in perm]
        else:
            events = events + meta + tail
        return events

    def _gua(self, r, ev, stream, lo, hi):
        return {
            "ph": "X",
            "cat": "gpu_user_annotation",
            "name": ev["name"],
            "pid": self.gpu_pid(r),
            "tid": self.gpu_tid(stream),
            "ts": self.ts(r, lo),
            "dur": self.dur(lo, hi),
            "args": {"External id": ev["ext"]},
        }

    def window(self, rk):
        hi = max(
            [ev["end"] for ev in rk.cpu] + [op.end for op in rk.gpu] + [rt["end"] for rt in rk.rt]
        )
        return 0, hi + self.job.q(180_000)

    def _meta_events(self, rk):
        o = self.o
        r = rk.r
        lo, hi = self.window(rk)
        mts = self.ts(r, lo + self.job.q(40_000))
        cpu_p = self.cpu_pid(r)
        meta = [
            {"name": "process_name", "ph": "M", "ts": mts, "pid": cpu_p, "tid": 0,
             "args": {"name": "python3"}},
            {"name": "process_labels", "ph": "M", "ts": mts, "pid": cpu_p, "tid": 0,
             "args": {"labels": "CPU"}},
            {"name": "process_sort_index", "ph": "M", "ts": mts, "pid": cpu_p, "tid": 0,
             "args": {"sort_index": self.pids[r]}},
        ]  # fmt: skip
        for d in range(8):
            p = str(d) if o["id_style"] == "str" else d
            meta += [
                {"name": "process_name", "ph": "M", "ts": mts, "pid": p, "tid": 0,
                 "args": {"name": "python3"}},
                {"name": "process_labels", "ph": "M", "ts": mts, "pid": p, "tid": 0,
                 "args": {"labels": f"GPU {d}"}},
                {"name": "process_sort_index", "ph": "M", "ts": mts, "pid": p, "tid": 0,
                 "args": {"sort_index": 16777216 + d}},
            ]  # fmt: skip
        gpu_p = self.gpu_pid(r)
        streams = sorted({op.stream for op in rk.gpu})
        if any(rt["sync"] is not None and rt["sync"]["stream"] == -1 for rt in rk.rt):
            meta += [
                {"name": "thread_name", "ph": "M", "ts": mts, "pid": gpu_p,
                 "tid": self.gpu_tid(-1), "args": {"name": f"Device {self.device(r)}"}},
                {"name": "thread_sort_index", "ph": "M", "ts": mts, "pid": gpu_p,
                 "tid": self.gpu_tid(-1), "args": {"sort_index": -1}},
            ]  # fmt: skip
        for s in streams:
            meta += [
                {"name": "thread_name", "ph": "M", "ts": mts, "pid": gpu_p,
                 "tid": self.gpu_tid(s), "args": {"name": f"stream {s} "}},
                {"name": "thread_sort_index", "ph": "M", "ts": mts, "pid": gpu_p,
                 "tid": self.gpu_tid(s), "args": {"sort_index": s}},
            ]  # fmt: skip
        threads = ["main"] + (["autograd"] if o["autograd_thread"] else [])
        for th in threads:
            num = self.cpu_tid_num(r, th)
            tid = self.cpu_tid(r, th)
            meta.append({"name": "thread_name", "ph": "M", "ts": mts, "pid": cpu_p, "tid": tid,
                         "args": {"name": f"thread {num} (python3)"}})  # fmt: skip
            if th == "autograd":
                meta.append({"name": "thread_name", "ph": "M", "ts": mts, "pid": cpu_p,
                             "tid": tid, "args": {"name": f"thread {num} (pt_autograd_0)"}})  # fmt: skip
            meta.append({"name": "thread_sort_index", "ph": "M", "ts": mts, "pid": cpu_p,
                         "tid": tid, "args": {"sort_index": num}})  # fmt: skip
        t0 = self.ts(r, lo)
        tail = [
            {"ph": "X", "cat": "Trace", "ts": t0, "dur": self.dur(lo, hi), "pid": "Spans",
             "tid": "PyTorch Profiler", "name": "PyTorch Profiler (0)", "args": {"Op count": 0}},
            {"name": "process_sort_index", "ph": "M", "ts": t0, "pid": "Spans", "tid": 0,
             "args": {"sort_index": 536870912}},
            {"name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g", "pid": "Traces",
             "tid": "Trace PyTorch Profiler", "ts": t0},
            {"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "",
             "ts": self.ts(r, hi + self.job.q(25_000))},
        ]  # fmt: skip
        return meta, tail

    def top_metadata(self, r):
        o = self.o
        W = self.job.W
        md = {"schemaVersion": 1}
        md["deviceProperties"] = [dict(id=d, **_DEVICE_PROPS) for d in range(8)]
        if o["dist_info"] == "basic":
            md["distributedInfo"] = {"backend": "nccl", "rank": r, "world_size": W}
        elif o["dist_info"] == "full":
            md["distributedInfo"] = {
                "backend": "nccl",
                "rank": r,
                "world_size": W,
                "pg_count": 1,
                "pg_config": [
                    {
                        "pg_name": "0",
                        "pg_desc": "default_pg",
                        "backend_config": "cuda:nccl",
                        "pg_size": W,
                        "ranks": list(range(W)),
                    }
                ],
                "nccl_version": "2.21.5",
            }
        md["cuda_runtime_version"] = 12040
        md["cupti_version"] = 22
        md["record_shapes"] = 1
        if o["python_stack"]:
            md["with_stack"] = 1
        md["cuda_driver_version"] = 12090
        md["trace_id"] = self.trace_ids[r]
        md["displayTimeUnit"] = "ms"
        if o["ts_style"] == "float":
            md["baseTimeNanoseconds"] = self.base_time_ns
        md["traceName"] = self.file_name(r)
        return md

    def serialize(self, r, events):
        lines = ",\n".join(json.dumps(e) for e in events)
        if self.o["container"] == "list":
            return "[\n" + lines + "\n]\n"
        md = self.top_metadata(r)
        head = "".join(f"  {json.dumps(k)}: {json.dumps(v)},\n" for k, v in md.items())
        return "{\n" + head + '  "traceEvents": [\n' + lines + "\n]\n}\n"

    def write_files(self):
        os.makedirs(self.out_dir, exist_ok=True)
        counts = {}
        for rk in self.job.ranks:
            events = self.rank_events(rk)
            counts[str(rk.r)] = len(events)
            text = self.serialize(rk.r, events).encode("utf-8")
            path = os.path.join(self.out_dir, self.file_name(rk.r))
            with open(path, "wb") as f:
                if self.o["gzip"]:
                    with gzip.GzipFile(filename="", mode="wb", fileobj=f, mtime=0) as gz:
                        gz.write(text)
                else:
                    f.write(text)
        return counts

    # ------------------------------------------------------------------ truth
    def truth(self, baseline_step_times, counts):
        job, o = self.job, self.o
        W = job.W
        metrics = _step_metrics(job)
        nsteps = len(metrics)
        warm = bool(o["warmup"]) and nsteps > 1
        steps = []
        for s in sorted(metrics):
            per = {}
            for r, m in sorted(metrics[s].items()):
                per[str(r)] = {
                    "start_local_ns": self.local(r, m["start"]),
                    "end_local_ns": self.local(r, m["end"]),
                    "start_true_ns": self.true(m["start"]),
                    "end_true_ns": self.true(m["end"]),
                    "step_ns": m["dur"],
                    "gpu_busy_ns": m["gpu_busy_ns"],
                    "gpu_busy_fraction": m["gpu_busy_ns"] / m["dur"],
                    "compute_busy_fraction": m["compute_busy_ns"] / m["dur"],
                    "nccl_busy_fraction": m["nccl_busy_ns"] / m["dur"],
                    "exposed_comm_ns": m["exposed_comm_ns"],
                    "coll_wait_ns": m["coll_wait_ns"],
                    "coll_wait_fraction": m["coll_wait_ns"] / m["dur"],
                    "host_delay_ns": m["host_delay_ns"],
                    "main_thread_idle_ns": m["main_thread_idle_ns"],
                }
            durs = [m["dur"] for m in metrics[s].values()]
            steps.append(
                {
                    "index": s,
                    "name": metrics[s][0]["name"],
                    "warmup": warm and s == 0,
                    "step_time_ns": max(durs),
                    "median_rank_step_ns": _median(durs),
                    "span_true_ns": max(self.true(m["end"]) for m in metrics[s].values())
                    - min(self.true(m["start"]) for m in metrics[s].values()),
                    "per_rank": per,
                }
            )
        steady = [st for st in steps if not st["warmup"]] or steps
        steady_sorted = sorted(steady, key=lambda st: (st["step_time_ns"], st["index"]))
        typical = steady_sorted[(len(steady_sorted) - 1) // 2]
        saving_per_step = [
            st["step_time_ns"] - b for st, b in zip(steps, baseline_step_times, strict=True)
        ]
        saving_typical = int(_median(saving_per_step[st["index"]] for st in steady))

        colls = []
        for key, inst in job.coll_table.items():
            meta = inst["meta"]
            parts = meta["participants"]
            ops = inst["ops"]
            arr = {p: self.true(ops[p].start) for p in parts}
            end = self.true(ops[parts[0]].end)
            last = max(parts, key=lambda p: (arr[p], -p))
            others = [arr[p] for p in parts if p != last]
            lateness = arr[last] - _median(others) if others else 0
            colls.append(
                {
                    "key": ":".join(str(k) for k in key),
                    "op": meta["op"],
                    "collective_name_per_rank": {str(p): ops[p].coll["cname"] for p in parts},
                    "process_group": meta["pg"],
                    "seq": meta["seq"] if meta["op"] != "send_recv" else None,
                    "seq_per_rank": {str(p): ops[p].coll["seq"] for p in parts},
                    "seq_written": o["coll_args"] == "full",
                    "step": ops[parts[0]].step,
                    "participants": list(parts),
                    "kernel_name": ops[parts[0]].name,
                    "stream": ops[parts[0]].stream,
                    "nelems": meta["nelems"],
                    "bytes": meta["nbytes"],
                    "transfer_ns": meta["transfer"],
                    "arrival_true_ns": {str(p): arr[p] for p in parts},
                    "arrival_local_ns": {str(p): self.local(p, ops[p].start) for p in parts},
                    "end_true_ns": end,
                    "end_local_ns": {str(p): self.local(p, ops[p].end) for p in parts},
                    "wait_ns": {str(p): end - meta["transfer"] - arr[p] for p in parts},
                    "last_rank": last,
                    "lateness_ns": int(lateness),
                }
            )
        colls.sort(key=lambda c: (c["step"], min(c["arrival_true_ns"].values()), c["key"]))
        for i, c in enumerate(colls):
            c["index"] = i
        # ordinal of each collective within its process group, per rank, in trace order
        for p in range(W):
            mine = [c for c in colls if p in c["participants"]]
            mine.sort(key=lambda c: c["arrival_true_ns"][str(p)])
            for k, c in enumerate(mine):
                c.setdefault("ordinal_per_rank", {})[str(p)] = k

        straggler = self._straggler_info()
        waits = []
        for rk in job.ranks:
            for w in rk.waits:
                first = w["first"]
                if first is None:
                    continue
                tgt = w["target"]
                waits.append(
                    {
                        "rank": rk.r,
                        "step": w["step"],
                        "what": w["what"],
                        "kernel": first.name,
                        "kernel_stream": first.stream,
                        "launch_local_ns": self.local(rk.r, first.rt["start"]),
                        "launch_true_ns": self.true(first.rt["start"]),
                        "start_local_ns": self.local(rk.r, first.start),
                        "start_true_ns": self.true(first.start),
                        "waited_kernel": tgt.name,
                        "waited_stream": tgt.stream,
                        "waited_is_nccl": tgt.kind == "nccl",
                        "waited_end_true_ns": self.true(tgt.end),
                        "waited_end_local_ns": self.local(rk.r, tgt.end),
                        "bound_by_wait": bool(first.bound_by_wait),
                        "has_sync_record": w["has_sync_record"],
                        "has_wait_event_runtime": w["has_wait_event_runtime"],
                    }
                )
        no_sync = [
            w
            for w in waits
            if w["bound_by_wait"]
            and not w["has_sync_record"]
            and w["kernel_stream"] == COMPUTE_STREAM
            and w["waited_is_nccl"]
        ]
        idle = []
        for rk in job.ranks:
            for d in rk.idle:
                idle.append(
                    {
                        "rank": rk.r,
                        "step": d["step"],
                        "main_tid": self.cpu_tid_num(rk.r, "main"),
                        "autograd_tid": self.cpu_tid_num(rk.r, "autograd"),
                        "start_local_ns": self.local(rk.r, d["start"]),
                        "end_local_ns": self.local(rk.r, d["end"]),
                        "start_true_ns": self.true(d["start"]),
                        "end_true_ns": self.true(d["end"]),
                        "dur_ns": d["end"] - d["start"],
                    }
                )
        delays = []
        for rk in job.ranks:
            for d in rk.host_delays:
                delays.append(
                    {
                        "rank": rk.r,
                        "step": d["step"],
                        "start_true_ns": self.true(d["start"]),
                        "end_true_ns": self.true(d["end"]),
                        "start_local_ns": self.local(rk.r, d["start"]),
                        "dur_ns": d["end"] - d["start"],
                    }
                )
        rank_info = {}
        for r in range(W):
            rank_info[str(r)] = {
                "file": self.file_name(r),
                "pid": self.pids[r],
                "main_tid": self.cpu_tid_num(r, "main"),
                "autograd_tid": self.cpu_tid_num(r, "autograd") if o["autograd_thread"] else None,
                "gpu_device": self.device(r),
                "compute_stream": COMPUTE_STREAM,
                "nccl_stream": int(o["coll_stream"]),
                "clock_offset_ns": self.offsets[r],
                "distributed_info_written": o["dist_info"] is not None
                and o["container"] == "object",
                "event_count": counts.get(str(r)),
            }
        busy_typ = {str(r): typical["per_rank"][str(r)]["gpu_busy_fraction"] for r in range(W)}
        truth = {
            "generator": "tests/cleanroom/kineto_writer.py (clean room)",
            "scenario": self.scenario,
            "options": dict(o),
            "world_size": W,
            "ranks": list(range(W)),
            "files": {str(r): self.file_name(r) for r in range(W)},
            "rank_info": rank_info,
            "clock_offsets_ns": {str(r): self.offsets[r] for r in range(W)},
            "steps": steps,
            "typical_step_index": typical["index"],
            "warmup_step_index": 0 if warm else None,
            "collectives": colls,
            "straggler": straggler,
            "straggler_saving_ns": {
                "per_step": saving_per_step,
                "typical": saving_typical,
                "baseline_step_time_ns": list(baseline_step_times),
                "method": "re-ran the simulation (same random draws) with the injected "
                "slowdown removed; saving = step_time_ns - baseline step_time_ns; typical = "
                "median over non-warm-up steps",
            },
            "gpu_busy_fraction": busy_typ,
            "critical_path_expectation": self._critical(typical, straggler, saving_typical),
            "cross_stream_waits": waits,
            "cross_stream_waits_without_sync": no_sync,
            "main_thread_idle": idle,
            "host_delays": delays,
            "definitions": _DEFINITIONS,
        }
        return json.loads(json.dumps(truth))

    def _straggler_info(self):
        o = self.o
        if o["straggler_rank"] is not None and o["straggler_factor"] != 1.0:
            return {
                "ranks": [int(o["straggler_rank"])],
                "cause": "gpu_compute_slowdown",
                "detail": f"every compute kernel on rank {o['straggler_rank']} takes "
                f"x{o['straggler_factor']} longer",
                "factor": o["straggler_factor"],
            }
        if o["host_delay_rank"] is not None and o["host_delay_ns"]:
            return {
                "ranks": [int(o["host_delay_rank"])],
                "cause": "host_delay",
                "detail": f"rank {o['host_delay_rank']} sleeps {o['host_delay_ns']} ns on the "
                "CPU (no event recorded) before launching the backward pass",
                "delay_ns": int(o["host_delay_ns"]),
                "where": "before_backward",
            }
        if o["late_rank"] is not None and o["late_ns"]:
            return {
                "ranks": [int(o["late_rank"])],
                "cause": "late_arrival_compute_imbalance",
                "detail": f"rank {o['late_rank']}'s last kernel before the step's first "
                f"collective runs {o['late_ns']} ns longer",
                "extra_ns": int(o["late_ns"]),
                "where": "before_first_collective",
            }
        return {"ranks": [], "cause": None, "detail": "no injected straggler"}

    def _critical(self, typical, straggler, saving):
        o = self.o
        W = self.job.W
        per = typical["per_rank"]
        T = typical["step_time_ns"]
        out = [
            {"what": "step time (slowest rank's ProfilerStep)", "ns": T, "fraction_of_step": 1.0}
        ]
        sr = straggler["ranks"]
        others = [r for r in range(W) if r not in sr]

        def med(field, ranks):
            return int(_median(per[str(r)][field] for r in ranks))

        if sr:
            s = sr[0]
            if straggler["cause"] == "gpu_compute_slowdown":
                cb = int(per[str(s)]["compute_busy_fraction"] * per[str(s)]["step_ns"])
                out.append(
                    {
                        "what": f"GPU compute on the straggler rank {s} bounds the step",
                        "rank": s,
                        "ns": cb,
                        "fraction_of_step": cb / T,
                    }
                )
            elif straggler["cause"] == "host_delay":
                d = per[str(s)]["host_delay_ns"]
                out.append(
                    {
                        "what": f"host delay on rank {s}: the CPU sleeps before the backward "
                        "while its GPU idles",
                        "rank": s,
                        "ns": d,
                        "fraction_of_step": d / T,
                    }
                )
            else:
                d = int(o["late_ns"])
                out.append(
                    {
                        "what": f"extra compute on rank {s} before the first collective makes "
                        "it arrive late",
                        "rank": s,
                        "ns": d,
                        "fraction_of_step": d / T,
                    }
                )
            w = med("coll_wait_ns", others)
            out.append(
                {
                    "what": "the other ranks wait for the late rank inside their NCCL kernels "
                    "(median over the other ranks)",
                    "ranks": others,
                    "ns": w,
                    "fraction_of_step": w / T,
                }
            )
            out.append(
                {
                    "what": "straggler saving: the step would be this much shorter if the "
                    "straggler ran at the median rank's pace",
                    "ns": saving,
                    "fraction_of_step": saving / T,
                }
            )
        else:
            allr = list(range(W))
            cb = int(_median(per[str(r)]["compute_busy_fraction"] * T for r in allr))
            out.append(
                {
                    "what": "GPU compute, balanced across ranks (median rank)",
                    "ns": cb,
                    "fraction_of_step": cb / T,
                }
            )
            ex = med("exposed_comm_ns", allr)
            out.append(
                {
                    "what": "exposed communication: NCCL kernels with no compute kernel "
                    "running (median rank)",
                    "ns": ex,
                    "fraction_of_step": ex / T,
                }
            )
            w = med("coll_wait_ns", allr)
            out.append(
                {
                    "what": "waiting for peers inside NCCL kernels (median rank)",
                    "ns": w,
                    "fraction_of_step": w / T,
                }
            )
        if o["autograd_thread"]:
            idle = med("main_thread_idle_ns", list(range(W)))
            out.append(
                {
                    "what": "main thread idle (blocked in run_backward) while pt_autograd_0 "
                    "launches the backward (median rank)",
                    "ns": idle,
                    "fraction_of_step": idle / T,
                }
            )
        if o["model"] == "pipeline":
            out.append(
                {
                    "what": "pipeline bubble: time each stage waits for its neighbour inside "
                    "send/recv kernels",
                    "per_rank_ns": {str(r): per[str(r)]["coll_wait_ns"] for r in range(W)},
                }
            )
        return out


_DEFINITIONS = {
    "true clock": "rank 0's clock; local_ns = true_ns + clock_offset_ns[rank]; a trace's "
    "ts (µs) * 1000 == local_ns exactly (baseTimeNanoseconds is not added)",
    "step window": "the rank's CPU ProfilerStep#N user_annotation [ts, ts + dur)",
    "step_time_ns": "max over ranks of the step window length",
    "arrival": "start of the rank's NCCL kernel for that collective",
    "end": "every participant's NCCL kernel ends at max(arrivals) + transfer_ns",
    "wait_ns": "end - transfer_ns - arrival: time spent waiting for the last peer",
    "lateness_ns": "last arrival - median of the other participants' arrivals",
    "gpu_busy_fraction": "union of kernel + gpu_memcpy intervals on all streams of the rank's "
    "GPU (NCCL kernels included, cuda_sync and gpu_user_annotation excluded), clipped to the "
    "step window, divided by the window length",
    "compute_busy_fraction": "same with NCCL kernels excluded",
    "exposed_comm_ns": "GPU busy time during which only NCCL kernels run",
    "collective key": "(process group, Seq) for group collectives; p2p:<lo>:<hi>:<n> (n-th "
    "transfer between that pair) for send/recv, whose Seq is a per-rank counter",
}


def _resolve_options(ranks, steps, seed, variation):
    unknown = sorted(set(variation) - set(DEFAULTS))
    if unknown:
        raise TypeError(f"unknown write_job option(s): {', '.join(unknown)}")
    o = dict(DEFAULTS)
    o.update(variation)
    o["ranks"], o["steps"], o["seed"] = int(ranks), int(steps), int(seed)
    if o["ranks"] < 2:
        raise ValueError("ranks must be >= 2")
    if o["steps"] < 1:
        raise ValueError("steps must be >= 1")
    if o["cuda_sync"]:
        o["wait_event_runtime"] = True
    for k, allowed in (
        ("model", ("ddp", "dlrm", "pipeline")),
        ("dtype", tuple(_DTYPES)),
        ("nccl_naming", ("dev", "legacy")),
        ("coll_args", ("full", "minimal", "none")),
        ("external_id", ("op", "corr", None)),
        ("dist_info", ("full", "basic", None)),
        ("container", ("object", "list")),
        ("ts_style", ("float", "int")),
        ("id_style", ("int", "str", "str_stream")),
        ("event_order", ("kineto", "sorted", "shuffled")),
    ):
        if o[k] not in allowed:
            raise ValueError(f"{k} must be one of {allowed}, got {o[k]!r}")
    if o["straggler_rank"] is not None and not 0 <= int(o["straggler_rank"]) < o["ranks"]:
        raise ValueError("straggler_rank out of range")
    if isinstance(o["clock_offsets"], tuple):
        o["clock_offsets"] = list(o["clock_offsets"])
    return o


def write_job(out_dir, *, ranks=4, steps=3, seed=0, _scenario=None, **variation) -> dict:
    """Simulate the job, write ``<out_dir>/<rank file>`` per rank and ``truth.json``.

    Every keyword in :data:`DEFAULTS` can be given; unknown keywords raise TypeError.
    Returns the truth dict (identical to the content of ``truth.json``).
    """
    o = _resolve_options(ranks, steps, seed, variation)
    job = _Job(o).run()
    base_o = dict(o, straggler_factor=1.0, host_delay_ns=0, late_ns=0)
    baseline = _step_times(_Job(base_o).run())
    w = _Writer(job, os.fspath(out_dir), _scenario)
    counts = w.write_files()
    truth = w.truth(baseline, counts)
    with open(os.path.join(os.fspath(out_dir), "truth.json"), "w", encoding="utf-8") as f:
        json.dump(truth, f, indent=1)
        f.write("\n")
    return truth


def write_scenario(name, out_dir, seed=0) -> dict:
    """Write the named preset of :data:`SCENARIOS` into out_dir; returns its truth."""
    if name not in SCENARIOS:
        raise KeyError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}")
    opts = dict(SCENARIOS[name])
    ranks = opts.pop("ranks", DEFAULTS["ranks"])
    steps = opts.pop("steps", DEFAULTS["steps"])
    return write_job(out_dir, ranks=ranks, steps=steps, seed=seed, _scenario=name, **opts)
