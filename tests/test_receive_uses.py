"""Readers of received buffers the trace does not bind (graph.receive_uses), on hand-made
two-rank pipelines whose answers are worked out below."""

from __future__ import annotations

import pandas as pd

from tests.trace_factory import RankSpec, build
from tracediag.graph.inferred_edges import counts_by_rank, infer_edges
from tracediag.model import schema as S

US = 1_000
LINE = "model.py:228"


def _pipeline(reader_starts_us, bound_first: bool = True, source: str | None = LINE):
    """Rank 0 sends three buffers to rank 1 (CollectivePermute 0 -> 1), received by 10, 30 and
    45 us; rank 1's vector engine runs a TENSOR_REDUCE at ``source`` at each of
    ``reader_starts_us`` (2 us each), between other work, with no stall recorded (as when the
    reader was not ready before the buffer landed). The first read binds to the first receive
    by a recorded dependency."""
    ends = (10, 30, 45)
    send, recv = RankSpec(0), RankSpec(1)
    received = []
    for k, end in enumerate(ends):
        key = f"permute|0,1|{k}"
        s = send.add("CollectivePermute", "cc", "collective", (end - 3) * US, end * US)
        send.collective(s, key, (end - 3) * US, op="CollectivePermute")
        r = recv.add("CollectivePermute", "cc", "collective", (end - 3) * US, end * US)
        recv.collective(r, key, (end - 3) * US, op="CollectivePermute")
        received.append(r)
    extra = {S.WAIT: 0.0, **({S.SOURCE: source} if source else {})}
    readers = [
        recv.add("TENSOR_REDUCE", "vector", "compute", t * US, (t + 2) * US, **extra)
        for t in reader_starts_us
    ]
    recv.add("TENSOR_TENSOR", "vector", "compute", 3 * US, 5 * US, **extra)  # other code
    if bound_first:
        recv.dep(received[0], readers[0])
    for spec in (send, recv):
        for c in spec.colls:
            c[S.GROUP] = "0,1"
    trace = build(send, recv)
    ids = trace.events.index[trace.events[S.RANK] == 1]
    first = int(ids.min())  # rank 1's local indices -> the assembled event ids
    return trace, [first + r for r in received], [first + r for r in readers]


def _uses(trace) -> list[list[int]]:
    inferred = infer_edges(trace)
    return inferred.loc[inferred[S.EDGE_KIND] == "receive_use", [S.SRC, S.DST]].values.tolist()


def test_each_receive_binds_to_the_next_run_of_the_code_that_read_the_first():
    # reads at 10 (bound), 38 and 60 us: one per receive, each after its buffer landed
    trace, received, readers = _pipeline((10, 38, 60))
    assert _uses(trace) == [[received[1], readers[1]], [received[2], readers[2]]]
    inferred = infer_edges(trace)
    uses = inferred[inferred[S.EDGE_KIND] == "receive_use"]
    assert uses["gap_ns"].tolist() == [8 * US, 15 * US]  # 38 - 30, 60 - 45
    assert counts_by_rank(inferred)[1]["repeated_receive_consumer"] == 2


def test_a_run_before_its_buffer_landed_is_not_its_reader():
    # the second run starts at 25 us, before the second receive ends (30): the regular pattern
    # fails; each buffer then goes to the first run after it landed and after the previous
    # buffer's reader: the second to the run at 60 us, the third to none (no run is left)
    trace, received, readers = _pipeline((10, 25, 60))
    assert _uses(trace) == [[received[1], readers[2]]]


def test_runs_that_do_not_repeat_once_per_receive_take_the_first_after_each_landing():
    trace, received, readers = _pipeline((10, 38, 50, 60))  # four runs for three receives
    assert _uses(trace) == [[received[1], readers[1]], [received[2], readers[2]]]


def test_a_rule_that_misses_a_known_reader_binds_nothing():
    # the first buffer (landed at 10 us) is read by the run at 38 us, as a recorded edge says:
    # neither one run per buffer from there (the third would need a fourth run) nor the first
    # run after each landing (the run at 10 us) finds it
    trace, received, readers = _pipeline((10, 38, 60), bound_first=False)
    trace.edges = pd.concat(
        [
            trace.edges,
            pd.DataFrame({S.SRC: [received[0]], S.DST: [readers[1]], S.EDGE_KIND: ["dependency"]}),
        ],
        ignore_index=True,
    )
    assert _uses(trace) == []


def test_without_a_known_reader_or_a_source_location_nothing_is_inferred():
    assert _uses(_pipeline((10, 38, 60), bound_first=False)[0]) == []
    assert _uses(_pipeline((10, 38, 60), source=None)[0]) == []


def test_two_runs_per_receive_bind_the_first_of_each_pair():
    # six runs: two per buffer (at 10/12, 38/40, 60/62); the first of each pair reads it
    trace, received, readers = _pipeline((10, 12.5, 38, 40.5, 60, 62.5))
    assert pd.Series(_uses(trace)).tolist() == [
        [received[1], readers[2]],
        [received[2], readers[4]],
    ]
