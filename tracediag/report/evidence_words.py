"""A finding's evidence in words a reader understands, for the TUI's detail pane and the message
text of the CI formats (JUnit, SARIF, GitHub): labels instead of field names (``mean lateness``,
not ``mean_late_ns``), instants relative to the start of the critical path, sizes, rates and
shares in their units, and without tracediag's own row numbers (event ids, collective keys),
which a reader cannot look up: the JSON report (and SARIF's properties) keep those for tools.
"""

from __future__ import annotations

import math

from tracediag.model.units import fmt_bw, fmt_bytes, fmt_ns

#: Evidence keys whose values number rows of tracediag's own tables (event ids, collective
#: keys): kept in JSON for tools, left out of what a person reads.
ID_KEYS = frozenset({"events", "event_ids", "coll_keys", "coll_key", "event", "src_id"})
#: Keys whose value is an instant on the trace's time base (not a duration).
INSTANT_KEYS = frozenset({"arrival_ns", "start_ns", "end_ns"})

#: The words of the evidence keys the rules write (the rest: underscores become spaces).
LABELS = {
    "achieved_bw": "achieved bandwidth",
    "algbw": "algorithm bandwidth",
    "arrival_ns": "arrived at",
    "average_bytes": "average size",
    "bubble_cost_ns": "bubble cost",
    "bubble_pct": "bubble",
    "busbw": "bus bandwidth",
    "busy_ns_by_engine": "busy time by engine",
    "by_dtype": "by number format",
    "by_rank": "by rank",
    "bytes_per_rank": "bytes per rank",
    "clock_offset_ns": "clock offset",
    "cooldown_ns": "cool-down",
    "dma_transfer_ns": "DMA transfer time",
    "dma_wait_ns": "DMA wait time",
    "dropped_edges": "dependencies dropped",
    "dtypes": "number formats",
    "dur_ns": "duration",
    "edges": "dependencies",
    "events_per_rank": "events per rank",
    "excess_over_peers_by_engine_ns": "work beyond the median rank's, by engine",
    "host_ns": "host time",
    "idle_by_cause_ns": "idle time by cause",
    "ideal_bubble_pct": "ideal bubble",
    "imbalance_pct": "imbalance",
    "instances": "collectives",
    "last_share": "share of collectives it arrives last at",
    "late_instances": "collectives it arrives late at",
    "late_ns": "late by",
    "link_bw": "link bandwidth",
    "listed_group_size": "group size listed by the trace",
    "max_late_ns": "largest lateness",
    "max_stall_ns": "longest stall",
    "mean_late_ns": "mean lateness",
    "median_stage_busy_ns": "median stage busy time",
    "mfu_pct": "MFU",
    "model_dtype": "model number format",
    "model_flops": "model FLOPs",
    "op": "operation",
    "order_only": "ordered only",
    "path_on_rank_ns": "critical path on the rank",
    "peak_bw": "peak bandwidth",
    "peak_flops": "peak FLOP/s",
    "peak_saving_ns": "saving at the peak bandwidth",
    "recv_wait_ns": "receive wait",
    "reload_dmas": "reload DMAs",
    "residual_ns": "unexplained time",
    "saving_together_ns": "saving of the findings together",
    "stage_bubble_pct": "stage bubble",
    "stage_busy_ns": "stage busy time",
    "time_ns_slow": "time on the slow path",
    "total_late_ns": "total lateness",
    "track_name": "track",
    "typical_bw": "typical bandwidth",
    "typical_ns": "typical",
    "unmatched_instances": "unmatched collectives",
    "warmup_ns": "warm-up",
    "world_size": "world size",
}
_SUFFIXES = ("_ns", "_pct", "_bw")


def label(key: str) -> str:
    """The words for evidence key ``key`` (``"mean_late_ns"`` -> ``"mean lateness"``)."""
    if key in LABELS:
        return LABELS[key]
    for suffix in _SUFFIXES:
        if key.endswith(suffix):
            key = key[: -len(suffix)]
    return key.replace("_", " ")


def _si(value: float, unit: str) -> str:
    """``4.639e11`` -> ``"463.9 G<unit>"``."""
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.4g} {prefix}{unit}"
    return f"{value:.4g} {unit}".rstrip()


def value_text(key: str, value, base_ns: int = 0) -> str:
    """``value`` of evidence key ``key`` in its unit; instants from ``base_ns`` (the start of
    the critical path)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "unknown"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ", ".join(map(str, value)) or "-"
    if not isinstance(value, int | float):
        return str(value)
    if key in INSTANT_KEYS:
        return f"{fmt_ns(value - base_ns)} into the critical path"
    if key.endswith("_ns"):
        return fmt_ns(value)
    if key.endswith("_pct"):
        return f"{value:.2f}%"
    if key.endswith("_share") or key == "ratio":
        return f"{100.0 * value:.1f}%" if key.endswith("_share") else f"{value:.3g}"
    if key.endswith("bw"):
        return fmt_bw(value)
    if "bytes" in key:
        return fmt_bytes(value)
    if key == "peak_flops":
        return _si(value, "FLOP/s")
    if key.endswith("flops"):
        return _si(value, "FLOPs")
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _unit_key(key: str) -> str | None:
    """A key naming the unit of a dict's values (``idle_by_cause_ns``, ``busy_ns_by_engine``):
    a key with that unit's suffix, or None when the key names none."""
    for suffix in ("_ns", "_pct"):
        if key.endswith(suffix) or f"{suffix}_" in key:
            return f"value{suffix}"
    return "bytes" if "bytes" in key else None


def evidence_rows(
    evidence: dict, base_ns: int = 0, prefix: str = "", unit: str | None = None
) -> list[tuple[str, str]]:
    """Evidence as (words, value) rows: nesting flattened (``worst 1, late by``), machine ids
    left out (see :data:`ID_KEYS`; a top-level ``events`` number is a count and stays).
    ``unit``: the unit key of a parent dict whose keys are names (engines, categories)."""
    rows: list[tuple[str, str]] = []
    for key, value in evidence.items():
        key = str(key)
        if key in ID_KEYS and not (key == "events" and not prefix and isinstance(value, int)):
            continue
        name = f"{prefix}{label(key)}"
        if isinstance(value, dict):
            rows += evidence_rows(value, base_ns, f"{name}, ", _unit_key(key))
        elif isinstance(value, list) and value and isinstance(value[0], dict):
            for i, item in enumerate(value):
                rows += evidence_rows(item, base_ns, f"{name} {i + 1}, ")
        else:
            rows.append((name, value_text(unit or key, value, base_ns)))
    return rows


def evidence_text(evidence: dict, base_ns: int = 0) -> list[str]:
    """``"mean lateness: 1.084 ms"`` lines of :func:`evidence_rows`."""
    return [f"{name}: {value}" for name, value in evidence_rows(evidence, base_ns)]
