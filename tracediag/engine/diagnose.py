"""The one way in: analyse a trace, run the selected rules, drop what the configuration's
per-trace ignores cover, return the :class:`~tracediag.engine.diagnosis.Diagnosis`.

The CLI, the TUI, the API, baselines and saved-report runs all call :func:`diagnose`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from tracediag.analysis.context import GRAPH_STAGE, PATH_STAGE, analyse
from tracediag.analysis.parallel_layout import resolve_layout
from tracediag.engine.config import Config
from tracediag.engine.diagnosis import Diagnosis
from tracediag.engine.forked import forks_pay, map_with_child
from tracediag.engine.rule import all_rules
from tracediag.engine.shared_savings import mark_shared_bottlenecks
from tracediag.engine.trace_ignores import apply_per_trace_ignores
from tracediag.io.threads import map_in_threads, runs_in_threads
from tracediag.model import schema as S
from tracediag.model.errors import UsageError, did_you_mean
from tracediag.model.findings import Finding

#: The stages of :func:`diagnose`, in order, as its ``progress`` callback announces them.
DIAGNOSE_STAGES = (GRAPH_STAGE, PATH_STAGE, "running the rules")


def diagnose(
    trace: S.Trace, config: Config | None = None, progress: Callable[[str], None] | None = None
) -> Diagnosis:
    """Analyse ``trace`` and run every selected rule; findings sorted by saving, less those the
    configuration's per-trace ignores drop (counted in ``ignored_findings``). ``progress`` is
    called with each of :data:`DIAGNOSE_STAGES` as it starts."""
    config = config or Config()
    try:
        analysis = analyse(trace, config.hardware, progress)
    except ValueError as exc:  # bad hardware overrides
        raise UsageError(f"{config.source or 'config'}: {exc}") from None
    if config.layout:
        analysis.layout = resolve_layout(trace, config.layout)
    rules = all_rules()
    for code in list(config.rule_options) + list(config.severity):
        if code not in rules:
            raise UsageError(
                f"{config.source or 'config'}: no rule {code}{did_you_mean(code, rules)}"
            )
    if progress:
        progress(DIAGNOSE_STAGES[-1])
    run = [code for code in rules if config.is_selected(code)]
    findings: list[Finding] = []
    for code, found in zip(run, _run_rules(analysis, config, rules, run), strict=True):
        if code in config.severity:
            found = [replace(f, severity=config.severity[code]) for f in found]
        findings += found
    findings.sort(key=Finding.sort_key)
    diagnosis = apply_per_trace_ignores(
        Diagnosis(trace, analysis, findings, config, run), config.per_trace_ignores
    )
    # Findings of equal savings name the bottleneck they share, when the replay shows one.
    return replace(diagnosis, findings=mark_shared_bottlenecks(analysis, diagnosis.findings))


def _run_rules(analysis, config: Config, rules: dict, codes: list[str]) -> list[list[Finding]]:
    """Each rule's findings, in the order of ``codes``; in threads on a big trace
    (:mod:`tracediag.io.threads`): the rules share the analysis, whose cached parts whichever
    rule asks first builds, the same for all."""

    def check(code: str) -> list[Finding]:
        cls = rules[code]
        return list(cls().check(analysis, config.options_for(code, cls.options)))

    events = len(analysis.trace.events)
    if forks_pay(events):
        return _with_child(analysis, check, codes, events)
    if not runs_in_threads(events):
        return [check(code) for code in codes]
    # The job's steps, which every report reads (1.6 s on the clean-room 64 x 100k job), are
    # made in the pool after the rules, while the last rules leave a thread idle.
    done = map_in_threads(
        lambda code: check(code) if code is not None else analysis.job_steps,
        [*codes, None],
        events=events,
    )
    return done[:-1]


def _with_child(analysis, check, codes: list[str], events: int) -> list[list[Finding]]:
    """The rules shared with a forked child (:mod:`tracediag.engine.forked`). Each rule's findings
    come back with the changes they were replayed with and the replays it ran, which the
    analysis then holds as if every rule had run here, in rule order."""

    def run(code: str) -> tuple[list[Finding], dict, dict, dict]:
        changes, replayed = set(analysis.changes), set(analysis.replayed)
        built = set(analysis.__dict__)
        found = check(code)
        return (
            found,
            {k: v for k, v in analysis.changes.items() if k not in changes},
            {k: v for k, v in analysis.replayed.items() if k not in replayed},
            {
                k: analysis.__dict__[k]
                for k in _SENT_BACK
                if k not in built and k in analysis.__dict__
            },
        )

    before = dict(analysis.changes)
    claim_order = sorted(codes, key=_claim_rank)
    done = dict(zip(claim_order, map_with_child(run, claim_order, events=events), strict=True))
    analysis.changes = before
    for code in codes:
        _, changes, replayed, parts = done[code]
        analysis.changes.update(changes)
        analysis.replayed.update(replayed)
        for name, value in parts.items():  # the same as this process would build
            analysis.__dict__.setdefault(name, value)
    return [done[code][0] for code in codes]


#: The analysis' cached parts a rule run in the child sends back when it built them: the small
#: ones the report reads too (a per-event array at most: the dtypes' int8 codes), so that the
#: parent does not build them again (NUM701's dtypes of GPU kernel names, 27 ms of the report
#: on df_index_resolver). Event-sized tables (ordinals, the DMA frame) are cheaper rebuilt.
_SENT_BACK = ("matmul_work", "layout", "lateness", "track_labels", "peer_track_names")


#: The rules that took longest on the real GPU traces (50-200 ms each on 25-51 MB Kineto
#: traces, the rest under 20 ms): claimed first, so that the last rules claimed are short and
#: the two processes end close together.
_SLOW_RULES = ("HST401", "DMA101", "COL202", "DMA102", "NUM701", "HST402", "CMP301")


def _claim_rank(code: str) -> int:
    return _SLOW_RULES.index(code) if code in _SLOW_RULES else len(_SLOW_RULES)
