"""GitHub Actions workflow commands: one annotation per finding and per gate failure.

``::error file=PATH,title=TITLE::MESSAGE``. Findings that fail the gate are errors; the others
are warnings (severity warning or error) or notices (info). Budgets exceeded and metric
regressions are errors. The last line is the verdict as a notice or an error.
"""

from __future__ import annotations

from pathlib import Path

from tracediag.ci.gate import verdict_line
from tracediag.report.ci_common import gate_of, scope_label, trace_path


def escape_data(text: str) -> str:
    """A message as a workflow command carries it (``%``, CR and LF escaped)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A property value (``file``, ``title``): ``:`` and ``,`` escaped as well."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def annotation(level: str, title: str, message: str, file: str = "") -> str:
    """One workflow command line."""
    props = [f"file={escape_property(file)}"] if file else []
    props.append(f"title={escape_property(title)}")
    return f"::{level} {','.join(props)}::{escape_data(message)}"


def annotated_file(path: str) -> str:
    """``path``, unless it is a directory: GitHub attaches an annotation to a file only, so a
    profile directory (a Neuron Parquet profile, a rank's folder) gets none; its findings'
    messages name it instead."""
    return "" if not path or Path(path).is_dir() else path


def _with_trace(message: str, path: str) -> str:
    return message if not path or annotated_file(path) else f"{message} (trace: {path})"


def render_github(report: dict) -> str:
    """The check report (with its ``gate``) as workflow annotations, one per line."""
    gate = gate_of(report)
    lines = []
    for f, failing in zip(report["findings"], gate["failing"], strict=True):
        level = "error" if failing else ("notice" if f["severity"] == "info" else "warning")
        title = f"{f['code']} {f['title']} [{scope_label(f)}]"
        path = trace_path(report, f["ranks"])
        lines.append(
            annotation(level, title, _with_trace(f["message"], path), annotated_file(path))
        )
    for g in gate["failures"]:
        if g["kind"] in ("budget", "regression"):
            path = trace_path(report)
            lines.append(
                annotation(
                    "error",
                    f"tracediag {g['title']}",
                    _with_trace(g["message"], path),
                    annotated_file(path),
                )
            )
    lines.append(
        annotation("notice" if gate["passed"] else "error", "tracediag", verdict_line(gate))
    )
    return "\n".join(lines) + "\n"
