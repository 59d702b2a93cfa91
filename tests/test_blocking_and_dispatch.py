"""Waits for and by the device that no record names, on hand-made traces with the answer worked
out by hand, and HST402 on a real trace against its raw events: a host call that blocks until
device work ends (its return bound to that work, the what-if *releasing* it), and device work
no launch ties to its host (``dispatch_wait``)."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from tests.chrome_helpers import shared
from tests.trace_factory import RankSpec, build
from tracediag.analysis.context import analyse
from tracediag.engine.config import Config
from tracediag.engine.diagnose import diagnose
from tracediag.graph import dependencies as G
from tracediag.graph.changes import WhatIf, released_graph
from tracediag.graph.dependencies import build_graph
from tracediag.graph.inferred_edges import counts_by_rank, infer_edges
from tracediag.graph.replay import replay
from tracediag.loading.loader import load
from tracediag.model import schema as S

US = 1_000


def _blocking_copy_trace():
    """A kernel K (20-1,020 µs on stream 7) and a pageable copy call on the host thread
    (15-1,050 µs) that returns 30 µs after K ends, the device idle until the next launch
    (1,060-1,070 µs) starts K2 at 1,080 µs for 500 µs."""
    r = RankSpec(0, fmt="chrome-json", hardware="")
    launch = r.add("cudaLaunchKernel", "cpu 1/1", "host", 0, 10 * US)
    k = r.add("gemm", "stream 7", "compute", 20 * US, 1_020 * US)
    copy = r.add("cudaMemcpyAsync", "cpu 1/1", "host", 15 * US, 1_050 * US)
    launch2 = r.add("cudaLaunchKernel", "cpu 1/1", "host", 1_060 * US, 1_070 * US)
    k2 = r.add("relu", "stream 7", "compute", 1_080 * US, 1_580 * US)
    r.dep(launch, k, "launch")
    r.dep(launch2, k2, "launch")
    return build(r), {"k": k, "copy": copy, "k2": k2}


def test_a_call_that_returns_when_the_device_work_ends_is_bound_to_it():
    trace, ev = _blocking_copy_trace()
    inferred = infer_edges(trace)
    row = inferred[inferred[S.EDGE_KIND] == "device_wait"]
    assert row[[S.SRC, S.DST]].values.tolist() == [[ev["k"], ev["copy"]]]
    assert row["idle_ns"].tolist() == [1_000 * US]  # K's time inside the call
    assert counts_by_rank(inferred)[0]["device_to_host_wait"] == 1
    g = build_graph(trace, inferred)
    done = g.event_node[ev["copy"]]  # the call's completion: K's end binds it
    assert g.role[done] == G.COMPLETION and g.bind[done] == g.event_node[ev["k"]]
    assert g.bind_code[done] == G.DEVICE_WAIT and g.gap[done] == 30 * US


def test_released_the_call_waits_only_its_begin_and_the_replay_still_reproduces_the_trace():
    trace, ev = _blocking_copy_trace()
    g = build_graph(trace, infer_edges(trace))
    done = g.event_node[ev["copy"]]
    free = released_graph(g, [done])
    assert free is released_graph(g, [done])  # made once
    assert free.bind_code[done] == G.SYNC_DONE and free.gap[done] == 1_035 * US  # blocked
    assert np.array_equal(replay(free).end, g.end)
    # Blocking only while K works (1,000 µs): the call returns at 1,015 µs, 35 µs earlier, and
    # so does everything after it: K2 ends at 1,545 µs instead of 1,580 µs.
    r = replay(g, WhatIf.released([done], [1_000 * US]))
    assert r.end[done] == 1_015 * US
    assert r.end[g.event_node[ev["k2"]]] == 1_545 * US
    assert r.length_ns == g.end.max() - g.start[g.window].min() - 35 * US


def test_hst402_prices_the_blocking_copy_by_releasing_it():
    trace, ev = _blocking_copy_trace()
    d = diagnose(trace, Config(select=["HST402"]))
    (f,) = d.findings
    assert f.evidence["calls"] == 1 and f.evidence["call_ns"] == 1_035 * US
    assert f.evidence["device_busy_in_calls_ns"] == 1_000 * US
    assert f.saving_ns == 35 * US  # the worked replay above
    # the path runs through K while the host waits: from K's start to the call's return
    assert f.impact_ns == 1_030 * US
    assert (f.start_ns, f.end_ns, f.ranks) == (15 * US, 1_050 * US, (0,))


def _dispatched_trace(second_dispatch_end_us=680, launch=False, fmt="xplane"):
    """A host with no launch records: dispatch#1 (0-50 µs) then op A (70-570 µs), dispatch#2
    (ends at ``second_dispatch_end_us``) then op B (700-1,200 µs), the device idle between.
    Not inferred outside XPlane (``device_waits.DISPATCH_FORMATS``)."""
    r = RankSpec(0, fmt=fmt, hardware="")
    d1 = r.add("dispatch#1", "cpu 1/1", "host", 0, 50 * US)
    a = r.add("fusion.1", "stream 0", "compute", 70 * US, 570 * US)
    end2 = second_dispatch_end_us * US
    d2 = r.add("dispatch#2", "cpu 1/1", "host", end2 - 50 * US, end2)
    b = r.add("fusion.2", "stream 0", "compute", 700 * US, 1_200 * US)
    if launch:
        r.dep(d1, a, "launch")
    return build(r), {"d1": d1, "a": a, "d2": d2, "b": b}


def test_device_work_no_launch_ties_to_the_host_binds_to_the_dispatch_before_it():
    trace, ev = _dispatched_trace()
    inferred = infer_edges(trace)
    rows = inferred[inferred[S.EDGE_KIND] == "dispatch_wait"]
    assert rows[[S.SRC, S.DST]].values.tolist() == [[ev["d1"], ev["a"]], [ev["d2"], ev["b"]]]
    assert rows["gap_ns"].tolist() == [20 * US, 20 * US]
    assert rows["idle_ns"].tolist() == [0, 130 * US]  # A: nothing before it; B: after A
    assert counts_by_rank(inferred)[0]["host_to_device_dispatch"] == 2
    a = analyse(trace)
    node = a.graph.event_in_node[ev["b"]]
    assert a.graph.bind_code[node] == G.DISPATCH_WAIT
    cats = a.path.by_category()
    # A, then the host until B's dispatch returns, B: no gap, the host's 130 µs between
    assert cats["gap"] == 0 and cats["compute"] == 1_000 * US and cats["host"] == 130 * US


def test_no_dispatch_is_inferred_where_launches_are_recorded_or_the_host_returned_long_before():
    for trace, _ in (_dispatched_trace(launch=True), _dispatched_trace(fmt="chrome-json")):
        inferred = infer_edges(trace)
        assert not (inferred[S.EDGE_KIND] == "dispatch_wait").any()
    trace, ev = _dispatched_trace(second_dispatch_end_us=550)  # 150 µs before B
    inferred = infer_edges(trace)
    rows = inferred[inferred[S.EDGE_KIND] == "dispatch_wait"]
    assert rows[S.DST].tolist() == [ev["a"]]


def test_hst402_names_qwens_device_synchronizes_within_what_they_can_remove():
    """kineto_h100_qwen_inference: two long cudaDeviceSynchronize calls, the GPU working
    through most of them (read from the raw events); since their return is bound to the device
    work they wait for, HST402 prices them by releasing it (before: no finding, the path ran
    through the device and never through host time inside the calls)."""
    with gzip.open(shared("kineto_h100_qwen_inference.json.gz"), "rt") as fh:
        raw = [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X"]
    calls = sorted(
        (e for e in raw if e["name"] == "cudaDeviceSynchronize" and e["dur"] >= 1_000),
        key=lambda e: e["ts"],
    )
    dur_ns = [round(e["dur"] * 1000) for e in calls]
    assert len(calls) == 2 and sum(dur_ns) == 16_269_809  # 14,102.53 + 2,167.279 µs
    (f,) = [
        f
        for f in diagnose(
            load([shared("kineto_h100_qwen_inference.json.gz")], cache=False)
        ).findings
        if f.code == "HST402"
    ]
    assert f.evidence["calls"] == 2 and f.evidence["call_ns"] == sum(dur_ns)
    dev = [e for e in raw if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    busy = 0.0
    for c in calls:  # the union of device work inside each call
        lo, hi = c["ts"], c["ts"] + c["dur"]
        spans = sorted((max(e["ts"], lo), min(e["ts"] + e["dur"], hi)) for e in dev)
        reach = lo
        for s, e in spans:
            if e > max(s, reach):
                busy += e - max(s, reach)
                reach = e
    assert f.evidence["device_busy_in_calls_ns"] == pytest.approx(busy * 1000, rel=0.01)
    assert 0 < f.saving_ns <= f.evidence["call_ns"] - f.evidence["device_busy_in_calls_ns"]
    assert f.severity.name == "INFO"
