"""Neuron Perfetto device-profile writer (``neuron-explorer view --output-format perfetto``).

One file per rank (``rank_<i>.pftrace``), laid out as neuron-formats.md section 3 describes the
tool's output: a process ``Instructions [1]``; thread tracks ``<Engine> Engine - Row <k>``
(``TensorMatrix Engine - Row 0``, ...) holding one slice per instruction, named by its opcode,
with the instruction's fields as debug annotations (``opcode``, ``subgroup``, ``hlo_name``,
``layer``, ``operands``, ``pc``, ``id``, ``inst_dep_ids``, ``evt_wait_time``, bytes, ``raw_flops``);
DMA tracks ``<queue> - Row <k>`` (``qSyncIO0 - Row 0``) holding one slice per transfer named by
its tensor variable (``id``, ``transfer_bytes``, ``queue_name``, ``semaphore_id``, and its trigger
instruction in ``inst_dep_ids``); semaphore tracks ``S[<n>] (<queue>)`` holding an instant per
update (``value``, ``update_source``, ``update_operation_type``). Several rows of one engine
hold overlapping slices.

Collectives are not shown in the documented screenshots; this writer puts each ``CcOp`` on a
``CC Stream <n> - Row <k>`` track, named by its operation, with the CcOp fields as annotations
(our convention; the Perfetto reader maps it). Times are the rank's device clock, as in the
Parquet and legacy JSON outputs of the same rank. Everything is encoded column by column
(:mod:`tracediag.io.protowire`): no message object per event.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from tracediag.generator.device_tables import RankTables
from tracediag.generator.write_neuron_json import SUBGROUP
from tracediag.io import protowire as W
from tracediag.parsers.protos.perfetto_trace_pb2 import Trace

SEQUENCE = 1
_PROCESS_UUID = 1
_MAX_ROWS = 64
#: DebugAnnotation value field numbers (debug_annotation.proto).
_INT, _DOUBLE, _STRING, _ARRAY = 4, 5, 6, 12


# ---- column encoders -----------------------------------------------------------------------
def text_column(values: np.ndarray) -> W.Column:
    """UTF-8 bytes of each row's string (encoded once per distinct value)."""
    codes, uniques = pd.factorize(pd.Series(values, dtype=object).fillna(""))
    encoded = [str(u).encode() for u in uniques]  # a loop over distinct strings
    lengths = np.array([len(e) for e in encoded] + [0], dtype=np.int64)
    flat = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    starts = np.cumsum(lengths) - lengths
    row_len = lengths[codes]
    total = int(row_len.sum())
    within = np.arange(total) - np.repeat(np.cumsum(row_len) - row_len, row_len)
    return flat[np.repeat(starts[codes], row_len) + within], row_len


def _named(name: str, value: W.Column) -> W.Column:
    """A DebugAnnotation ``{name: <name>, <value>}`` per row, as TrackEvent field 4."""
    n = len(value[1])
    name_bytes = name.encode()
    head = W.constant(W.tag(10, 2) + bytes([len(name_bytes)]) + name_bytes, n)
    return W.field_message(4, W.join([head, value]))


def int_annotation(name: str, values: np.ndarray) -> W.Column:
    """An ``int_value`` annotation on every row."""
    return _named(name, W.field_varint(_INT, np.asarray(values, dtype=np.int64)))


def double_annotation(name: str, values: np.ndarray) -> W.Column:
    """A ``double_value`` annotation on every row."""
    bits = np.asarray(values, dtype=np.float64).view(np.uint64)
    return _named(name, W.join([W.constant(W.tag(_DOUBLE, 1), len(bits)), W.fixed64(bits)]))


def text_annotation(name: str, values: np.ndarray) -> W.Column:
    """A ``string_value`` annotation on every row."""
    return _named(name, W.field_message(_STRING, text_column(values)))


def int_list_annotation(name: str, owner: np.ndarray, values: np.ndarray, n: int) -> W.Column:
    """An annotation per row whose ``array_values`` are the ints ``values`` owned by that row
    (``owner``: each value's row, in row order); a row owning none gets an empty annotation."""
    element = W.field_message(_ARRAY, W.field_varint(_INT, np.asarray(values, dtype=np.int64)))
    # Elements are laid out row after row: each row's value bytes are its elements' bytes.
    lengths = np.bincount(owner, weights=element[1], minlength=n).astype(np.int64)
    return _named(name, (element[0], lengths))


def _exploded(lists: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """(row, value) of every element of a Series of lists."""
    flat = lists.reset_index(drop=True).explode()
    known = flat.notna().to_numpy()
    return flat.index.to_numpy()[known], flat.to_numpy()[known].astype(np.int64)


def present(column: W.Column, keep: np.ndarray) -> W.Column:
    """``column`` on the rows where ``keep`` (a missing field is left out, not written as 0)."""
    return W.masked(column, np.asarray(keep, dtype=bool))


# ---- layout --------------------------------------------------------------------------------
def rows_of(track: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Each slice's row on its track: slices of one row never overlap (several rows hold the
    overlapping ones), found one row at a time, each pass vectorised."""
    row = np.zeros(len(track), dtype=np.int64)
    for k in range(_MAX_ROWS):  # a loop over rows (few)
        mine = np.flatnonzero(row == k)
        order = mine[np.lexsort((end[mine], start[mine], track[mine]))]
        tr = track[order]
        running = pd.Series(end[order]).groupby(tr).cummax().to_numpy()
        before = np.r_[np.iinfo(np.int64).min, running[:-1]]
        before[np.r_[True, tr[1:] != tr[:-1]]] = np.iinfo(np.int64).min
        moved = order[start[order] < before]
        if not len(moved):
            break
        row[moved] = k + 1
    return row


def _slices(tables: RankTables) -> tuple[pd.DataFrame, list[W.Column]]:
    """Every slice (track name base, start, end, name, instant) and its annotation columns, in
    the order instructions, DMA transfers, collectives, semaphore updates (an instant at the
    end of each DMA transfer on the queue's semaphore, the ``semaphore_id`` of its block)."""
    instr, dma, cc = tables.instructions, tables.dma_blocks, tables.cc_ops
    deps = _exploded(tables.instruction_deps.reindex(instr["id"].to_numpy()))
    frames = [
        pd.DataFrame({"base": instr["timeline_track"] + " Engine", "name": instr["opcode"],
                      "start": instr["start_ts"], "end": instr["end_ts"]}),
        pd.DataFrame({"base": dma["queue_name"], "name": dma["variable"],
                      "start": dma["start_ts"], "end": dma["end_ts"]}),
        pd.DataFrame({"base": "CC Stream " + cc["stream_id"].astype(str),
                      "name": cc["operation"], "start": cc["start_ts"], "end": cc["end_ts"]}),
        pd.DataFrame({"base": dma["semaphore_id"], "name": "sem_inc",
                      "start": dma["end_ts"], "end": dma["end_ts"]}),
    ]  # fmt: skip
    sizes = [len(f) for f in frames]
    which = np.repeat(np.arange(len(frames)), sizes)
    annotations = []
    for table_index, columns in enumerate(
        (
            _instruction_annotations(instr, deps),
            _dma_annotations(dma),
            _cc_annotations(cc, tables.flows),
            _semaphore_annotations(dma),
        )
    ):
        for column in columns:  # a loop over fields: each one padded to every slice
            full_len = np.zeros(len(which), dtype=np.int64)
            full_len[which == table_index] = column[1]
            annotations.append((column[0], full_len))
    return pd.concat(frames, ignore_index=True).assign(instant=which == 3), annotations


def _semaphore_annotations(dma: pd.DataFrame) -> list[W.Column]:
    """A semaphore's value counts the transfers completed on it (SemaphoreUpdate fields)."""
    order = np.argsort(dma["end_ts"].to_numpy(), kind="stable")
    value = np.empty(len(dma), dtype=np.int64)
    value[order] = (
        dma["semaphore_id"].iloc[order].groupby(dma["semaphore_id"].iloc[order]).cumcount() + 1
    )
    return [
        int_annotation("value", value),
        text_annotation("update_source", dma["queue_name"].to_numpy()),
        text_annotation("update_operation_type", np.full(len(dma), "sem_inc", dtype=object)),
    ]


def _instruction_annotations(instr: pd.DataFrame, deps: tuple) -> list[W.Column]:
    return [
        text_annotation("opcode", instr["opcode"].to_numpy()),
        text_annotation("subgroup", instr["engine"].map(SUBGROUP).to_numpy()),
        text_annotation("hlo_name", instr["hlo_name"].to_numpy()),
        text_annotation("layer", instr["layer"].to_numpy()),
        text_annotation("operands", instr["operands"].to_numpy()),
        int_annotation("pc", instr["pc"].to_numpy()),
        int_annotation("id", instr["id"].to_numpy()),
        int_list_annotation("inst_dep_ids", *deps, len(instr)),
        int_annotation("evt_wait_time", instr["evt_wait_time_ns"].to_numpy()),
        int_annotation("hbm_read_bytes", instr["hbm_read_bytes"].to_numpy()),
        int_annotation("hbm_write_bytes", instr["hbm_write_bytes"].to_numpy()),
        int_annotation("sbuf_read_bytes", instr["sbuf_read_bytes"].to_numpy()),
        int_annotation("sbuf_write_bytes", instr["sbuf_write_bytes"].to_numpy()),
        int_annotation("raw_flops", instr["raw_flops"].to_numpy()),
    ]


def _dma_annotations(dma: pd.DataFrame) -> list[W.Column]:
    return [
        int_annotation("id", dma["id"].to_numpy()),
        text_annotation("queue_name", dma["queue_name"].to_numpy()),
        int_annotation("transfer_bytes", dma["transfer_bytes"].to_numpy()),
        text_annotation("semaphore_id", dma["semaphore_id"].to_numpy()),
        int_list_annotation(
            "inst_dep_ids", np.arange(len(dma)), dma["trigger"].to_numpy(), len(dma)
        ),
    ]


def _cc_annotations(cc: pd.DataFrame, flows: pd.DataFrame) -> list[W.Column]:
    """The CcOp fields, and the instruction that triggered each op in ``inst_dep_ids``."""
    into_cc = flows[flows["out_table"] == "cc_op"]
    trigger = pd.Series(into_cc["in_id"].to_numpy(), index=into_cc["out_id"].to_numpy())
    trigger = trigger[~trigger.index.duplicated()].reindex(cc["op_id"].to_numpy())
    has = trigger.notna().to_numpy()
    deps = int_list_annotation(
        "inst_dep_ids", np.flatnonzero(has), trigger.to_numpy()[has].astype(np.int64), len(cc)
    )
    ints = ("op_id", "stream_id", "num_elements", "input_size", "output_size", "trigger_start_ts",
            "replica_group_id")  # fmt: skip
    texts = ("operation", "algorithm", "dtype", "trigger_engine", "replica_group")
    return (
        [int_annotation(f, cc[f].to_numpy()) for f in ints]
        + [text_annotation(f, cc[f].to_numpy()) for f in texts]
        + [double_annotation(f, cc[f].to_numpy()) for f in ("algorithm_bandwidth", "bus_bandwidth")]
        + [deps]
    )


def _header(names: pd.Index, tracks: pd.DataFrame) -> bytes:
    """Interned names, the process and one thread track per (track, row) (few objects)."""
    out = Trace()
    first = out.packet.add(trusted_packet_sequence_id=SEQUENCE, sequence_flags=1)
    for iid, name in enumerate(names, start=1):  # a loop over distinct names
        first.interned_data.event_names.add(iid=iid, name=str(name))
    td = out.packet.add(trusted_packet_sequence_id=SEQUENCE).track_descriptor
    td.uuid, td.process.pid, td.process.process_name = _PROCESS_UUID, 1, "Instructions [1]"
    for t in tracks.itertuples(index=False):  # a loop over tracks
        td = out.packet.add(trusted_packet_sequence_id=SEQUENCE).track_descriptor
        td.uuid, td.parent_uuid, td.name = int(t.uuid), _PROCESS_UUID, t.title
        td.thread.pid, td.thread.tid, td.thread.thread_name = 1, int(t.uuid), t.title
    return out.SerializeToString()


def track_event_packets(
    uuid: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    name_iid: np.ndarray,
    extra: list,
    instant: np.ndarray,
) -> bytes:
    """BEGIN/END packets of slices that never partly overlap on a track, sorted so that they
    pair back, and INSTANT packets where ``instant``; ``extra`` columns (annotations) go on
    the BEGIN and INSTANT events."""
    n = len(uuid)
    dur = end - start
    begin = np.r_[np.ones(n, bool), np.zeros(n, bool)]
    ts = np.r_[start, end]
    # At one instant: ends of slices with a length, then begins, then zero-length ends.
    phase = np.r_[np.ones(n), np.where(dur > 0, 0, 2)]
    order = np.lexsort((np.r_[-end, -start], phase, ts))
    begin, ts = begin[order], ts[order]
    row = np.r_[np.arange(n), np.arange(n)][order]
    kept = begin | ~instant[row]  # an instant has no END
    begin, ts, row = begin[kept], ts[kept], row[kept]
    kind = np.where(begin, np.where(instant[row], 3, 1), 2)  # INSTANT, SLICE_BEGIN, SLICE_END
    te = W.join(
        [
            W.field_varint(9, kind),
            W.field_varint(11, uuid[row]),
            W.masked(W.field_varint(10, name_iid[row]), begin),
            *[W.masked(_take(c, row), begin) for c in extra],
        ]
    )
    packet = W.join(
        [
            W.field_varint(8, ts),
            W.field_message(11, te),
            W.field_varint(10, np.full(len(ts), SEQUENCE)),
            W.field_varint(13, np.full(len(ts), 2)),  # SEQ_NEEDS_INCREMENTAL_STATE
        ]
    )
    return W.field_message(1, packet)[0].tobytes()


def _take(column: W.Column, rows: np.ndarray) -> W.Column:
    """Rows ``rows`` of a column, in that order."""
    flat, length = column
    start = np.cumsum(length) - length
    picked = length[rows]
    within = np.arange(int(picked.sum())) - np.repeat(np.cumsum(picked) - picked, picked)
    return flat[np.repeat(start[rows], picked) + within], picked


def rank_trace(tables: RankTables) -> bytes:
    """The whole Perfetto device trace of one rank."""
    sl, annotations = _slices(tables)
    start = sl["start"].to_numpy(dtype=np.int64)
    end = sl["end"].to_numpy(dtype=np.int64)
    base_codes, bases = pd.factorize(sl["base"])
    row = rows_of(base_codes, start, end)
    key = pd.factorize(pd.Series(base_codes) * _MAX_ROWS + row, sort=True)
    uuid = _PROCESS_UUID + 1 + key[0].astype(np.int64)
    tracks = pd.DataFrame({"uuid": _PROCESS_UUID + 1 + np.arange(len(key[1]))})
    # Semaphore tracks are named by the semaphore alone (``S[10] (qSyncIO0)``).
    tracks["title"] = [
        bases[k // _MAX_ROWS]
        if bases[k // _MAX_ROWS].startswith("S[") and k % _MAX_ROWS == 0
        else f"{bases[k // _MAX_ROWS]} - Row {k % _MAX_ROWS}"
        for k in key[1]
    ]  # a loop over tracks
    name_codes, names = pd.factorize(sl["name"].fillna("unknown"))
    header = _header(names, tracks)
    body = track_event_packets(
        uuid, start, end, name_codes.astype(np.int64) + 1, annotations, sl["instant"].to_numpy()
    )
    return header + body


def write_rank(tables: RankTables, path: Path) -> Path:
    """Write one rank's device trace to ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(rank_trace(tables))
    return path
