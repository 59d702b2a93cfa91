"""The critical-path list's sort, search and grouping, over the segments' columns (no Textual).

A critical path has hundreds to 100k segments: every query is a few vectorised pandas/numpy
operations over columns built once, never a Python object per segment.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from tracediag.model.units import fmt_ns
from tracediag.model.wording import plural

#: Sortable columns (key, header), in the order ``s`` cycles through them.
SORTS = (
    ("time", "start"),
    ("duration", "duration"),
    ("category", "category"),
    ("rank", "rank"),
    ("track", "track"),
    ("event", "event / op"),
    ("layer", "layer"),
)
#: What ``g`` cycles through.
GROUPS = (None, "category", "rank")


@dataclass(frozen=True)
class PathQuery:
    """How the list is shown: sort, direction, search words, grouping, the groups opened."""

    sort: str = "time"
    descending: bool = False
    text: str = ""
    group: str | None = None
    opened: frozenset = field(default_factory=frozenset)

    def next_sort(self) -> PathQuery:
        keys = [k for k, _ in SORTS]
        key = keys[(keys.index(self.sort) + 1) % len(keys)]
        # durations read best longest first; the rest in their natural order
        return replace(self, sort=key, descending=key == "duration")

    def reversed(self) -> PathQuery:
        return replace(self, descending=not self.descending)

    def next_group(self) -> PathQuery:
        group = GROUPS[(GROUPS.index(self.group) + 1) % len(GROUPS)]
        return replace(self, group=group, opened=frozenset())

    def toggled(self, key) -> PathQuery:
        return replace(self, opened=self.opened ^ {key})

    def describe(self) -> str:
        arrow = "▼" if self.descending else "▲"
        words = [f"sort {self.sort} {arrow}"]
        words.append(f"grouped by {self.group}" if self.group else "not grouped")
        if self.text:
            words.append(f"search {self.text!r}")
        return " · ".join(words)


@dataclass
class Group:
    """One group's heading: its key, label, matching segments and their path time."""

    key: object
    label: str
    count: int
    total_ns: int


def _text(frame: pd.DataFrame, col: str) -> pd.Series:
    if col not in frame:
        return pd.Series("", index=frame.index)
    return frame[col].astype(object).where(frame[col].notna(), "").astype(str)


class PathTable:
    """The chronological segments' columns, and the order a :class:`PathQuery` shows them in."""

    def __init__(self, segments: pd.DataFrame, start, end, category, rank, length_ns: int):
        """``segments``: ``Analysis.segments`` in chronological order; the arrays beside are
        the timeline index's chronological columns."""
        seg = segments.reset_index(drop=True)
        self.start = np.asarray(start)
        self.duration = np.asarray(end) - self.start
        self.category = np.asarray(category).astype(str)
        self.rank = np.asarray(rank).astype(np.int64)
        self.track = _text(seg, "track_name").replace("", "-").to_numpy(dtype=str)
        what = (_text(seg, "name") + " " + _text(seg, "op")).str.strip()
        self.what = what.replace("", "-").to_numpy(dtype=str)
        self.layer = _text(seg, "layer").replace("", "-").to_numpy(dtype=str)
        self.length_ns = max(int(length_ns), 1)
        rank_text = pd.Series(self.rank).map(lambda r: f"rank {r} r{r}")  # one per rank value
        self._haystack = (
            pd.Series(self.category)
            + " "
            + rank_text
            + " "
            + pd.Series(self.track)
            + " "
            + pd.Series(self.what)
            + " "
            + pd.Series(self.layer)
        ).str.lower()

    def __len__(self) -> int:
        return len(self.start)

    def _column(self, key: str) -> np.ndarray:
        return {
            "time": self.start,
            "duration": self.duration,
            "category": self.category,
            "rank": self.rank,
            "track": self.track,
            "event": self.what,
            "layer": self.layer,
        }[key]

    def matching(self, text: str) -> np.ndarray:
        """Chronological indices of the segments whose columns hold every word of ``text``."""
        hit = np.ones(len(self), dtype=bool)
        for word in text.lower().split():
            hit &= self._haystack.str.contains(word, regex=False).to_numpy()
        return np.flatnonzero(hit)

    def ordered(self, q: PathQuery) -> np.ndarray:
        """The matching segments sorted by ``q`` (ties stay in time order)."""
        rows = self.matching(q.text)
        values = self._column(q.sort)[rows]
        order = np.argsort(values, kind="stable")
        if q.descending:  # reversed, with ties still in time order
            _, inverse = np.unique(values, return_inverse=True)
            order = np.lexsort((rows, -inverse))
        return rows[order]

    def entries(self, q: PathQuery) -> tuple[np.ndarray, list[Group]]:
        """What the list shows, top to bottom: a segment's chronological index, or ``-(g+1)``
        for the heading of ``groups[g]`` (groups by path time, largest first; a closed group
        shows its heading only)."""
        rows = self.ordered(q)
        if q.group is None:
            return rows, []
        keys = (self.category if q.group == "category" else self.rank)[rows]
        total = pd.Series(self.duration[rows]).groupby(keys).agg(["size", "sum"])
        total = total.sort_values("sum", ascending=False, kind="stable")
        groups, parts = [], []
        for g, (key, size, ns) in enumerate(
            zip(total.index, total["size"], total["sum"], strict=True)
        ):  # a loop over groups (categories or ranks), not segments
            key = key.item() if hasattr(key, "item") else key
            label = f"rank {key}" if q.group == "rank" and key >= 0 else str(key)
            if q.group == "rank" and key < 0:
                label = "no rank (gaps)"
            groups.append(Group(key, label, int(size), int(ns)))
            parts.append(np.array([-(g + 1)]))
            if key in q.opened:
                parts.append(rows[keys == key])
        return np.concatenate(parts) if parts else rows[:0], groups

    def heading(self, group: Group, opened: bool) -> str:
        """``▸ compute  212 segments  7.95 ms  84.3% of the path``."""
        share = 100.0 * group.total_ns / self.length_ns
        mark = "▾" if opened else "▸"
        return (
            f"{mark} {group.label}  {plural(group.count, 'segment')}  {fmt_ns(group.total_ns)}  "
            f"{share:.1f}% of the path"
        )
