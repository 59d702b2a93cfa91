"""Reading a rank's vendor summary metrics (Neuron ``Summary``), flat or per subgraph.

Device profiles give one flat ``{field: value}``; summary-json gives ``{subgraph: {field:
value}}``, whose counters add up over the subgraphs.
"""

from __future__ import annotations

from tracediag.model import schema as S


def summary_total(meta: S.RankMeta, field: str) -> float | None:
    """``field`` of the rank's summary (summed over subgraphs); None when no summary has it."""
    summary = meta.summary or {}
    if field in summary and not isinstance(summary[field], dict):
        return float(summary[field])
    values = [float(v[field]) for v in summary.values() if isinstance(v, dict) and field in v]
    return sum(values) if values else None
