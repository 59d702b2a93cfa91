"""One XPlane -> columns: events with exact ns times, their names and the stats we map.

Times: an event starts at ``line.timestamp_ns`` ns plus ``offset_ps`` ps and lasts
``duration_ps`` ps. Integer arithmetic keeps them exact (``timestamp_ns * 1000`` would overflow
int64 for epoch times): start = ``timestamp_ns + offset_ps // 1000`` and the duration is
``(offset_ps % 1000 + duration_ps) // 1000``, so both ends are floored to whole ns.

Stats are resolved through the plane's ``stat_metadata`` (their names; a ``ref_value`` is the id
of a stat metadata whose name is the value) and come from the event, else from its event
metadata (per-op stats such as ``flops`` live there). Events that only count occurrences
(``num_occurrences``, aggregated traces) are no timeline events: skipped and counted.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
from pandas.api.types import infer_dtype

_U64 = 1 << 64
_I64_MAX = (1 << 63) - 1
#: Stats we read, by name.
TEXT_STATS = ("hlo_op", "hlo_module", "tf_op", "name", "long_name", "source", "memcpy_details",
              "memset_details", "hlo_category")  # fmt: skip
NUMBER_STATS = ("correlation_id", "bytes_accessed", "raw_bytes_accessed", "flops", "model_flops",
                "group_id", "step_num", "program_id", "size", "bytes")  # fmt: skip
#: Ids read exactly (int64, -1 where absent): the launch's correlation id, and the context ids of
#: TSL's TraceMeProducer / TraceMeConsumer (``_p`` / ``_c``, their types ``_pt`` / ``_ct``): a
#: thread pool's ``ThreadpoolListener::Record`` (a task enqueued) and the worker's
#: ``ThreadpoolListener::StartRegion`` (that task started) carry the same id.
ID_STATS = ("correlation_id", "_p", "_pt", "_c", "_ct")
_SIZE_IN_DETAILS = re.compile(r"(?:^|\s)(?:size|num_bytes):(\d+)")


def _wrap(value: int) -> int:
    return value - _U64 if value > _I64_MAX else value


def _stat_value(stat, names: dict[int, str]):
    """A stat's value: number, text, or the name its ``ref_value`` points to."""
    which = stat.WhichOneof("value")
    if which == "ref_value":
        return names.get(stat.ref_value)
    if which == "uint64_value":
        return _wrap(stat.uint64_value)
    if which == "bytes_value":
        return None
    return getattr(stat, which) if which else None


def plane_table(plane, time_shift_ns: int, counts: dict[str, int]) -> tuple[pd.DataFrame, dict]:
    """Events of ``plane`` as columns: ``line`` (position in ``plane.lines``), ``meta``,
    ``name``, ``ts_ns``, ``dur_ns`` and one column per stat of :data:`TEXT_STATS` and
    :data:`NUMBER_STATS` named ``stat.<name>``. Also returns the plane's own stats
    ({name: value})."""
    names = {int(k): m.name for k, m in plane.stat_metadata.items()}
    wanted = {k for k, n in names.items() if n in TEXT_STATS or n in NUMBER_STATS or n in ID_STATS}
    line_of, meta, offset, duration = [], [], [], []
    st_ev, st_id, st_value = [], [], []
    aggregated = 0
    for li, line in enumerate(plane.lines):  # a loop over lines (tracks)
        for ev in line.events:  # protobuf has no columnar access: one pass per event
            if ev.num_occurrences:
                aggregated += 1
                continue
            index = len(meta)
            line_of.append(li)
            meta.append(ev.metadata_id)
            offset.append(ev.offset_ps)
            duration.append(ev.duration_ps)
            for stat in ev.stats:
                if stat.metadata_id in wanted:
                    st_ev.append(index)
                    st_id.append(stat.metadata_id)
                    st_value.append(_stat_value(stat, names))
    if aggregated:
        key = "events with num_occurrences only (aggregates): skipped"
        counts[key] = counts.get(key, 0) + aggregated
    line_of = np.array(line_of, dtype=np.int64)
    base = np.array([ln.timestamp_ns for ln in plane.lines] + [0], dtype=np.int64)
    off = np.array(offset, dtype=np.int64)
    meta = np.array(meta, dtype=np.int64)
    table = pd.DataFrame(
        {
            "line": line_of,
            "meta": meta,
            "name": _event_names(plane, meta),
            "ts_ns": base[line_of] + time_shift_ns + off // 1000,
            "dur_ns": (off % 1000 + np.array(duration, dtype=np.int64)) // 1000,
        }
    )
    stats = pd.DataFrame(
        {
            "ev": np.array(st_ev, dtype=np.int64),
            "stat": np.array([names[i] for i in st_id], dtype=object),
            "value": np.array(st_value + [None], dtype=object)[:-1],
        }
    )
    stats = pd.concat([stats, _metadata_stats(plane, meta, names, wanted)], ignore_index=True)
    stats["ev"] = stats["ev"].astype(np.int64)
    _stat_columns(table, stats)
    own = {names.get(s.metadata_id, str(s.metadata_id)): _stat_value(s, names) for s in plane.stats}
    return table, own


def _event_names(plane, meta: np.ndarray) -> np.ndarray:
    """Names by event metadata id (name, else display name), looked up per distinct id."""
    uniq, inverse = np.unique(meta, return_inverse=True)
    em = plane.event_metadata
    names = [
        (em[int(u)].name or em[int(u)].display_name or f"event {u}")
        if int(u) in em
        else f"event {u}"
        for u in uniq
    ]
    return np.array(names + [""], dtype=object)[inverse] if len(meta) else np.zeros(0, object)


def _metadata_stats(plane, meta: np.ndarray, names: dict, wanted: set) -> pd.DataFrame:
    """Stats of the events' metadata (per op), spread onto the events (event stats win)."""
    per_meta = [
        (int(k), names[s.metadata_id], _stat_value(s, names))
        for k, m in plane.event_metadata.items()
        for s in m.stats
        if s.metadata_id in wanted
    ]  # a loop over metadata entries, not events
    if not per_meta:
        return pd.DataFrame({"ev": [], "stat": [], "value": []})
    by_meta = pd.DataFrame(per_meta, columns=["meta", "stat", "value"])
    events = pd.DataFrame({"ev": np.arange(len(meta)), "meta": meta})
    spread = events.merge(by_meta, on="meta")[["ev", "stat", "value"]]
    return spread.assign(first=True)


def _stat_columns(table: pd.DataFrame, stats: pd.DataFrame) -> None:
    """One column per wanted stat: the event's own value, else its metadata's."""
    n = len(table)
    if "first" in stats:  # metadata rows come last: keep the event's own value first
        stats = stats.assign(first=stats["first"].fillna(False).astype(bool))
        stats = stats.sort_values("first", kind="stable")
    stats = stats.drop_duplicates(["ev", "stat"], keep="first")
    for stat in TEXT_STATS:
        sub = stats[stats["stat"] == stat]
        col = pd.Series(sub["value"].to_numpy(dtype=object), index=sub["ev"].to_numpy())
        col = col.reindex(np.arange(n))
        if infer_dtype(col, skipna=True) not in ("string", "empty"):
            # A text stat written as a number (damaged or unusual profiles): read as its text.
            col = col.where(col.isna(), col.astype(str))
        table[f"stat.{stat}"] = col.to_numpy(dtype=object)
    for stat in NUMBER_STATS:
        sub = stats[stats["stat"] == stat]
        col = pd.Series(sub["value"].to_numpy(dtype=object), index=sub["ev"].to_numpy())
        table[f"stat.{stat}"] = pd.to_numeric(col.reindex(np.arange(n)), errors="coerce").to_numpy(
            dtype=np.float64
        )
    for stat in ID_STATS:  # a loop over five stats
        exact = stats[stats["stat"] == stat]
        ids = np.full(n, -1, dtype=np.int64)
        values = exact["value"].to_numpy(dtype=object)
        ok = np.ones(len(values), dtype=bool)
        if infer_dtype(values, skipna=False) != "integer":  # text, doubles, inf: whole numbers
            ok = np.fromiter((_whole(v) for v in values), dtype=bool, count=len(values))
        ids[exact["ev"].to_numpy()[ok]] = values[ok].astype(np.int64)
        table[f"stat.{stat}"] = ids  # 64-bit ids stay exact (not through float)


def _whole(value) -> bool:
    """An int, or a float holding a whole number int64 can hold (stat values are ints)."""
    if isinstance(value, float):
        return value.is_integer() and abs(value) < 2.0**63
    return isinstance(value, int)


def detail_bytes(details: np.ndarray) -> np.ndarray:
    """``size:N`` of ``memcpy_details``/``memset_details`` texts (NaN where absent, and where
    ``size:0``: ROCm's profiler writes ``kind:Unknown size:0`` when it did not capture the
    copy, and a copy that takes time moves bytes)."""
    text = pd.Series(details, dtype=object)
    size = pd.to_numeric(
        text.str.extract(_SIZE_IN_DETAILS, expand=False), errors="coerce"
    ).to_numpy(dtype=np.float64)
    return np.where(size > 0, size, np.nan)
