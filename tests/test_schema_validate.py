"""The canonical schema's checks of references between tables: edges and collectives that name
events the trace lacks, and events of ranks without meta, are refused with what is wrong."""

from __future__ import annotations

import dataclasses

import pytest

from tests.trace_factory import RankSpec, build
from tracediag.model import schema as S


def _two_ranks() -> S.Trace:
    a, b = RankSpec(0), RankSpec(1)
    for spec in (a, b):
        first = spec.add("mm0", "tensor", "compute", 0, 100)
        second = spec.add("mm1", "tensor", "compute", 150, 300)
        spec.edges.append((first, second, "dependency"))
    return build(a, b)


def test_a_valid_trace_passes_with_its_edges_shifted_per_rank():
    trace = S.validate(_two_ranks())
    assert trace.edges[S.SRC].tolist() == [0, 2] and trace.edges[S.DST].tolist() == [1, 3]


@pytest.mark.parametrize("end", [S.SRC, S.DST])
@pytest.mark.parametrize("bad", [-1, 4])  # before the first event, past the last (4 events)
def test_an_edge_to_an_event_the_trace_lacks_is_refused(end, bad):
    trace = _two_ranks()
    edges = trace.edges.copy()
    edges.loc[1, end] = bad
    with pytest.raises(S.SchemaError, match="edges refer to unknown events"):
        S.validate(dataclasses.replace(trace, edges=edges))


def test_events_of_a_rank_without_meta_are_refused():
    trace = _two_ranks()
    meta = {0: trace.meta[0]}
    with pytest.raises(S.SchemaError, match=r"events of ranks without meta: \[1\]"):
        S.validate(dataclasses.replace(trace, meta=meta))
