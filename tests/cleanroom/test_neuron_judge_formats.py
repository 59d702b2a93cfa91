"""Clean-room judge (issue 15): one simulated run, every Neuron layout, the same answers.

Black box: only ``tracediag.load``/``tracediag.diagnose``, the loaded job's public frames
(``ranks``, ``collectives``) and the CLI's JSON report. The expected figures come from the
simulator in ``neuron_judge_writer`` (re-run with the cause removed for the savings), never
from the tool.

One test per run (cause x variant seed) loads the run's five layouts once and makes every
check on them (so pytest-xdist never loads a run twice). Each failed check has an id
(``col201[parquet]``); ``KNOWN`` lists the checks the tool is known to fail, with the figures
at the time. A run whose failing checks are exactly its known ones is an xfail carrying the
measured figures; any other difference (a new failure, or a known one that now passes) fails
the test, so a fix or a regression is never silent. Nothing is skipped.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tracediag
from tests.cleanroom.neuron_judge_writer import (
    CLEAN,
    DEVICE_LAYOUTS,
    LAYOUTS,
    Shape,
    slow_dma,
    straggler,
    truth,
    write_run,
)

CAUSES = {
    "clean": CLEAN,
    "straggler": straggler(rank=2, slower_pct=30),
    "dma": slow_dma(layer=2, k=10),
}
# (cause, variant seed): seeds picked so that every open reading of Variants is written at least once
RUNS = [
    ("clean", 0),
    ("clean", 20),
    ("straggler", 0),
    ("straggler", 8),
    ("straggler", 3),
    ("straggler", 54),
    ("straggler", 29),  # Perfetto device traces: one file for all ranks
    ("dma", 0),
    ("dma", 16),
    ("dma", 7),  # Perfetto device traces: profile_rank_<g>/ntff.pftrace
    # legacy JSON without cc_ops (json_collectives=triggers; seeds 3, 29 and 7 above draw it too)
    ("straggler", 2),  # json_cc_wait=none: nothing after a trigger names S[15]
    ("clean", 26),  # json_cc_wait=consumer: an ACTIVATE waits $S[15]>=v for each op
    ("clean", 4),  # json_cc_wait=none
    # Perfetto device rows drawn round robin (pfd_rows=spread) in one file for all ranks
    ("clean", 51),
    ("clean", 19),
]
SYSTEM_LAYOUTS = tuple(x for x in LAYOUTS if x not in DEVICE_LAYOUTS)
DEVICE_ONLY = ("DMA", "CMP", "NUM")  # families only a device profile can show
ALIGN_TOL_NS = 2_000
SAVING_TOL = 0.15
CLI_RUN = ("straggler", 0)
CLI_LAYOUTS = ("parquet", "perfetto")

# Checks the tool failed when this judge was written (2026-12-02), by run, less those fixed
# since (ranks from worker_gid and rank folders, timestamp_unit us, executions of a legacy JSON
# whose pc counts on, DmaPacketAggregated blocks on serial lanes, a later execution's DMA tied
# to the previous one's end only through each track's first transfer, legacy JSON DMA rows
# without a block or trigger id given no trigger, so no source line for DMA104). Reasons in
# short; the xfail message carries the figures measured on each run.
# The Perfetto device traces (layout perfetto_device, added 2026-12-02) were fixed the same day:
# DMA slices with only the legacy JSON row keys (an IndexError), collectives from the CC-core
# rows, ranks from profile_rank_<g> folders and pid = worker_gid, negative and unsigned ids,
# DMA and collective triggers, executions and packets as the legacy JSON reader infers them.
KNOWN: dict[tuple[str, int], dict[str, str]] = {}


def _input_paths(run: dict, layout: str) -> list[str]:
    root = Path(run["paths"][layout])
    v = run["variants"]
    if (layout == "legacy_json" and v.json_layout == "dirs") or (
        layout == "perfetto_device" and v.pfd_files in ("rank_dirs", "ntff_dirs")
    ):
        return [str(p) for p in sorted(root.iterdir())]  # one folder per rank: named one by one
    return [str(root)]


def _load(run: dict, layout: str):
    """(job, diagnosis) or the error text: an error fails every check of the layout."""
    try:
        job = tracediag.load(_input_paths(run, layout), cache=False, jobs=1)
        return job, tracediag.diagnose(job), None
    except Exception as exc:  # noqa: BLE001 - the judge reports any failure as a failed check
        return None, None, f"{type(exc).__name__}: {str(exc)[:300]}"


def _warn_set(diag, exclude: tuple = ()) -> set:
    return {
        (f.code, tuple(sorted(int(r) for r in f.ranks)))
        for f in diag.at_or_above("warning")
        if not f.code.startswith(exclude)
    }


def _instances(job):
    """The loaded collectives, instances in time order x ranks: ends and arrivals (ns)."""
    c = job.collectives
    order = c.groupby("coll_key", observed=True).end_ns.median().sort_values().index
    ends = c.pivot_table(index="coll_key", columns="rank", values="end_ns", observed=True).loc[
        order
    ]
    arr = c.pivot_table(index="coll_key", columns="rank", values="arrival_ns", observed=True).loc[
        order
    ]
    return ends.to_numpy(np.int64), arr.to_numpy(np.int64)


def _layout_checks(run: dict, layout: str, job, diag, cause: str) -> dict:
    """Failed checks of one layout: id -> what was expected and what the tool gave."""
    t, shape, bad = run["truth"], run["sim"].shape, {}
    ranks = [int(r) for r in job.ranks]
    if ranks != t["ranks"]:
        bad[f"ranks[{layout}]"] = f"ranks {ranks}, written {t['ranks']}"
    ends, arr = _instances(job)
    if ends.shape != (shape.n_steps, shape.n_ranks):
        bad[f"ends[{layout}]"] = (
            f"collective instances x ranks {ends.shape}, written {(shape.n_steps, shape.n_ranks)}"
        )
    else:
        spread = ends.max(axis=1) - ends.min(axis=1)
        if (spread > ALIGN_TOL_NS).any():
            bad[f"ends[{layout}]"] = (
                f"AllReduce end spread {spread.tolist()} ns after alignment (max {ALIGN_TOL_NS})"
            )
        rel = arr - arr.min(axis=1, keepdims=True)
        want = np.asarray(t["arrival_rel_ns"])
        if (np.abs(rel - want) > ALIGN_TOL_NS).any():
            bad[f"arrivals[{layout}]"] = (
                f"arrival offsets {rel.tolist()} ns, simulated {want.tolist()}"
            )
    warn = list(diag.at_or_above("warning"))
    if cause == "straggler":
        late = t["late_rank"][0]
        col = [f for f in warn if f.code == "COL201"]
        best = max(col, key=lambda f: f.saving_ns) if col else None
        if best is None:
            bad[f"col201[{layout}]"] = f"no COL201 at warning+ (got {sorted(_warn_set(diag))})"
        elif [int(r) for r in best.ranks] != [late] or abs(
            best.saving_ns - t["saving_ns"]
        ) > SAVING_TOL * t["saving_ns"]:
            bad[f"col201[{layout}]"] = (
                f"COL201 ranks {list(best.ranks)} saving {best.saving_ns} ns; truth rank "
                f"{late}, saving {t['saving_ns']} ns (+-{SAVING_TOL:.0%})"
            )
    if cause == "dma" and layout in DEVICE_LAYOUTS:
        dma = [f for f in warn if f.code == "DMA101"]
        best = max(dma, key=lambda f: f.saving_ns) if dma else None
        if best is None:
            info = [
                (f.code, str(f.severity), f.saving_ns)
                for f in diag.findings
                if f.code.startswith("DMA")
            ]
            bad[f"dma101[{layout}]"] = (
                f"no DMA101 at warning+ (DMA findings: {info}); truth saving {t['saving_ns']} ns"
            )
        elif (
            sorted(int(r) for r in best.ranks) != t["ranks"]
            or abs(best.saving_ns - t["saving_ns"]) > SAVING_TOL * t["saving_ns"]
        ):
            bad[f"dma101[{layout}]"] = (
                f"DMA101 ranks {list(best.ranks)} saving {best.saving_ns} ns; truth ranks "
                f"{t['ranks']}, saving {t['saving_ns']} ns (+-{SAVING_TOL:.0%})"
            )
    if cause == "dma" and layout in DEVICE_LAYOUTS:
        # Efficiency per transfer, not per packet (a Parquet DmaPacket table and a Perfetto
        # trace of packets write 4 rows a transfer): the slow layer's weight moves in one
        # transfer per rank and step, whatever the layout.
        want = shape.n_ranks * shape.n_steps
        got = [f.evidence["transfers"] for f in warn if f.code == "DMA104"]
        if got != [want]:
            bad[f"dma104-transfers[{layout}]"] = (
                f"DMA104 transfers {got}; written {want} (one per rank and step)"
            )
        per_rank = {f.evidence["transfers"] for f in warn if f.code == "DMA101"}
        if per_rank != {shape.n_steps}:
            bad[f"dma101-transfers[{layout}]"] = (
                f"DMA101 transfers per rank {sorted(per_rank)}; written {shape.n_steps}"
            )
    if (cause == "clean" or (cause == "dma" and layout in SYSTEM_LAYOUTS)) and warn:
        # nothing to see: a clean run, or every rank equally slower as a system profile shows it
        bad[f"quiet[{layout}]"] = "warning+ findings on a run without a visible cause: " + str(
            [(f.code, list(f.ranks), f.title) for f in warn]
        )
    return bad


def _cli_check(run: dict, layout: str, diag) -> dict:
    exe = shutil.which("tracediag") or str(Path(sys.executable).with_name("tracediag"))
    out = subprocess.run(
        [exe, "report", *_input_paths(run, layout), "--format", "json", "--no-cache", "-q"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if out.returncode != 0:
        return {f"cli[{layout}]": f"exit {out.returncode}: {out.stderr[-500:]}"}
    rep = json.loads(out.stdout)
    cli = {
        (f["code"], tuple(sorted(f["ranks"])), f["saving_ns"])
        for f in rep["findings"]
        if f["severity"] in ("warning", "error")
    }
    api = {
        (f.code, tuple(sorted(int(r) for r in f.ranks)), int(f.saving_ns))
        for f in diag.at_or_above("warning")
    }
    rank_ids = [r["rank"] for r in rep["ranks"]]
    if cli != api or rank_ids != run["truth"]["ranks"]:
        return {f"cli[{layout}]": f"CLI ranks {rank_ids} findings {sorted(cli)}; API {sorted(api)}"}
    return {}


@pytest.mark.parametrize(("cause", "seed"), [pytest.param(c, s, id=f"{c}-s{s}") for c, s in RUNS])
def test_every_layout_of_the_run_gives_the_truth(tmp_path, cause, seed):
    """Ranks, clock alignment (AllReduce ends within 2 us, arrivals as simulated), the cause's
    finding with its re-simulated saving, quiet runs quiet, and the same findings at warning
    and above from every layout of the run (device-only families compared between the device
    layouts)."""
    run = write_run(tmp_path, CAUSES[cause], seed)
    bad, device_sets, system_sets, dma_queues = {}, {}, {}, {}
    for layout in LAYOUTS:
        job, diag, err = _load(run, layout)
        if err:
            bad[f"load[{layout}]"] = err
            continue
        bad.update(_layout_checks(run, layout, job, diag, cause))
        system_sets[layout] = _warn_set(diag, exclude=DEVICE_ONLY)
        if layout in DEVICE_LAYOUTS:
            device_sets[layout] = _warn_set(diag)
            # DMA findings name the same queue whatever the layout draws (rings, rows, engines)
            dma_queues[layout] = {
                (f.code, f.track) for f in diag.at_or_above("warning") if f.code.startswith("DMA")
            }
        if (cause, seed) == CLI_RUN and layout in CLI_LAYOUTS:
            bad.update(_cli_check(run, layout, diag))
    if (
        len(device_sets) < len(DEVICE_LAYOUTS)
        or len({frozenset(s) for s in device_sets.values()}) != 1
    ):
        bad["same-device"] = f"warning+ (code, ranks) by device layout: {device_sets}"
    if len({frozenset(s) for s in dma_queues.values()}) > 1:
        bad["same-dma-queue"] = f"warning+ DMA (code, queue) by device layout: {dma_queues}"
    if len(system_sets) < len(LAYOUTS) or len({frozenset(s) for s in system_sets.values()}) != 1:
        bad["same-all"] = f"warning+ (code, ranks) without {DEVICE_ONLY} by layout: {system_sets}"
    known = KNOWN.get((cause, seed), {})
    header = (
        f"variants: {run['variants'].describe()}; truth: saving {run['truth']['saving_ns']} ns, "
        f"late rank {run['truth']['late_rank']}, ranks {run['truth']['ranks']}"
    )
    unexpected = {k: v for k, v in bad.items() if k not in known}
    fixed = sorted(set(known) - set(bad))
    if unexpected or fixed:
        lines = [f"  FAILED {k}: {v}" for k, v in unexpected.items()]
        lines += [f"  NOW PASSES (remove from KNOWN): {k} ({known[k]})" for k in fixed]
        pytest.fail(header + "\n" + "\n".join(lines))
    if bad:
        pytest.xfail(
            header + " | known failures: " + " | ".join(f"{k}: {v}" for k, v in bad.items())
        )


def test_judge_truth_matches_the_figures_worked_by_hand():
    """The simulator's truth against arithmetic on the nominal durations (jitter is +-0.4%):
    the straggler is 30% slower on 4 x (30 + 8) us per step; layer 2's 100 us DMA, issued at
    0.9 us, ends 22.4 us after layer 1's activation (2.5 us + 2 x 38 us); two steps."""
    sh = Shape()
    assert truth(sh, CLEAN, 0)["saving_ns"] == 0
    t = truth(sh, CAUSES["straggler"], 0)
    assert t["late_rank"] == [2, 2]
    assert t["lateness_ns"] == pytest.approx([0.3 * 4 * 38_000] * 2, rel=0.02)
    assert t["saving_ns"] == pytest.approx(2 * 0.3 * 4 * 38_000, rel=0.02)
    t = truth(sh, CAUSES["dma"], 0)
    assert t["saving_ns"] == pytest.approx(2 * (900 + 100_000 - (2_500 + 2 * 38_000)), rel=0.03)
