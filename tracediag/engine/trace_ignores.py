"""Per-trace ignores, like ruff's per-file-ignores: ``[tool.tracediag.per-trace-ignores]``.

Each key is a glob on an input path (``"runs/warmup/*"``; a pattern without ``/`` also matches
the path's last component) or on a rank number (``"rank:3"``, ``"rank:[4-7]"``); its value
lists codes or prefixes. A finding is dropped when every rank it concerns (every rank of the
job, when it names none) is covered by a key whose codes match the finding's code.
"""

from __future__ import annotations

from dataclasses import replace
from fnmatch import fnmatchcase
from pathlib import PurePath
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tracediag.engine.diagnosis import Diagnosis

RANK_PREFIX = "rank:"


def covered_ranks(pattern: str, inputs: list[tuple[str, list[int]]], ranks: list[int]) -> set[int]:
    """The ranks a pattern covers, given ``inputs`` as (path, ranks it holds) and every rank."""
    if pattern.startswith(RANK_PREFIX):
        glob = pattern[len(RANK_PREFIX) :].strip()
        return {r for r in ranks if fnmatchcase(str(r), glob)}
    out: set[int] = set()
    for path, held in inputs:
        names = {path, PurePath(path).as_posix()}
        if "/" not in pattern:
            names.add(PurePath(path).name)
        if any(fnmatchcase(n, pattern) for n in names):
            out.update(held)
    return out


def apply_per_trace_ignores(diagnosis: Diagnosis, patterns: dict[str, list[str]]) -> Diagnosis:
    """``diagnosis`` without the findings the patterns ignore; ``ignored_findings`` counts them."""
    if not patterns or not diagnosis.findings:
        return diagnosis
    trace = diagnosis.trace
    inputs = [(i.path, list(i.ranks)) for i in trace.inputs]
    ranks = list(trace.ranks)
    cover = [(codes, covered_ranks(p, inputs, ranks)) for p, codes in patterns.items()]
    kept = []
    for f in diagnosis.findings:
        scope = set(f.ranks) or set(ranks)
        ignored_ranks: set[int] = set()
        for codes, covered in cover:
            if any(f.code.startswith(c) or c == "ALL" for c in codes):
                ignored_ranks |= covered
        if not scope <= ignored_ranks:
            kept.append(f)
    return replace(diagnosis, findings=kept, ignored_findings=len(diagnosis.findings) - len(kept))
