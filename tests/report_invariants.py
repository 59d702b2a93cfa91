"""Properties every report must have, checked on every Diagnosis the test suite makes.

``tests/conftest.py`` wraps :func:`tracediag.engine.diagnose.diagnose` so that each result is
checked by :func:`violations`; a test whose diagnosis breaks one fails with the list.

1. Saving within the path. No finding's saving exceeds the critical path it is measured on
   (``saving_ns <= path.length_ns``): a replay cannot shorten the step by more than the step.
2. Saving within impact, for every finding (``saving_ns <= impact_ns``): what fixing a cause
   gains is never more than what the report says the cause costs. For the rules whose change
   only shortens the events they cite (NUM701, NUM702, CMP302) the impact is the time those
   events occupy on the critical path, and with P the old critical path the new longest path is
   at least as long as P with the new durations, so the step shrinks by at most the time removed
   from P's nodes. The rules whose change does more than their own measure of the cause counts
   (COL201: the others' wait, while the pace change also shortens the late rank's own work on
   the path; COL202/COL203: the exposed transfer, while the change also closes its handshake;
   PIP602: the stage's compute in path segments, while the scaling reaches its compute before
   the window too) report as impact what their change takes off the path whenever the saving
   exceeds their own measure (:func:`tracediag.engine.saving_bound.impact_covering_saving`),
   which by 5 bounds the saving. Rules with no what-if (``saving_ns == 0``) satisfy it trivially.
3. No bandwidth above the peak it is compared with: in a finding's evidence, ``busbw`` <=
   ``link_bw`` and ``achieved_bw``/``typical_bw`` <= ``peak_bw`` (where both are finite).
4. No engine the device lacks: a finding's ``engine`` is an engine of one of its ranks' tracks,
   or a function those ranks have events of (``dma`` for copies, ``cc`` for collectives, ``cpu``
   for host threads).
5. Saving within what its own change removes, for EVERY finding whose rule recorded a change
   (``Analysis.finding(change=)``), and for the joint saving of the headline findings with their
   joint change: ``saving_ns <= removed_on_path_ns + added_ns``
   (:func:`tracediag.engine.saving_bound.change_effect`), the time the change takes off the
   durations and gaps of the critical path's binding chain (continued back to its root) plus
   any time it adds anywhere. The old path with the new durations still runs from its root to
   the window's last node, and the window's first start moves later only by time added, so the
   step cannot shrink by more (proof in ``saving_bound``'s docstring). This is "no saving
   exceeds its impact plus what its own change removes" without the slack of the impact (gloo
   alltoall's COL201: the others' wait 244.7 ms, the saving 293.6 ms, never more than the
   326.7 ms its change takes off the path, now its impact).
6. A finding's change only takes time out: it lengthens no node and widens no gap
   (``ChangeEffect.added_ns == 0``; a fix restores work and waits to what they should take),
   and it starts no node before the predecessor that binds it ends, further than observed: no
   gap is set below both 0 and its observed value (``ChangeEffect.early_ns == 0``). Such a gap
   would let the replay move work earlier than any recorded dependency allows (COL201 gave a
   straggler's events its peers' -19 ns overlaps, fixed in ``whatif/straggler_pace.py``).
"""

from __future__ import annotations

import math

import numpy as np

from tracediag.analysis.context import change_key
from tracediag.engine.saving_bound import change_effect, finding_effect
from tracediag.graph.changes import joint
from tracediag.model import schema as S

#: Bandwidths in a finding's evidence and the peak each is compared with.
BANDWIDTH_PEAKS = (("busbw", "link_bw"), ("achieved_bw", "peak_bw"), ("typical_bw", "peak_bw"))
#: Engines a rank has when it has events of a kind (the function, not a track's engine name).
KIND_ENGINES = {"dma": "dma", "collective": "cc", "host": "cpu", "sync": "cpu"}
#: Rounding slack for savings from replays in integer ns.
SLACK_NS = 1


def _engines_by_rank(trace: S.Trace) -> dict[int, set[str]]:
    """Per rank: its tracks' engines and the functions it has events of."""
    ev = trace.events
    out: dict[int, set[str]] = {}
    if not len(ev):
        return out
    track_engine = trace.tracks[S.ENGINE].astype(str).to_numpy()
    pairs = (
        ev[[S.RANK]]
        .assign(engine=track_engine[ev[S.TRACK].to_numpy()], kind=ev[S.KIND].astype(str))
        .drop_duplicates()
    )
    for rank, engine, kind in pairs.itertuples(index=False):  # distinct (rank, engine, kind)
        have = out.setdefault(int(rank), set())
        have.add(str(engine))
        if kind in KIND_ENGINES:
            have.add(KIND_ENGINES[kind])
    return out


def _finite(value) -> bool:
    return isinstance(value, (int, float, np.floating, np.integer)) and math.isfinite(value)


def violations(diagnosis) -> list[str]:
    """Every property (module docstring) a diagnosis breaks, one line per finding and property."""
    out: list[str] = []
    path_ns = int(diagnosis.analysis.path.length_ns)
    engines = _engines_by_rank(diagnosis.trace)
    for f in diagnosis.findings:
        where = f"{f.code} ranks {list(f.ranks)} engine {f.engine!r}"
        if f.saving_ns > path_ns + SLACK_NS:
            out.append(f"{where}: saving {f.saving_ns} ns > critical path {path_ns} ns")
        if f.saving_ns > f.impact_ns + SLACK_NS:
            out.append(f"{where}: saving {f.saving_ns} ns > impact {f.impact_ns} ns")
        effect = finding_effect(diagnosis.analysis, f)
        if effect is not None:
            out += _effect_violations(where, f.saving_ns, effect, f.impact_ns)
        ev = f.evidence or {}
        for bw, peak in BANDWIDTH_PEAKS:
            both = _finite(ev.get(bw)) and _finite(ev.get(peak)) and ev[peak] > 0
            if both and ev[bw] > ev[peak] * (1 + 1e-9):
                out.append(f"{where}: {bw} {ev[bw]:.4g} above {peak} {ev[peak]:.4g}")
        if f.engine and f.ranks:
            have = set().union(*(engines.get(int(r), set()) for r in f.ranks))
            if f.engine not in have:
                out.append(f"{where}: names engine {f.engine!r}; its ranks have {sorted(have)}")
    out += _joint_violations(diagnosis)
    return out


def _effect_violations(where: str, saving_ns: int, effect, impact_ns: int | None = None) -> list:
    """Properties 5 and 6 of a saving and the effect of its change."""
    out = []
    if saving_ns > effect.bound_ns + SLACK_NS:
        beside = f", impact {impact_ns} ns" if impact_ns is not None else ""
        out.append(
            f"{where}: saving {saving_ns} ns > what its change removes from the path "
            f"{effect.removed_on_path_ns} ns + adds {effect.added_ns} ns (removes "
            f"{effect.removed_ns} ns anywhere{beside})"
        )
    if effect.added_ns:
        out.append(
            f"{where}: its change adds {effect.added_ns} ns to durations and gaps: a fix "
            "shortens work and waits, it lengthens none"
        )
    if effect.early_ns:
        out.append(
            f"{where}: its change sets gaps {effect.early_ns} ns below 0 and below what was "
            "observed: work would start before what it depends on ends"
        )
    return out


def _joint_violations(diagnosis) -> list[str]:
    """Properties 5 and 6 of the joint saving: the headline findings' changes made at once."""
    a = diagnosis.analysis
    changes = [
        a.changes[k] for f in diagnosis.at_or_above("warning") if (k := change_key(f)) in a.changes
    ]
    if not changes:
        return []
    saving = diagnosis.joint_saving_ns
    if saving is None:  # a finding with a saving recorded no change: no joint replay
        return []
    return _effect_violations("joint saving", saving, change_effect(a, joint(changes)))
