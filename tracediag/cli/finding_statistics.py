"""``--statistics`` of report and check: how many findings each rule code gave, like ruff's.

Text is one line per code, most frequent first: count, code, severity, rule name and title,
cut to the output width; json is a list of ``{code, name, severity, count, title}``.
"""

from __future__ import annotations

from collections.abc import Iterable

import orjson

from tracediag.model.findings import Finding


def finding_statistics(findings: Iterable[Finding]) -> list[dict]:
    """One row per code: the count, the highest severity and the title; most frequent first,
    ties by code."""
    from tracediag.engine.rule import all_rules

    rules = all_rules()
    rows: dict[str, dict] = {}
    for f in findings:  # a loop over findings (few), not events
        row = rows.setdefault(
            f.code,
            {
                "code": f.code,
                "name": rules[f.code].name if f.code in rules else "",
                "severity": f.severity,
                "count": 0,
                "title": f.title,
            },
        )
        row["count"] += 1
        row["severity"] = max(row["severity"], f.severity)
    ordered = sorted(rows.values(), key=lambda r: (-r["count"], r["code"]))
    return [{**r, "severity": str(r["severity"])} for r in ordered]


def render_statistics(rows: list[dict], fmt: str, width: int) -> str:
    """The rows as ``json`` or aligned ``text`` (``no findings`` when there are none)."""
    if fmt == "json":
        return orjson.dumps(rows, option=orjson.OPT_INDENT_2).decode() + "\n"
    if not rows:
        return "no findings\n"
    count_w = max(len(str(r["count"])) for r in rows)
    code_w = max(len(r["code"]) for r in rows)
    sev_w = max(len(r["severity"]) for r in rows)
    name_w = max(len(r["name"]) for r in rows)
    lines = []
    for r in rows:
        line = (
            f"{r['count']:>{count_w}}  {r['code']:<{code_w}}  {r['severity']:<{sev_w}}  "
            f"{r['name']:<{name_w}}  {r['title']}"
        ).rstrip()
        lines.append(line if len(line) <= width else line[: width - 1] + "…")
    return "\n".join(lines) + "\n"
