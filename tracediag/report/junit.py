"""JUnit XML for CI (GitLab, Jenkins, Azure): one testcase per rule and scope.

Suites: one per rule family (``tracediag.dma``...), then ``tracediag.budgets`` (one testcase per
budget) and ``tracediag.baseline`` (one per gated metric) when the check had them. A rule that
ran and found nothing is one passing testcase (scope ``job``); a rule's findings are grouped by
scope (their ranks), one testcase each, failed when a finding of the group fails the gate, and
otherwise passing with the findings in ``system-out``.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from tracediag.ci.gate import regression_message
from tracediag.model.findings import family_of
from tracediag.report.ci_common import finding_figures, gate_of, rule_info, scope_label, trace_path

#: Characters XML 1.0 cannot hold, even escaped.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _clean(text: str) -> str:
    return _NOT_XML.sub("\ufffd", text)


def _out(case: ET.Element, text: str) -> None:
    ET.SubElement(case, "system-out").text = _clean(text)


def _case(suite: ET.Element, classname: str, name: str, file: str) -> ET.Element:
    attrs = {"classname": classname, "name": _clean(name), "time": "0"}
    if file:
        attrs["file"] = file
    return ET.SubElement(suite, "testcase", attrs)


def _fail(case: ET.Element, message: str, kind: str, text: str) -> None:
    failure = ET.SubElement(case, "failure", {"message": _clean(message), "type": kind})
    failure.text = _clean(text)


def _rule_cases(report: dict, gate: dict, suites: dict[str, ET.Element]) -> None:
    info = rule_info()
    groups: dict[tuple[str, str], list[int]] = {}
    for i, f in enumerate(report["findings"]):
        groups.setdefault((f["code"], scope_label(f)), []).append(i)
    codes = sorted(set(report["config"].get("rules_run", [])) | {c for c, _ in groups})
    for code in codes:
        family = family_of(code)
        suite = suites.setdefault(family, ET.Element("testsuite", {"name": f"tracediag.{family}"}))
        name = info.get(code, {}).get("name", code)
        scopes = sorted(scope for c, scope in groups if c == code) or ["job"]
        for scope in scopes:
            idx = groups.get((code, scope), [])
            first = report["findings"][idx[0]] if idx else None
            case = _case(
                suite,
                f"tracediag.{family}.{code}",
                f"{code} {name} [{scope}]",
                trace_path(report, first["ranks"] if first else None),
            )
            failing = [i for i in idx if gate["failing"][i]]
            texts = "\n\n".join(finding_figures(report["findings"][i], report) for i in idx)
            if failing:
                f = report["findings"][failing[0]]
                more = f" (and {len(idx) - 1} more)" if len(idx) > 1 else ""
                _fail(case, f"{code} {f['severity']}: {f['title']}{more}", code, texts)
            elif idx:
                _out(case, texts)


def _budget_cases(report: dict, gate: dict) -> ET.Element | None:
    if not gate["budgets"]:
        return None
    suite = ET.Element("testsuite", {"name": "tracediag.budgets"})
    for b in gate["budgets"]:
        case = _case(suite, "tracediag.budgets", b["budget"], trace_path(report))
        if not b["passed"]:
            _fail(case, b["message"], "budget", b["message"])
        else:
            _out(case, b["message"])
    return suite


def _baseline_cases(report: dict, gate: dict) -> ET.Element | None:
    comparison = gate["baseline"]
    if not comparison:
        return None
    suite = ET.Element("testsuite", {"name": "tracediag.baseline"})
    for row in comparison["metrics"]:
        case = _case(suite, "tracediag.baseline", row["metric"], trace_path(report))
        text = regression_message(row)
        if row["status"] == "regression":
            _fail(case, text, "regression", text)
        else:
            _out(case, text)
    return suite


def _count(suite: ET.Element) -> tuple[int, int]:
    cases = suite.findall("testcase")
    failures = sum(1 for c in cases if c.find("failure") is not None)
    suite.set("tests", str(len(cases)))
    suite.set("failures", str(failures))
    suite.set("errors", "0")
    suite.set("skipped", "0")
    suite.set("time", "0")
    return len(cases), failures


def render_junit(report: dict) -> str:
    """The check report (with its ``gate``) as JUnit XML text."""
    gate = gate_of(report)
    families: dict[str, ET.Element] = {}
    _rule_cases(report, gate, families)
    suites = [families[k] for k in sorted(families)]
    suites += [
        s for s in (_budget_cases(report, gate), _baseline_cases(report, gate)) if s is not None
    ]
    root = ET.Element("testsuites", {"name": "tracediag"})
    tests = failures = 0
    for suite in suites:
        t, f = _count(suite)
        tests, failures = tests + t, failures + f
        root.append(suite)
    root.attrib.update(tests=str(tests), failures=str(failures), errors="0", time="0")
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
