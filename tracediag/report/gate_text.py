"""The gate's verdict as a section of the text and Markdown reports of ``tracediag check``."""

from __future__ import annotations

from tracediag.ci.gate import regression_message, verdict_line
from tracediag.model.wording import plural, ranks_label


def gate_lines(gate: dict) -> list[tuple[str, str]]:
    """(mark, text) pairs: ``x`` fails the gate, ``ok`` passes, ``-`` is for information."""
    out: list[tuple[str, str]] = []
    for f in gate["failures"]:
        if f["kind"] in ("finding", "new-finding"):
            word = "new " if f["kind"] == "new-finding" else ""
            scope = _scope(f)
            out.append(("x", f"{word}{f['title']}{scope} (fails the gate; see the finding above)"))
    for b in gate["budgets"]:
        out.append(("ok" if b["passed"] else "x", b["message"]))
    comparison = gate["baseline"]
    if comparison:
        for row in comparison["metrics"]:
            if row["status"] != "unchanged":
                out.append(("x" if row["status"] == "regression" else "-", regression_message(row)))
        for f in comparison["fixed_findings"]:
            title = f"{f.get('code', '?')} {f.get('title', '')}".rstrip()
            out.append(("-", f"fixed since the baseline: {title}{_scope(f)}"))
    return out


def _scope(finding: dict) -> str:
    """`` [rank 1]`` for a finding that names ranks, else ``""``: a code can be new on one rank
    and fixed on another, and the two lines must say which is which."""
    ranks = finding.get("ranks")
    return f" [{ranks_label(ranks)}]" if ranks else ""


def baseline_summary(comparison: dict) -> str:
    """One sentence: the baseline's runs, the new, fixed and known findings, the regressions."""
    regressions = sum(1 for r in comparison["metrics"] if r["status"] == "regression")
    return (
        f"Against a baseline of {plural(comparison['runs'], 'run')}: "
        f"{len(comparison['new_findings'])} new, {len(comparison['fixed_findings'])} fixed, "
        f"{comparison['known_findings']} known findings; {plural(regressions, 'metric regression')}."
    )


def render_gate_text(gate: dict) -> str:
    """``Gate: ...`` and one line per failure, budget and baseline change."""
    lines = ["", f"Gate: {verdict_line(gate)}"]
    if gate["baseline"]:
        lines.append(f"  {baseline_summary(gate['baseline'])}")
    lines += [f"  {mark:>2} {text}" for mark, text in gate_lines(gate)]
    return "\n".join(lines) + "\n"


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;")


def render_gate_markdown(gate: dict) -> str:
    """A ``## Gate`` section: the verdict, then a bullet per failure, budget and change."""
    icon = {"x": "❌", "ok": "✅", "-": "ℹ️"}
    lines = ["", "## Gate", "", f"**{verdict_line(gate)}**", ""]
    if gate["baseline"]:
        lines += [baseline_summary(gate["baseline"]), ""]
    lines += [f"- {icon[mark]} {_md_escape(text)}" for mark, text in gate_lines(gate)]
    return "\n".join(lines) + "\n"
