"""Findings: what a rule reports, frozen and serialisable, with its impact and what-if saving."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import IntEnum


class Severity(IntEnum):
    """Severities in gate order: ``--fail-on warning`` fails on warning and error."""

    INFO = 0
    WARNING = 1
    ERROR = 2

    @classmethod
    def parse(cls, text: str) -> Severity:
        """``"warning"`` -> ``Severity.WARNING``; raises ValueError naming the choices."""
        try:
            return cls[text.strip().upper()]
        except KeyError:
            raise ValueError(f"unknown severity {text!r} (choose error, warning or info)") from None

    def __str__(self) -> str:
        return self.name.lower()


#: Code prefix -> family name used in reports.
FAMILIES = {
    "DMA": "dma",
    "COL": "collective",
    "CMP": "compute",
    "HST": "host",
    "TRC": "trace",
    "NUM": "precision",
    "PIP": "pipeline",
}


def family_of(code: str) -> str:
    """The family of a rule code, from its letter prefix."""
    prefix = code.rstrip("0123456789")
    if prefix not in FAMILIES:
        raise ValueError(f"rule code {code!r} has no known family prefix {sorted(FAMILIES)}")
    return FAMILIES[prefix]


@dataclass(frozen=True)
class Finding:
    """One diagnosed problem.

    ``impact_ns`` is the time this cause occupies on the critical path (COL201: the other
    ranks' wait for the late rank, from arrivals, wherever the path runs); ``saving_ns`` what the
    step would gain if it were fixed, from replaying the graph with the cause restored to what
    its peers achieve, never more than ``impact_ns`` (where a rule's own measure of the cause is
    below the saving, the impact is what its change takes off the path). Times are aligned ns.
    ``evidence`` holds numbers and event ids.
    """

    code: str
    severity: Severity
    title: str
    message: str
    ranks: tuple[int, ...] = ()
    engine: str = ""
    track: str = ""
    layer: str = ""
    op: str = ""
    start_ns: int = 0
    end_ns: int = 0
    impact_ns: int = 0
    impact_pct: float = 0.0
    saving_ns: int = 0
    suggestion: str = ""
    evidence: dict = field(default_factory=dict)

    @property
    def family(self) -> str:
        """dma, collective, compute, host or trace."""
        return family_of(self.code)

    def sort_key(self) -> tuple:
        """Largest saving first, then impact, severity and code (deterministic)."""
        return (
            -self.saving_ns,
            -self.impact_ns,
            -int(self.severity),
            self.code,
            self.ranks,
            self.start_ns,
        )

    def to_dict(self) -> dict:
        """The finding as the JSON report writes it."""
        d = asdict(self)
        d["severity"] = str(self.severity)
        d["family"] = self.family
        d["ranks"] = list(self.ranks)
        return {
            k: d[k]
            for k in (
                "code",
                "family",
                "severity",
                "title",
                "message",
                "ranks",
                "engine",
                "track",
                "layer",
                "op",
                "start_ns",
                "end_ns",
                "impact_ns",
                "impact_pct",
                "saving_ns",
                "suggestion",
                "evidence",
            )
        }
