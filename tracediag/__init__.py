"""tracediag: why is this ML accelerator job slow? Critical path, stalls and what fixing them saves.

The Python API (see :mod:`tracediag.api.job` and :mod:`tracediag.whatif.user_changes`)::

    import tracediag

    job = tracediag.load("profiles/")            # a Job: events, tracks, edges, collectives
    diagnosis = tracediag.diagnose(job)          # findings, critical path, breakdowns, JSON
    diagnosis.findings_df.head()
    tracediag.what_if(job, tracediag.Scale(rank=1, factor=0.8)).saving_ns
    job.tui()                                    # the terminal UI on the loaded job

Importing the package loads nothing heavy: every name below is imported on first use.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # not typing's: importing typing would double this package's import time

__version__ = "0.1.0"

__all__ = [
    "Config",
    "Diagnosis",
    "Finding",
    "Job",
    "RemoveWait",
    "Scale",
    "Severity",
    "TraceInputError",
    "TracediagError",
    "UsageError",
    "WhatIfResult",
    "__version__",
    "diagnose",
    "load",
    "open_tui",
    "what_if",
]

#: Public name -> the module that defines it (imported when the name is first used).
_LAZY = {
    "Job": "tracediag.api.job",
    "Diagnosis": "tracediag.engine.diagnosis",
    "diagnose": "tracediag.api.job",
    "load": "tracediag.api.job",
    "open_tui": "tracediag.api.job",
    "Scale": "tracediag.whatif.user_changes",
    "RemoveWait": "tracediag.whatif.user_changes",
    "WhatIfResult": "tracediag.whatif.user_changes",
    "what_if": "tracediag.whatif.user_changes",
    "Finding": "tracediag.model.findings",
    "Severity": "tracediag.model.findings",
    "Config": "tracediag.engine.config",
    "TracediagError": "tracediag.model.errors",
    "TraceInputError": "tracediag.model.errors",
    "UsageError": "tracediag.model.errors",
}

if TYPE_CHECKING:
    from typing import Any

    from tracediag.api.job import Job, diagnose, load, open_tui
    from tracediag.engine.config import Config
    from tracediag.engine.diagnosis import Diagnosis
    from tracediag.model.errors import TracediagError, TraceInputError, UsageError
    from tracediag.model.findings import Finding, Severity
    from tracediag.whatif.user_changes import RemoveWait, Scale, WhatIfResult, what_if


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'tracediag' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
