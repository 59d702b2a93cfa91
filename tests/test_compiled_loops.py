"""The one-pass loops numba compiles for million-row inputs give exactly what the numpy paths
give, on random groups (lone rows, ties, nested and disjoint intervals), run as plain Python and,
where numba is installed, compiled."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tracediag.analysis import intervals, peers
from tracediag.graph import dependencies, sort_orders
from tracediag.graph.sort_orders import stable_order_by
from tracediag.loading.loader import load

SAMPLES = Path(__file__).parent.parent / "sample_traces"


def _groups(rng, n):
    return np.sort(rng.integers(0, max(n // 3, 1), n)).astype(np.int64)


@pytest.mark.parametrize("seed", range(20))
def test_median_of_others_loop_matches_the_arrays(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    g = _groups(rng, n)
    v = rng.integers(0, 5, n).astype(np.float64)  # ties
    o = np.lexsort((v, g))
    g, v = g[o], v[o]
    want = peers._others_median_arrays(g, v)
    got = np.empty(n)
    peers._others_median_loop(g, v, got)
    np.testing.assert_array_equal(got, want)
    kernel = peers._median_kernel()
    if kernel is not None:
        compiled = np.empty(n)
        kernel(g, v, compiled)
        np.testing.assert_array_equal(compiled, want)


@pytest.mark.parametrize("seed", range(20))
def test_busy_loop_matches_the_numpy_path(seed):
    rng = np.random.default_rng(100 + seed)
    n = int(rng.integers(1, 80))
    group = rng.integers(0, 6, n).astype(np.int64)
    start = rng.integers(0, 1_000, n).astype(np.int64)
    end = start + rng.integers(-5, 300, n)  # a few end before they start
    want = intervals.busy_ns_by_group(group, start, end)  # below the threshold: numpy
    o = stable_order_by(group, start)
    base, span = int(start.min()), int(end.max() - start.min()) + 1
    sums, heads = np.empty(n, np.int64), np.empty(n, np.int64)
    k = intervals._busy_loop(o, group, start, end, base, span, sums, heads)
    assert heads[:k].tolist() == want.index.tolist()
    assert sums[:k].tolist() == want.tolist()
    kernel = intervals._busy_kernel()
    if kernel is not None:
        sums2, heads2 = np.empty(n, np.int64), np.empty(n, np.int64)
        k2 = kernel(o, group, start, end, base, span, sums2, heads2)
        assert (heads2[:k2].tolist(), sums2[:k2].tolist()) == (
            heads[:k].tolist(),
            sums[:k].tolist(),
        )


@pytest.mark.parametrize("seed", range(20))
def test_bucket_order_is_lexsorts(seed):
    """The edges' binding order of a big graph (graph.sort_orders._bucket_order): by
    destination, latest end first, explicit edges before program order, then source, full ties
    in index order; a destination of many edges (over 32: three stable sorts) among them."""
    rng = np.random.default_rng(200 + seed)
    n, m = int(rng.integers(1, 40)), int(rng.integers(0, 300))
    dst = rng.integers(0, n, m)
    if seed % 3 == 0:
        dst[: m // 2] = 0  # one node with many edges
    src, neg_end = rng.integers(0, n, m), rng.integers(-4, 4, m)  # ties on every key
    explicit_first = rng.integers(0, 2, m).astype(np.int8)
    want = np.lexsort((src, explicit_first, neg_end, dst))
    got = sort_orders._bucket_order(src, dst, neg_end, explicit_first, n)
    np.testing.assert_array_equal(got, want)
    kernel = sort_orders._bucket_kernel()
    if kernel is not None:
        np.testing.assert_array_equal(kernel(src, dst, neg_end, explicit_first, n), want)


@pytest.mark.parametrize("seed", range(20))
def test_runs_ordered_by_minor_are_lexsorts(seed):
    """The ties of a big graph's fused sort keys (graph.sort_orders._order_runs): each run of
    equal keys by ``minor``, full ties in index order; one run of over 32 among them."""
    rng = np.random.default_rng(300 + seed)
    n = int(rng.integers(0, 300))
    key = rng.integers(0, int(rng.integers(1, 40)), n)
    if seed % 4 == 0:
        key[: n // 2] = 3  # one long run
    minor = rng.integers(-3, 3, n)
    want = np.lexsort((minor, key))
    order = np.argsort(key, kind="stable")
    got = sort_orders._order_runs(order.copy(), key[order], minor)
    np.testing.assert_array_equal(got, want)
    kernel = sort_orders._runs_kernel()
    if kernel is not None:
        np.testing.assert_array_equal(kernel(order.copy(), key[order], minor), want)


def test_a_graph_built_with_the_compiled_sorts_is_the_same(monkeypatch):
    trace = load([SAMPLES / "neuron_parquet_straggler" / "parquet"], cache=False)
    sorted_graph = dependencies.build_graph(trace)
    monkeypatch.setattr(sort_orders, "COMPILE_ABOVE_ROWS", -1)
    bucketed = dependencies.build_graph(trace)
    for name in ("pred_ptr", "pred_src", "pred_code", "bind", "bind_code", "gap", "order"):
        np.testing.assert_array_equal(getattr(bucketed, name), getattr(sorted_graph, name))
