"""CI outputs of ``tracediag check``: JUnit XML, SARIF 2.1.0, GitHub annotations, JSON.

SARIF logs are validated against the official SARIF 2.1.0 JSON schema (a copy in tests/data).
"""

from __future__ import annotations

import functools
import gzip
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import junitparser
import orjson
import pytest

from tests import gate_runs
from tracediag.ci.gate import evaluate_gate
from tracediag.model.findings import Severity
from tracediag.model.fingerprints import fingerprints, identity
from tracediag.model.units import fmt_ns
from tracediag.report.formats import CHECK_FORMATS, render_check
from tracediag.report.github import annotation, escape_data, escape_property

# the shared fixtures (see tests/gate_runs.py)
cli = gate_runs.cli
probes = gate_runs.probes
reports = gate_runs.reports
run_dirs = gate_runs.run_dirs


def _checked(report: dict, fail_on=Severity.ERROR, **kw) -> dict:
    report["gate"] = evaluate_gate(report, fail_on, **kw)
    return report


# ---- JUnit ------------------------------------------------------------------------------------

TESTCASE_CHILDREN = {"failure", "error", "skipped", "system-out", "system-err"}


def assert_junit(xml: str) -> ET.Element:
    """The JUnit structure GitLab and Jenkins read (the common junit-10.xsd): ``testsuites`` of
    ``testsuite``s of ``testcase``s, counts that add up, at most one failure per testcase."""
    root = ET.fromstring(xml)
    assert root.tag == "testsuites"
    total = failed = 0
    for suite in root:
        assert suite.tag == "testsuite"
        assert suite.get("name")
        cases = suite.findall("testcase")
        assert {c.tag for c in suite} <= {"testcase", "properties", "system-out", "system-err"}
        assert int(suite.get("tests")) == len(cases) > 0
        failures = sum(1 for c in cases if c.find("failure") is not None)
        assert int(suite.get("failures")) == failures
        assert int(suite.get("errors")) == 0 and int(suite.get("skipped")) == 0
        float(suite.get("time"))
        names = [(c.get("classname"), c.get("name")) for c in cases]
        assert len(set(names)) == len(names), "one testcase per rule and scope"
        for case in cases:
            assert case.get("name") and case.get("classname")
            float(case.get("time"))
            assert {c.tag for c in case} <= TESTCASE_CHILDREN
            assert len(case.findall("failure")) <= 1
            for f in case.findall("failure"):
                assert f.get("message") and f.get("type") and f.text
        total, failed = total + len(cases), failed + failures
    assert (int(root.get("tests")), int(root.get("failures"))) == (total, failed)
    _read_with_junitparser(xml, total, failed)
    return root


def _read_with_junitparser(xml: str, total: int, failed: int) -> None:
    """The same document as a JUnit reader (junitparser) sees it: same counts, failures typed."""
    doc = junitparser.JUnitXml.fromstring(xml)
    cases = [case for suite in doc for case in suite]
    assert len(cases) == total
    failures = [r for case in cases for r in case.result if isinstance(r, junitparser.Failure)]
    assert len(failures) == failed
    assert all(f.message and f.type and f.text for f in failures)
    assert sum(suite.tests for suite in doc) == total
    assert sum(suite.failures for suite in doc) == failed


def test_junit_one_testcase_per_rule_and_scope(reports):
    report = _checked(reports("slow_dma"))
    root = assert_junit(render_check(report, "junit"))
    cases = {c.get("name"): c for c in root.iter("testcase")}
    dma = cases["DMA101 dma-wait-on-critical-path [ranks 0-1]"]
    finding = next(f for f in report["findings"] if f["code"] == "DMA101")
    failure = dma.find("failure")
    assert failure.get("type") == "DMA101"
    assert failure.get("message") == f"DMA101 error: {finding['title']}"
    assert finding["message"] in failure.text
    assert f"what-if saving: {fmt_ns(finding['saving_ns'])}" in failure.text
    assert f"impact: {fmt_ns(finding['impact_ns'])} (" in failure.text
    # the evidence figures, in words and units (not field names, not our event ids)
    ev = finding["evidence"]
    assert f"\n  DMA transfer time: {fmt_ns(ev['dma_transfer_ns'])}\n" in failure.text
    assert "_ns" not in failure.text and "events" not in failure.text
    assert dma.get("file") == str(report["inputs"][0]["path"])
    # CMP301 fires on both ranks: one testcase per scope, passing (info) with the text
    assert "CMP301 compute-underutilization [rank 0]" in cases
    assert cases["CMP301 compute-underutilization [rank 1]"].find("system-out") is not None
    # every rule that ran is a testcase; those that found nothing pass with scope "job"
    codes = {c.get("classname").rsplit(".", 1)[1] for c in root.iter("testcase")}
    assert codes == set(report["config"]["rules_run"])
    assert cases["HST401 host-bound-gaps [job]"].find("failure") is None
    assert int(root.get("failures")) == 1


def test_junit_carries_budgets_and_baseline_suites(reports):
    from tracediag.ci.baseline import compare, make_baseline
    from tracediag.ci.budgets import parse_budgets

    base = make_baseline([("clean0", reports("clean0"))])
    report = reports("slow_dma")
    report = _checked(
        report,
        budgets=parse_budgets({"max-step-time-ms": 7.0, "min-mfu-pct": 50}),
        comparison=compare(report, base),
    )
    root = assert_junit(render_check(report, "junit"))
    suites = {s.get("name"): s for s in root}
    budgets = {c.get("name"): c for c in suites["tracediag.budgets"]}
    assert "exceeds budget max-step-time-ms = 7" in budgets["max-step-time-ms"].find("failure").get(
        "message"
    )
    assert budgets["min-mfu-pct"].find("failure") is None
    metrics = {c.get("name"): c for c in suites["tracediag.baseline"]}
    assert metrics["step-time-ns"].find("failure") is not None
    assert metrics["collective-skew-ns"].find("failure") is None


def test_junit_is_valid_xml_with_control_characters():
    from tracediag.report.junit import _clean

    assert _clean("a\x1bb\x00") == "a\ufffdb\ufffd"


# ---- SARIF ------------------------------------------------------------------------------------

# The official SARIF 2.1.0 JSON schema (OASIS, final "rtm.5" revision; see tests/data/README.md).
SARIF_SCHEMA_FILE = Path(__file__).parent / "data" / "sarif-2.1.0-rtm.5.json.gz"


@functools.cache
def _sarif_validator() -> jsonschema.Draft4Validator:
    schema = orjson.loads(gzip.decompress(SARIF_SCHEMA_FILE.read_bytes()))
    jsonschema.Draft4Validator.check_schema(schema)
    return jsonschema.Draft4Validator(schema)


def assert_sarif(log: dict) -> None:
    """Valid against the SARIF 2.1.0 schema, plus the cross-references it cannot express."""
    errors = sorted(_sarif_validator().iter_errors(log), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors[:5])
    assert log["version"] == "2.1.0"
    for run in log["runs"]:
        rules = run["tool"]["driver"]["rules"]
        ids = [r["id"] for r in rules]
        assert len(set(ids)) == len(ids)
        artifacts = run.get("artifacts", [])
        for result in run["results"]:
            assert rules[result["ruleIndex"]]["id"] == result["ruleId"]
            assert result["partialFingerprints"]
            for loc in result["locations"]:
                art = loc["physicalLocation"]["artifactLocation"]
                assert artifacts[art["index"]]["location"]["uri"] == art["uri"]


def test_the_sarif_check_rejects_what_the_schema_forbids(reports):
    log = orjson.loads(render_check(_checked(reports("slow_dma")), "sarif"))
    log["runs"][0]["results"][0]["level"] = "fatal"
    with pytest.raises(AssertionError, match="level"):
        assert_sarif(log)
    log = orjson.loads(render_check(_checked(reports("slow_dma")), "sarif"))
    log["runs"][0]["tool"]["driver"]["rules"][0]["helpText"] = "not a SARIF property"
    with pytest.raises(AssertionError, match="helpText"):
        assert_sarif(log)


def test_sarif_has_rule_help_fingerprints_and_the_trace(reports):
    report = _checked(reports("slow_dma"))
    log = orjson.loads(render_check(report, "sarif"))
    assert_sarif(log)
    run = log["runs"][0]
    rules = {r["id"]: r for r in run["tool"]["driver"]["rules"]}
    assert set(rules) == set(report["config"]["rules_run"])
    assert rules["DMA101"]["help"]["text"].startswith("# DMA101 dma-wait-on-critical-path")
    assert "## How to fix" in rules["DMA101"]["help"]["markdown"]
    assert rules["CMP301"]["defaultConfiguration"]["level"] == "note"
    levels = [(r["ruleId"], r["level"]) for r in run["results"]]
    assert levels == [
        (f["code"], {"info": "note"}.get(f["severity"], f["severity"])) for f in report["findings"]
    ]
    uri = run["artifacts"][0]["location"]["uri"]
    assert uri == "file://" + str(report["inputs"][0]["path"])
    fps = [r["partialFingerprints"]["tracediag/v1"] for r in run["results"]]
    assert fps == fingerprints(report["findings"]) and len(set(fps)) == len(fps)
    dma = run["results"][0]
    assert dma["properties"]["fails_gate"] is True
    assert dma["properties"]["saving_ns"] == report["findings"][0]["saving_ns"]


def test_sarif_lists_gate_failures_and_baseline_state(reports):
    from tracediag.ci.baseline import compare, make_baseline
    from tracediag.ci.budgets import parse_budgets

    base = make_baseline([("clean0", reports("clean0")), ("clean1", reports("clean1"))])
    report = reports("straggler")
    report = _checked(
        report,
        budgets=parse_budgets({"max-collective-skew-pct": 2}),
        comparison=compare(report, base),
    )
    log = orjson.loads(render_check(report, "sarif"))
    assert_sarif(log)
    results = log["runs"][0]["results"]
    states = {r["ruleId"]: r.get("baselineState") for r in results}
    assert states["COL201"] == "new"
    assert states["COL202"] == "unchanged"  # rank 1's exposed AllReduce is in both clean runs
    gate_ids = [r["ruleId"] for r in results if "/" in r["ruleId"]]
    assert gate_ids == [
        "budget/max-collective-skew-pct",
        "regression/step-time-ns",
        "regression/collective-skew-ns",
        "regression/mfu-pct",
    ]


def test_relative_trace_paths_stay_relative():
    from tracediag.report.sarif import artifact_uri

    assert artifact_uri("traces/run 1/rank_0.json") == "traces/run%201/rank_0.json"
    assert artifact_uri("/abs/t.json") == "file:///abs/t.json"


# ---- fingerprints -----------------------------------------------------------------------------


def test_the_same_finding_has_the_same_fingerprint_across_runs(reports):
    a, b = reports("clean0"), reports("clean1")
    col_a = next(f for f in a["findings"] if f["code"] == "COL202")
    col_b = next(f for f in b["findings"] if f["code"] == "COL202")
    assert col_a["end_ns"] - col_a["start_ns"] != col_b["end_ns"] - col_b["start_ns"] or (
        col_a["start_ns"] != col_b["start_ns"]
    )
    assert fingerprints([col_a]) == fingerprints([col_b])
    dma_a = next(f for f in a["findings"] if f["code"] == "DMA101")
    dma_b = next(f for f in b["findings"] if f["code"] == "DMA101")
    assert dma_a["ranks"] != dma_b["ranks"]  # rank 0 in one rerun, rank 1 in the other
    assert fingerprints([dma_a]) != fingerprints([dma_b])


def test_fingerprint_ignores_times_figures_and_layer_order():
    f = {"code": "COL201", "ranks": [1], "track": "tensor", "layer": "layer_2, layer_1", "op": "AllReduce",
         "start_ns": 5, "saving_ns": 10, "message": "x", "severity": "error"}  # fmt: skip
    g = {
        **f,
        "layer": "layer_1, layer_2",
        "start_ns": 99,
        "saving_ns": 1,
        "message": "y",
        "severity": "info",
    }
    assert identity(f) == identity(g)
    assert fingerprints([f]) == fingerprints([g])
    assert fingerprints([{**f, "ranks": [0]}]) != fingerprints([f])
    one, two = fingerprints([f, g])
    assert two == f"{one}:2"
    assert re.fullmatch(r"[0-9a-f]{32}", one)


# ---- GitHub annotations -------------------------------------------------------------------------


def test_github_annotations(reports):
    report = _checked(reports("slow_dma"))
    lines = render_check(report, "github").splitlines()
    pattern = re.compile(r"^::(error|warning|notice) (file=[^,:]+,)?title=[^,:]+::[^\r\n]+$")
    assert all(pattern.match(line) for line in lines), lines
    # The input is a Parquet profile directory: GitHub attaches annotations to files only, so
    # no file= (a directory would be dropped), and the message names the trace instead.
    path = report["inputs"][0]["path"]
    assert Path(path).is_dir()
    assert lines[0].startswith("::error title=DMA101 ") and "file=" not in lines[0]
    assert lines[0].endswith(f"(trace: {path})")
    # GitHub reads % as an escape: the message's percentages are written %25, never bare.
    impact_pct = report["findings"][0]["impact_pct"]
    assert f"{impact_pct}%25 of the step" in lines[0] and not re.search(r"%(?!25)", lines[0])
    assert [line.split(" ", 1)[0] for line in lines[1:-1]] == ["::notice"] * (len(lines) - 2)
    assert lines[-1] == "::error title=tracediag::check failed: 1 finding at or above error"


def test_github_escaping():
    assert escape_data("50% a\nb\r") == "50%25 a%0Ab%0D"
    assert escape_property("a:b,c") == "a%3Ab%2Cc"
    assert (
        annotation("warning", "T, x", "m\nn", "p:1") == "::warning file=p%3A1,title=T%2C x::m%0An"
    )


# ---- the command line -----------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", CHECK_FORMATS)
def test_every_check_format_writes_its_file(cli, probes, tmp_path, fmt):
    out = tmp_path / f"out.{fmt}"
    code, stdout, err = cli("check", "a", "--fail-on", "warning", "--format", fmt, "-o", out)
    assert (code, stdout) == (1, "")
    assert err.splitlines()[-1] == "tracediag: check failed: 1 finding at or above warning"
    text = out.read_text()
    if fmt == "junit":
        root = assert_junit(text)
        assert root.get("failures") == "1"
        case = next(root.iter("testcase"))
        assert case.get("name") == "COL990 skew-probe [rank 1]" and case.get("file") == "b"
    elif fmt == "sarif":
        log = orjson.loads(text)
        assert_sarif(log)
        assert [
            r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
            for r in log["runs"][0]["results"]
        ] == ["b", "b"]
    elif fmt == "json":
        data = orjson.loads(text)
        assert data["schema"] == "tracediag.report/1"
        assert data["gate"]["passed"] is False
        assert data["gate"]["failing"] == [True, False]
    elif fmt == "github":
        assert text.startswith(
            "::error file=b,title=COL990 Probe | skew on the critical path [rank 1]::rank 1 arrives late\n"
        )
    else:
        assert "check failed: 1 finding at or above warning" in text


def test_exit_zero_and_passing_gate(cli, probes):
    assert (
        cli("check", "a", "--fail-on", "warning", "--format", "junit", "--exit-zero", "-q")[0] == 0
    )
    code, out, _ = cli("check", "a", "--format", "github", "-q")
    assert code == 0
    assert out.splitlines()[0].startswith("::warning file=b,title=COL990")  # below the gate
    assert (
        out.splitlines()[-1]
        == "::notice title=tracediag::check passed: no finding at or above error"
    )


def test_the_ci_formats_need_the_gate(reports):
    from tracediag.report.junit import render_junit

    with pytest.raises(KeyError, match="gate"):
        render_junit(reports("clean0"))


def test_check_on_a_generated_trace(cli, run_dirs, tmp_path):
    code, _, err = cli(
        "check", run_dirs["slow_dma"], "--format", "sarif", "-o", tmp_path / "s.sarif", "-q"
    )
    assert code == 1 and err == ""
    assert_sarif(orjson.loads((tmp_path / "s.sarif").read_text()))
    assert (
        cli("check", run_dirs["clean0"], "--format", "junit", "-o", tmp_path / "j.xml", "-q")[0]
        == 0
    )
    assert assert_junit((tmp_path / "j.xml").read_text()).get("failures") == "0"
