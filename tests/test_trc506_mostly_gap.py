"""TRC506: a critical path that is mostly unexplained gap says so, with the rank, how much and
the likely reason (hand-made traces with exact numbers; real traces that must stay quiet)."""

from __future__ import annotations

import pytest

from tests.chrome_helpers import shared
from tests.trace_factory import RankSpec, build
from tests.worked_example import example_trace
from tracediag.engine.config import Config
from tracediag.engine.diagnose import diagnose
from tracediag.loading.loader import load
from tracediag.model.findings import Severity

US = 1_000
ONLY = Config(select=["TRC506"])


def _sparse_stream(with_launch: bool = False, with_flow: bool = False):
    """Three 10 µs kernels on stream 7 at 0, 100 and 200 µs (c at 120 µs with ``with_flow``):
    the stream idles between them and nothing in the trace says why."""
    r = RankSpec(0, fmt="perfetto", hardware="")
    a = r.add("k0", "stream 7", "compute", 0, 10 * US)
    b = r.add("k1", "stream 7", "compute", 100 * US, 110 * US)
    c_start = 120 * US if with_flow else 200 * US
    r.add("k2", "stream 7", "compute", c_start, c_start + 10 * US)
    if with_launch:  # one recorded dependency on the rank, into the first kernel only
        launch = r.add("cudaLaunchKernel", "cpu 1/1", "host", 0, 5 * US)
        r.dep(launch, a, "launch")
    if with_flow:  # k1 waits after a flow from stream 9 that ended 70 µs before it starts
        other = r.add("k9", "stream 9", "compute", 20 * US, 30 * US)
        r.dep(other, b, "flow")
    return build(r)


def test_a_format_without_dependencies_is_named():
    (f,) = diagnose(_sparse_stream(), ONLY).findings
    assert (f.code, f.severity, f.ranks, f.track) == ("TRC506", Severity.WARNING, (0,), "stream 7")
    # Two 90 µs idle stretches of the 210 µs path.
    assert (f.impact_ns, f.start_ns, f.end_ns) == (180 * US, 10 * US, 200 * US)
    assert f.evidence["reason"] == "format_without_dependencies"
    (row,) = f.evidence["ranks"]
    assert (row["gap_ns"], row["path_ns"], row["gap_pct_of_path"]) == (180 * US, 210 * US, 85.71)
    assert (row["recorded_edges"], row["inferred_edges"]) == (0, 0)
    assert "perfetto trace records no dependency" in f.message
    assert "rank 0, 180 µs of its 210 µs" in f.message


def test_idle_stretches_with_nothing_recorded_are_missing_records():
    (f,) = diagnose(_sparse_stream(with_launch=True), ONLY).findings
    assert f.evidence["reason"] == "missing_records"
    (row,) = f.evidence["ranks"]
    assert (row["recorded_edges"], row["top_track"], row["top_gap_ns"]) == (1, "stream 7", 180 * US)
    assert "records are likely missing" in f.message


def test_a_wait_after_every_recorded_predecessor_is_an_unrecorded_dependency():
    (f,) = diagnose(_sparse_stream(with_flow=True), ONLY).findings
    assert f.evidence["reason"] == "unrecorded_dependency"
    (row,) = f.evidence["ranks"]
    # k1 starts 70 µs after the flow from k9 ended; k2 10 µs after k1 (program order); k9
    # 10 µs after k0 (the idle stream 9 binds to stream 7's k0: an inferred stream wait).
    assert (row["gap_ns"], row["top_after"], row["top_gap_ns"]) == (90 * US, "flow", 70 * US)
    assert (row["recorded_edges"], row["inferred_edges"]) == (1, 1)
    assert "a dependency the trace does not record" in f.message


def test_thresholds_keep_a_mostly_explained_path_quiet():
    # The same trace with the threshold above its 85.71%: nothing.
    cfg = Config(select=["TRC506"], rule_options={"TRC506": {"min_gap_pct": 90.0}})
    assert diagnose(_sparse_stream(), cfg).findings == []
    assert diagnose(example_trace(), ONLY).findings == []


@pytest.mark.parametrize(
    "name",
    ["kineto_mtia_inference_rank-0.json.gz", "kineto_resnet50_train_worker0.pt.trace.json.gz"],
)
def test_real_traces_with_an_explained_path_stay_quiet(name):
    # MTIA's path is 24.5% gap (93 ms idle on one device stream), ResNet-50's none: not mostly.
    d = diagnose(load([shared(name)], cache=False))
    assert not [f for f in d.findings if f.code == "TRC506"]
