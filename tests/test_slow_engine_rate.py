"""CMP302's what-if on a slow engine, and findings that share one saving, on the generator's
kernel scenarios (``tracediag.generator.kernels``).

The truth of ``slow_vector_engine`` is the kernel re-simulated with the cause removed (the
generator's scheduler, not tracediag's replay). The engine's rate is read by hand from the
written Parquet tables (pandas alone): Metadata lanes x clock, the element count in each
instruction's ``operands``, one instruction's fixed cost as the shortest instruction of the
other engines.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from tests.kernel_fixtures import diagnosed_kernels
from tracediag.analysis.context import change_key
from tracediag.generator.kernel_program import KernelShape
from tracediag.generator.kernels import _CAUSES, simulate_kernel
from tracediag.graph.changes import joint


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    return diagnosed_kernels(tmp_path_factory.mktemp("rate_kernels"))


def _instructions(profile) -> pd.DataFrame:
    return pd.concat(
        [pd.read_parquet(p) for p in sorted(profile.glob("Instruction_*.parquet"))],
        ignore_index=True,
    )


def test_the_slow_vector_engine_saves_within_15_percent_of_the_resimulated_truth(kernels):
    profile, truth, diagnosis = kernels["slow_vector_engine"]
    (fault,) = truth["faults"]
    (f,) = [f for f in diagnosis.findings if f.code == "CMP302"]
    assert f.engine == "vector" and f.ranks == (0,)
    assert fault["saving_ns"] == 61_833  # the generator's re-simulation, 137.7 -> 75.8 µs
    assert abs(f.saving_ns - fault["saving_ns"]) <= 0.15 * fault["saving_ns"], f.saving_ns
    assert f.evidence["what_if"] == "engine_rate"
    # By hand from the tables: 128 copies of 16,384 elements at 128 lanes x 1.4 GHz, plus the
    # 64 ns the DMA triggers (the shortest instructions of the other engines) take.
    md = pd.read_parquet(profile / "Metadata.parquet").iloc[0]
    rate = float(md["vector_engine_num_channels"]) * float(md["vector_engine_clock_freq"])
    inst = _instructions(profile)
    vec = inst[inst["engine"] == "vector"]
    elements = vec["operands"].map(lambda t: int(re.search(r"src=\S*?\[(\d+)\]", t).group(1)))
    fixed = int(inst.loc[inst["engine"] != "vector", "duration_ns"].min())
    at_rate = float(np.ceil(elements / rate + fixed).sum())
    assert f.evidence["elements_per_ns"] == {"0": pytest.approx(rate)}
    assert f.evidence["instruction_overhead_ns"] == {"0": fixed} and fixed == 64
    assert f.evidence["rate_share"] == pytest.approx(at_rate / vec["duration_ns"].sum(), abs=1e-3)
    # ... which is what the vector engine takes in the kernel without the cause (19.8 µs).
    fixed_run = simulate_kernel(KernelShape(), _CAUSES["slow_vector_engine"][0].removed())
    p, s = fixed_run.kernel.program, fixed_run.run.schedule
    healthy = float((s.end[:, 0] - s.start[:, 0])[p.engine == "vector"].sum())
    assert at_rate == pytest.approx(healthy, rel=0.01)
    # The saving never exceeds what the change removes from the engine.
    removed = float(vec["duration_ns"].sum()) - at_rate
    assert 0 < f.saving_ns <= removed and f.saving_ns <= f.impact_ns


def test_an_engine_at_its_rate_is_not_called_slow(kernels):
    """On the clean kernel the vector copies take what the rate model says (share ~1), far
    above CMP302's 0.5: an engine busy at its rate keeps the balance what-if."""
    from tracediag.analysis.context import analyse
    from tracediag.model import schema as S
    from tracediag.whatif.engine_rate import at_engine_rate, instruction_overhead_ns

    trace = kernels["kernel_clean"][2].trace
    ctx = analyse(trace)
    ev = trace.events
    engine = trace.tracks[S.ENGINE].astype(str).to_numpy()[ev[S.TRACK].to_numpy()]
    compute = (ev[S.KIND] == "compute").to_numpy()
    ids = np.flatnonzero(compute & (engine == "vector"))
    at_rate, _ = at_engine_rate(
        ctx, ids, "vector", instruction_overhead_ns(trace, compute & (engine != "vector"))
    )
    share = at_rate.sum() / ev[S.DUR].to_numpy()[ids].sum()
    assert len(ids) == 128 and share == pytest.approx(1.0, abs=0.01)


def test_dma101_and_dma104_on_strided_dma_are_one_bottleneck_and_say_so(kernels):
    """Both speed up the A tile loads on qSyncIO0 (DMA101 the ones the tensor engine waits for
    on the path, DMA104 all 64 strided ones): one bottleneck seen by two rules."""
    _, truth, diagnosis = kernels["strided_dma"]
    (fault,) = truth["faults"]
    a = diagnosis.analysis
    (d101,) = [f for f in diagnosis.findings if f.code == "DMA101" and f.saving_ns > 0]
    (d104,) = [f for f in diagnosis.findings if f.code == "DMA104"]
    assert d101.saving_ns == d104.saving_ns == fault["saving_ns"] == 7_168
    c101, c104 = a.changes[change_key(d101)], a.changes[change_key(d104)]
    # The same transfers: every load DMA101 shortens is one of DMA104's strided A loads.
    shortened = c101.dur_nodes[c101.dur_values < a.graph.dur[c101.dur_nodes]]
    assert len(shortened) and np.isin(shortened, c104.dur_nodes).all()
    names = diagnosis.trace.events["name"].astype(str).to_numpy()
    assert set(names[a.graph.event[c104.dur_nodes]]) == {"A"}
    # Together they save what either does alone, and each message names the other.
    assert a.what_if(joint([c101, c104])) == 7_168
    assert d101.evidence["shared_with"] == ["DMA104 rank 0 (qSyncIO0)"]
    assert d104.evidence["shared_with"] == ["DMA101 rank 0 (qSyncIO0)"]
    assert d101.evidence["saving_together_ns"] == d104.evidence["saving_together_ns"] == 7_168
    assert "DMA104 rank 0 (qSyncIO0) reports the same saving for the same bottleneck" in (
        d101.message
    )
    assert "DMA101 rank 0 (qSyncIO0) reports the same saving" in d104.message


def test_equal_savings_are_marked_shared_only_when_the_replay_shares_them(kernels):
    """The invariant over every kernel scenario: two findings with the same positive saving
    name each other exactly when their joint replay saves less than the sum."""
    for name, (_, _, diagnosis) in kernels.items():
        a = diagnosis.analysis
        found = [f for f in diagnosis.findings if f.saving_ns > 0]
        for i, f in enumerate(found):
            for g in found[i + 1 :]:
                if f.saving_ns != g.saving_ns:
                    continue
                together = a.what_if(joint([a.changes[change_key(f)], a.changes[change_key(g)]]))
                shared = together < f.saving_ns + g.saving_ns
                named = any(
                    s.startswith(g.code) for s in f.evidence.get("shared_with", [])
                ) and any(s.startswith(f.code) for s in g.evidence.get("shared_with", []))
                assert shared == named, (name, f.code, g.code, together)
