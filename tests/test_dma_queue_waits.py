"""DMA transfers that waited for their queue (graph.dma_queue_waits), on hand-made queues whose
answers are worked out below."""

from __future__ import annotations

from tests.trace_factory import RankSpec, build
from tracediag.analysis.context import analyse
from tracediag.graph import dependencies as G
from tracediag.graph.inferred_edges import counts_by_rank, infer_edges
from tracediag.model import schema as S

US = 1_000


def _queue(second_start_ns: int, second_ring: str = "qSyncSpillReload0/ring1"):
    """A WRITE on the sync engine (0-1 us) triggers two transfers of one queue: the first on
    ring 0 (1-5 us), the second on ``second_ring`` from ``second_start_ns`` for 3 us."""
    r = RankSpec(0)
    trigger = r.add("WRITE", "sync", "compute", 0, 1 * US)
    first = r.add("spill", "qSyncSpillReload0/ring0", "dma", 1 * US, 5 * US)
    second = r.add("spill", second_ring, "dma", second_start_ns, second_start_ns + 3 * US)
    r.dep(trigger, first, "dma_trigger")
    r.dep(trigger, second, "dma_trigger")
    return build(r), first, second


def _waits(trace):
    inferred = infer_edges(trace)
    return inferred[inferred[S.EDGE_KIND] == "queue_wait"]


def test_a_transfer_starting_as_its_queue_frees_up_binds_to_the_transfer_before_it():
    trace, first, second = _queue(5 * US + 40)  # 40 ns after the first ended
    waits = _waits(trace)
    assert waits[[S.SRC, S.DST]].values.tolist() == [[first, second]]
    # evidence: 40 ns from the first's end; 4.04 us after its trigger ended
    assert waits[["gap_ns", "idle_ns"]].values.tolist() == [[40, 4 * US + 40]]
    assert counts_by_rank(infer_edges(trace))[0]["dma_queue_order"] == 1
    g = analyse(trace).graph
    node = g.event_in_node[second]
    assert g.bind_code[node] == G.QUEUE_WAIT and g.gap[node] == 40


def test_no_queue_wait_beyond_the_tolerance_on_the_same_ring_or_another_queue():
    assert _waits(_queue(5 * US + 500)[0]).empty  # 500 ns later: something else held it
    assert _waits(_queue(5 * US, "qSyncSpillReload0/ring0")[0]).empty  # its ring says so
    assert _waits(_queue(5 * US, "qSyncIO0/ring1")[0]).empty  # another queue
    assert _waits(_queue(1 * US)[0]).empty  # its trigger explains it
