"""Every rule, alone, stays quiet (below warning) on the generator's clean job; trace-quality
rules say nothing at all on it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracediag.engine.config import Config
from tracediag.engine.diagnose import diagnose
from tracediag.engine.rule import all_rules
from tracediag.loading.loader import load
from tracediag.model.findings import Severity

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"


@pytest.fixture(scope="module")
def clean_trace():
    return load([SAMPLES / "neuron_parquet_clean" / "parquet"])


@pytest.mark.parametrize("code", sorted(all_rules()))
def test_rule_is_quiet_on_the_clean_job(clean_trace, code):
    d = diagnose(clean_trace, Config(select=[code]))
    assert not d.at_or_above(Severity.WARNING), [f.message for f in d.findings]
    if code.startswith("TRC"):
        assert d.findings == []
