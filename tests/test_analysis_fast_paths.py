"""The diagnosis's shortcuts give what the long way gives: Arrow-built text columns, ordinals of a
few tracks, the lazily built path table, the path's time per category, duration tables keyed
by category codes."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tests.trace_factory import RankSpec, build
from tracediag.analysis.context import analyse
from tracediag.analysis.dma import dma_frame
from tracediag.analysis.durations import op_durations
from tracediag.analysis.peers import event_ordinals
from tracediag.graph.critical_path import texts_by_code
from tracediag.model import schema as S


def _trace() -> S.Trace:
    """Two ranks: a DMA feeding a matmul per layer, a host thread launching, one marker."""
    specs = []
    for r in (0, 1):
        s = RankSpec(r)
        t = 0
        for k in range(3):
            launch = s.add(f"launch{k}", "main", "host", t, t + 10)
            dma = s.add("w", "q0", "dma", t + 20, t + 120, bytes=4096.0, layer=f"layer_{k}")
            mm = s.add("MATMUL", "tensor", "compute", t + 120, t + 300, op=f"dot.{k}")
            s.dep(launch, dma, "launch")
            s.dep(dma, mm)
            t += 300
        s.add("note", "main", "marker", 5, 5)
        specs.append(s)
    return build(*specs)


def test_texts_by_code_is_the_str_column_pandas_infers():
    got = pd.Series(texts_by_code(["a", "bb", ""], np.array([1, -1, 0, 2, 1])))
    want = pd.Series(np.array(["bb", None, "a", "", "bb"], dtype=object))
    pd.testing.assert_series_equal(got, want)
    assert got.isna().tolist() == [False, True, False, False, False]


def test_ordinals_of_some_tracks_match_the_whole_table():
    trace = _trace()
    whole = event_ordinals(trace)
    dma_tracks = (trace.tracks[S.TRACK_KIND] == "dma_queue").to_numpy()
    some = event_ordinals(trace, dma_tracks)
    on = dma_tracks[trace.events[S.TRACK].to_numpy()]
    assert on.sum() == 6  # three transfers per rank
    assert (some[on] == whole[on]).all() and (some[~on] == -1).all()
    assert sorted(some[on].tolist()) == [0, 0, 1, 1, 2, 2]
    pd.testing.assert_frame_equal(dma_frame(trace), dma_frame(trace, whole))


def test_path_table_is_built_on_first_use_with_the_event_fields():
    a = analyse(_trace())
    assert "segments" not in a.__dict__
    seg = a.segments
    assert len(seg) == len(a.path.segments)
    assert (seg["node"].to_numpy() == a.path.segments["node"].to_numpy()).all()
    on_event = seg["event"].to_numpy() >= 0
    names = a.trace.events[S.NAME].astype(object).to_numpy()[seg["event"].to_numpy()[on_event]]
    assert seg["name"][on_event].tolist() == names.tolist()
    assert seg["name"][~on_event].isna().all()
    assert str(seg["name"].dtype) == "str" and str(seg["track_name"].dtype) == "str"


def test_path_time_of_categories_sums_the_segments():
    a = analyse(_trace())
    by_cat = a.path.by_category()
    assert a.path_ns("compute") == by_cat["compute"] > 0
    assert a.path_ns("dma_wait", "dma_transfer") == by_cat["dma_wait"] + by_cat["dma_transfer"]
    assert a.path_ns() == 0


def test_op_table_keys_past_an_int8_code():
    s = RankSpec(0)
    for k in range(100):  # 100 ops, then 100 kernels named only: name keys offset past 127
        s.add("kernel", "tensor", "compute", 100 * k, 100 * k + 10, op=f"op{k}")
    for k in range(100):
        s.add(f"k{k}", "tensor", "compute", 10_000 + 100 * k, 10_000 + 100 * k + 20 + k)
    trace = build(s)
    assert trace.events[S.NAME].cat.codes.dtype == np.int8
    rows = op_durations(trace)
    assert len(rows) == 200
    assert rows[0] == {
        "op": "k99",
        "kind": "compute",
        "count": 1,
        "total_ns": 119,
        "mean_ns": 119.0,
        "std_ns": 0.0,
    }
    assert {r["op"] for r in rows if r["total_ns"] == 10} == {f"op{k}" for k in range(100)}
