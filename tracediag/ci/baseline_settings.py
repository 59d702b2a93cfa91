"""Noise thresholds of ``check --baseline`` (``[tool.tracediag.baseline]``).

A gated metric regresses when it is worse than the baseline runs' median by more than both
``noise-sigmas`` robust standard deviations of those runs (1.4826 x their median absolute
deviation) and ``min-change-pct`` (percent of the baseline's median step time for time
metrics, percentage points for percentages). The floor keeps a baseline of one run, or of runs
that happen to agree exactly, from flagging every nanosecond.
"""

from __future__ import annotations

from dataclasses import dataclass

KEYS = {"min-change-pct": "min_change_pct", "noise-sigmas": "noise_sigmas"}


@dataclass(frozen=True)
class BaselineSettings:
    """``min_change_pct`` (default 1.0) and ``noise_sigmas`` (default 4.0)."""

    min_change_pct: float = 1.0
    noise_sigmas: float = 4.0

    @classmethod
    def from_table(cls, table: dict) -> BaselineSettings:
        """From the ``[baseline]`` table; raises ValueError for unknown keys or bad values."""
        unknown = set(table) - set(KEYS)
        if unknown:
            raise ValueError(f"unknown baseline keys {sorted(unknown)} (known: {sorted(KEYS)})")
        values = {}
        for key, attr in KEYS.items():
            if key in table:
                v = table[key]
                if isinstance(v, bool) or not isinstance(v, int | float) or v < 0:
                    raise ValueError(f"baseline {key} must be a number >= 0, not {v!r}")
                values[attr] = float(v)
        return cls(**values)
