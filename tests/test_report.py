"""The renderers: one contract over every format, then what each format must show."""

from __future__ import annotations

import orjson
import pytest

from tests.fake_rules import use_probe_rules
from tests.worked_example import example_trace
from tracediag.engine.config import Config
from tracediag.engine.diagnose import diagnose
from tracediag.model import schema as S
from tracediag.model.wording import rank_list
from tracediag.report.formats import REPORT_FORMATS as FORMATS
from tracediag.report.formats import render
from tracediag.report.markdown import MAX_DETAILS, MAX_ROWS


@pytest.fixture
def probed(monkeypatch):
    """The worked example diagnosed by the two probe rules (COL990 warning, DMA990 info)."""
    use_probe_rules(monkeypatch)
    return diagnose(example_trace())


@pytest.fixture(scope="module")
def built_in():
    """The worked example diagnosed by whatever built-in rules exist."""
    return diagnose(example_trace())


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_renderer_shows_the_path_and_every_finding(probed, fmt):
    before = probed.to_dict()
    out = render(probed, fmt)
    assert out.endswith("\n")
    assert ("780 ns" in out) if fmt != "json" else ('"length_ns": 780' in out)
    for finding in probed.findings:
        assert finding.code in out
    assert probed.to_dict() == before  # renderers only read


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_renderer_takes_the_built_in_rules(built_in, fmt):
    out = render(built_in, fmt)
    for finding in built_in.findings:
        assert finding.code in out


def test_json_is_exactly_the_report(probed):
    out = render(probed, "json")
    assert out.startswith('{\n  "schema": "tracediag.report/1"')
    data = orjson.loads(out)
    assert data == probed.to_dict()
    cp = data["critical_path"]
    assert cp["length_ns"] == 780
    assert cp["by_category_ns"]["collective_skew"] == 150
    assert cp["compute_by_engine_ns"] == {"tensor": 300, "vector": 100, "sync": 5}
    assert [f["code"] for f in data["findings"]] == ["COL990", "DMA990"]
    assert data["summary"] == {
        "findings": 2,
        "info": 1,
        "warning": 1,
        "error": 0,
        "total_saving_ns_upper_bound": 150,
        "total_saving_ns_joint": None,  # the probe rules pass no change= to ctx.finding
        "joint_findings": 1,  # the joint replay is of the findings at warning or above
        "joint_sum_ns": 150,
    }


def test_json_takes_numpy_evidence(probed):
    import dataclasses

    import numpy as np

    f = dataclasses.replace(
        probed.findings[0], evidence={"late_ns": np.int64(150), "ids": np.arange(2)}
    )
    probed.findings[0] = f
    assert orjson.loads(render(probed, "json"))["findings"][0]["evidence"] == {
        "late_ns": 150,
        "ids": [0, 1],
    }


def test_text_shows_path_by_category_and_ranked_findings(probed):
    out = render(probed, "text")
    lines = out.splitlines()
    assert max(map(len, lines)) <= 100
    assert "\x1b" not in out
    skew = next(line for line in lines if line.strip().startswith("collective_skew"))
    assert skew.split()[1:4] == ["150", "ns", "19.2%"]
    assert (
        "compute by engine: tensor 300 ns (38.5%), vector 100 ns (12.8%), sync 5 ns (0.6%)" in out
    )
    rank_rows = [
        line.split() for line in lines if line.startswith("      0 ") or line.startswith("      1 ")
    ]
    assert [row[3:5] for row in rank_rows] == [["780", "ns"], ["780", "ns"]]
    assert out.index("COL990") < out.index("DMA990")  # by saving
    assert "rank 1 | engine cc | window 420 ns to 570 ns" in out
    assert "impact 150 ns (19.2% of path), saving 150 ns" in out
    assert "fix: balance the ranks" in out
    assert "2 findings (0 errors, 1 warning, 1 info)" in lines[0]


def test_text_colour_only_when_asked(probed):
    assert "\x1b[1;33mwarning" in render(probed, "text", color=True)


def test_text_clips_long_inputs_to_100_columns(probed):
    probed.trace.inputs = [S.InputFile("/very/long/" * 20 + "rank_0.json", "chrome", [0])]
    out = render(probed, "text")
    assert max(map(len, out.splitlines())) <= 100
    assert "…" in out


def test_markdown_tables_and_details(probed):
    out = render(probed, "markdown")
    assert "| collective_skew | 150 ns | 19.2% |" in out
    assert "| Critical path | 780 ns |" in out
    assert "| 1 | `COL990` | warning | 1 | cc | - | 150 ns (19.2%) | 150 ns | Probe \\| skew" in out
    assert out.count("<details><summary><b>") == 2
    assert "window 420 ns to 570 ns" in out


def test_markdown_caps_long_finding_lists(monkeypatch):
    use_probe_rules(monkeypatch)
    many = diagnose(example_trace(), Config(rule_options={"COL990": {"count": 40}}))
    out = render(many, "markdown")
    assert f"... and {41 - MAX_ROWS} more findings" in out
    assert out.count("<details><summary><b>") == MAX_DETAILS


def test_unknown_format_is_refused(probed):
    with pytest.raises(ValueError, match="unknown report format 'xml'"):
        render(probed, "xml")


def test_rank_list_is_compact():
    assert rank_list([5, 0, 1, 2, 3, 8, 7]) == "0-3,5,7-8"
    assert rank_list([]) == "-"
