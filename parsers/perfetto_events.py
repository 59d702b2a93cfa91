"""Decoded Perfetto track events -> slices, their fields and their edges, all vectorised.

- Times: every event is moved onto the trace clock with the first clock snapshot that names both
  clocks (:func:`trace_times`).
- Slices: ``SLICE_BEGIN``/``SLICE_END`` pairs per track as a stack (:func:`pair_stack`, shared
  with the Chrome reader); ``INSTANT`` events become zero-length slices; Chrome legacy complete
  events keep their duration. Unpaired begins or ends are counted, not kept.
- Fields from debug annotations (Neuron writes the instruction's fields there): ``hlo_name`` ->
  ``op``, ``layer``, ``nki_source_location`` -> ``source_location``, ``id`` -> ``src_id``,
  ``evt_wait_time[_ns]`` -> ``wait_ns``, ``hbm_read_bytes`` + ``hbm_write_bytes`` or
  ``transfer_size``/``transfer_bytes`` -> ``bytes``, ``raw_flops`` -> ``flops``; ``opcode`` names
  an unnamed slice. Annotations of a slice's END event count as the slice's too.
- Edges: flows (``flow_ids`` chain the events of one flow in time order; a
  ``terminating_flow_ids`` entry ends the chain) and Neuron ``inst_dep_ids`` (dependencies by
  instruction id).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracediag.model import schema as S
from tracediag.parsers.chrome_events import pair_stack
from tracediag.parsers.neuron_common import IdIndex
from tracediag.parsers.perfetto_annotations import index_of, last_numbers
from tracediag.parsers.perfetto_decode import (
    TYPE_COMPLETE,
    TYPE_INSTANT,
    TYPE_SLICE_BEGIN,
    TYPE_SLICE_END,
    VALUE_FLOAT,
    VALUE_INT,
    Decoded,
)

BOOTTIME = 6
_TEXT_FIELDS = {"hlo_name": S.OP, "layer": S.LAYER, "nki_source_location": S.SOURCE}
_NUMBER_FIELDS = {
    "id": S.SRC_ID,
    "evt_wait_time": S.WAIT,
    "evt_wait_time_ns": S.WAIT,
    "raw_flops": S.FLOPS,
    "transfer_size": S.BYTES,
    "transfer_bytes": S.BYTES,
}
_BYTE_PARTS = ("hbm_read_bytes", "hbm_write_bytes")
#: The annotation names the reader maps (lower-case); the decoder keeps only these.
WANTED = frozenset(
    {*_TEXT_FIELDS, *_NUMBER_FIELDS, *_BYTE_PARTS, "opcode", "inst_dep_ids"}
    | {"cpu_timestamp_ns", "nc_timestamp_ns"}  # Neuron system profiles' clock sync points
)


def trace_times(d: Decoded, counts: dict[str, int]) -> np.ndarray:
    """Event times on the trace clock (the snapshots' primary clock, else BOOTTIME).

    An event on another clock is shifted by the first snapshot holding both clocks; without one
    its time is kept as written (a trace on one clock needs no snapshot) and counted if the trace
    mixes clocks.
    """
    ts = d.events["ts"].to_numpy(dtype=np.int64).copy()
    clock = d.events["clock"].to_numpy()
    trace_clock = d.primary_clock or BOOTTIME
    clock = np.where(clock == 0, trace_clock, clock)
    others = [int(c) for c in np.unique(clock) if c != trace_clock]
    for c in others:
        snap = next((s for s in d.clocks if c in s and trace_clock in s), None)
        on_c = clock == c
        if snap is None:
            if len(others) > 1 or on_c.sum() < len(ts):
                counts[f"events on clock {c} without a clock snapshot: times not converted"] = int(
                    on_c.sum()
                )
            continue
        ts[on_c] += snap[trace_clock] - snap[c]
    return ts


def slices(d: Decoded, ts: np.ndarray, keep: np.ndarray, counts: dict[str, int]) -> pd.DataFrame:
    """One row per slice: ``begin`` and ``end`` (event rows; ``end`` -1 when none), ``ts``,
    ``dur``, ``track``, ``instant``. Events where ``keep`` is False are left out."""
    ev = d.events
    typ = ev["type"].to_numpy()
    track = ev["track"].to_numpy()
    paired = np.flatnonzero(keep & ((typ == TYPE_SLICE_BEGIN) | (typ == TYPE_SLICE_END)))
    key = pd.factorize(track[paired])[0]
    is_begin = typ[paired] == TYPE_SLICE_BEGIN
    b, e = pair_stack(key, is_begin, ts[paired])
    unpaired = {
        "slice begins without an end: skipped": int(is_begin.sum()) - len(b),
        "slice ends without a begin: skipped": int((~is_begin).sum()) - len(e),
    }
    for reason, n in unpaired.items():
        if n:
            counts[reason] = n
    begin, end = paired[b], paired[e]
    single = np.flatnonzero(keep & ((typ == TYPE_INSTANT) | (typ == TYPE_COMPLETE)))
    out = pd.DataFrame(
        {
            "begin": np.concatenate([begin, single]),
            "end": np.concatenate([end, np.full(len(single), -1)]),
            "ts": np.concatenate([ts[begin], ts[single]]),
            "dur": np.concatenate(
                [ts[end] - ts[begin], np.maximum(ev["dur"].to_numpy()[single], 0)]
            ),
            "track": np.concatenate([track[begin], track[single]]),
            "instant": np.concatenate([np.zeros(len(begin), bool), typ[single] == TYPE_INSTANT]),
        }
    )
    return out.sort_values(["ts", "begin"], kind="stable").reset_index(drop=True)


def slice_of_event(sl: pd.DataFrame, n_events: int) -> np.ndarray:
    """For every decoded event row, the slice row it belongs to (-1: none)."""
    out = np.full(n_events, -1, dtype=np.int64)
    rows = np.arange(len(sl), dtype=np.int64)
    out[sl["begin"].to_numpy()] = rows
    has_end = sl["end"].to_numpy() >= 0
    out[sl["end"].to_numpy()[has_end]] = rows[has_end]
    return out


def annotation_table(d: Decoded, owner: np.ndarray) -> pd.DataFrame:
    """The decoded annotations of kept slices: ``slice``, ``name``, ``kind``, ``value``."""
    a = d.annotations
    slice_row = owner[a["ev"].to_numpy()]
    kept = slice_row >= 0
    names = a["name"]
    # A string column is taken as it is: through objects it would be converted twice.
    name = (
        names.array.take(np.flatnonzero(kept))
        if isinstance(names.dtype, pd.StringDtype)
        else names.to_numpy(dtype=object)[kept]
    )
    return pd.DataFrame(
        {
            "slice": slice_row[kept],
            "name": name,
            "kind": a["kind"].to_numpy()[kept],
            "value": a["value"].to_numpy(dtype=object)[kept],
        }
    )


def _values(ann: pd.DataFrame, name: str) -> pd.Series:
    """The last value of annotation ``name`` per slice (indexed by slice row)."""
    return _last_values(ann, name)


def _last_values(ann: pd.DataFrame, name: str, kind: int | None = None) -> pd.Series:
    index = index_of(ann)
    rows = index.last(name, kind)
    return pd.Series(index.value[rows], index=index.key[rows])


def fields(ann: pd.DataFrame, n: int) -> dict[str, np.ndarray]:
    """Event columns from the annotations of ``n`` slices (NaN / None where absent)."""
    out: dict[str, np.ndarray] = {}
    for name, column in _TEXT_FIELDS.items():
        out[column] = _values(ann, name).reindex(np.arange(n)).to_numpy(dtype=object)
    for name, column in _NUMBER_FIELDS.items():
        values = last_numbers(ann, name, n)
        out[column] = np.fmax(out[column], values) if column in out else values
    parts = [last_numbers(ann, p, n) for p in _BYTE_PARTS]
    both_missing = np.isnan(parts[0]) & np.isnan(parts[1])
    hbm = np.where(both_missing, np.nan, np.nan_to_num(parts[0]) + np.nan_to_num(parts[1]))
    out[S.BYTES] = np.fmax(out[S.BYTES], hbm)
    src, exact = exact_ints(ann, "id", n)
    # A 64-bit id may be negative (neuron-formats.md): ``has_id`` says which slices have one.
    out["has_id"] = exact | ~np.isnan(out[S.SRC_ID])
    out[S.SRC_ID] = np.where(exact, src, np.nan_to_num(out[S.SRC_ID], nan=-1).astype(np.int64))
    out["opcode"] = _values(ann, "opcode").reindex(np.arange(n)).to_numpy(dtype=object)
    return out


def exact_ints(ann: pd.DataFrame, name: str, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Integer annotation ``name`` per slice as exact int64 (64-bit ids and epoch ns do not
    survive float64) and whether it is present."""
    values = _last_values(ann, name, VALUE_INT).reindex(np.arange(n))
    present = values.notna().to_numpy()
    out = np.zeros(n, dtype=np.int64)
    out[present] = values[present].to_numpy(dtype=np.int64)
    return out, present


def flow_edges(
    d: Decoded, ts: np.ndarray, owner: np.ndarray, counts: dict[str, int]
) -> pd.DataFrame:
    """Edges between consecutive slices of each flow (a terminating point ends its chain)."""
    f = d.flows
    empty = pd.DataFrame({S.SRC: np.zeros(0, np.int64), S.DST: np.zeros(0, np.int64)})
    if not len(f):
        return empty
    ev = f["ev"].to_numpy()
    row = owner[ev]
    lost = int((row < 0).sum())
    if lost:
        counts["flow points on events not kept: skipped"] = lost
    order = np.lexsort((ev, ts[ev], f["id"].to_numpy()))
    fid, row, term = f["id"].to_numpy()[order], row[order], f["terminating"].to_numpy()[order]
    # A terminating point closes its chain: the next point of the same id starts a new one.
    link = (fid[:-1] == fid[1:]) & ~term[:-1] & (row[:-1] >= 0) & (row[1:] >= 0)
    link &= row[:-1] != row[1:]
    return pd.DataFrame({S.SRC: row[:-1][link], S.DST: row[1:][link]})


def _int64_or_unknown(digits: np.ndarray) -> np.ndarray:
    """Decimal ids as the int64 with their 64 bits: a signed id as it is, an unsigned one above
    int64's range (``10463205956802632105``) as its two's complement, as the decoder reads a
    uint64 annotation (Neuron prints one id both ways: neuron-formats.md); -1 (no instruction
    has it) beyond 64 bits."""
    negative = np.char.startswith(digits, "-")
    body = np.where(negative, np.char.lstrip(digits, "-"), digits)
    width = np.char.str_len(body)
    fits_neg = negative & ((width < 19) | ((width == 19) & (body <= "9223372036854775808")))
    fits_pos = ~negative & ((width < 20) | ((width == 20) & (body <= "18446744073709551615")))
    out = np.full(len(digits), -1, dtype=np.int64)
    out[fits_neg] = digits[fits_neg].astype(np.int64)
    out[fits_pos] = digits[fits_pos].astype(np.uint64).view(np.int64)
    return out


def dependency_edges(
    ann: pd.DataFrame,
    src_id: np.ndarray,
    counts: dict[str, int],
    has_id: np.ndarray | None = None,
) -> pd.DataFrame:
    """Neuron ``inst_dep_ids`` (a list of ids, as an array or as text) -> edges dep -> slice.
    ``has_id``: the slices with an id (negative ids too); None: those with ``src_id >= 0``."""
    deps = ann.iloc[index_of(ann).positions("inst_dep_ids")]
    empty = pd.DataFrame({S.SRC: np.zeros(0, np.int64), S.DST: np.zeros(0, np.int64)})
    if not len(deps):
        return empty
    numeric = deps["kind"].to_numpy() == VALUE_INT
    text = deps[~numeric & (deps["kind"].to_numpy() != VALUE_FLOAT)]
    listed = pd.Series(text["value"].to_numpy(dtype=object), index=text["slice"].to_numpy())
    from_text = listed.astype(str).str.findall(r"-?\d+").explode().dropna()
    dst = np.concatenate([deps["slice"].to_numpy()[numeric], from_text.index.to_numpy()])
    ids = np.concatenate(
        [
            deps["value"].to_numpy(dtype=object)[numeric].astype(np.int64),
            _int64_or_unknown(from_text.to_numpy(dtype=str)),
        ]
    ).astype(np.int64)
    has_id = src_id >= 0 if has_id is None else has_id
    index = IdIndex(src_id, has_id, np.arange(len(src_id), dtype=np.int64))
    src = index.lookup(ids)
    missing = int((src < 0).sum())
    if missing:
        counts["inst_dep_ids: id matches no instruction"] = missing
    kept = src >= 0
    return pd.DataFrame({S.SRC: src[kept], S.DST: dst[kept].astype(np.int64)})
