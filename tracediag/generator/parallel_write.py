"""Writing a parallel scenario: per-rank device profiles and the ground truth of its faults.

Each rank's tables are its stage's program written by :func:`device_tables.rank_tables`, with
the collectives made parallel: a ``replica_group`` of the rank's own group (its TP or DP group,
or the two ranks of a Send/Recv), an ``op_id`` shared by the instance's participants, and
``stream_id`` 0 for group collectives and ``1 + 2 * link + direction`` for Send/Recv (both ends
on the same stream id, as the parser matches on group, stream and op id).

Truth (``truth.json``): ``layout`` (sizes and per-rank coordinates), ``micro_batches``,
``schedule``, ``ideal_bubble_pct``; the ``device`` section adds per-stage ``stages`` (busy and
bubble time) to the usual fields. A ``slow_stage`` fault carries ``stage`` and
``bubble_cost_ns`` (the median growth of the other stages' bubbles, by re-simulation without
the fault); an ``exposed_tp`` fault the collective ``op``. Only the Neuron device formats are
simulated for parallel layouts: a request for another is recorded under ``skipped_formats``.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np

from tracediag.generator import write_neuron_json, write_parquet
from tracediag.generator.clocks import device_offsets
from tracediag.generator.device_tables import rank_tables
from tracediag.generator.faults import layer_name
from tracediag.generator.parallel_layout import (
    PARALLEL_SCENARIOS,
    SLOW_STAGE,
    SLOW_STAGE_FACTOR,
    ParallelLayout,
    scenario_layout,
)
from tracediag.generator.parallel_sim import ParallelRun, run_parallel, stage_run
from tracediag.generator.pipeline import DP_SYNC, MP_SYNC, TP_SYNC, build_parallel_program
from tracediag.generator.program import CC, INSTR, WorkloadShape
from tracediag.generator.summary import union_ns

DEVICE_FORMATS = ("parquet", "json")


def scenario_shape(
    scenario: str, layout: ParallelLayout, scale: float
) -> tuple[WorkloadShape, int]:
    """(model shape, micro-batches) of a parallel scenario: small, so that tests stay quick."""
    if layout.pp > 1:
        per_stage = max(1, round(2 * scale))
        shape = WorkloadShape(layout.pp * per_stage, tokens=256, hidden=4096, tiles=2, k_splits=1)
        return shape, 8
    return WorkloadShape(max(2, round(4 * scale)), tokens=1024, hidden=4096, tiles=4, k_splits=1), 2


def simulate_scenario(
    scenario: str, layout: ParallelLayout, seed: int, scale: float = 1.0, *, faults: bool = True
) -> ParallelRun:
    """The scenario's run on ``layout``; ``faults=False`` gives the same job without its fault."""
    shape, micro = scenario_shape(scenario, layout, scale)
    exposed = faults and scenario == "tp_exposed"
    slow = SLOW_STAGE if faults and scenario == "pipeline_slow_stage" else None
    if slow is not None and slow >= layout.pp:
        raise ValueError(f"{scenario}: stage {slow} needs at least {slow + 1} stages")
    pprog = build_parallel_program(shape, layout, micro, exposed_tp=exposed)
    return run_parallel(pprog, seed, slow, SLOW_STAGE_FACTOR if slow is not None else 1.0)


def _group_text(members) -> str:
    return "[[" + ", ".join(str(int(m)) for m in sorted(members)) + "]]"


def _bus_factor(stream: int, n: int) -> float:
    return 2.0 * (n - 1) / n if stream < 0 and n > 1 else 1.0  # Send/Recv: algbw is busbw


def rank_device_tables(run: ParallelRun, rank: int, offset: int):
    """The device tables of ``rank`` with its parallel collectives (see the module docstring)."""
    layout = run.layout
    stage, lane = divmod(rank, layout.lanes)
    device, nodes = stage_run(run, stage)
    tables = rank_tables(device, lane, offset)
    cc = nodes[device.program.kind == CC]
    sync, stream = run.pprog.sync[cc], run.pprog.p2p_stream[cc]
    is_recv = device.program.opcode[device.program.kind == CC] == "Recv"
    # An instance is named by its first node: a pair by its Send, the gradient norm's
    # AllReduce (one node per stage, consecutive) by stage 0's.
    op_id = np.where(is_recv, cc - 1, np.where(sync == MP_SYNC, cc - stage, cc))
    groups = []
    for kind, s in zip(sync.tolist(), stream.tolist(), strict=True):
        if kind == TP_SYNC:
            groups.append(_group_text(layout.tp_group(stage, lane)))
        elif kind == DP_SYNC:
            groups.append(_group_text(layout.dp_group(stage, lane)))
        elif kind == MP_SYNC:
            tp = layout.tp_group(0, lane)
            groups.append(_group_text([r + k * layout.lanes for k in range(layout.pp) for r in tp]))
        else:
            link = s // 2
            groups.append(_group_text([layout.rank(link, lane), layout.rank(link + 1, lane)]))
    sizes = np.array([g.count(",") + 1 for g in groups])
    cc_ops = tables.cc_ops.assign(
        op_id=op_id,
        stream_id=np.where(stream >= 0, 1 + stream, 0),
        stream_index=np.where(stream >= 0, 1 + stream, 0),
        replica_group=groups,
        bus_bandwidth=tables.cc_ops["algorithm_bandwidth"].to_numpy()
        * np.array(
            [_bus_factor(s, n) for s, n in zip(stream.tolist(), sizes.tolist(), strict=True)]
        ),
    )
    # Flows name a collective by its op_id: renumber them like the CcOp rows.
    flows = tables.flows.copy()
    for end in ("in", "out"):
        is_cc = (flows[f"{end}_table"] == "cc_op").to_numpy()
        ordinal = flows[f"{end}_id"].to_numpy()[is_cc]
        flows.loc[is_cc, f"{end}_id"] = op_id[ordinal]
    return dataclasses.replace(tables, rank=rank, cc_ops=cc_ops, flows=flows)


def stage_bubbles(run: ParallelRun) -> list[dict]:
    """Per stage: median busy time (union of instructions) and bubble over the step window."""
    layout = run.layout
    window = run.schedule.step_ns
    kind = run.pprog.program.kind
    stats = []
    for stage in range(layout.pp):
        busy = []
        for lane in range(layout.lanes):
            nodes, start, end = run.rank_times(layout.rank(stage, lane))
            instr = kind[nodes] == INSTR
            busy.append(union_ns(start[instr], end[instr]))
        median = int(np.median(busy))
        stats.append(
            {
                "stage": stage,
                "ranks": [layout.rank(stage, lane) for lane in range(layout.lanes)],
                "busy_ns": median,
                "bubble_ns": window - median,
                "bubble_pct": round(100.0 * (window - median) / window, 2),
            }
        )
    return stats


def _window(run: ParallelRun, mask: np.ndarray, ranks: list[int], offset0: int) -> list[int]:
    starts, ends = [], []
    for rank in ranks:
        nodes, start, end = run.rank_times(rank)
        hit = mask[nodes]
        starts.append(start[hit].min())
        ends.append(end[hit].max())
    return [int(min(starts)) + offset0, int(max(ends)) + offset0]


def _fault_entries(scenario: str, run: ParallelRun, clean: ParallelRun, offset0: int) -> list:
    layout, p = run.layout, run.pprog.program
    saving = run.schedule.step_ns - clean.schedule.step_ns
    if scenario == "pipeline_slow_stage":
        stage = SLOW_STAGE
        ranks = [layout.rank(stage, lane) for lane in range(layout.lanes)]
        mask = (p.kind == INSTR) & (run.pprog.stage == stage)
        before, after = stage_bubbles(run), stage_bubbles(clean)
        growth = [b["bubble_ns"] - a["bubble_ns"] for b, a in zip(before, after, strict=True)]
        per_stage = p.shape.layers // layout.pp
        return [
            {
                "kind": "slow_stage",
                "family": "pipeline",
                "stage": stage,
                "ranks": ranks,
                "all_ranks": False,
                "layers": [layer_name(stage * per_stage + i) for i in range(per_stage)],
                "phase": None,
                "engines": ["tensor", "vector", "scalar", "gpsimd", "sync"],
                "queue": None,
                "window_ns": _window(run, mask, ranks, offset0),
                "saving_ns": int(saving),
                "bubble_cost_ns": int(np.median(np.delete(growth, stage))),
                "params": {"slowdown": SLOW_STAGE_FACTOR},
            }
        ]
    if scenario == "tp_exposed":
        mask = (run.pprog.sync == TP_SYNC) & (p.phase == "fwd")
        ranks = list(range(layout.world))
        return [
            {
                "kind": "exposed_tp",
                "family": "collective",
                "ranks": ranks,
                "all_ranks": True,
                "layers": sorted(set(p.layer[mask].tolist())),
                "phase": "fwd",
                "engines": ["cc"],
                "queue": None,
                "op": "AllReduce",
                "window_ns": _window(run, mask, ranks, offset0),
                "saving_ns": int(saving),
                "params": {"group": "tp", "overlapped_in_clean": True},
            }
        ]
    return []


def generate_parallel(
    scenario: str,
    out: Path,
    formats: tuple[str, ...],
    ranks: int,
    seed: int,
    scale: float,
    *,
    gzip_json: bool = False,
    layout: ParallelLayout | None = None,
) -> dict:
    """Simulate a parallel scenario, write its device formats under ``out``, return the truth."""
    layout = layout or scenario_layout(scenario, ranks)
    written = [f for f in DEVICE_FORMATS if f in formats]
    if not written:
        raise ValueError(
            f"{scenario}: parallel scenarios are written as {', '.join(DEVICE_FORMATS)}"
        )
    run = simulate_scenario(scenario, layout, seed, scale)
    clean = simulate_scenario(scenario, layout, seed, scale, faults=False)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for fmt in ("parquet", "json", "chrome"):
        shutil.rmtree(out / fmt, ignore_errors=True)
    offsets = device_offsets(layout.world, seed)
    for rank in range(layout.world):
        tables = rank_device_tables(run, rank, int(offsets[rank]))
        if "parquet" in written:
            write_parquet.write_rank(tables, out / "parquet" / f"rank_{rank}")
        if "json" in written:
            name = f"rank_{rank}.json" + (".gz" if gzip_json else "")
            write_neuron_json.write_rank(tables, out / "json" / name, compress=gzip_json)
    p, m = layout.pp, run.pprog.micro_batches
    device = {
        "clock_offset_ns": [int(o) for o in offsets],
        "align_to_rank0_ns": [int(offsets[0] - o) for o in offsets],
        "step_time_ns": int(run.schedule.step_ns),
        "step_time_without_faults_ns": int(clean.schedule.step_ns),
        "stages": stage_bubbles(run),
        "faults": _fault_entries(scenario, run, clean, int(offsets[0])),
    }
    truth = {
        "scenario": scenario,
        "description": PARALLEL_SCENARIOS[scenario],
        "seed": seed,
        "ranks": layout.world,
        "layers": run.pprog.program.shape.layers,
        "scale": scale,
        "formats": written,
        "skipped_formats": {
            f: "not simulated for parallel layouts (Neuron Parquet and JSON only)"
            for f in formats
            if f not in DEVICE_FORMATS
        },
        "layout": layout.to_dict(),
        "micro_batches": m,
        "schedule": "1F1B",
        "ideal_bubble_pct": round(100.0 * (p - 1) / (m + p - 1), 2),
        "device": device,
        "flavour": "device",
        **device,
    }
    (out / "truth.json").write_text(json.dumps(truth, indent=2) + "\n")
    return truth
