"""What the TUI holds once a trace is loaded: the Diagnosis, its report and the timeline index.

No Textual here: :func:`open_session` runs in the app's worker thread and reports each stage
through a callback, so the loading screen can show one progress bar per stage.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd

from tracediag.engine.config import Config
from tracediag.engine.diagnose import DIAGNOSE_STAGES, diagnose
from tracediag.engine.diagnosis import Diagnosis
from tracediag.loading.loader import discover, load
from tracediag.model.errors import TracediagError
from tracediag.tui.lanes import LaneLayout, lane_layout
from tracediag.tui.timeline_index import TimelineIndex
from tracediag.tui.timeline_state import track_ranks

#: Called with a stage's label when it starts; the previous stage is then complete.
StageCallback = Callable[[str], None]

INDEX_STAGE = "indexing the timeline"


@dataclass
class Session:
    """A diagnosed trace and the read-only views the screens share."""

    diagnosis: Diagnosis
    timeline: TimelineIndex = field(init=False)

    def __post_init__(self) -> None:
        self.timeline = TimelineIndex(self.diagnosis.trace, self.diagnosis.analysis.segments)

    @property
    def trace(self):
        return self.diagnosis.trace

    @cached_property
    def report(self) -> dict:
        """The JSON report (``Diagnosis.to_dict``): the overview reads its numbers from here."""
        return self.diagnosis.to_dict()

    @cached_property
    def track_ranks(self) -> np.ndarray:
        return track_ranks(self.trace)

    @cached_property
    def track_names(self) -> np.ndarray:
        """Per track, its name as every view shows it (``peers.track_labels``)."""
        return self.diagnosis.analysis.track_labels

    @cached_property
    def lanes(self) -> LaneLayout:
        """Which tracks get a timeline lane, their order (the same on every rank), labels."""
        return lane_layout(self.trace, self.track_names)

    @cached_property
    def event_names(self) -> pd.Series:
        """The events' name column (categorical: no string per event)."""
        return self.trace.events["name"]

    @cached_property
    def body_node(self) -> np.ndarray:
        """Per event: its graph node carrying its duration (-1 for markers), built once."""
        return self.diagnosis.analysis.nodes_of(np.arange(len(self.trace.events)))

    @cached_property
    def lateness(self) -> pd.DataFrame:
        """Arrival lateness per (collective instance, rank): the analysis's own table."""
        return self.diagnosis.analysis.lateness

    @property
    def path_start(self) -> int:
        return int(self.diagnosis.analysis.path.start_ns)


def planned_stages(paths: Sequence[str | Path], align: bool) -> list[str]:
    """The stages a load will go through, in order (for the overall progress bar)."""
    found, _ = discover(paths)
    stages = [f"reading {path} ({reader.FORMAT})" for path, reader in found]
    if align:
        stages.append("aligning clocks")
    return [*stages, *DIAGNOSE_STAGES, INDEX_STAGE]


def open_session(
    paths: Sequence[str | Path],
    config: Config,
    align: bool,
    on_stage: StageCallback,
    reading: dict | None = None,
) -> Session:
    """Load ``paths``, diagnose them and index the timeline, announcing each stage.

    ``reading``: ``load()``'s cache, jobs and scheduler keywords.
    """
    trace = load(paths, align=align, progress=on_stage, **(reading or {}))
    diagnosis = diagnose(trace, config, progress=on_stage)
    on_stage(INDEX_STAGE)
    return Session(diagnosis)


def error_line(exc: BaseException) -> str:
    """The one line the CLI prints for ``exc`` (see ``cli.main``): same words, same prefix."""
    if isinstance(exc, TracediagError):
        message = exc.one_line()
    elif isinstance(exc, OSError):
        where = f"{exc.filename}: " if exc.filename else ""
        message = f"{where}{exc.strerror or exc}"
    else:
        message = f"internal error: {type(exc).__name__}: {exc}"
    return f"tracediag: error: {' '.join(message.split())}"
