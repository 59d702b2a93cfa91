"""SARIF 2.1.0 for code-scanning dashboards (GitHub code scanning, Azure DevOps, SonarQube).

One run; its driver lists a rule descriptor (with the rule's document as help) for every rule
that ran, plus one per budget and baseline metric that failed. Each finding is a result with a
stable ``partialFingerprints`` entry (see :mod:`tracediag.model.fingerprints`), so the same problem is
the same alert in every run, and the trace file as its artifact location. GitHub requires a
``region.startLine`` on every location: traces have no lines, so it is always 1.
"""

from __future__ import annotations

from pathlib import PurePath
from urllib.parse import quote

import orjson

from tracediag import __version__
from tracediag.model.findings import family_of
from tracediag.model.fingerprints import FINGERPRINT_VERSION
from tracediag.report.ci_common import finding_figures, gate_of, rule_info, scope_label, trace_path

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
LEVELS = {"error": "error", "warning": "warning", "info": "note"}
INFORMATION_URI = "https://pypi.org/project/tracediag/"


def artifact_uri(path: str) -> str:
    """A URI reference for a trace path: relative paths stay relative (as code scanning wants,
    relative to the repository), absolute ones become ``file://`` URIs."""
    p = PurePath(path)
    if p.is_absolute():
        return "file://" + quote(p.as_posix())
    return quote(p.as_posix())


def _rule_descriptor(code: str) -> dict:
    info = rule_info().get(code)
    if info is None:  # a code from a saved report whose rule is no longer installed
        return {"id": code, "shortDescription": {"text": code}}
    return {
        "id": code,
        "name": info["name"],
        "shortDescription": {"text": info["title"]},
        "fullDescription": {"text": info["doc"]["what it finds"]},
        "help": {"text": info["document"], "markdown": info["document"]},
        "defaultConfiguration": {"level": LEVELS[info["severity"]]},
        "properties": {"tags": ["performance", family_of(code)]},
    }


def _gate_descriptor(rule_id: str, short: str, help_text: str) -> dict:
    return {
        "id": rule_id,
        "name": rule_id.replace("/", "-"),
        "shortDescription": {"text": short},
        "fullDescription": {"text": help_text},
        "help": {"text": help_text, "markdown": help_text},
        "defaultConfiguration": {"level": "error"},
        "properties": {"tags": ["performance", "gate"]},
    }


_BUDGET_HELP = (
    "A limit set in [tool.tracediag.budgets] on a metric of the report. Bring the metric back "
    "within the budget, or change the budget if the new value is intended."
)
_REGRESSION_HELP = (
    "A metric is worse than the baseline's median by more than the baseline runs' noise allows "
    "(check --baseline). Find the change that caused it with 'tracediag diff BASE NEW', or write "
    "a new baseline if the change is intended."
)


def _location(report: dict, ranks: list[int] | None, artifacts: dict[str, int], logical: str):
    path = trace_path(report, ranks)
    loc: dict = {}
    if path:
        uri = artifact_uri(path)
        index = artifacts.setdefault(uri, len(artifacts))
        loc["physicalLocation"] = {
            "artifactLocation": {"uri": uri, "index": index},
            "region": {"startLine": 1},
        }
    loc["logicalLocations"] = [{"name": logical, "kind": "module"}]
    return loc


def _finding_result(report, gate, i, f, rule_index, artifacts, baseline_new) -> dict:
    fp = gate["fingerprints"][i]
    where = ", ".join([scope_label(f)] + [f[k] for k in ("track", "layer", "op") if f.get(k)])
    result = {
        "ruleId": f["code"],
        "ruleIndex": rule_index[f["code"]],
        "level": LEVELS[f["severity"]],
        "message": {"text": finding_figures(f, report)},
        "locations": [_location(report, f["ranks"], artifacts, where)],
        "partialFingerprints": {FINGERPRINT_VERSION: fp},
        "properties": {
            "ranks": f["ranks"],
            "impact_ns": f["impact_ns"],
            "impact_pct": f["impact_pct"],
            "saving_ns": f["saving_ns"],
            "fails_gate": bool(gate["failing"][i]),
            # machine ids (event ids, collective keys) for tools; the message has words only
            "evidence": f.get("evidence") or {},
        },
    }
    if baseline_new is not None:
        result["baselineState"] = "new" if fp in baseline_new else "unchanged"
    return result


def render_sarif(report: dict) -> str:
    """The check report (with its ``gate``) as a SARIF 2.1.0 log (JSON text)."""
    gate = gate_of(report)
    codes = sorted(
        set(report["config"].get("rules_run", [])) | {f["code"] for f in report["findings"]}
    )
    rules = [_rule_descriptor(c) for c in codes]
    gate_failures = [g for g in gate["failures"] if g["kind"] in ("budget", "regression")]
    for g in gate_failures:
        rid = f"{g['kind']}/{g['id']}"
        if all(r["id"] != rid for r in rules):
            help_text = _BUDGET_HELP if g["kind"] == "budget" else _REGRESSION_HELP
            rules.append(_gate_descriptor(rid, g["title"], help_text))
    rule_index = {r["id"]: n for n, r in enumerate(rules)}
    artifacts: dict[str, int] = {}
    comparison = gate["baseline"]
    new = {f["fingerprint"] for f in comparison["new_findings"]} if comparison else None
    results = [
        _finding_result(report, gate, i, f, rule_index, artifacts, new)
        for i, f in enumerate(report["findings"])
    ]
    for g in gate_failures:
        rid = f"{g['kind']}/{g['id']}"
        results.append(
            {
                "ruleId": rid,
                "ruleIndex": rule_index[rid],
                "level": "error",
                "message": {"text": g["message"]},
                "locations": [_location(report, None, artifacts, "job")],
                "partialFingerprints": {FINGERPRINT_VERSION: rid},
            }
        )
    run = {
        "tool": {
            "driver": {
                "name": "tracediag",
                "version": __version__,
                "semanticVersion": __version__,
                "informationUri": INFORMATION_URI,
                "rules": rules,
            }
        },
        "artifacts": [{"location": {"uri": uri}} for uri in artifacts],
        "invocations": [{"executionSuccessful": True}],
        "results": results,
        "properties": {"gate_passed": gate["passed"], "fail_on": gate["fail_on"]},
    }
    log = {"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]}
    options = orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE | orjson.OPT_SERIALIZE_NUMPY
    return orjson.dumps(log, option=options | orjson.OPT_NON_STR_KEYS).decode()
