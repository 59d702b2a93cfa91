"""Make real PyTorch profiler (Kineto) traces of a small CPU pipeline-parallel job with a known answer.

Runs a 4-stage pipeline on CPU with the gloo backend (torch.multiprocessing spawn, one rank per
stage, MASTER_ADDR=127.0.0.1, a free port). Each stage holds a small MLP; a GPipe schedule runs
MICRO micro-batches per step: all forwards (stage s receives its input activation from s-1 with
``dist.recv``, computes, sends its output to s+1 with ``dist.send``), then all backwards (stage s
receives the output gradient from s+1, back-propagates, sends the input gradient to s-1). The
profiler records a few steps per rank with ``torch.profiler.profile(record_shapes=True)``: only
then does the ``c10d::send``/``c10d::recv_`` op carry its peer rank (``Concrete Inputs``).
Per scenario it writes::

    <out>/<scenario>/rank-<r>.json.gz   one Chrome/Kineto trace per rank (gzip -9, mtime 0)
    <out>/<scenario>/truth.json         what the script injected and measured itself

The truth comes from this script's own knowledge (which stage is slow and why) and from
``time.time_ns()`` readings it takes around every send/recv call, every forward/backward of a
micro-batch, the injected extra compute and ``prof.step()``. It never reads a trace to decide
the answer; after export each rank reads back only its own ``ProfilerStep#N`` ends to state the
clock the trace follows.

After the profiled window the same processes run one settle step and then 2 x CF_PAIRS
unprofiled steps that alternate the extra compute off and on: the difference of their mean step
times is the measured counterfactual "what if the slow stage ran at the others' pace" (both
sides unprofiled and interleaved, so the load other jobs put on the shared host cancels).

Scenarios (``--scenario``, repeatable; default: all):

* ``pipeline_clean``       every stage does the same work.
* ``pipeline_slow_stage``  stage 2 runs an extra matmul loop in each micro-batch's forward,
                           calibrated to its own forward+backward time, so it computes ~2x
                           longer per micro-batch and is the bottleneck.

Needs torch (CPU build is enough); it is not a dependency of the project. Run::

    /work/torchvenv/bin/python tests/real_traces/make_gloo_pipeline.py \
        --out tests/data/real_gloo_pipeline
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import shutil
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.profiler import ProfilerActivity, profile, schedule

SCENARIOS = ("pipeline_clean", "pipeline_slow_stage")
STAGES = 4
MICRO = 4
SLOW_STAGE = 2

SCHED_WAIT, SCHED_WARMUP, SCHED_ACTIVE = 1, 1, 5
TOTAL_STEPS = SCHED_WAIT + SCHED_WARMUP + SCHED_ACTIVE
ACTIVE_STEPS = list(range(SCHED_WAIT + SCHED_WARMUP, TOTAL_STEPS))
# After the profiled window: one settle step (the trace is exported in the prof.step() that
# closes the window), then unprofiled steps alternating extra loop off / on, so that both sides
# of the counterfactual see the same load on the shared host (other jobs come and go).
CF_PAIRS = 6
CF_OFF_STEPS = [TOTAL_STEPS + 1 + 2 * i for i in range(CF_PAIRS)]
CF_ON_STEPS = [TOTAL_STEPS + 2 + 2 * i for i in range(CF_PAIRS)]
ALL_STEPS = TOTAL_STEPS + 1 + 2 * CF_PAIRS

MB_ROWS, WIDTH = 128, 512  # one micro-batch: 128 x 512 activations (256 KiB of float32)


def now() -> int:
    return time.time_ns()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_stage() -> nn.Module:
    return nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Tanh(), nn.Linear(WIDTH, WIDTH), nn.Tanh())


def extra_compute(a: torch.Tensor, b: torch.Tensor, iters: int) -> torch.Tensor:
    acc = a
    for _ in range(iters):
        acc = torch.tanh(acc @ b)
    return acc


def worker(rank: int, cfg: dict) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(cfg["port"])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=STAGES)
    slow = cfg["scenario"] == "pipeline_slow_stage" and rank == SLOW_STAGE
    out_dir, tmp_dir = Path(cfg["out_dir"]), Path(cfg["tmp_dir"])

    torch.manual_seed(rank)
    model = make_stage()
    opt = torch.optim.SGD(model.parameters(), lr=0.001)
    gen = torch.Generator().manual_seed(100 + rank)
    inputs = [torch.randn(MB_ROWS, WIDTH, generator=gen) for _ in range(MICRO)]
    target = torch.randn(MB_ROWS, WIDTH, generator=gen)
    ea = torch.randn(MB_ROWS * 2, WIDTH, generator=gen)
    eb = torch.randn(WIDTH, WIDTH, generator=gen) / 20.0

    # Calibrate the slow stage's extra loop to its own forward+backward time per micro-batch
    # (before profiling; the loop is then fixed real work).
    extra_iters = 0
    if slow:

        def fwd_bwd():
            x = inputs[0].clone().requires_grad_(True)
            model(x).sum().backward()

        for _ in range(3):
            fwd_bwd()
        t0 = time.perf_counter_ns()
        for _ in range(10):
            fwd_bwd()
        own_ns = (time.perf_counter_ns() - t0) / 10
        extra_compute(ea, eb, 3)
        t0 = time.perf_counter_ns()
        extra_compute(ea, eb, 20)
        per_iter_ns = (time.perf_counter_ns() - t0) / 20
        extra_iters = max(1, round(own_ns / per_iter_ns))
        opt.zero_grad(set_to_none=True)

    def timed_p2p(log, step, op, peer, mb, phase, fn, tensor):
        enter = now()
        fn(tensor, peer)
        log.append(
            {
                "step": step,
                "op": op,
                "peer": peer,
                "micro_batch": mb,
                "phase": phase,
                "enter_ns": enter,
                "exit_ns": now(),
            }
        )

    p2p_log: list = []
    compute_log: list = []
    steps: list = []
    dist.barrier()
    sched = schedule(wait=SCHED_WAIT, warmup=SCHED_WARMUP, active=SCHED_ACTIVE, repeat=1)
    raw_trace = tmp_dir / f"rank-{rank}.json"
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=sched,
        on_trace_ready=lambda p: p.export_chrome_trace(str(raw_trace)),
        record_shapes=True,  # the c10d::send/recv_ op's peer rank is recorded only with this
        with_stack=False,
    ) as prof:
        for it in range(ALL_STEPS):
            extra_on = slow and it not in CF_OFF_STEPS
            rec = {"step": it, "start_ns": now()}
            acts_in, acts_out = [], []
            for mb in range(MICRO):  # GPipe: all forwards
                if rank == 0:
                    x = inputs[mb]
                else:
                    x = torch.empty(MB_ROWS, WIDTH)
                    timed_p2p(p2p_log, it, "recv", rank - 1, mb, "forward", dist.recv, x)
                x.requires_grad_(rank > 0)
                t0 = now()
                y = model(x)
                t_extra = now()
                iters = extra_iters if extra_on else 0
                if iters:
                    y = y + 0.0 * extra_compute(ea, eb, iters).mean()
                t1 = now()
                compute_log.append(
                    {
                        "step": it,
                        "micro_batch": mb,
                        "phase": "forward",
                        "start_ns": t0,
                        "end_ns": t1,
                        "extra_ns": t1 - t_extra if iters else 0,
                    }
                )
                acts_in.append(x)
                acts_out.append(y)
                if rank < STAGES - 1:
                    timed_p2p(p2p_log, it, "send", rank + 1, mb, "forward", dist.send, y.detach())
            for mb in range(MICRO):  # then all backwards
                y = acts_out[mb]
                if rank == STAGES - 1:
                    t0 = now()
                    nn.functional.mse_loss(y, target).backward()
                else:
                    grad = torch.empty(MB_ROWS, WIDTH)
                    timed_p2p(p2p_log, it, "recv", rank + 1, mb, "backward", dist.recv, grad)
                    t0 = now()
                    y.backward(grad)
                t1 = now()
                compute_log.append(
                    {
                        "step": it,
                        "micro_batch": mb,
                        "phase": "backward",
                        "start_ns": t0,
                        "end_ns": t1,
                        "extra_ns": 0,
                    }
                )
                if rank > 0:
                    timed_p2p(
                        p2p_log,
                        it,
                        "send",
                        rank - 1,
                        mb,
                        "backward",
                        dist.send,
                        acts_in[mb].grad,
                    )
            t0 = now()
            opt.step()
            opt.zero_grad(set_to_none=True)
            rec["optimizer_ns"] = now() - t0
            rec["before_prof_step_ns"] = now()
            prof.step()
            rec["after_prof_step_ns"] = now()
            steps.append(rec)

    trace = json.loads(raw_trace.read_text())
    base_ns = int(trace.get("baseTimeNanoseconds", 0))
    by_step = {r["step"]: r for r in steps}
    clock_offsets = []
    for ev in trace["traceEvents"]:
        name = ev.get("name", "")
        if ev.get("ph") == "X" and name.startswith("ProfilerStep#"):
            n = int(name.split("#")[1])
            if n in by_step:
                end_ns = base_ns + round((float(ev["ts"]) + float(ev["dur"])) * 1000)
                clock_offsets.append(end_ns - by_step[n]["before_prof_step_ns"])
    raw_size = raw_trace.stat().st_size
    with (
        raw_trace.open("rb") as src,
        gzip.GzipFile(out_dir / f"rank-{rank}.json.gz", "wb", compresslevel=9, mtime=0) as dst,
    ):
        shutil.copyfileobj(src, dst)
    raw_trace.unlink()
    mine = {
        "rank": rank,
        "pid": os.getpid(),
        "steps": steps,
        "p2p": p2p_log,
        "compute": compute_log,
        "extra_iters": extra_iters,
        "profiler_step_end_minus_epoch_reading_ns": clock_offsets,
        "trace_uncompressed_bytes": raw_size,
    }
    everyone: list = [None] * STAGES
    dist.all_gather_object(everyone, mine)
    if rank == 0:
        (tmp_dir / "ranks.json").write_text(json.dumps(everyone))
    dist.barrier()
    dist.destroy_process_group()


# ---------------------------------------------------------------- truth building


def _ms(ns: float) -> float:
    return round(ns / 1e6, 3)


def _mean(xs) -> float:
    xs = list(xs)
    return round(statistics.fmean(xs), 3) if xs else 0.0


def step_ms(rank: dict, step: int) -> float:
    """ProfilerStep#k: from just after the previous prof.step() to just before this one."""
    by = {s["step"]: s for s in rank["steps"]}
    return _ms(by[step]["before_prof_step_ns"] - by[step - 1]["after_prof_step_ns"])


def build_truth(scenario: str, ranks: list, cmdline: list[str]) -> dict:
    ranks = sorted(ranks, key=lambda r: r["rank"])
    slow = SLOW_STAGE if scenario == "pipeline_slow_stage" else None
    steps = {}
    for st in ACTIVE_STEPS:
        row = {}
        for r in ranks:
            by = {s["step"]: s for s in r["steps"]}
            row[str(r["rank"])] = {
                "profiler_step_name": f"ProfilerStep#{st}",
                "start_epoch_ns": by[st - 1]["after_prof_step_ns"],
                "end_epoch_ns": by[st]["before_prof_step_ns"],
                "duration_ms": step_ms(r, st),
                "p2p": [
                    {
                        **{k: v for k, v in p.items() if k != "step"},
                        "duration_ms": _ms(p["exit_ns"] - p["enter_ns"]),
                    }
                    for p in r["p2p"]
                    if p["step"] == st
                ],
                "compute": [
                    {
                        "micro_batch": c["micro_batch"],
                        "phase": c["phase"],
                        "start_ns": c["start_ns"],
                        "end_ns": c["end_ns"],
                        "ms": _ms(c["end_ns"] - c["start_ns"]),
                        "extra_ms": _ms(c["extra_ns"]),
                    }
                    for c in r["compute"]
                    if c["step"] == st
                ],
            }
        steps[str(st)] = row

    def per_mb(r, phase, key="ms"):
        vals = [
            c[key]
            for st in ACTIVE_STEPS
            for c in steps[str(st)][str(r)]["compute"]
            if c["phase"] == phase
        ]
        return _mean(vals)

    compute = {
        str(r["rank"]): {
            "forward_ms_per_micro_batch": per_mb(r["rank"], "forward"),
            "backward_ms_per_micro_batch": per_mb(r["rank"], "backward"),
            "extra_ms_per_micro_batch": per_mb(r["rank"], "forward", "extra_ms"),
            "compute_ms_per_step": _mean(
                sum(c["ms"] for c in steps[str(st)][str(r["rank"])]["compute"])
                for st in ACTIVE_STEPS
            ),
        }
        for r in ranks
    }
    # Time blocked in p2p calls per rank, split by what they wait for.
    waits = {}
    for r in ranks:
        rk = str(r["rank"])
        calls = [p for st in ACTIVE_STEPS for p in steps[str(st)][rk]["p2p"]]
        waits[rk] = {
            f"{p_op}_{phase}_ms_per_step": round(
                sum(p["duration_ms"] for p in calls if p["op"] == p_op and p["phase"] == phase)
                / len(ACTIVE_STEPS),
                3,
            )
            for p_op in ("send", "recv")
            for phase in ("forward", "backward")
        }
    step_table = {str(r["rank"]): [step_ms(r, st) for st in ACTIVE_STEPS] for r in ranks}
    mean_step = _mean(v for vs in step_table.values() for v in vs)
    cf = {str(r["rank"]): [step_ms(r, st) for st in CF_OFF_STEPS] for r in ranks}
    cf_mean = _mean(v for vs in cf.values() for v in vs)
    cf_on = {str(r["rank"]): [step_ms(r, st) for st in CF_ON_STEPS] for r in ranks}
    cf_on_mean = _mean(v for vs in cf_on.values() for v in vs)
    saving = round(cf_on_mean - cf_mean, 3)
    compute_per_step = {rk: v["compute_ms_per_step"] for rk, v in compute.items()}
    if slow is None:
        words = (
            f"No stage is slow: the 4 stages run the same MLP (compute per step "
            f"{compute_per_step} ms). Layout: a 4-stage pipeline, one rank per stage "
            "(pp=4, dp=1): rank r sends activations to r+1 and gradients to r-1, no "
            "collective spans the ranks. Every stage idles in the GPipe bubble: the ideal "
            f"share is (p-1)/(m+p-1) = 3/7 = 42.9% for {STAGES} stages and {MICRO} "
            "micro-batches, plus the send/recv latency; those waits are the schedule's "
            "bubbles, not stragglers. On a 2-core host 4 ranks share the cores, so compute "
            f"times are noisy. Mean profiled step {mean_step} ms; unprofiled steps "
            f"{cf_on_mean} ms and {cf_mean} ms (the two interleaved halves, the same work): "
            f"{saving} ms apart, the noise. Expected saving from balancing: none (~0 ms)."
        )
    else:
        extra = compute[str(slow)]["extra_ms_per_micro_batch"]
        words = (
            f"Stage {slow} (rank {slow}) is the slow stage: each micro-batch's forward runs an "
            f"extra matmul loop of ~{extra} ms (measured mean), so its compute per step is "
            f"{compute_per_step[str(slow)]} ms against the others' {compute_per_step} ms. "
            "Layout: a 4-stage pipeline, one rank per stage (pp=4, dp=1). The other stages "
            f"wait for stage {slow} in their send/recv: stage {slow + 1} in its forward recvs "
            f"(from stage {slow}), stages 0..{slow - 1} in their backward recvs (the gradients "
            f"come back through stage {slow}); those are pipeline bubbles caused by stage "
            f"{slow}, not stragglers, and stage {slow + 1} is merely downstream. Measured "
            f"blocked time in send/recv per rank per step: {waits}. Mean profiled step "
            f"{mean_step} ms. If stage {slow} ran at the others' pace (the counterfactual: the "
            f"same processes, {2 * CF_PAIRS} unprofiled steps after the window alternating the "
            f"extra loop off and on) the mean step is {cf_mean} ms against {cf_on_mean} ms with "
            f"the loop: a measured saving of {saving} ms per step (the extra compute is "
            f"~{round(extra * MICRO, 1)} ms per step on stage {slow}). They differ because "
            "the 4 ranks share 2 cores (the others' compute speeds up while stage 2 computes "
            "alone) and a pipeline hides part of one stage's extra time in its bubbles."
        )
    return {
        "scenario": scenario,
        "world_size": STAGES,
        "backend": "gloo",
        "device": "cpu",
        "layout": {
            "pp": STAGES,
            "dp": 1,
            "tp": 1,
            "stage_of_rank": {str(r): r for r in range(STAGES)},
        },
        "schedule": "GPipe (all forwards, then all backwards)",
        "micro_batches": MICRO,
        "profiled_steps": ACTIVE_STEPS,
        "profiler_step_names": [f"ProfilerStep#{s}" for s in ACTIVE_STEPS],
        "slow_stage": slow,
        "slow_rank": slow,
        "extra_matmul_iters": {str(r["rank"]): r["extra_iters"] for r in ranks},
        "compute_by_rank": compute,
        "p2p_blocked_by_rank": waits,
        "mean_step_ms": mean_step,
        "step_ms_per_rank": step_table,
        "counterfactual_no_extra": {
            "what": (
                f"Unprofiled steps of the same processes after one settle step {TOTAL_STEPS}, "
                f"alternating: steps {CF_OFF_STEPS} with the extra loop off (every stage at the "
                f"same pace), steps {CF_ON_STEPS} with it on (as in the profiled steps). The "
                "saving is the difference of their mean step times."
            ),
            "steps": CF_OFF_STEPS,
            "step_ms_per_rank": cf,
            "mean_step_ms": cf_mean,
            "with_extra_steps": CF_ON_STEPS,
            "with_extra_step_ms_per_rank": cf_on,
            "with_extra_mean_step_ms": cf_on_mean,
            "measured_saving_ms_per_step": saving,
            "measured_saving_ms_total": round(saving * len(ACTIVE_STEPS), 3),
        },
        "expected_answer": words,
        "steps": steps,
        "clock": {
            "statement": "epoch_ns = baseTimeNanoseconds + ts*1000 (time.time_ns()); all ranks "
            "share one host clock. All *_ns here are time.time_ns().",
            "profiler_step_end_minus_epoch_reading_ns": {
                str(r["rank"]): r["profiler_step_end_minus_epoch_reading_ns"] for r in ranks
            },
        },
        "ranks": {
            str(r["rank"]): {
                "pid": r["pid"],
                "trace_uncompressed_bytes": r["trace_uncompressed_bytes"],
            }
            for r in ranks
        },
        "provenance": {
            "torch_version": torch.__version__,
            "python_version": sys.version,
            "platform": platform.platform(),
            "cpu_count": os.cpu_count(),
            "torch_num_threads_per_rank": 1,
            "model": f"per stage MLP {WIDTH}-{WIDTH}-{WIDTH} (tanh), micro-batch {MB_ROWS} rows, "
            f"{MICRO} micro-batches, SGD; blocking dist.send/dist.recv",
            "profiler": {
                "activities": ["CPU"],
                "schedule": {
                    "wait": SCHED_WAIT,
                    "warmup": SCHED_WARMUP,
                    "active": SCHED_ACTIVE,
                    "repeat": 1,
                },
                "record_shapes": True,
                "with_stack": False,
            },
            "command_line": cmdline,
            "generator": "tests/real_traces/make_gloo_pipeline.py",
        },
    }


def run_scenario(scenario: str, out_root: Path, cmdline: list[str]) -> None:
    out_dir = out_root / scenario
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("rank-*.json.gz"):
        old.unlink()
    tmp_dir = Path(tempfile.mkdtemp(prefix=f"gloo-{scenario}-"))
    cfg = {
        "scenario": scenario,
        "port": free_port(),
        "out_dir": str(out_dir),
        "tmp_dir": str(tmp_dir),
    }
    t0 = time.time()
    try:
        mp.spawn(worker, args=(cfg,), nprocs=STAGES, join=True)
        ranks = json.loads((tmp_dir / "ranks.json").read_text())
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)
    truth = build_truth(scenario, ranks, cmdline)
    truth["provenance"]["wall_seconds"] = round(time.time() - t0, 1)
    (out_dir / "truth.json").write_text(json.dumps(truth, indent=1) + "\n")
    size = sum(p.stat().st_size for p in out_dir.iterdir())
    print(f"{scenario}: {truth['provenance']['wall_seconds']} s, {size / 1024:.0f} KiB")
    print(f"  {truth['expected_answer']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", action="append", choices=SCENARIOS)
    ap.add_argument("--out", default="tests/data/real_gloo_pipeline")
    args = ap.parse_args()
    cmdline = [sys.executable, *sys.argv]
    for sc in args.scenario or SCENARIOS:
        run_scenario(sc, Path(args.out), cmdline)


if __name__ == "__main__":
    main()
