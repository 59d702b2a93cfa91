"""Budgets: limits on report metrics that fail the CI gate (``[tool.tracediag.budgets]``).

A key is ``max-METRIC`` or ``min-METRIC`` with a number, METRIC from
:data:`tracediag.ci.metrics.CATALOG`; a ``*-ns`` metric may be written in ``us``, ``ms`` or ``s``::

    [tool.tracediag.budgets]
    max-step-time-ms = 7.0        # the typical (median) step may not exceed 7 ms
    max-dma-wait-pct = 5          # at most 5% of the critical path waiting on DMA
    max-collective-skew-pct = 2   # at most 2% waiting for late ranks at collectives
    min-mfu-pct = 40              # every rank at 40% MFU or better

A budget the report cannot check (``min-mfu-pct`` on a trace without FLOPs) fails: a gate that
passes silently when it cannot see is worse than one that says so.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from tracediag.ci.metrics import CATALOG, Metric, format_value, resolve_metric


@dataclass(frozen=True)
class Budget:
    """One limit: ``key`` as written, the metric, ``bound`` (``max`` or ``min``) and the limit
    in the metric's own unit."""

    key: str
    metric: Metric
    bound: str
    limit: float
    written: float  # the limit as the user wrote it, in the key's unit

    def check(self, metrics: dict[str, float]) -> dict:
        """The result: ``{budget, metric, bound, limit, value, passed, message}``."""
        value = metrics.get(self.metric.name)
        result = {
            "budget": self.key,
            "metric": self.metric.name,
            "bound": self.bound,
            "limit": self.limit,
            "value": value,
        }
        limit_txt = format_value(self.metric, self.limit)
        if value is None:
            result.update(
                passed=False,
                message=f"budget {self.key} = {self.written:g} cannot be checked: the report "
                f"has no {self.metric.description}",
            )
            return result
        passed = value <= self.limit if self.bound == "max" else value >= self.limit
        word = "within" if passed else ("exceeds" if self.bound == "max" else "is below")
        result.update(
            passed=passed,
            message=f"{self.metric.description} is {format_value(self.metric, value)}: "
            f"{word} budget {self.key} = {self.written:g} ({self.bound} {limit_txt})",
        )
        return result


def parse_budgets(table: dict) -> list[Budget]:
    """The budgets of a ``[budgets]`` table; raises ValueError naming a bad key or value."""
    out = []
    for key, value in table.items():
        bound, _, name = key.partition("-")
        if bound not in ("max", "min") or not name:
            raise ValueError(f"budget {key!r} must start with max- or min-")
        try:
            metric, factor = resolve_metric(name)
        except KeyError:
            close = difflib.get_close_matches(name, list(CATALOG), n=1, cutoff=0.5)
            hint = f" (did you mean {bound}-{close[0]}?)" if close else ""
            raise ValueError(f"budget {key!r}: no metric {name!r}{hint}") from None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"budget {key!r} must be a number, not {value!r}")
        out.append(Budget(key, metric, bound, float(value) * factor, float(value)))
    return out


def check_budgets(metrics: dict[str, float], budgets: list[Budget]) -> list[dict]:
    """One result per budget, in the order written."""
    return [b.check(metrics) for b in budgets]
