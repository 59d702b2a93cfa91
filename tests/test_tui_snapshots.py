"""SVG snapshots of the main views at 80x24 on the straggler sample (pytest-textual-snapshot).

Deterministic: the input is loaded by a relative path from the repository root (no absolute
path on screen), no clock is shown, no text input has focus (no blinking cursor), and colour
is on whatever the environment says (``NO_COLOR`` would change every snapshot).
Update after an intended change with ``pytest tests/test_tui_snapshots.py --snapshot-update``
and look at the SVGs before committing them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tracediag.engine.diagnose import diagnose
from tracediag.loading.loader import load
from tracediag.tui.app import make_app

pytest.importorskip("pytest_textual_snapshot")

ROOT = Path(__file__).resolve().parents[1]
SIZE = (80, 24)


@pytest.fixture(autouse=True)
def _colour(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)


@pytest.fixture(scope="module")
def diagnosis():
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(ROOT)
        return diagnose(load(["sample_traces/neuron_parquet_straggler/parquet"]))


def test_overview(snap_compare, diagnosis):
    assert snap_compare(make_app(diagnosis=diagnosis), terminal_size=SIZE)


def test_findings_filtered_to_collectives(snap_compare, diagnosis):
    assert snap_compare(make_app(diagnosis=diagnosis), press=["f", "F", "F"], terminal_size=SIZE)


def test_finding_detail(snap_compare, diagnosis):
    assert snap_compare(make_app(diagnosis=diagnosis), press=["f", "enter"], terminal_size=SIZE)


def test_timeline_of_the_straggler(snap_compare, diagnosis):
    assert snap_compare(make_app(diagnosis=diagnosis), press=["f", "t"], terminal_size=SIZE)


def test_ranks_heatmap_light_theme(snap_compare, diagnosis):
    assert snap_compare(make_app(diagnosis=diagnosis), press=["T", "r"], terminal_size=SIZE)
