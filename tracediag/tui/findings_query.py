"""Which findings the findings table shows, and in what order: filters, search and sort.

Pure functions over the Diagnosis's findings (no Textual), tested on their own.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tracediag.model.findings import FAMILIES, Finding, Severity
from tracediag.model.wording import rank_list

#: Table columns: (key, header). Sorting is by the key's value, see :func:`sort_value`.
COLUMNS = (
    ("code", "code"),
    ("severity", "severity"),
    ("ranks", "rank"),
    ("engine", "engine"),
    ("layer", "layer"),
    ("impact", "impact"),
    ("saving", "saving"),
)
COLUMN_KEYS = tuple(k for k, _ in COLUMNS)
FAMILY_CHOICES = (None, *FAMILIES.values())
SEVERITY_CHOICES = (None, Severity.WARNING, Severity.ERROR)


def sort_value(finding: Finding, column: str):
    """The value a column sorts by (numbers for impact, saving and severity)."""
    return {
        "code": finding.code,
        "severity": int(finding.severity),
        "ranks": finding.ranks,
        "engine": finding.engine,
        "layer": finding.layer,
        "impact": finding.impact_ns,
        "saving": finding.saving_ns,
    }[column]


def _haystack(f: Finding) -> str:
    parts = (f.code, f.family, str(f.severity), f.title, f.message, f.engine, f.track)
    parts += (f.layer, f.op, f.suggestion, f"rank {rank_list(list(f.ranks))}")
    return " ".join(parts).lower()


@dataclass(frozen=True)
class FindingsQuery:
    """Filters (``None`` = any), a search text (every word must occur) and the sort column."""

    family: str | None = None
    min_severity: Severity | None = None
    rank: int | None = None
    text: str = ""
    sort: str = "saving"
    descending: bool = True

    def matches(self, f: Finding) -> bool:
        """Whether ``f`` passes the filters and the search."""
        if self.family is not None and f.family != self.family:
            return False
        if self.min_severity is not None and f.severity < self.min_severity:
            return False
        if self.rank is not None and self.rank not in f.ranks:
            return False
        hay = _haystack(f)
        return all(word in hay for word in self.text.lower().split())

    def apply(self, findings: list[Finding]) -> list[Finding]:
        """The findings to show, sorted (ties keep the Diagnosis's order: by saving)."""
        kept = [f for f in findings if self.matches(f)]
        return sorted(kept, key=lambda f: sort_value(f, self.sort), reverse=self.descending)

    def sorted_by(self, column: str) -> FindingsQuery:
        """Sort by ``column``; choosing the current column again flips the direction."""
        if column == self.sort:
            return replace(self, descending=not self.descending)
        numeric = column in ("severity", "impact", "saving")
        return replace(self, sort=column, descending=numeric)

    def next_sort(self) -> FindingsQuery:
        """Sort by the next column (wraps around)."""
        i = COLUMN_KEYS.index(self.sort)
        return self.sorted_by(COLUMN_KEYS[(i + 1) % len(COLUMN_KEYS)])

    def describe(self) -> str:
        """``"family any · severity ≥ any · rank any · sort saving ↓"``."""
        sev = "any" if self.min_severity is None else f"≥ {self.min_severity}"
        return (
            f"family {self.family or 'any'} · severity {sev} · "
            f"rank {'any' if self.rank is None else self.rank} · "
            f"sort {self.sort} {'↓' if self.descending else '↑'}"
        )


def cycle(choices: tuple, current):
    """The choice after ``current`` in ``choices`` (wrapping; ``None`` is 'any')."""
    i = choices.index(current) if current in choices else -1
    return choices[(i + 1) % len(choices)]
