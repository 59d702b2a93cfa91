"""Make real PyTorch profiler (Kineto) traces of a small CPU pipeline-parallel job with a known answer.

Runs a 4-stage pipeline on CPU with the gloo backend (torch.multiprocessing spawn, one rank per
stage, MASTER_ADDR=127.0.0.1, a free port). Each stage holds a small MLP; a GPipe schedule runs
MICRO micro-batches per step: all forwards (stage s receives its input activation from s-1 with
``dist.recv``, computes, sends its output to s+1 with ``dist.send``), then all backwards (stage s
receives the output gradient from s+1, back-propagates, sends the input gradient to s-1). The
profiler records a few steps per rank with ``torch.profiler.profile(record_shapes=True)``: only
then does the ``c10d::send``/``c10d::recv_`` op carry its peer rank (``Concrete Inputs``);
``--no-record-shapes`` makes the same job without it (the traces then do not say who a Send/Recv
talks to). Per scenario it writes::

    <out>/<scenario>/rank-<r>.json.gz   one Chrome/Kineto trace per rank (gzip -9, mtime 0)
    <out>/<scenario>/truth.json         what the script injected and measured itself

The truth comes from this script's own knowledge (which stage is slow and why) and from
``time.time_ns()`` readings it takes around every send/recv call, every forward/backward of a
micro-batch, the injected extra compute and ``prof.step()``. It never reads a trace to decide
the answer; after export each rank reads back only its own ``ProfilerStep#N`` ends to state the
clock the trace follows.

The counterfactual "what if the slow stage ran at the others' pace" is measured under the same
profiler as the trace: the profiler schedule repeats its cycle (1 wait, 1 warm-up, 5 recorded
steps) CYCLES times, the extra compute on in the even cycles (cycle 0 is the exported trace) and
off in the odd ones; only cycle 0 is exported, the others are recorded and dropped. The
difference of the mean recorded step with the extra on and off is the measured saving: both
sides pay the profiler's per-op cost and run close in time, and the alternation cancels the drift
of the load other jobs put on the shared host. (The traces in tests/data/real_gloo_pipeline come
from this script's earlier version, which timed unprofiled steps after the window: its traced
steps ran at 101-124 ms, its counterfactual ones at 47-88 ms, the host's load having dropped in
between, so only the saving's share of the step compares with the trace.)

Scenarios (``--scenario``, repeatable; default: all):

* ``pipeline_clean``       every stage does the same work.
* ``pipeline_slow_stage``  stage 2 runs an extra matmul loop in each micro-batch's forward,
                           calibrated to its own forward+backward time, so it computes ~2x
                           longer per micro-batch and is the bottleneck.

Needs torch (CPU build is enough); it is not a dependency of the project. Run::

    /work/torchvenv/bin/python tests/real_traces/make_gloo_pipeline.py \
        --out tests/data/real_gloo_pipeline
    /work/torchvenv/bin/python tests/real_traces/make_gloo_pipeline.py --no-record-shapes \
        --out tests/data/real_gloo_pipeline_no_shapes
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import gloo_job as job
import torch
import torch.distributed as dist
from torch import nn
from torch.profiler import ProfilerActivity, profile, schedule

SCENARIOS = ("pipeline_clean", "pipeline_slow_stage")
STAGES = 4
MICRO = 4
SLOW_STAGE = 2

SCHED_WAIT, SCHED_WARMUP, SCHED_ACTIVE = 1, 1, 5
CYCLE = SCHED_WAIT + SCHED_WARMUP + SCHED_ACTIVE
# Profiler cycles: 0 is the exported trace (extra on); then off, on, off, ... (see the docstring).
CYCLES = 8
ALL_STEPS = CYCLE * CYCLES


def active_steps(cycle: int) -> list[int]:
    """The recorded steps of one profiler cycle."""
    return list(range(cycle * CYCLE + SCHED_WAIT + SCHED_WARMUP, (cycle + 1) * CYCLE))


def extra_on_in(cycle: int) -> bool:
    """Whether the slow stage runs its extra loop in this cycle (the exported one: yes)."""
    return cycle % 2 == 0


ACTIVE_STEPS = active_steps(0)
ON_CYCLES = [c for c in range(CYCLES) if extra_on_in(c)]
OFF_CYCLES = [c for c in range(CYCLES) if not extra_on_in(c)]
CF_ON_STEPS = [s for c in ON_CYCLES for s in active_steps(c)]
CF_OFF_STEPS = [s for c in OFF_CYCLES for s in active_steps(c)]

MB_ROWS, WIDTH = 128, 512  # one micro-batch: 128 x 512 activations (256 KiB of float32)


def now() -> int:
    return time.time_ns()


def make_stage() -> nn.Module:
    return nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Tanh(), nn.Linear(WIDTH, WIDTH), nn.Tanh())


def worker(rank: int, cfg: dict) -> None:
    job.init_rank(rank, cfg["port"], STAGES)
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
        job.extra_compute(ea, eb, 3)
        t0 = time.perf_counter_ns()
        job.extra_compute(ea, eb, 20)
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
    sched = schedule(wait=SCHED_WAIT, warmup=SCHED_WARMUP, active=SCHED_ACTIVE, repeat=CYCLES)
    raw_trace = tmp_dir / f"rank-{rank}.json"
    exported = []

    def on_ready(p):  # cycle 0 is the trace; the later cycles only time the counterfactual
        if not exported:
            p.export_chrome_trace(str(raw_trace))
            exported.append(raw_trace)

    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=sched,
        on_trace_ready=on_ready,
        # the c10d::send/recv_ op's peer rank is recorded only with this
        record_shapes=cfg["record_shapes"],
        with_stack=False,
    ) as prof:
        for it in range(ALL_STEPS):
            extra_on = slow and extra_on_in(it // CYCLE)
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
                    y = y + 0.0 * job.extra_compute(ea, eb, iters).mean()
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

    _, ends = job.profiler_step_ends(raw_trace)
    by_step = {r["step"]: r for r in steps}
    clock_offsets = [end - by_step[n]["before_prof_step_ns"] for n, end in ends.items()]
    raw_size = job.export_gzip(raw_trace, out_dir / f"rank-{rank}.json.gz")
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
    job.gather_and_finish(mine, STAGES, tmp_dir)


# ---------------------------------------------------------------- truth building

_ms, _mean = job.ms, job.mean


def step_ms(rank: dict, step: int) -> float:
    """ProfilerStep#k: from just after the previous prof.step() to just before this one."""
    by = {s["step"]: s for s in rank["steps"]}
    return _ms(by[step]["before_prof_step_ns"] - by[step - 1]["after_prof_step_ns"])


def build_truth(scenario: str, ranks: list, cmdline: list[str], record_shapes: bool) -> dict:
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
    # Per cycle: the mean recorded step over the ranks, and the compute each rank did per step
    # (the slow stage's extra loop included: what the off cycles take away).
    per_cycle = {
        str(c): {
            "extra_on": extra_on_in(c) and slow is not None,
            "mean_step_ms": _mean(step_ms(r, st) for r in ranks for st in active_steps(c)),
            "compute_ms_per_step": {
                str(r["rank"]): _mean(
                    sum(_ms(x["end_ns"] - x["start_ns"]) for x in r["compute"] if x["step"] == st)
                    for st in active_steps(c)
                )
                for r in ranks
            },
        }
        for c in range(CYCLES)
    }
    # Neighbouring cycles (on, off), (off, on), ...: their differences show the noise.
    pair_diffs = [
        round(
            (per_cycle[str(c)]["mean_step_ms"] - per_cycle[str(c + 1)]["mean_step_ms"])
            * (1 if extra_on_in(c) else -1),
            3,
        )
        for c in range(CYCLES - 1)
    ]
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
            f"times are noisy. Mean profiled step {mean_step} ms; the even and odd profiler "
            f"cycles (the same work) {cf_on_mean} ms and {cf_mean} ms: {saving} ms apart, the "
            "noise. Expected saving from balancing: none (~0 ms)."
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
            f"same processes, {CYCLES - 1} more profiler cycles alternating the extra loop off and "
            f"on) the mean recorded step is {cf_mean} ms against {cf_on_mean} ms with "
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
                f"{CYCLES} cycles of the profiler's schedule (wait {SCHED_WAIT}, warm-up "
                f"{SCHED_WARMUP}, record {SCHED_ACTIVE}), the same processes and profiler "
                f"settings as the trace (cycle 0, exported): the recorded steps of cycles "
                f"{OFF_CYCLES} with the extra loop off (every stage at the same pace), of cycles "
                f"{ON_CYCLES} with it on (as in the trace). The saving is the difference of their "
                "mean step times; pair_differences_ms are those of neighbouring cycles (on - "
                "off), their spread the noise of one pair."
            ),
            "per_cycle": per_cycle,
            "pair_differences_ms": pair_diffs,
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
        "ranks": job.ranks_summary(ranks),
        "provenance": {
            **job.host_provenance(),
            "model": f"per stage MLP {WIDTH}-{WIDTH}-{WIDTH} (tanh), micro-batch {MB_ROWS} rows, "
            f"{MICRO} micro-batches, SGD; blocking dist.send/dist.recv",
            "profiler": job.profiler_provenance(
                {
                    "wait": SCHED_WAIT,
                    "warmup": SCHED_WARMUP,
                    "active": SCHED_ACTIVE,
                    "repeat": CYCLES,
                },
                record_shapes,
                exported_cycle=0,
            ),
            "command_line": cmdline,
            "generator": "tests/real_traces/make_gloo_pipeline.py",
        },
    }


def run_scenario(scenario: str, out_root: Path, cmdline: list[str], args) -> None:
    out_dir = out_root / scenario
    cfg = {"scenario": scenario, "record_shapes": args.record_shapes}
    ranks, wall = job.run_job(worker, cfg, STAGES, out_dir)
    truth = build_truth(scenario, ranks, cmdline, args.record_shapes)
    truth["provenance"]["wall_seconds"] = wall
    job.write_truth(out_dir, truth)


def main() -> None:
    def options(ap):
        ap.add_argument(
            "--no-record-shapes",
            dest="record_shapes",
            action="store_false",
            help="profile without record_shapes: the c10d send/recv ops then carry no peer rank",
        )

    job.main_loop(__doc__, SCENARIOS, "tests/data/real_gloo_pipeline", run_scenario, options)


if __name__ == "__main__":
    main()
