"""Third-party rules from the entry-point group, and hardware peaks overridden by config."""

from __future__ import annotations

from importlib.metadata import EntryPoint

import pytest

from tests.fake_rules import SkewProbe
from tests.trace_factory import RankSpec, build
from tracediag.engine import rule as rule_module
from tracediag.engine.config import from_mapping
from tracediag.engine.diagnose import diagnose
from tracediag.model.errors import UsageError


def test_entry_point_rules_join_the_builtin_ones(monkeypatch):
    ep = EntryPoint(name="probe", value="tests.fake_rules:SkewProbe", group="tracediag.rules")
    monkeypatch.setattr(
        rule_module, "entry_points", lambda group: [ep] if group == "tracediag.rules" else []
    )
    rules = rule_module.all_rules()
    assert rules["COL990"] is SkewProbe
    assert "DMA101" in rules


def test_an_entry_point_that_is_not_a_rule_is_refused(monkeypatch):
    ep = EntryPoint(name="bad", value="tests.fake_rules:PROBES", group="tracediag.rules")
    monkeypatch.setattr(rule_module, "entry_points", lambda group: [ep])
    with pytest.raises(TypeError, match="not a Rule subclass"):
        rule_module.all_rules()


def _one_matmul_rank() -> RankSpec:
    spec = RankSpec(0)
    spec.add("MATMUL", "tensor", "compute", 0, 10_000, flops=1e9)
    spec.add("ADD", "vector", "compute", 10_000, 40_000)
    return spec


def test_hardware_peak_can_be_overridden():
    trace = build(_one_matmul_rank())
    base = diagnose(trace, from_mapping({"select": ["CMP301"]}))
    assert base.findings[0].evidence["peak_flops"] == 95e12  # trn1's BF16 peak
    cfg = from_mapping({"select": ["CMP301"], "hardware": {"peak_flops_bf16": 50e12}})
    f = diagnose(build(_one_matmul_rank()), cfg).findings[0]
    assert f.evidence["peak_flops"] == 50e12
    assert f.evidence["mfu_pct"] == pytest.approx(100 * 1e9 / 40e-6 / 50e12)


def test_unknown_hardware_setting_is_a_usage_error():
    cfg = from_mapping({"hardware": {"peak_tops": 1}}, "tracediag.toml")
    with pytest.raises(UsageError, match="tracediag.toml: unknown hardware settings"):
        diagnose(build(_one_matmul_rank()), cfg)
