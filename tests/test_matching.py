"""Instances matched by ordinal but ending at different instants are split, and counted."""

from __future__ import annotations

from tests.trace_factory import RankSpec, build
from tracediag.analysis.arrival_skew import lateness
from tracediag.loading.collective_matching import split_mismatched
from tracediag.model import schema as S


def test_a_missing_instance_on_one_rank_does_not_pair_unrelated_ops():
    # Rank 0 saw three SendRecv; rank 1's profile misses the first. Ordinal keys pair rank 0's
    # k-th with rank 1's k-th, which end 20 ms apart: those pairs are split, not trusted.
    a, b = RankSpec(0, fmt="chrome-json"), RankSpec(1, fmt="chrome-json")
    ends0 = [(0, 10_000_000), (20_000_000, 30_000_000), (40_000_000, 50_000_000)]
    ends1 = [(21_000_000, 30_000_000), (45_000_000, 50_000_000)]
    for spec, spans in ((a, ends0), (b, ends1)):
        for k, (s, e) in enumerate(spans):
            c = spec.add("ncclKernel_SendRecv", "stream 28", "collective", s, e)
            spec.collective(c, f"pg|SendRecv|{k}", s, op="SendRecv")
    trace = build(a, b)
    assert split_mismatched(trace) == 4  # instances 0 and 1 pair unrelated ops on both ranks
    assert trace.meta[0].repairs and trace.meta[1].repairs
    late = lateness(trace.collectives)
    assert late[S.COLL_KEY].nunique() == 0  # what is left matched (key 2) is rank 0's alone


def test_consistent_instances_are_left_alone():
    a, b = RankSpec(0), RankSpec(1)
    for spec, arrival in ((a, 0), (b, 3_000)):
        c = spec.add("AllReduce", "cc", "collective", 5_000, 9_000)
        spec.collective(c, "ar", arrival)
    trace = build(a, b)
    assert split_mismatched(trace) == 0
    late = lateness(trace.collectives).set_index(S.RANK)
    assert late.loc[1, "late_ns"] == 3_000 and bool(late.loc[1, "last"])


def test_a_single_rank_job_has_no_skew_and_the_straggler_rule_stays_quiet():
    # A one-process JAX profile of 4 devices holds collectives no other rank saw (found on a
    # real CPU profile: lateness returned no 'synchronous' column and COL201 raised KeyError).
    from tracediag.engine.diagnose import diagnose

    solo = RankSpec(0)
    for k in range(3):
        c = solo.add("all-reduce", "cc", "collective", 10_000 * k, 10_000 * k + 4_000)
        solo.collective(c, f"ar{k}", 10_000 * k)
    trace = build(solo)
    late = lateness(trace.collectives)
    assert len(late) == 0 and {"late_ns", "last", "synchronous"} <= set(late.columns)
    assert not [f for f in diagnose(trace).findings if f.code == "COL201"]
