"""Each gap between two bounds carries a replay-backed saving (tracediag.whatif.bound_gaps),
checked against the generator's own re-simulation of the kernel with that gap closed.

The truth here is not computed by tracediag's replay: the kernel scenarios' program
(``generator.kernel_program``) is re-scheduled by the generator's list scheduler with the
durations the closed gap implies, read from the program itself (its FLOPs, bytes, transposes)
and the peaks from the profile's written ``Metadata`` and ``TensorInfo`` tables. Where the
scenario's cause is exactly one gap (small tiles: the tensor engine's underutilization), the
saving is also checked against the scenario's truth (the kernel re-simulated without the cause).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from tests.kernel_fixtures import diagnosed_kernels
from tests.trace_factory import RankSpec, build
from tracediag.analysis.bounds import GAPS
from tracediag.analysis.context import analyse
from tracediag.generator.kernel_program import KernelShape, build_kernel, packet_durations
from tracediag.generator.kernels import _CAUSES, KERNEL_SCENARIOS
from tracediag.generator.program import DMA, INSTR
from tracediag.generator.simulate import list_schedule
from tracediag.graph.changes import WhatIf
from tracediag.report.bounds_precision import gap_rows
from tracediag.report.html import render_html
from tracediag.report.markdown import render_markdown
from tracediag.report.text import render_text
from tracediag.whatif import bound_gaps
from tracediag.whatif.saving_limit import most_saved_ns


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    """Every kernel scenario written once and diagnosed: (profile dir, truth, diagnosis)."""
    return diagnosed_kernels(tmp_path_factory.mktemp("gap_kernels"))


def _resimulated_savings(profile, scenario: str) -> dict[str, float]:
    """Per gap: ns the generator's schedule of the kernel gains with that gap closed, at most
    the gap, by the same definitions as bound_gaps' docstring applied to the program."""
    md = pd.read_parquet(profile / "Metadata.parquet").iloc[0]
    dma_peak = float(md["dma_ddr_bandwidth"]) / 1e9  # B/ns
    te_peak = (
        float(md["tensor_engine_num_rows"])
        * float(md["tensor_engine_num_cols"])
        * 2
        * float(md["tensor_engine_clock_freq"])
    )  # FLOP/ns
    tensors = pd.read_parquet(profile / "TensorInfo.parquet")
    necessary = float(tensors.loc[tensors["type"].isin(["IN", "OUT"]), "size"].sum())
    kp = build_kernel(KernelShape(), _CAUSES[scenario][0])
    p = kp.program
    base = np.zeros(len(p), dtype=np.float64)
    instr = p.kind == INSTR
    base[instr] = np.rint(p.work_ns[instr])
    base[p.packet_block] = packet_durations(kp)
    dma = p.kind == DMA
    tensor = instr & (p.engine == "tensor")

    into = np.repeat(np.arange(len(p)), np.diff(p.dep_ptr))  # each dependency's node

    def step(duration, no_wait=None) -> int:
        """The schedule's length; ``no_wait``: nodes whose dependencies have no latency."""
        d = np.maximum(np.ceil(duration), 0).astype(np.int64)[:, None]
        lat = p.dep_lat if no_wait is None else np.where(no_wait[into], 0, p.dep_lat)
        z = np.zeros(len(p), dtype=bool)
        s = list_schedule(
            p.resource, z, z, p.dep_ptr, p.dep_src, lat, d, np.zeros(1, np.int64), False
        )
        return int(s.end.max() - s.start.min())

    def busy(mask) -> float:
        s, e = s0.start[mask, 0], s0.end[mask, 0]
        o = np.argsort(s)
        s, e = s[o], e[o]
        reach = np.maximum.accumulate(e)
        new = np.r_[True, s[1:] > reach[:-1]]
        return float((np.maximum.reduceat(e, np.flatnonzero(new)) - s[new]).sum())

    z = np.zeros(len(p), dtype=bool)
    d0 = base.astype(np.int64)[:, None]
    s0 = list_schedule(
        p.resource, z, z, p.dep_ptr, p.dep_src, p.dep_lat, d0, np.zeros(1, np.int64), False
    )
    total = step(base)
    engines = {str(e): busy(instr & (p.engine == e)) for e in np.unique(p.engine[instr])}
    engines["dma"] = busy(dma)
    busiest = max(engines, key=engines.get)
    moved = float(p.nbytes[dma].sum())
    kept = dma if busiest == "dma" else instr & (p.engine == busiest)
    idle = {"dma_idle": dma, "te_idle": tensor, "serialization": kept}
    closed = {
        "dma_idle": np.where(instr, 0.0, base),
        "te_idle": np.where(tensor, base, 0.0),
        "serialization": np.where(kept, base, 0.0),
        "dma_inefficiency": np.where(dma, np.minimum(base, p.nbytes / dma_peak), base),
        "excess_hbm_traffic": np.where(
            dma, base - p.nbytes * (1 - necessary / moved) / dma_peak, base
        ),
        "te_underutilization": np.where(tensor, np.minimum(base, p.flops / te_peak), base),
        "transpose_overhead": np.where(tensor & kp.transpose, base - p.flops / te_peak, base),
    }
    return {g: float(total - step(d, idle.get(g))) for g, d in closed.items()}


@pytest.mark.parametrize("scenario", sorted(KERNEL_SCENARIOS))
def test_each_gap_saving_matches_the_generator_resimulation(kernels, scenario):
    profile, _, diagnosis = kernels[scenario]
    row = diagnosis.bounds_df.loc[0]
    truth = _resimulated_savings(profile, scenario)
    for gap in GAPS:
        size = float(row[f"{gap}_ns"])
        got = float(row[f"{gap}_saving_ns"])
        want = min(max(truth[gap], 0.0), size)
        assert 0 <= got <= size, (gap, got, size)  # a saving never exceeds its gap
        # Within 15%, or 500 ns for the gaps that save next to nothing.
        assert abs(got - want) <= max(0.15 * want, 500), (scenario, gap, got, want, size)


def test_the_gap_that_is_the_cause_saves_what_removing_the_cause_saves(kernels):
    _, truth, diagnosis = kernels["small_tiles"]
    (fault,) = truth["faults"]
    got = float(diagnosis.bounds_df.loc[0, "te_underutilization_saving_ns"])
    assert fault["saving_ns"] == 133549
    assert abs(got - fault["saving_ns"]) <= 0.15 * fault["saving_ns"], got
    # The reloads are DMA time at the queue's rate; their excess bytes at the peak are a
    # smaller gap, and the saving stays within it.
    _, truth, diagnosis = kernels["dma_reloads"]
    row = diagnosis.bounds_df.loc[0]
    assert row["excess_hbm_traffic_saving_ns"] <= row["excess_hbm_traffic_ns"]
    assert row["excess_hbm_traffic_saving_ns"] > 0.8 * row["excess_hbm_traffic_ns"]
    assert row["excess_hbm_traffic_ns"] < truth["faults"][0]["saving_ns"]


def test_savings_reach_the_json_and_the_text_table(kernels):
    _, _, diagnosis = kernels["small_tiles"]
    report = json.loads(diagnosis.to_json())
    (b,) = report["bounds"]
    saving = b["gap_savings_ns"]
    assert set(saving) == set(GAPS)
    assert saving["te_underutilization"] == int(
        diagnosis.bounds_df.loc[0, "te_underutilization_saving_ns"]
    )
    assert b["gap_savings_note"] == ""
    header, rows = gap_rows(report)
    assert header[-1] == "saving (replay)"
    assert rows[0][:2] == ["0", "TE underutilization"]
    assert rows[0][3] == "157 µs"  # the gap, 156.965 µs
    text = render_text(report)
    assert "Gaps between the bounds" in text
    assert "TE underutilization  TE active - FLOPs@peak" in text
    assert "### Gaps between the bounds" in render_markdown(report)
    assert "<h2>Gaps between the bounds</h2>" in render_html(report)


def test_over_budget_the_savings_are_unknown_and_say_why(kernels):
    _, _, diagnosis = kernels["dma_reloads"]
    table, note = bound_gaps.gap_savings(diagnosis.analysis, diagnosis.bounds_df, budget=10)
    assert table.loc[0, "dma_inefficiency_saving_ns"] != table.loc[0, "dma_inefficiency_saving_ns"]
    assert (
        table.loc[0, "excess_hbm_traffic_saving_ns"] != table.loc[0, "excess_hbm_traffic_saving_ns"]
    )
    assert table.loc[0, "transpose_overhead_saving_ns"] == 0  # a gap of 0 needs no replay
    # dma_idle is also serialization (the DMA is the busiest engine): 5 distinct replays.
    assert note == "not replayed: 5 replays of a 1,280-node graph exceed the budget"


def test_the_most_a_change_can_save_is_what_it_takes_off_its_nodes():
    spec = RankSpec(0)
    spec.add("mm0", "tensor", "compute", 0, 100)
    spec.add("mm1", "tensor", "compute", 400, 500)  # 300 ns after mm0
    spec.add("mm2", "tensor", "compute", 550, 600)  # 50 ns after mm1
    a = analyse(build(spec), {})
    g = a.graph
    nodes = np.flatnonzero(g.gap > 0)
    assert sorted(g.gap[nodes].tolist()) == [50, 300]
    # Gaps cut to 10 ns: 290 + 40 off; one raised: nothing off it; durations cut count too.
    assert most_saved_ns(g, WhatIf.gaps(nodes, [10, 10])) == 330
    assert most_saved_ns(g, WhatIf.gaps(nodes, [g.gap[nodes[0]] + 5, 0])) == int(g.gap[nodes[1]])
    mm0 = int(np.flatnonzero(g.start == 0)[0])
    assert most_saved_ns(g, WhatIf.durations([mm0], [40])) == 60
    # What the replay saves stays within it.
    change = WhatIf.gaps(nodes, [10, 10])
    assert a.what_if(change) == 330 <= most_saved_ns(g, change)
    assert most_saved_ns(g, WhatIf.released(nodes[:1], [0])) is None
