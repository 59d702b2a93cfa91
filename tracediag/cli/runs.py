"""One run as a report: a trace (file or directory) is diagnosed, a saved JSON report is read.

Shared by the commands that take several runs (``baseline``, ``diff``): each PATH is one run.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tracediag.cli.common import diagnose_paths, say
from tracediag.engine.config import Config
from tracediag.model.wording import plural


def report_of(path: str, args: argparse.Namespace, config: Config) -> dict:
    """The JSON report of one run at ``path`` (per-trace ignores applied to fresh diagnoses)."""
    from tracediag.ci.saved_report import is_saved_report, load_report

    if is_saved_report(Path(path)):
        say(args, f"reading the saved report {path}")
        return load_report(Path(path))
    one = argparse.Namespace(**{**vars(args), "paths": [path]})
    diagnosis = diagnose_paths(one, config)
    if diagnosis.ignored_findings:
        n = diagnosis.ignored_findings
        say(args, f"{plural(n, 'finding')} of {path} ignored by per-trace-ignores")
    return diagnosis.to_dict()
