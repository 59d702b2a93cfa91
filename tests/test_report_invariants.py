"""The report invariants themselves (tests/report_invariants.py): they pass honest diagnoses and
flag a finding that claims more than its change removes.

One rank, hand-made: matmuls A [0, 1000) -> B [1000, 3000) -> C [3000, 4000) on the tensor
engine, the critical path (4000 ns); X [0, 500) alone on the vector engine, off the path.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from tests.report_invariants import violations
from tests.trace_factory import RankSpec, build
from tracediag.engine.config import Config
from tracediag.engine.diagnose import diagnose
from tracediag.engine.saving_bound import binding_chain, change_effect
from tracediag.graph.changes import WhatIf
from tracediag.model.findings import Severity


class _Probe:
    """What ``Analysis.finding`` reads of a rule."""

    code = "CMP990"
    title = "probe"
    severity = Severity.WARNING


def _chain_job():
    spec = RankSpec(0)
    a = spec.add("A", "tensor", "compute", 0, 1000)
    b = spec.add("B", "tensor", "compute", 1000, 3000)
    c = spec.add("C", "tensor", "compute", 3000, 4000)
    spec.add("X", "vector", "compute", 0, 500)
    spec.dep(a, b)
    spec.dep(b, c)
    return build(spec)


@pytest.fixture
def chain():
    """The job diagnosed with no rules, and the graph node of each event name."""
    trace = _chain_job()
    d = diagnose(trace, Config(select=[]))  # no rules: the tests add their own finding
    names = trace.events["name"].astype(str).to_numpy()
    nodes = d.analysis.nodes_of(np.arange(len(names)))
    return d, {str(n): int(v) for n, v in zip(names, nodes, strict=True)}


def _claim(d, change: WhatIf, saving_ns: int, impact_ns: int = 2000, engine: str = "tensor"):
    """``d`` with one finding of ``saving_ns`` whose change is ``change``."""
    f = d.analysis.finding(
        _Probe,
        message="probe",
        ranks=(0,),
        engine=engine,
        saving_ns=saving_ns,
        impact_ns=impact_ns,
        change=change,
    )
    return replace(d, findings=[f])


def test_the_bound_is_the_time_the_change_takes_off_the_path(chain):
    d, node = chain
    a = d.analysis
    assert a.length_ns == 4000
    on = binding_chain(a.graph)
    assert on[[node["A"], node["B"], node["C"]]].all() and not on[node["X"]]
    on_path = WhatIf.durations([node["B"]], [500])
    e = change_effect(a, on_path)
    assert (e.removed_on_path_ns, e.removed_ns, e.added_ns, e.early_ns) == (1500, 1500, 0, 0)
    assert a.what_if(on_path) == 1500 == e.bound_ns  # tight: the whole cut is on the path
    off_path = WhatIf.durations([node["X"]], [0])
    e = change_effect(a, off_path)
    assert (e.removed_on_path_ns, e.removed_ns) == (0, 500)
    assert a.what_if(off_path) == 0


def test_an_honest_saving_passes(chain):
    d, node = chain
    change = WhatIf.durations([node["B"]], [500])
    assert violations(_claim(d, change, d.analysis.what_if(change))) == []


def test_a_saving_above_what_its_change_removes_is_flagged(chain):
    d, node = chain
    # Within the path and within its impact (2000 ns): only the change's bound catches it.
    [line] = violations(_claim(d, WhatIf.durations([node["B"]], [500]), 1600))
    assert "saving 1600 ns > what its change removes from the path 1500 ns" in line
    assert line.startswith("CMP990 ranks [0]")


def test_a_saving_above_its_impact_is_flagged_for_every_rule(chain):
    d, node = chain
    change = WhatIf.durations([node["B"]], [500])
    # Within what the change removes (1500 ns), above the cost the finding states (1000 ns).
    [line] = violations(_claim(d, change, 1500, impact_ns=1000))
    assert line == "CMP990 ranks [0] engine 'tensor': saving 1500 ns > impact 1000 ns"


def test_a_change_off_the_path_bounds_nothing_it_removes_elsewhere(chain):
    d, node = chain
    # X's 500 ns removed anywhere would allow 400; none of it is on the path.
    [line] = violations(_claim(d, WhatIf.durations([node["X"]], [0]), 400))
    assert "from the path 0 ns + adds 0 ns (removes 500 ns anywhere" in line


def test_a_change_that_starts_work_before_its_dependency_ends_is_flagged(chain):
    d, node = chain
    change = WhatIf.gaps([node["C"]], [-300])  # C would start 300 ns before B ends
    assert change_effect(d.analysis, change).early_ns == 300
    # The finding and the joint change of the headline findings (this one) both break it.
    lines = violations(_claim(d, change, d.analysis.what_if(change)))
    assert [line.split(":")[0] for line in lines] == [
        "CMP990 ranks [0] engine 'tensor'",
        "joint saving",
    ]
    assert all("gaps 300 ns below 0" in line for line in lines)


def test_time_added_where_it_delays_the_window_start_counts_in_the_bound():
    # Host H [0, 100) launches device work A [100, 1100); D [300, 2000) on another engine ends
    # the window (device work only: it starts at A's 100). H 500 ns longer delays A to 600, and
    # the window then starts at D's 300: a saving of 200 ns that removes nothing.
    spec = RankSpec(0, fmt="kineto", hardware="h100")
    h = spec.add("H", "cpu thread #0", "host", 0, 100)
    a = spec.add("A", "stream 7", "compute", 100, 1100)
    spec.add("D", "stream 8", "compute", 300, 2000)
    spec.dep(h, a, "launch")
    d = diagnose(build(spec), Config(select=[]))
    an = d.analysis
    names = d.trace.events["name"].astype(str).to_numpy()
    node = dict(zip(names, an.nodes_of(np.arange(len(names))).tolist(), strict=True))
    assert an.length_ns == 1900
    change = WhatIf.durations([node["H"]], [600])
    e = change_effect(an, change)
    assert (e.removed_on_path_ns, e.added_ns) == (0, 500)
    saving = an.what_if(change)
    assert saving == 200
    # Within the bound, so only property 6 objects: a finding's fix lengthens nothing.
    lines = violations(_claim(d, change, saving, impact_ns=saving, engine="gpu"))
    assert [v.split(":")[0] for v in lines] == ["CMP990 ranks [0] engine 'gpu'", "joint saving"]
    assert all("its change adds 500 ns to durations and gaps" in v for v in lines)
    over = violations(_claim(d, change, 502, impact_ns=0, engine="gpu"))
    assert any(
        "saving 502 ns > what its change removes from the path 0 ns + adds 500" in v for v in over
    )
