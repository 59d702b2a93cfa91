"""Read the real gloo traces with json/gzip only and check them against truth.json.

Standalone: it uses none of the project's code.  For every scenario folder under
``tests/data/real_gloo`` it lists what torch wrote (event names, categories,
threads, header keys), rebuilds per ProfilerStep and per collective who entered
last and how long the early ranks' collective ranges last, and compares that
with the script-side measurements in ``truth.json``.

    python tests/real_traces/read_traces.py [--data tests/data/real_gloo] [--json out.json]
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import statistics
from pathlib import Path

# c10d op on the calling thread -> gloo work range on a pt_gloo_runloop thread
C10D_TO_GLOO = {
    "c10d::allreduce_": "gloo:all_reduce",
    "c10d::broadcast_": "gloo:broadcast",
    "c10d::allgather_": "gloo:all_gather",
    "c10d::barrier": "gloo:barrier",
}


def ms(ns: float) -> float:
    return round(ns / 1e6, 3)


def load_rank(path: Path) -> dict:
    d = json.loads(gzip.decompress(path.read_bytes()))
    base = int(d.get("baseTimeNanoseconds", 0))
    thread_names: dict = collections.defaultdict(list)
    xs = []
    for e in d["traceEvents"]:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            thread_names[e["tid"]].append(e["args"]["name"])
        if e.get("ph") == "X":
            e = dict(e)
            e["t0"] = base + round(float(e["ts"]) * 1000)  # epoch ns (= time.time_ns())
            e["t1"] = e["t0"] + round(float(e.get("dur", 0)) * 1000)
            xs.append(e)
    steps = {}
    for e in xs:
        if e["name"].startswith("ProfilerStep#"):
            steps[int(e["name"].split("#")[1])] = e
    main_tid = next(iter(steps.values()))["tid"] if steps else None
    return {
        "header": {k: v for k, v in d.items() if k != "traceEvents"},
        "events": xs,
        "all_events": d["traceEvents"],
        "thread_names": dict(thread_names),
        "steps": steps,
        "main_tid": main_tid,
        "base": base,
    }


def step_of(t: int, steps: dict) -> int | None:
    for n, e in steps.items():
        if e["t0"] <= t <= e["t1"]:
            return n
    return None


def collectives(rank: dict) -> list[dict]:
    """c10d ops on the main thread, each paired with the gloo range it launched.

    Pairing: the k-th c10d::X on the main thread launches the k-th gloo:Y of
    that kind (gloo ranges run on the pt_gloo_runloop threads, in order).
    """
    ev = rank["events"]
    launches = sorted(
        (e for e in ev if e["name"] in C10D_TO_GLOO and e["tid"] == rank["main_tid"]),
        key=lambda e: e["t0"],
    )
    works = collections.defaultdict(list)
    for e in sorted(ev, key=lambda e: e["t0"]):
        if e["name"].startswith("gloo:"):
            works[e["name"]].append(e)
    # gloo work that began before the first recorded launch belongs to a step
    # before the window (its launch was not recorded): drop those.
    out = []
    used = collections.Counter()
    for ln in launches:
        gname = C10D_TO_GLOO[ln["name"]]
        cands = works[gname]
        i = used[gname]
        while i < len(cands) and cands[i]["t0"] < ln["t0"]:
            i += 1
        w = cands[i] if i < len(cands) else None
        used[gname] = i + 1
        out.append(
            {
                "name": ln["name"],
                "gloo": gname,
                "step": step_of(ln["t0"], rank["steps"]),
                "launch_t0": ln["t0"],
                "launch_dur_ms": ms(ln["t1"] - ln["t0"]),
                "work_t0": w["t0"] if w else None,
                "work_t1": w["t1"] if w else None,
                "work_tid": w["tid"] if w else None,
            }
        )
    return out


def main_thread_gaps(rank: dict, n: int) -> list[tuple[float, int]]:
    """Idle gaps (ms, start) between top-level events on the main thread inside step n."""
    st = rank["steps"][n]
    tops = sorted(
        (
            e
            for e in rank["events"]
            if e["tid"] == rank["main_tid"]
            and e is not st
            and st["t0"] <= e["t0"] <= st["t1"]
            and not e["name"].startswith("ProfilerStep#")
        ),
        key=lambda e: e["t0"],
    )
    gaps, cur = [], st["t0"]
    for e in tops:
        if e["t0"] > cur:
            gaps.append((ms(e["t0"] - cur), cur))
        cur = max(cur, e["t1"])
    if st["t1"] > cur:
        gaps.append((ms(st["t1"] - cur), cur))
    return sorted(gaps, reverse=True)


def op_time_ms(rank: dict, n: int, names: set[str]) -> float:
    st = rank["steps"][n]
    return ms(
        sum(
            e["t1"] - e["t0"]
            for e in rank["events"]
            if e["name"] in names
            and e["tid"] == rank["main_tid"]
            and st["t0"] <= e["t0"] <= st["t1"]
        )
    )


def analyse(folder: Path) -> dict:
    truth = json.loads((folder / "truth.json").read_text())
    world = truth["world_size"]
    ranks = {r: load_rank(folder / f"rank-{r}.json.gz") for r in range(world)}
    res: dict = {"scenario": folder.name, "inventory": {}, "steps": {}, "collectives": {}}

    # ---- inventory
    cats = collections.Counter()
    names_by_cat = collections.defaultdict(collections.Counter)
    thread_kinds = {}
    for r, rk in ranks.items():
        for e in rk["all_events"]:
            cats[(e.get("ph"), e.get("cat"))] += 1
            if e.get("ph") == "X":
                names_by_cat[e.get("cat")][e["name"]] += 1
        thread_kinds[r] = {str(t): n for t, n in rk["thread_names"].items()}
    h0 = ranks[0]["header"]
    res["inventory"] = {
        "header_keys": sorted(h0),
        "distributedInfo": h0.get("distributedInfo"),
        "baseTimeNanoseconds": {r: rk["base"] for r, rk in ranks.items()},
        "ph_cat_counts": {f"{ph}/{cat}": n for (ph, cat), n in sorted(cats.items(), key=str)},
        "user_annotation_names": sorted(names_by_cat.get("user_annotation", {})),
        "comm_names": sorted(
            n for c in names_by_cat.values() for n in c if "c10d" in n or "gloo" in n or "comm" in n
        ),
        "record_param_comms_present": any("record_param_comms" in c for c in names_by_cat.values()),
        "args_keys_on_comm_events": sorted(
            {
                k
                for rk in ranks.values()
                for e in rk["events"]
                if e["name"] in C10D_TO_GLOO or e["name"].startswith("gloo:")
                for k in e.get("args", {})
            }
        ),
        "thread_names": thread_kinds,
        "n_distinct_cpu_op_names": len(names_by_cat.get("cpu_op", {})),
    }

    # ---- steps (timestamps comparable directly: same host clock, base + ts*1000)
    step_ids = sorted(set.intersection(*(set(rk["steps"]) for rk in ranks.values())))
    for n in step_ids:
        row = {}
        for r, rk in ranks.items():
            st = rk["steps"][n]
            gaps = main_thread_gaps(rk, n)
            t = truth["steps"][str(n)][str(r)]
            row[r] = {
                "dur_ms": ms(st["t1"] - st["t0"]),
                "truth_dur_ms": t["duration_ms"],
                "start_minus_truth_us": round((st["t0"] - t["start_epoch_ns"]) / 1e3, 1),
                "largest_main_gap_ms": gaps[0][0] if gaps else 0.0,
                "largest_gap_at_ms_into_step": ms(gaps[0][1] - st["t0"]) if gaps else None,
                "matmul_tanh_ms": op_time_ms(rk, n, {"aten::matmul", "aten::tanh"}),
            }
        res["steps"][n] = row

    # ---- collectives per step, matched by order within the step
    per_rank = {r: collectives(rk) for r, rk in ranks.items()}
    truth_calls = truth["collectives"]
    for n in step_ids:
        calls = {r: [c for c in cs if c["step"] == n] for r, cs in per_rank.items()}
        k_max = min(len(v) for v in calls.values())
        out = []
        for k in range(k_max):
            cs = {r: calls[r][k] for r in calls}
            enter = {r: c["launch_t0"] for r, c in cs.items()}
            last = max(enter, key=enter.get)
            work_ms = {
                r: ms(c["work_t1"] - c["work_t0"]) if c["work_t0"] else None for r, c in cs.items()
            }
            # launch -> gloo work end: what the caller effectively waits for
            launch_to_end_ms = {
                r: ms(c["work_t1"] - c["launch_t0"]) if c["work_t1"] else None
                for r, c in cs.items()
            }
            tc = truth_calls[str(n)][k] if k < len(truth_calls[str(n)]) else None
            item = {
                "k": k,
                "trace_name": cs[0]["name"],
                "last_to_enter": last,
                "enter_after_first_ms": {r: ms(v - min(enter.values())) for r, v in enter.items()},
                "gloo_range_ms": work_ms,
                "launch_to_gloo_end_ms": launch_to_end_ms,
            }
            if tc:
                item["truth_op"] = tc["op"]
                item["truth_last_to_enter"] = tc["last_to_enter"]
                item["enter_minus_truth_us"] = {
                    r: round((enter[r] - tc["enter_epoch_ns"][str(r)]) / 1e3, 1) for r in enter
                }
                item["gloo_end_minus_truth_exit_us"] = {
                    r: round((cs[r]["work_t1"] - tc["exit_epoch_ns"][str(r)]) / 1e3, 1)
                    if cs[r]["work_t1"]
                    else None
                    for r in enter
                }
            out.append(item)
        res["collectives"][n] = out
    res["truth"] = {
        "delayed_rank": truth["delayed_rank"],
        "delay_measured_mean_ms": truth["delay_measured_mean_ms"],
        "mean_step_ms": truth["mean_step_ms"],
        "counterfactual": truth.get("counterfactual_no_delay", {}).get("mean_step_ms"),
        "measured_saving": truth.get("counterfactual_no_delay", {}).get(
            "measured_saving_ms_per_step"
        ),
    }
    return res


def summarise(res: dict) -> str:
    lines = [f"## {res['scenario']}"]
    steps = res["steps"]
    world = len(next(iter(steps.values())))
    durs = {r: [steps[n][r]["dur_ms"] for n in steps] for r in range(world)}
    lines.append(
        "step ms per rank (trace ProfilerStep): "
        + ", ".join(f"r{r}={[round(x, 1) for x in v]}" for r, v in durs.items())
    )
    lines.append(
        "mean step ms (trace): "
        + str(round(statistics.fmean(x for v in durs.values() for x in v), 3))
        + f"; truth mean {res['truth']['mean_step_ms']}"
    )
    gap = {r: [steps[n][r]["largest_main_gap_ms"] for n in steps] for r in range(world)}
    lines.append(
        "largest main-thread idle gap per step: "
        + ", ".join(f"r{r}={[round(x, 1) for x in v]}" for r, v in gap.items())
    )
    mm = {r: [steps[n][r]["matmul_tanh_ms"] for n in steps] for r in range(world)}
    lines.append(
        "aten::matmul+aten::tanh ms per step: "
        + ", ".join(f"r{r}={[round(x, 1) for x in v]}" for r, v in mm.items())
    )
    # group collectives by position
    by_k = collections.defaultdict(list)
    for items in res["collectives"].values():
        for it in items:
            by_k[(it["k"], it["trace_name"])].append(it)
    for (k, name), items in sorted(by_k.items()):
        lasts = [it["last_to_enter"] for it in items]
        spread = {
            r: round(statistics.fmean(it["enter_after_first_ms"][r] for it in items), 1)
            for r in range(world)
        }
        gl = {
            r: round(statistics.fmean(it["gloo_range_ms"][r] for it in items), 1)
            for r in range(world)
        }
        le = {
            r: round(statistics.fmean(it["launch_to_gloo_end_ms"][r] for it in items), 1)
            for r in range(world)
        }
        wait = {
            r: round(
                statistics.fmean(
                    max(it["enter_after_first_ms"].values()) - it["enter_after_first_ms"][r]
                    for it in items
                ),
                1,
            )
            for r in range(world)
        }
        agree = sum(it["last_to_enter"] == it.get("truth_last_to_enter") for it in items)
        e_in = sorted(abs(v) for it in items for v in it["enter_minus_truth_us"].values())
        e_out = sorted(
            abs(v)
            for it in items
            for v in it["gloo_end_minus_truth_exit_us"].values()
            if v is not None
        )
        err_in = f"median {round(statistics.median(e_in), 1)} max {e_in[-1]}"
        err_out = f"median {round(statistics.median(e_out), 1)} max {e_out[-1]}"
        lines.append(
            f"call #{k} {name} (truth: {items[0].get('truth_op')}): last to enter {lasts} "
            f"(= truth in {agree}/{len(items)}); mean enter after first per rank {spread} ms; "
            f"mean wait for the last arrival per rank {wait} ms; "
            f"mean gloo range per rank {gl} ms; mean launch->gloo end {le} ms; "
            f"|trace enter - truth enter| {err_in} us, |gloo end - truth exit| {err_out} us"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="tests/data/real_gloo")
    ap.add_argument("--json")
    args = ap.parse_args()
    results = []
    for folder in sorted(Path(args.data).iterdir()):
        if (folder / "truth.json").exists():
            res = analyse(folder)
            results.append(res)
            print(summarise(res))
            print()
    inv = results[0]["inventory"]
    print("## inventory (first scenario, rank 0 header)")
    for k, v in inv.items():
        print(f"{k}: {v}")
    if args.json:
        slim = [{k: v for k, v in r.items()} for r in results]
        Path(args.json).write_text(json.dumps(slim, indent=1, default=str))


if __name__ == "__main__":
    main()
