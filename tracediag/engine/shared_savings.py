"""Findings that report the same saving: when the replay shows one bottleneck behind them, say so.

Two findings with equal savings are often two views of one cause (DMA101 and DMA102 on the same
transfers, one collective seen from two ranks): fixing either removes the other's saving too, so
adding them up would promise twice what the job can gain. The engine replays the changes of each
such pair together (each finding's own what-if, ``Analysis.changes``): when together they save
less than the sum of their savings, they share a bottleneck, and each names the others in
``evidence["shared_with"]`` (labels such as ``"DMA102 ranks 0, 1"``), with the joint saving in
``evidence["saving_together_ns"]`` and a sentence in its message. Findings whose savings are
equal by chance but add up in the replay are left as they are.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from tracediag.analysis.context import Analysis, change_key
from tracediag.graph.changes import joint
from tracediag.model.findings import Finding
from tracediag.model.units import fmt_ns

#: Findings of one saving replayed pairwise at most (a replay each pair): beyond, the rest are
#: left unmarked rather than spend a quadratic number of replays.
MAX_GROUP = 8


def label(f: Finding) -> str:
    """How another finding's message names ``f``: its code, ranks and layer (or track)."""
    text = f.code
    if f.ranks:
        text += f" rank{'s' if len(f.ranks) > 1 else ''} {', '.join(map(str, f.ranks))}"
    where = f.layer or f.track
    return f"{text} ({where})" if where else text


def mark_shared_bottlenecks(analysis: Analysis, findings: list[Finding]) -> list[Finding]:
    """``findings`` (order kept) where each that shares its saving's bottleneck with others of
    the same saving names them (module docstring); the others unchanged."""
    groups: dict[int, list[int]] = defaultdict(list)
    for i, f in enumerate(findings):
        if f.saving_ns > 0 and change_key(f) in analysis.changes:
            groups[f.saving_ns].append(i)
    partners: dict[int, list[int]] = defaultdict(list)
    for members in groups.values():
        members = members[:MAX_GROUP]
        for a, i in enumerate(members):
            for j in members[a + 1 :]:
                together = _joint_saving(analysis, [findings[i], findings[j]])
                if together < findings[i].saving_ns + findings[j].saving_ns:
                    partners[i].append(j)
                    partners[j].append(i)
    out = list(findings)
    for i, others in partners.items():
        f = findings[i]
        names = [label(findings[j]) for j in others]
        together = _joint_saving(analysis, [f, *(findings[j] for j in others)])
        total = f.saving_ns * (1 + len(others))
        sentence = (
            f" {'; '.join(names)} report{'s' if len(names) == 1 else ''} the same saving for the "
            f"same bottleneck: fixed together they save {fmt_ns(together)}, not the "
            f"{fmt_ns(total)} the savings add up to."
        )
        out[i] = replace(
            f,
            message=f.message + sentence,
            evidence={**f.evidence, "shared_with": names, "saving_together_ns": together},
        )
    return out


def _joint_saving(analysis: Analysis, findings: list[Finding]) -> int:
    return analysis.what_if(joint([analysis.changes[change_key(f)] for f in findings]))
