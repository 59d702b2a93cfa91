"""group_codes: the grouping pandas gives a MultiIndex of the key columns, without its tuples."""

import numpy as np
import pandas as pd
import pytest

from tracediag.analysis.group_codes import group_codes


def _columns(seed: int, n: int):
    rng = np.random.default_rng(seed)
    rank = rng.integers(0, 4, n)
    queue = np.array([f"qSyncIO{i}" for i in range(7)], dtype=object)[rng.integers(0, 7, n)]
    tensor = pd.Series(
        np.array([f"t{i}" for i in range(300)], dtype=object)[rng.integers(0, 300, n)]
    )
    step = rng.integers(0, 5, n).astype(float)
    wide = rng.integers(-(2**40), 2**40, n)  # too wide to be its own code: factorized
    return rank, queue, tensor, step, wide


@pytest.mark.parametrize("sort", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_codes_and_first_rows_match_multiindex_factorize(seed, sort):
    cols = _columns(seed, 5000)
    as_arrays = [np.asarray(c) for c in cols]
    want, uniq = pd.factorize(pd.MultiIndex.from_arrays(as_arrays), sort=sort)
    code, first = group_codes(*cols, sort=sort)
    assert np.array_equal(code, want)
    # Each code's key is its first row's, in the order pandas numbers them.
    keys = list(zip(*(a[first] for a in as_arrays), strict=True))
    assert keys == list(uniq)
    assert np.array_equal(first, [np.flatnonzero(want == k)[0] for k in range(len(uniq))])


def test_a_small_hand_made_table():
    code, first = group_codes(np.array([2, 1, 2, 1, 2]), np.array(["a", "b", "a", "a", "a"]))
    assert code.tolist() == [0, 1, 0, 2, 0]
    assert first.tolist() == [0, 1, 3]
    code, first = group_codes(
        np.array([2, 1, 2, 1, 2]), np.array(["a", "b", "a", "a", "a"]), sort=True
    )
    assert code.tolist() == [2, 1, 2, 0, 2]  # (1, a) < (1, b) < (2, a)
    assert first.tolist() == [3, 1, 0]


def test_missing_values_form_one_key_and_empty_input():
    code, first = group_codes(np.array(["x", None, "x", None], dtype=object))
    assert code.tolist() == [0, 1, 0, 1] and first.tolist() == [0, 1]
    code, first = group_codes(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=object))
    assert len(code) == 0 and len(first) == 0
