"""The generator's one-core kernel scenarios, written and diagnosed once per test module."""

from __future__ import annotations

from pathlib import Path

import tracediag
from tracediag.generator import generate
from tracediag.generator.kernels import KERNEL_SCENARIOS


def diagnosed_kernels(root: Path) -> dict:
    """Every kernel scenario written under ``root`` and diagnosed: name -> (rank_0 profile dir,
    the generator's truth, the diagnosis)."""
    out = {}
    for name in KERNEL_SCENARIOS:
        truth = generate(name, root / name, formats=("parquet",))
        job = tracediag.load([str(root / name / "parquet")], cache=False)
        out[name] = (root / name / "parquet" / "rank_0", truth, job.diagnose())
    return out
