"""Make real PyTorch profiler (Kineto) traces of a small CPU DDP job with known causes.

Runs a world-size-4 DistributedDataParallel job on CPU with the gloo backend
(torch.multiprocessing spawn, MASTER_ADDR=127.0.0.1, a free port), profiles a
few steps per rank with ``torch.profiler.profile`` and writes, per scenario::

    <out>/<scenario>/rank-<r>.json.gz   one Chrome/Kineto trace per rank (gzip -9)
    <out>/<scenario>/truth.json         what the script injected and measured itself

The truth is taken from this script's own knowledge (which rank it delays and
how) and from wall-clock readings it takes itself (``time.time_ns`` and
``time.perf_counter_ns``) around the injected delay, around every collective
call and around ``prof.step()``.  It never reads a trace to decide the answer;
after export each rank only reads back its own ``ProfilerStep#N`` events to
report which of its two clocks the trace's timestamps follow.

After the profiled window the same processes run one settle step and then five
more steps with the delay switched off (profiler no longer recording): their
step time is the measured counterfactual for "what if the delayed rank kept the
others' pace" (``truth.json["counterfactual_no_delay"]``).

Scenarios (``--scenario``, repeatable; default: all):

* ``clean``             no injected delay.
* ``straggler_sleep``   rank 2 sleeps 80 ms (host delay) before its forward, every step.
* ``straggler_compute`` rank 1 runs an extra matmul loop (~70 ms) before backward, every step.
* ``alltoall``          gloo has no all_to_all, so each step adds explicit
                        broadcast, all_gather and all_reduce calls after the
                        optimizer step; rank 3 sleeps 60 ms right before the
                        broadcast (so it is late to the broadcast and to the
                        all_gather that follows).

Needs torch (CPU build is enough); it is not a dependency of the project.  Run::

    /work/torchvenv/bin/python tests/real_traces/make_gloo_traces.py \
        --out tests/data/real_gloo
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

import torch
import torch.distributed as dist
from gloo_job import (
    export_gzip,
    extra_compute,
    gather_and_finish,
    host_provenance,
    init_rank,
    main_loop,
    profiler_provenance,
    profiler_step_ends,
    ranks_summary,
    run_job,
    write_truth,
)
from gloo_job import ms as _ms
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, profile, schedule

SCENARIOS = ("clean", "straggler_sleep", "straggler_compute", "alltoall")
WORLD_SIZE = 4

# Profiler schedule: step 0 wait, step 1 warmup, steps 2..6 recorded.
SCHED_WAIT, SCHED_WARMUP, SCHED_ACTIVE = 1, 1, 5
TOTAL_STEPS = SCHED_WAIT + SCHED_WARMUP + SCHED_ACTIVE
ACTIVE_STEPS = list(range(SCHED_WAIT + SCHED_WARMUP, TOTAL_STEPS))
# After the profiled window: one settle step (trace export happens in the prof.step()
# that closes the window), then CF_STEPS unprofiled steps with the delay switched off,
# timed the same way: the paired counterfactual "what if the delayed rank kept pace".
CF_STEPS = list(range(TOTAL_STEPS + 1, TOTAL_STEPS + 1 + 5))
ALL_STEPS = TOTAL_STEPS + 1 + len(CF_STEPS)

BATCH, D_IN, D_HID, D_OUT = 128, 256, 512, 16

SCENARIO_SPEC = {
    "clean": {"delayed_rank": None, "kind": None, "delay_s": 0.0},
    "straggler_sleep": {"delayed_rank": 2, "kind": "sleep_before_forward", "delay_s": 0.08},
    "straggler_compute": {
        "delayed_rank": 1,
        "kind": "extra_matmul_before_backward",
        "delay_s": 0.07,  # target; the matmul count is calibrated once before profiling
    },
    "alltoall": {"delayed_rank": 3, "kind": "sleep_before_broadcast", "delay_s": 0.06},
}


# What this script knows about each scenario beyond the numbers (said in words).
SCENARIO_NOTES = {
    "straggler_sleep": (
        "Rank 2 sleeps before its forward, so it reaches its first DDP bucket all-reduce "
        "(launched from backward) last; the other ranks' gloo:all_reduce work for that "
        "bucket stays open until rank 2 joins."
    ),
    "straggler_compute": (
        "Rank 1's extra compute sits between forward and backward, so it launches its DDP "
        "bucket all-reduces last; the others wait in those all-reduces. Unlike the sleep "
        "case, the delay is visible as ops (aten::matmul/aten::mm/aten::tanh) on rank 1."
    ),
    "alltoall": (
        "Root cause: rank 3 (it sleeps right before the broadcast). gloo's broadcast is "
        "not one-to-all here: only some ranks are held until rank 3 enters it (see the "
        "per-rank broadcast durations), and a rank held in the broadcast then arrives late "
        "at the all_gather together with rank 3, so 'last to enter' at the all_gather can "
        "be rank 3 or the rank that rank 3 held up (they enter within ~1 ms of each other). "
        "The ranks not held in the broadcast wait ~the delay in the all_gather. The DDP "
        "bucket all-reduces and the final all_reduce show only noise-level spreads."
    ),
}


def now() -> dict[str, int]:
    """Both clocks, read back to back."""
    return {"epoch_ns": time.time_ns(), "perf_ns": time.perf_counter_ns()}


def make_model() -> nn.Module:
    return nn.Sequential(
        nn.Linear(D_IN, D_HID),
        nn.ReLU(),
        nn.Linear(D_HID, D_HID),
        nn.ReLU(),
        nn.Linear(D_HID, D_HID),
        nn.ReLU(),
        nn.Linear(D_HID, D_OUT),
    )


def timed_collective(log: list, step: int, name: str, fn, *args, **kwargs):
    """Run one synchronous collective and log its enter/exit on this rank."""
    enter = now()
    out = fn(*args, **kwargs)
    leave = now()
    log.append({"step": step, "op": name, "enter": enter, "exit": leave})
    return out


def make_ddp_hook(log: list, step_box: list, world: int):
    """Same maths as torch's default allreduce_hook, plus enter/complete times.

    ``enter`` is when DDP's reducer hands the bucket to the hook (the
    ``dist.all_reduce(async_op=True)`` call is made right then); ``exit`` is when
    gloo completes the work (the future's callback, on gloo's thread).
    """

    def hook(state, bucket):
        rec = {
            "step": step_box[0],
            "op": "ddp_bucket_all_reduce",
            "bucket_index": bucket.index(),
            "numel": bucket.buffer().numel(),
        }
        buf = bucket.buffer()
        buf.div_(world)
        rec["enter"] = now()
        fut = dist.all_reduce(buf, async_op=True).get_future()

        def done(f):
            rec["exit"] = now()
            return f.value()[0]

        log.append(rec)
        return fut.then(done)

    return hook


def worker(rank: int, cfg: dict) -> None:
    init_rank(rank, cfg["port"], cfg["world"])
    scenario = cfg["scenario"]
    spec = SCENARIO_SPEC[scenario]
    delayed_rank = spec["delayed_rank"] == rank
    out_dir = Path(cfg["out_dir"])
    tmp_dir = Path(cfg["tmp_dir"])

    torch.manual_seed(0)
    model = DDP(make_model())
    coll_log: list = []
    step_box = [-1]
    model.register_comm_hook(None, make_ddp_hook(coll_log, step_box, cfg["world"]))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.MSELoss()
    gen = torch.Generator().manual_seed(1000 + rank)
    x = torch.randn(BATCH, D_IN, generator=gen)
    y = torch.randn(BATCH, D_OUT, generator=gen)

    # Extra compute for straggler_compute: calibrate the matmul count once,
    # before profiling, so the loop is fixed real work (~delay_s) per step.
    # (few large matmuls rather than many small ones keep the trace small)
    ea = torch.randn(256, 768, generator=gen)
    eb = torch.randn(768, 768, generator=gen) / 30.0
    extra_iters = 0
    if delayed_rank and spec["kind"] == "extra_matmul_before_backward":
        extra_compute(ea, eb, 2)
        t0 = time.perf_counter_ns()
        extra_compute(ea, eb, 6)
        per_iter_ns = (time.perf_counter_ns() - t0) / 6
        extra_iters = max(1, round(spec["delay_s"] * 1e9 / per_iter_ns))

    ctrl = torch.zeros(4)
    metric = torch.zeros(8)
    gathered = [torch.zeros(8) for _ in range(cfg["world"])]
    loss_sum = torch.zeros(1)

    dist.barrier()  # warm start: all ranks leave here together

    steps: list = []
    injected: list = []
    sched = schedule(wait=SCHED_WAIT, warmup=SCHED_WARMUP, active=SCHED_ACTIVE, repeat=1)
    raw_trace = tmp_dir / f"rank-{rank}.json"

    def on_ready(p):
        p.export_chrome_trace(str(raw_trace))

    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=sched,
        on_trace_ready=on_ready,
        record_shapes=False,
        with_stack=False,
    ) as prof:
        for it in range(ALL_STEPS):
            delayed = delayed_rank and it < TOTAL_STEPS  # off for the counterfactual steps
            step_box[0] = it
            rec = {"step": it, "profiler_step_num": prof.step_num, "start": now()}
            if delayed and spec["kind"] == "sleep_before_forward":
                a = now()
                time.sleep(spec["delay_s"])
                injected.append({"step": it, "kind": spec["kind"], "start": a, "end": now()})
            rec["forward_start"] = now()
            out = model(x)
            loss = loss_fn(out, y)
            if delayed and spec["kind"] == "extra_matmul_before_backward":
                a = now()
                extra_compute(ea, eb, extra_iters)
                injected.append(
                    {
                        "step": it,
                        "kind": spec["kind"],
                        "iters": extra_iters,
                        "start": a,
                        "end": now(),
                    }
                )
            rec["backward_start"] = now()
            loss.backward()  # DDP's bucket all-reduces are launched and waited for in here
            rec["backward_end"] = now()
            opt.step()
            opt.zero_grad(set_to_none=True)
            rec["optimizer_end"] = now()
            if scenario == "alltoall":
                if delayed:
                    a = now()
                    time.sleep(spec["delay_s"])
                    injected.append({"step": it, "kind": spec["kind"], "start": a, "end": now()})
                if rank == 0:
                    ctrl.fill_(float(it))
                timed_collective(coll_log, it, "broadcast", dist.broadcast, ctrl, src=0)
                metric.fill_(loss.item() + rank)
                timed_collective(coll_log, it, "all_gather", dist.all_gather, gathered, metric)
                loss_sum.fill_(loss.item())
                timed_collective(coll_log, it, "all_reduce", dist.all_reduce, loss_sum)
            rec["before_prof_step"] = now()
            prof.step()
            rec["after_prof_step"] = now()
            steps.append(rec)

    # Which clock does the trace follow?  Read back only this rank's own
    # ProfilerStep#N begin/end and compare with the readings taken just after
    # the previous prof.step() / just before this step's prof.step().
    base_ns, ends = profiler_step_ends(raw_trace)
    off_epoch, off_perf = [], []
    by_step = {r["step"]: r for r in steps}
    for n, end_ns in ends.items():
        if n in by_step:
            r = by_step[n]
            off_epoch.append(end_ns - r["before_prof_step"]["epoch_ns"])
            off_perf.append(end_ns - r["before_prof_step"]["perf_ns"])
    clock_check = {
        "base_time_ns": base_ns,
        "profiler_step_end_minus_epoch_reading_ns": off_epoch,
        "profiler_step_end_minus_perf_reading_ns": off_perf,
    }
    raw_size = export_gzip(raw_trace, out_dir / f"rank-{rank}.json.gz")

    # Clock pairs for converting perf readings to epoch (sampled after the run).
    pairs = [now() for _ in range(5)]
    mine = {
        "rank": rank,
        "pid": os.getpid(),
        "steps": steps,
        "collectives": coll_log,
        "injected": injected,
        "extra_matmul_iters": extra_iters,
        "clock_check": clock_check,
        "clock_pairs": pairs,
        "trace_uncompressed_bytes": raw_size,
    }
    gather_and_finish(mine, cfg["world"], tmp_dir)


# ---------------------------------------------------------------- truth building


def build_truth(scenario: str, ranks: list, cmdline: list[str], world: int) -> dict:
    spec = SCENARIO_SPEC[scenario]
    delayed = spec["delayed_rank"]
    active = set(ACTIVE_STEPS)

    # --- steps per rank (ProfilerStep#N = [after previous prof.step(), before this prof.step()])
    step_table = {}
    for st in ACTIVE_STEPS:
        row = {}
        for r in ranks:
            rec = next(s for s in r["steps"] if s["step"] == st)
            prev = next(s for s in r["steps"] if s["step"] == st - 1)
            start = prev["after_prof_step"]["epoch_ns"]
            end = rec["before_prof_step"]["epoch_ns"]
            row[str(r["rank"])] = {
                "profiler_step_name": f"ProfilerStep#{st}",
                "start_epoch_ns": start,
                "end_epoch_ns": end,
                "start_perf_ns": prev["after_prof_step"]["perf_ns"],
                "end_perf_ns": rec["before_prof_step"]["perf_ns"],
                "duration_ms": _ms(end - start),
                "forward_start_epoch_ns": rec["forward_start"]["epoch_ns"],
                "backward_ms": _ms(
                    rec["backward_end"]["epoch_ns"] - rec["backward_start"]["epoch_ns"]
                ),
            }
        step_table[str(st)] = row

    # --- collectives per step: match the k-th call of each op across ranks
    coll_table = {}
    for st in ACTIVE_STEPS:
        per_rank = {r["rank"]: [c for c in r["collectives"] if c["step"] == st] for r in ranks}
        n = min(len(v) for v in per_rank.values())
        calls = []
        for k in range(n):
            entries = {rk: per_rank[rk][k] for rk in per_rank}
            op = entries[0]["op"]
            assert all(e["op"] == op for e in entries.values()), "collective order differs"
            enter = {rk: e["enter"]["epoch_ns"] for rk, e in entries.items()}
            leave = {rk: e["exit"]["epoch_ns"] for rk, e in entries.items()}
            last = max(enter, key=enter.get)
            first = min(enter, key=enter.get)
            calls.append(
                {
                    "index_in_step": k,
                    "op": op,
                    **(
                        {"bucket_index": entries[0]["bucket_index"], "numel": entries[0]["numel"]}
                        if "bucket_index" in entries[0]
                        else {}
                    ),
                    "enter_epoch_ns": {str(rk): v for rk, v in enter.items()},
                    "exit_epoch_ns": {str(rk): v for rk, v in leave.items()},
                    "enter_perf_ns": {str(rk): e["enter"]["perf_ns"] for rk, e in entries.items()},
                    "exit_perf_ns": {str(rk): e["exit"]["perf_ns"] for rk, e in entries.items()},
                    "duration_ms": {str(rk): _ms(leave[rk] - enter[rk]) for rk in enter},
                    "last_to_enter": last,
                    "first_to_enter": first,
                    "arrival_spread_ms": _ms(enter[last] - enter[first]),
                    "wait_for_last_ms": {str(rk): _ms(enter[last] - enter[rk]) for rk in enter},
                }
            )
        coll_table[str(st)] = calls

    # --- injected delay, measured
    inj = []
    if delayed is not None:
        r = next(x for x in ranks if x["rank"] == delayed)
        inj = [
            {
                "step": i["step"],
                "kind": i["kind"],
                "start_epoch_ns": i["start"]["epoch_ns"],
                "end_epoch_ns": i["end"]["epoch_ns"],
                "measured_ms": _ms(i["end"]["epoch_ns"] - i["start"]["epoch_ns"]),
                **({"iters": i["iters"]} if "iters" in i else {}),
            }
            for i in r["injected"]
            if i["step"] in active
        ]

    # --- summary numbers
    def mean(xs):
        return round(statistics.fmean(xs), 3) if xs else None

    step_ms = {
        str(r["rank"]): [step_table[str(st)][str(r["rank"])]["duration_ms"] for st in ACTIVE_STEPS]
        for r in ranks
    }
    mean_step_ms = mean([v for vs in step_ms.values() for v in vs])
    mean_delay_ms = mean([i["measured_ms"] for i in inj]) if inj else 0.0

    # Per collective kind: who is last, how long the others wait (enter gap) and
    # how long their collective calls last.
    kinds: dict = {}
    for st in ACTIVE_STEPS:
        for c in coll_table[str(st)]:
            key = c["op"] + (f"[bucket {c['bucket_index']}]" if "bucket_index" in c else "")
            d = kinds.setdefault(
                key, {"last_to_enter": [], "spread_ms": [], "dur_ms": {}, "wait_ms": {}}
            )
            d["last_to_enter"].append(c["last_to_enter"])
            d["spread_ms"].append(c["arrival_spread_ms"])
            for rk, v in c["duration_ms"].items():
                d["dur_ms"].setdefault(rk, []).append(v)
            for rk, v in c["wait_for_last_ms"].items():
                d["wait_ms"].setdefault(rk, []).append(v)
    per_kind = {
        k: {
            "last_to_enter_per_step": v["last_to_enter"],
            "mean_arrival_spread_ms": mean(v["spread_ms"]),
            "mean_duration_ms_per_rank": {rk: mean(x) for rk, x in v["dur_ms"].items()},
            "mean_wait_for_last_ms_per_rank": {rk: mean(x) for rk, x in v["wait_ms"].items()},
        }
        for k, v in kinds.items()
    }

    if delayed is None:
        spreads = "; ".join(
            f"{k}: last to enter per step {v['last_to_enter_per_step']}, mean arrival "
            f"spread {v['mean_arrival_spread_ms']} ms"
            for k, v in per_kind.items()
        )
        words = (
            "No rank is delayed. All ranks run the same work; arrival spreads at the DDP "
            "all-reduces are only scheduling noise (4 ranks on a shared 2-core host) and no "
            f"rank is meant to be consistently last. Measured: {spreads}. Mean step "
            f"{mean_step_ms} ms. Expected saving from fixing a straggler: none (~0 ms)."
        )
    else:
        where = {
            "sleep_before_forward": (
                "a host-side time.sleep before its forward (no ops in the trace: a gap "
                "on its main thread)"
            ),
            "extra_matmul_before_backward": (
                "extra matmul/tanh compute between its forward and backward (aten::matmul/"
                "aten::mm/aten::tanh ops on its main thread)"
            ),
            "sleep_before_broadcast": (
                "a host-side time.sleep after its optimizer step, right before the explicit "
                "broadcast (a gap on its main thread)"
            ),
        }[spec["kind"]]
        waits = []
        for k, v in per_kind.items():
            n_last = v["last_to_enter_per_step"].count(delayed)
            waits.append(
                f"{k}: last to enter per step {v['last_to_enter_per_step']} (rank {delayed} "
                f"in {n_last}/{len(ACTIVE_STEPS)}), mean wait for the last arrival per rank "
                f"{v['mean_wait_for_last_ms_per_rank']} ms, mean call duration per rank "
                f"{v['mean_duration_ms_per_rank']} ms"
            )
        words = (
            f"Rank {delayed} is the straggler: every step it spends ~{mean_delay_ms} ms "
            f"(measured mean) in {where}. Measured per collective: "
            + "; ".join(waits)
            + ". "
            + SCENARIO_NOTES.get(scenario, "")
            + " "
            f"The step time of every rank (~{mean_step_ms} ms mean over ranks and steps) is "
            f"bounded by rank {delayed}'s injected delay, since the others block in the "
            f"collective until it arrives. If rank {delayed} ran at the others' pace, each "
            f"step would be shorter by about the injected delay: ~{mean_delay_ms} ms per step "
            f"(~{round(mean_delay_ms * len(ACTIVE_STEPS), 1)} ms over the "
            f"{len(ACTIVE_STEPS)} profiled steps)."
        )

    clock_notes = []
    for r in ranks:
        cc = r["clock_check"]
        clock_notes.append(
            {
                "rank": r["rank"],
                "base_time_ns": cc["base_time_ns"],
                "median_step_end_minus_epoch_ns": statistics.median(
                    cc["profiler_step_end_minus_epoch_reading_ns"]
                ),
                "median_step_end_minus_perf_ns": statistics.median(
                    cc["profiler_step_end_minus_perf_reading_ns"]
                ),
            }
        )

    return {
        "scenario": scenario,
        "world_size": world,
        "backend": "gloo",
        "device": "cpu",
        "profiled_steps": ACTIVE_STEPS,
        "counterfactual_steps": CF_STEPS,
        "profiler_step_names": [f"ProfilerStep#{s}" for s in ACTIVE_STEPS],
        "delayed_rank": delayed,
        "delay_kind": spec["kind"],
        "delay_target_ms": spec["delay_s"] * 1000,
        "delay_measured_ms_per_step": [i["measured_ms"] for i in inj],
        "delay_measured_mean_ms": mean_delay_ms,
        "injected": inj,
        "extra_matmul_iters": {str(r["rank"]): r["extra_matmul_iters"] for r in ranks},
        "mean_step_ms": mean_step_ms,
        "step_ms_per_rank": step_ms,
        # Model answer: the saving if the delayed rank ran at the others' pace is about
        # the injected delay it measured; counterfactual_no_delay has the measured one.
        "expected_saving_ms_per_step": mean_delay_ms,
        "expected_saving_ms_total": round(mean_delay_ms * len(ACTIVE_STEPS), 3),
        "collectives_by_kind": per_kind,
        "expected_answer": words,
        "steps": step_table,
        "collectives": coll_table,
        "clock": {
            "statement": (
                "Trace 'ts'/'dur' are microseconds relative to the trace's "
                "baseTimeNanoseconds: epoch_ns = baseTimeNanoseconds + ts*1000. That "
                "matches time.time_ns() (CLOCK_REALTIME); time.perf_counter_ns() is a "
                "different (monotonic, boot-based) clock. All ranks are processes on one "
                "host, so epoch times are directly comparable across ranks. All *_epoch_ns "
                "fields here are time.time_ns(); *_perf_ns are time.perf_counter_ns()."
            ),
            "per_rank_check": clock_notes,
            "per_rank_clock_pairs": {str(r["rank"]): r["clock_pairs"] for r in ranks},
        },
        "measurement_notes": (
            "Step k = ProfilerStep#k, from just after the previous prof.step() to just "
            "before this step's prof.step(). DDP bucket all-reduce enter = the moment the "
            "reducer calls the comm hook (which immediately calls dist.all_reduce("
            "async_op=True)); exit = gloo completing the work (future callback). The "
            "explicit broadcast/all_gather/all_reduce in 'alltoall' are synchronous calls "
            "timed around the Python call. wait_for_last_ms = last rank's enter minus this "
            "rank's enter."
        ),
        "ranks": ranks_summary(ranks),
        "provenance": {
            **host_provenance(),
            "gloo_available": dist.is_gloo_available(),
            "backend": "gloo",
            "model": f"DDP(MLP {D_IN}-{D_HID}-{D_HID}-{D_HID}-{D_OUT}, ReLU), batch {BATCH}, SGD",
            "profiler": profiler_provenance(
                {"wait": SCHED_WAIT, "warmup": SCHED_WARMUP, "active": SCHED_ACTIVE, "repeat": 1},
                False,
                export="export_chrome_trace then gzip -9 (mtime=0)",
            ),
            "launcher": "torch.multiprocessing.spawn, MASTER_ADDR=127.0.0.1, free port",
            "command_line": cmdline,
            "generator": "tests/real_traces/make_gloo_traces.py",
        },
    }


def counterfactual_summary(ranks: list, delayed_mean_step_ms: float) -> dict:
    """Step times of the CF_STEPS run right after the profiled window, delay off."""
    per_rank = {}
    for r in ranks:
        by = {s["step"]: s for s in r["steps"]}
        per_rank[str(r["rank"])] = [
            _ms(by[st]["before_prof_step"]["epoch_ns"] - by[st - 1]["after_prof_step"]["epoch_ns"])
            for st in CF_STEPS
        ]
    cf_mean = round(statistics.fmean(v for vs in per_rank.values() for v in vs), 3)
    return {
        "what": (
            f"Steps {CF_STEPS[0]}..{CF_STEPS[-1]} of the same processes, run right after the "
            f"profiled window (after one settle step {TOTAL_STEPS}), with the injected delay "
            "switched off and the profiler no longer recording (not in the traces). Their "
            "step time is the measured answer to 'what if the delayed rank ran at the "
            "others' pace'. For 'clean' it shows the step-to-step noise and the profiler's "
            "own overhead instead."
        ),
        "steps": CF_STEPS,
        "step_ms_per_rank": per_rank,
        "mean_step_ms": cf_mean,
        "measured_saving_ms_per_step": round(delayed_mean_step_ms - cf_mean, 3),
        "measured_saving_ms_total": round((delayed_mean_step_ms - cf_mean) * len(ACTIVE_STEPS), 3),
    }


def run_scenario(scenario: str, out_root: Path, cmdline: list[str], _args=None) -> None:
    out_dir = out_root / scenario
    cfg = {"scenario": scenario, "world": WORLD_SIZE}
    ranks, wall = run_job(worker, cfg, WORLD_SIZE, out_dir)
    truth = build_truth(scenario, ranks, cmdline, WORLD_SIZE)
    truth["provenance"]["wall_seconds"] = wall
    cf = counterfactual_summary(ranks, truth["mean_step_ms"])
    truth["counterfactual_no_delay"] = cf
    if SCENARIO_SPEC[scenario]["delayed_rank"] is not None:
        gap = round(truth["delay_measured_mean_ms"] - cf["measured_saving_ms_per_step"], 3)
        truth["expected_answer"] += (
            f" Measured counterfactual (the same processes, {len(CF_STEPS)} more steps right "
            f"after the profiled window with the delay off): mean step {cf['mean_step_ms']} ms, "
            f"so the measured saving is {cf['measured_saving_ms_per_step']} ms per step "
            f"({gap:+} ms from the injected delay). The two can differ because the 4 ranks "
            "share 2 CPU cores (the others' compute speeds up while the straggler sleeps or "
            "computes alone), other work on the host varies, and the counterfactual steps "
            "run without the profiler recording."
        )
    write_truth(out_dir, truth)


def main() -> None:
    main_loop(__doc__, SCENARIOS, "tests/data/real_gloo", run_scenario)


if __name__ == "__main__":
    main()
