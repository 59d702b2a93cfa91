"""Neuron tables (with Explorer Parquet field names) -> canonical event frames of one rank.

Both readers bring their tables to the Parquet field names (the legacy JSON reader renames its
keys) and share these mappings: ``Instruction`` -> compute events, ``CcOp`` -> collective events plus
collective rows, and the trigger-instruction edges of CcOps (``DmaPacket`` -> DMA events: see
:mod:`neuron_dma`).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracediag.model import numeric_formats as dtypes
from tracediag.model import schema as S
from tracediag.model.assembly import TRACK_DEVICE, TRACK_ENGINE, TRACK_KIND_COL, TRACK_LABEL
from tracediag.model.collective_ops import ONE_SIDED_OPS
from tracediag.model.replica_groups import GROUPS_INFERRED, INFERRED_MARK
from tracediag.model.untriggered_receives import UNTRIGGERED_CORES as UNTRIGGERED
from tracediag.model.untriggered_receives import untriggered_key
from tracediag.parsers.neuron_common import (
    column,
    constant,
    fill_missing,
    floats,
    ints,
    labels,
    normalise_engines,
    numbered,
    several,
)
from tracediag.parsers.neuron_kernel_fields import (
    elementwise_counts,
    source_lines,
    tensor_operand_fields,
)

_INNER_LIST = re.compile(r"\[([\d,\s]*)\]")

#: Collective rows keep the trigger time here until ``neuron_part.finish_part`` knows the
#: event times.
TRIGGER_TS = "_trigger_ts"


def times(df: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """Start and duration (nullable Int64): ``duration_ns``, else ``end_ts - start_ts``."""
    start = df["start_ts"].astype("Int64")
    dur, end = column(df, "duration_ns"), column(df, "end_ts")
    fallback = (
        end.astype("Int64") - start
        if end is not None
        else pd.Series(pd.NA, index=df.index, dtype="Int64")
    )
    dur = fallback if dur is None else dur.astype("Int64").fillna(fallback)
    return start, dur


def event_frame(df, kind, name, label, engine, track_kind, device, **optional) -> pd.DataFrame:
    """Canonical events of a table's rows (times from :func:`times`) on the tracks ``label``."""
    start, dur = times(df)
    n = len(df)
    out = pd.DataFrame(
        {S.KIND: constant(kind, n), S.NAME: name, S.TS: start.array, S.DUR: dur.array}
    )
    for col, values in optional.items():
        out[col] = values
    out[TRACK_LABEL] = label
    out[TRACK_KIND_COL] = constant(track_kind, n)
    out[TRACK_ENGINE] = engine
    out[TRACK_DEVICE] = constant(device, n)
    return out


def _sum_present(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a + b where either is known (a missing one counts 0); NaN where both are missing."""
    return np.where(np.isnan(a) & np.isnan(b), np.nan, np.nan_to_num(a) + np.nan_to_num(b))


def instruction_events(df: pd.DataFrame, device: str) -> pd.DataFrame:
    """``Instruction`` rows -> compute events on one track per engine (and pcore, when several)."""
    n = len(df)
    engine = normalise_engines(df["engine"])
    pcore, pvalid = ints(column(df, "pcore_idx"), n)
    label = engine
    if several(pcore[pvalid]):
        # One label per distinct (engine, pcore) pair, formatted once per pair.
        pair = engine.codes.astype(np.int64) << 32 | np.where(pvalid, pcore + 1, 0)
        codes, uniq = pd.factorize(pair)
        names = [
            f"{engine.categories[u >> 32]}/pcore{(u & 0xFFFFFFFF) - 1}"
            if u & 0xFFFFFFFF
            else engine.categories[u >> 32]
            for u in uniq
        ]
        label = pd.Categorical.from_codes(codes, pd.Index(names, dtype="str"))
    ids, valid = ints(column(df, "id"), n)
    bytes_ = _sum_present(
        floats(column(df, "hbm_read_bytes"), n), floats(column(df, "hbm_write_bytes"), n)
    )
    opcode = fill_missing(labels(column(df, "opcode"), n), "unknown")
    out = event_frame(
        df, "compute", opcode, label, engine, "compute_engine", device,
        **{
            S.BYTES: bytes_,
            S.FLOPS: floats(column(df, "raw_flops"), n),
            S.WAIT: floats(column(df, "evt_wait_time_ns"), n),
            S.LAYER: labels(column(df, "layer"), n),
            S.OP: labels(column(df, "hlo_name"), n),
            S.SOURCE: source_lines(df, n),
            S.SRC_ID: np.where(valid, ids, -1),
            S.DTYPE: instruction_dtypes(df),
            S.TRANSPOSE_FLOPS: floats(column(df, "flops_transpose"), n),
        },
    )  # fmt: skip
    for name, values in tensor_operand_fields(df, engine).items():
        if np.isfinite(values).any():  # only where a tensor instruction states its tile
            out[name] = values
    elements = elementwise_counts(df, engine)
    if np.isfinite(elements).any():
        out[S.ELEMENTS] = elements
    return semaphore_waits_as_stalls(out, opcode)


#: Opcodes whose row is an engine waiting on a semaphore, not work (the glossary's "semaphore
#: increment or wait"; ActiveTime excludes them from busy time).
SEMAPHORE_WAIT_OPCODES = ("EVENT_SEMAPHORE",)


def semaphore_waits_as_stalls(events: pd.DataFrame, opcode: pd.Categorical) -> pd.DataFrame:
    """Semaphore-wait rows become instants at their end with their length as the stall
    (``wait_ns``): the engine idles for whatever it waits on, so the wait is a gap that binds to
    the producer (and shrinks with it in a what-if), never work of a fixed length."""
    cats = np.asarray(opcode.categories, dtype=object)
    wait_code = np.flatnonzero(np.isin(cats, SEMAPHORE_WAIT_OPCODES))
    is_wait = np.isin(opcode.codes, wait_code)
    if not is_wait.any():
        return events
    start = events[S.TS].astype("Int64")
    dur = events[S.DUR].astype("Int64")
    own = events[S.WAIT].to_numpy(dtype=np.float64, copy=True)
    length = dur.to_numpy(dtype=np.float64, na_value=np.nan)
    own[is_wait] = np.nan_to_num(own[is_wait]) + length[is_wait]
    events[S.TS] = start.where(~is_wait, start + dur).array
    events[S.DUR] = dur.where(~is_wait, 0).array
    events[S.WAIT] = own
    return events


def instruction_dtypes(df: pd.DataFrame) -> pd.Categorical:
    """Per instruction: the dtype its ``operands`` or ``instruction_chain`` name, unless
    ``adjusted_flops`` against ``raw_flops`` shows the FP32 or FP8 rate (the rate is what the
    time depends on); the ratio alone where the text names none (see :mod:`tracediag.model.numeric_formats`)."""
    n = len(df)
    rate = dtypes.from_flops_ratio(
        floats(column(df, "raw_flops"), n), floats(column(df, "adjusted_flops"), n)
    )
    named = dtypes.from_operands(labels(column(df, "operands"), n))
    named = dtypes.fill(named, dtypes.from_operands(labels(column(df, "instruction_chain"), n)))
    return dtypes.rate_or_name(rate, named)


def cc_events(df: pd.DataFrame, device: str) -> pd.DataFrame:
    """``CcOp`` rows -> collective events, one track per CC stream; without a stream (legacy
    JSON ``cc_ops``), one per replica group: the transfers of one group are ordered, but a
    permute's send and receive (two groups, ``[[1, 2]]`` and ``[[3, 2]]``) overlap, and one
    track for all would make each wait for the other."""
    n = len(df)
    stream, svalid = ints(column(df, "stream_id"), n)
    op_id, valid = ints(column(df, "op_id"), n)
    group = labels(column(df, "replica_group"), n)
    by_group = group.rename_categories(["cc group " + str(g) for g in group.categories])
    fallback = fill_missing(by_group, "cc stream ?")
    cores = column(df, UNTRIGGERED)
    if cores is not None:  # untriggered CC-core work (CSV export): the cores it ran on
        fallback = fill_missing(labels(("cc cores " + cores).where(cores.notna()), n), fallback)
    track = fill_missing(numbered("cc stream ", stream, svalid), fallback)
    return event_frame(
        df, "collective", fill_missing(labels(column(df, "operation"), n), "unknown"),
        track, constant("cc", n),
        "cc_core", device,
        **{S.BYTES: _cc_bytes(df), S.SRC_ID: np.where(valid, op_id, -1)},
    )  # fmt: skip


def _cc_bytes(df: pd.DataFrame) -> np.ndarray:
    n = len(df)
    return np.fmax(floats(column(df, "input_size"), n), floats(column(df, "output_size"), n))


def _member_list(group: str, rank: int) -> str:
    """The sub-list of a replica-group string holding ``rank`` as "0,1,2,3"; else the whole string."""
    for body in _INNER_LIST.findall(group):
        members = sorted(int(x) for x in body.replace(",", " ").split())
        if rank in members:
            return ",".join(str(m) for m in members)
    return "".join(group.split())


def _members(groups: np.ndarray, rank: int) -> np.ndarray:
    codes, uniques = pd.factorize(groups)
    return np.array([_member_list(g, rank) for g in uniques] + [""], dtype=object)[codes]


def _texts(df: pd.DataFrame, name: str, missing: str) -> np.ndarray:
    """A text column of a small table (one row per collective) as objects."""
    return np.asarray(fill_missing(labels(column(df, name), len(df)), missing), dtype=object)


def _permute_sides(
    df: pd.DataFrame, groups: np.ndarray, rank: int, key: pd.Series, members: np.ndarray
) -> None:
    """A ``CollectivePermute`` whose group is one ``[[source, target]]`` pair holding the rank is
    one side of a transfer the other rank's profile shows on another stream under its own op id:
    both sides take the key ``permute|source,target|k`` (the k-th transfer of that pair, in start
    order, as each side sees them in the same order) and the group in source, target order
    (``collective_ops.ONE_SIDED_OPS``). In place."""
    codes, uniques = pd.factorize(groups)
    ordered = []  # per distinct group: "source,target" where it is one pair holding the rank
    for g in uniques:
        lists = [body.replace(",", " ").split() for body in _INNER_LIST.findall(g)]
        pair = lists[0] if len(lists) == 1 else []
        ordered.append(",".join(pair) if len(pair) == 2 and str(rank) in pair else "")
    pair_of = np.array([*ordered, ""], dtype=object)[codes]
    op = pd.Series(_texts(df, "operation", ""), dtype=object).str.lower()
    side = op.isin(ONE_SIDED_OPS).to_numpy() & (pair_of != "")
    if not side.any():
        return
    start, _ = times(df)
    t = pd.Series(start.to_numpy(dtype=np.float64, na_value=np.nan)[side])
    k = t.groupby(pair_of[side]).rank(method="first").to_numpy().astype(np.int64) - 1
    key[side] = "permute|" + pair_of[side] + "|" + k.astype(str).astype(object)
    members[side] = pair_of[side]


def _stream_keys(df: pd.DataFrame) -> pd.Series:
    """Per CcOp row, its stream as the ranks share it: ``x<execution>.<stream_index>`` where
    the row has ``stream_index`` (relative to the execution: the reference), else its
    ``stream_id`` (unique within one profile, equal across ranks only by convention), else "".
    The execution (``execution_index``, set by the reader) is empty when not known."""
    n = len(df)
    stream, svalid = ints(column(df, "stream_id"), n)
    index, ivalid = ints(column(df, "stream_index"), n)
    execution, evalid = ints(column(df, "execution_index"), n)
    exe = np.where(evalid, execution.astype(str), "").astype(object)
    by_index = "x" + exe + "." + index.astype(str).astype(object)
    by_id = np.where(svalid, stream.astype(str), "").astype(object)
    return pd.Series(np.where(ivalid, by_index, by_id), dtype=object)


def cc_collectives(df: pd.DataFrame, first_row: int, rank: int, meta: S.RankMeta) -> pd.DataFrame:
    """One collective row per ``CcOp`` row; times are filled in by ``neuron_part.finish_part``."""
    n = len(df)
    groups = _texts(df, "replica_group", "")
    stream_text = _stream_keys(df)
    op_id, ovalid = ints(column(df, "op_id"), n)
    if not ovalid.all():
        # Without an op id, the instance is its ordinal on its stream (in start order).
        start, _ = times(df)
        order = pd.DataFrame(
            {"s": stream_text.to_numpy(), "t": start.to_numpy(dtype=np.float64, na_value=np.nan)}
        )
        ordinal = (
            order.sort_values("t", kind="stable").groupby("s").cumcount().sort_index().to_numpy()
        )
        op_id = np.where(ovalid, op_id, ordinal)
        meta.info["collective_seq_from_ordinal"] = int((~ovalid).sum())
    flat = pd.Series(groups, dtype=object).str.replace(r"\s+", "", regex=True)
    inferred = column(df, GROUPS_INFERRED)
    if inferred is not None:  # groups taken from the stream: marked, so others' can win
        flat = flat.where(~inferred.fillna(False).to_numpy(dtype=bool), INFERRED_MARK + flat)
    group_id, gvalid = ints(column(df, "group_id"), n)  # a trigger's group (no member list)
    if gvalid.any():
        flat = flat + np.where(gvalid, "#" + group_id.astype(str).astype(object), "")
    key = flat + "|" + stream_text + "|" + pd.Series(op_id.astype(str), dtype=object)
    members = _members(groups, rank)
    cores = column(df, UNTRIGGERED)
    if cores is not None:  # rank-local until assembly binds it to the transfer it received
        mine = cores.notna().to_numpy()
        key[mine] = untriggered_key(rank, cores[mine].astype(str).to_numpy(), op_id[mine])
    _permute_sides(df, groups, rank, key, members)
    trigger = column(df, "trigger_start_ts")
    return pd.DataFrame(
        {
            S.EVENT: first_row + np.arange(n, dtype=np.int64),
            S.MATCH_KEY: key.to_numpy(dtype=object),
            S.COLL_OP: _texts(df, "operation", "unknown"),
            S.GROUP: members,
            S.SEQ: op_id,
            S.BYTES: _cc_bytes(df),
            S.ALGORITHM: _texts(df, "algorithm", ""),
            S.ALGBW: floats(column(df, "algorithm_bandwidth"), n),
            S.BUSBW: floats(column(df, "bus_bandwidth"), n),
            S.DTYPE: _texts(df, "dtype", ""),
            TRIGGER_TS: trigger.astype("Int64").array
            if trigger is not None
            else pd.array([pd.NA] * n, dtype="Int64"),
        }
    )


def trigger_edges(
    instr: pd.DataFrame | None,
    instr_first: int,
    cc: pd.DataFrame,
    cc_first: int,
    has_edge_in: np.ndarray,
    meta: S.RankMeta,
) -> pd.DataFrame:
    """Edges instruction -> CcOp for ops no Flow edge reaches: the instruction on the op's
    ``trigger_engine`` starting at its ``trigger_start_ts`` (the PSEUDO_TRIGGER_COLLECTIVE)."""
    n = len(cc)
    ts, valid = ints(column(cc, "trigger_start_ts"), n)
    engine = labels(column(cc, "trigger_engine"), n)
    need = valid & ~has_edge_in & ~engine.isna()
    wanted = pd.DataFrame(
        {
            "e": np.asarray(normalise_engines(engine), dtype=object),
            "t": ts,
            "dst": cc_first + np.arange(n),
        }
    )[need]
    hits = wanted.iloc[:0].assign(src=np.zeros(0, dtype=np.int64))
    if instr is not None and len(wanted):
        start, svalid = ints(instr["start_ts"], len(instr))
        near = np.flatnonzero(svalid & np.isin(start, wanted["t"].to_numpy()))  # few rows
        candidates = pd.DataFrame(
            {
                "e": np.asarray(normalise_engines(instr["engine"].iloc[near]), dtype=object),
                "t": start[near],
                "src": instr_first + near,
            }
        ).drop_duplicates(["e", "t"])
        hits = wanted.merge(candidates, on=["e", "t"], how="inner")
    meta.info["collective_trigger_unmatched"] = int(len(wanted) - len(hits))
    return pd.DataFrame(
        {
            S.SRC: hits["src"].to_numpy(dtype=np.int64),
            S.DST: hits["dst"].to_numpy(dtype=np.int64),
            S.EDGE_KIND: "dependency",
        }
    )
