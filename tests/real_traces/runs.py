"""The real-trace tests' shared fixture body: each scenario of a data folder read and diagnosed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tracediag.engine.diagnose import diagnose
from tracediag.loading.loader import load


def diagnosed_runs(data: Path, scenarios) -> dict:
    """Per scenario: (diagnosis, truth), each read and diagnosed once; skips the test module
    when a scenario's ``truth.json`` is missing (the data folder is not present)."""
    if not all((data / s / "truth.json").is_file() for s in scenarios):
        pytest.skip(f"real traces not present ({data.relative_to(data.parents[1])})")
    out = {}
    for s in scenarios:
        truth = json.loads((data / s / "truth.json").read_text())
        out[s] = (diagnose(load([data / s], cache=False)), truth)
    return out
