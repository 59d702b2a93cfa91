"""The analysis parts that read only the trace, made beside the graph on a big trace
(``context._trace_only_parts``): each equals what its cached property makes. The report of a
diagnosis in threads, which makes them, is the serial one's (tests/test_threads.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tracediag.analysis import context
from tracediag.analysis.context import Analysis, analyse
from tracediag.loading.loader import load

SAMPLES = Path(__file__).parent.parent / "sample_traces"


def _same(a, b) -> None:
    if isinstance(a, pd.DataFrame):
        pd.testing.assert_frame_equal(a, b)
    elif hasattr(a, "__dataclass_fields__"):
        for name in a.__dataclass_fields__:
            x, y = getattr(a, name), getattr(b, name)
            if isinstance(x, pd.DataFrame):
                pd.testing.assert_frame_equal(x, y)
            elif isinstance(x, pd.Categorical):
                pd.testing.assert_extension_array_equal(x, y)
            else:
                assert np.array_equal(x, y)
    else:
        assert a == b


@pytest.mark.parametrize("sample", ["neuron_parquet_straggler/parquet", "chrome_straggler/chrome"])
def test_parts_made_beside_the_graph_are_the_properties(monkeypatch, sample):
    trace = load([SAMPLES / sample], cache=False)
    monkeypatch.setattr(context, "runs_in_threads", lambda events: True)
    early = analyse(trace)
    made = context._trace_only_parts(trace, early.hardware)
    assert set(made) == {"bounds", "durations", "matmul_work", "lateness"}
    for name in made:
        # Every part is a cached property of Analysis, set before any rule reads it.
        assert isinstance(getattr(Analysis, name), context.cached_property)
        assert name in early.__dict__
    monkeypatch.undo()
    late = analyse(trace)
    assert not set(made) & set(late.__dict__)  # a small trace makes them when asked
    for name in made:
        _same(early.__dict__[name], getattr(late, name))
