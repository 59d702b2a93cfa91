"""One row per NCCL/RCCL collective kernel of a Kineto trace, with a key that matches it across ranks.

Collective metadata (``Collective name``, message sizes, ``dtype``, ``Process Group Name``/``Ranks``,
``Seq``) comes from the kernel's args, else from the CPU op with the same ``External id`` that
carries it (``record_param_comms``). A generic kernel (NCCL's ``ncclKernel_SendRecv_*`` runs most
collectives since 2.12) takes its operation from the CPU-side collective range enclosing its launch
(``nccl:all_to_all``). The match key is ``"{process group}|{Seq}"`` when Kineto
gives ``Seq``; otherwise ``"{group}|{op}|{ordinal}"`` with the ordinal of the kernel among this
rank's kernels of that (group, op) in time order, which assumes every rank of the group runs the
same sequence of collectives.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracediag.model import schema as S
from tracediag.parsers.chrome_columns import COLLECTIVE_ARGS
from tracediag.parsers.chrome_nesting import SliceNesting
from tracediag.parsers.kineto import KIND, Rows

#: Normalised operation names, tried in order on the lower-cased letters of a name.
_OPS = (
    ("allreduce", "AllReduce"),
    ("reducescatter", "ReduceScatter"),
    ("allgather", "AllGather"),
    ("alltoall", "AllToAll"),
    ("sendrecv", "SendRecv"),
    ("broadcast", "Broadcast"),
    ("barrier", "Barrier"),
    ("reduce", "Reduce"),
    ("send", "Send"),
    ("recv", "Recv"),
)
#: The normalised operation names.
OP_NAMES = tuple(norm for _, norm in _OPS)
_KERNEL_OP = re.compile(r"kernel_([A-Za-z]+)", re.IGNORECASE)
_ALGORITHM = re.compile(
    r"_(RING|TREE|COLLNET_DIRECT|COLLNET_CHAIN|COLLNET|NVLS_TREE|NVLS|PAT)(?=_|\(|$)"
)
_NAME_DTYPE = re.compile(
    r"_(bf16|f16|f32|f64|u?int\d+_t|[iu]\d+|half|float|double|fp8_e4m3|fp8_e5m2)(?=[_(]|$)"
)
_DTYPE_BYTES = {
    **dict.fromkeys(
        ("float", "float32", "f32", "int", "int32", "i32", "uint32", "u32", "int32t", "uint32t"), 4
    ),
    **dict.fromkeys(
        ("double", "float64", "f64", "long", "int64", "i64", "uint64", "u64", "int64t", "uint64t"),
        8,
    ),
    **dict.fromkeys(
        ("half", "float16", "f16", "bfloat16", "bf16", "short", "int16", "i16", "uint16", "u16"), 2
    ),
    **dict.fromkeys(("byte", "char", "bool", "int8", "uint8", "i8", "u8", "int8t", "uint8t"), 1),
    **dict.fromkeys(
        ("float8e4m3fn", "float8e5m2", "fp8e4m3", "fp8e5m2", "float8e4m3fnuz", "float8e5m2fnuz"), 1
    ),
    **dict.fromkeys(("complexfloat", "complex64"), 8),
    **dict.fromkeys(("complexdouble", "complex128"), 16),
}


def collective_rows(
    rows: Rows, kind: np.ndarray, launcher: np.ndarray | None = None
) -> pd.DataFrame:
    """The collectives table of one rank (canonical columns less ``coll_key`` and ``rank``).

    ``launcher`` (per row, the runtime call that launched it, -1; :func:`kineto.launch_edges`)
    lets a generic kernel take its operation from the CPU-side collective that launched it."""
    coll = np.flatnonzero(kind == KIND["collective"])
    coll = coll[np.argsort(rows.ts[coll], kind="stable")]
    fields = _metadata(rows, coll)
    names = rows.name_of(coll).astype(str)
    op = _map_unique(fields["Collective name"], _op_from_text)
    from_kernel = _map_unique(names, _op_from_kernel)
    # NCCL >= 2.12 launches most collectives through one generic kernel named after SendRecv
    # (``ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t``): the kernel name says nothing then, the
    # CPU-side range that launched it (``nccl:all_to_all``, ``record_param_comms``) does.
    generic = np.isin(from_kernel, ("SendRecv", "Unknown"))
    if launcher is not None and generic.any():
        from_cpu = _launching_collective(rows, coll, launcher)
        from_kernel = np.where(generic & (from_cpu != ""), from_cpu, from_kernel)
    op = np.where(op == "", from_kernel, op)
    group = _map_unique(fields["Process Group Ranks"], _canonical_group)
    pg = fields["Process Group Name"]
    pg = np.where(pd.notna(pg), pg, "").astype(str)
    seq = pd.to_numeric(pd.Series(fields["Seq"], dtype=object), errors="coerce").to_numpy(
        dtype=np.float64
    )
    ordinal = _ordinal(group, op)
    with_seq = np.char.add(
        np.char.add(np.where(pg != "", pg, group).astype(str), "|"), _int_text(seq)
    )
    without_seq = np.char.add(
        np.char.add(np.char.add(group.astype(str), "|"), np.char.add(op.astype(str), "|")),
        ordinal.astype(str),
    )
    key = np.where(np.isfinite(seq), with_seq, without_seq).astype(object)
    if launcher is not None:
        _peer_named_transfers(rows, coll, launcher, key, op, group)
    dtype = fields["dtype"]
    dtype = np.where(pd.notna(dtype), dtype, _map_unique(names, _dtype_from_kernel)).astype(str)
    return pd.DataFrame(
        {
            S.EVENT: coll.astype(np.int64),
            S.MATCH_KEY: key,
            S.COLL_OP: op.astype(object),
            S.GROUP: group.astype(object),
            S.SEQ: np.where(np.isfinite(seq), seq, -1).astype(np.int64),
            S.BYTES: _bytes(fields, dtype),
            S.ARRIVAL: rows.ts[coll],
            S.START: rows.ts[coll],
            S.END: rows.end[coll],
            S.ALGORITHM: _map_unique(names, _algorithm).astype(object),
            S.ALGBW: np.full(len(coll), np.nan),
            S.BUSBW: np.full(len(coll), np.nan),
            S.DTYPE: dtype.astype(object),
        }
    )


def _metadata(rows: Rows, coll: np.ndarray) -> dict[str, np.ndarray]:
    """Collective args of the kernels, filled from the CPU op with the same External id."""
    fields = {f: rows.args.value(f, coll) for f in COLLECTIVE_ARGS}
    if not len(coll):
        return fields
    carriers = _rows_with(rows, "Collective name")
    carriers = carriers[~rows.on_gpu[carriers]]
    if not len(carriers):
        return fields
    ext = rows.args.number("External id", coll)
    # Older Kineto set a GPU slice's External id to its correlation id: no link to an op then.
    ext = np.where(ext == rows.corr[coll], np.nan, ext)
    by_ext = pd.Series(carriers, index=rows.args.number("External id", carriers))
    by_ext = by_ext[~by_ext.index.duplicated(keep="last")]
    carrier = by_ext.reindex(ext).to_numpy()
    has = np.isfinite(carrier)
    for f in COLLECTIVE_ARGS:
        missing = has & pd.isna(fields[f])
        if missing.any():
            fields[f][missing] = rows.args.value(f, carrier[missing].astype(np.int64))
    return fields


#: CPU-side ranges that name the collective they run: ``nccl:all_to_all``, ``c10d::allreduce_``,
#: ``gloo:broadcast`` (PyTorch's record_function names for ProcessGroup calls).
_CPU_COLLECTIVE = re.compile(
    r"^(?:nccl|rccl|gloo|c10d|mpi|ucc)\s*(?::{1,2}|_)\s*(\w+)", re.IGNORECASE
)


def _launching_collective(rows: Rows, coll: np.ndarray, launcher: np.ndarray) -> np.ndarray:
    """Per collective kernel, the operation of the innermost CPU-side collective range (by name,
    or ``record_param_comms`` by its ``Collective name``) enclosing its launch call; "" where
    none does."""
    out = np.full(len(coll), "", dtype=object)
    call = launcher[coll]
    cpu = rows.where("cpu_op", "annotation", gpu=False)
    by_name = rows.matches(_CPU_COLLECTIVE, cpu)
    carriers = np.intersect1d(cpu, _rows_with(rows, "Collective name"))
    ranges = np.union1d(cpu[by_name], carriers)
    if not len(ranges) or not (call >= 0).any():
        return out
    op = _map_unique(rows.args.value("Collective name", ranges), _op_from_text)
    by_range_name = _map_unique(rows.name_of(ranges), _op_from_range_name)
    op = np.where(op == "", by_range_name, op)
    op = np.where(np.isin(op, OP_NAMES), op, "")
    nesting = SliceNesting(rows.thread[ranges], rows.ts[ranges], rows.end[ranges])
    launched = np.flatnonzero(call >= 0)
    inner = nesting.innermost(rows.thread[call[launched]], rows.ts[call[launched]])
    out[launched] = np.where(inner >= 0, op[np.maximum(inner, 0)], "")
    return out


#: PyTorch's profiling title of a point-to-point transfer (ProcessGroupNCCL::send/recv):
#: ``nccl:send <rank>-><dst>``, ``nccl:recv <rank><-<src>``.
_P2P_RANGE = re.compile(r"^nccl:(send|recv) (\d+)(->|<-)(\d+)$")


def _peer_named_transfers(rows: Rows, coll, launcher, key, op, group) -> None:
    """Send/Recv kernels launched inside a range that names the transfer (``nccl:send 1->2``)
    key as ``"{src}>{dst}|P2P|{k}"``, the k-th transfer on that link on this rank, with the
    pair as their group, in place: the sender's k-th send to dst is dst's k-th recv from src.
    Their ``Seq`` cannot match them: PyTorch records a point-to-point op with its group's
    collective count, which the two sides need not share."""
    call = launcher[coll]
    cpu = rows.where("cpu_op", "annotation", gpu=False)
    ranges = cpu[rows.matches(_P2P_RANGE, cpu)]
    if not len(ranges) or not (call >= 0).any():
        return
    parsed = pd.Series(rows.name_of(ranges), dtype=object).astype(str).str.extract(_P2P_RANGE)
    sends = (parsed[0] == "send").to_numpy()
    me, peer = parsed[1].astype(np.int64).to_numpy(), parsed[3].astype(np.int64).to_numpy()
    nesting = SliceNesting(rows.thread[ranges], rows.ts[ranges], rows.end[ranges])
    launched = np.flatnonzero(call >= 0)
    inner = nesting.innermost(rows.thread[call[launched]], rows.ts[call[launched]])
    hit = inner >= 0
    rows_hit, r = launched[hit], inner[hit]
    if not len(rows_hit):
        return
    src = np.where(sends[r], me[r], peer[r])
    dst = np.where(sends[r], peer[r], me[r])
    key[rows_hit], group[rows_hit] = link_keys(src, dst)
    op[rows_hit] = np.where(sends[r], "Send", "Recv")


def link_keys(src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per point-to-point transfer of one rank (in time order), its match key
    ``"{src}>{dst}|P2P|{k}"`` (the k-th on that link: the sender's k-th send to dst is dst's
    k-th receive from src) and its group, the pair ``"lo,hi"``."""
    link = np.char.add(np.char.add(src.astype(str), ">"), dst.astype(str))
    ordinal = _ordinal(link, np.zeros(len(link), dtype=np.int64))  # per link, in time order
    key = np.char.add(np.char.add(link, "|P2P|"), ordinal.astype(str)).astype(object)
    lo, hi = np.minimum(src, dst).astype(str), np.maximum(src, dst).astype(str)
    return key, np.char.add(np.char.add(lo, ","), hi).astype(object)


def _op_from_range_name(name: str) -> str:
    m = _CPU_COLLECTIVE.match(name)
    return _op_from_text(m.group(1)) if m else ""


def _rows_with(rows: Rows, key: str) -> np.ndarray:
    """The rows (sorted) whose args give ``key``: from the few positions that give it, not a
    lookup per row."""
    where = rows.args.columns.values[key][0]  # sorted event positions where the key is given
    row_of_pos = np.full(int(max(rows.args.pos.max(initial=-1), where.max(initial=-1))) + 1, -1)
    row_of_pos[rows.args.pos] = np.arange(len(rows.args.pos))
    found = row_of_pos[where]
    return np.sort(found[found >= 0])


def _map_unique(values: np.ndarray, fn, missing: str = "") -> np.ndarray:
    """``fn`` of each value's text, evaluated once per distinct text; ``missing`` for None/NaN."""
    out = np.full(len(values), missing, dtype=object)
    present = pd.notna(values)
    if present.any():
        text = pd.Series(values[present], dtype=object).astype(str).to_numpy(dtype=object)
        codes, uniq = pd.factorize(text)
        out[present] = np.array([fn(u) for u in uniq], dtype=object)[codes]
    return out


def _ordinal(group: np.ndarray, op: np.ndarray) -> np.ndarray:
    """Per row, the number of earlier rows with its (group, op) (a cumcount by sorting codes)."""
    if not len(group):
        return np.zeros(0, dtype=np.int64)
    g, o = pd.factorize(group)[0], pd.factorize(op)[0]
    key = g * (o.max() + 1) + o
    order = np.argsort(key, kind="stable")
    new_key = np.r_[True, key[order][1:] != key[order][:-1]]
    ordinal = np.empty(len(key), dtype=np.int64)
    ordinal[order] = np.arange(len(key)) - np.flatnonzero(new_key)[np.cumsum(new_key) - 1]
    return ordinal


def _op_from_text(value: str) -> str:
    letters = re.sub(r"[^a-z]", "", value.lower())
    return next((norm for key, norm in _OPS if key in letters), value)


def op_from_text(value: str) -> str:
    """The normalised operation a name or ``Collective name`` value gives ("all_reduce",
    "allgather_" -> "AllReduce", "AllGather"); the value itself when it names none."""
    return _op_from_text(value)


def _op_from_kernel(name: str) -> str:
    m = _KERNEL_OP.search(name)
    op = _op_from_text(m.group(1)) if m else ""
    return op if op in {norm for _, norm in _OPS} else "Unknown"


def _canonical_group(value: str) -> str:
    ranks = sorted({int(x) for x in re.findall(r"-?\d+", value)})
    return ",".join(str(r) for r in ranks)


def _algorithm(name: str) -> str:
    m = _ALGORITHM.search(name)
    return m.group(1) if m else ""


def _dtype_from_kernel(name: str) -> str:
    m = _NAME_DTYPE.search(name)
    return m.group(1) if m else ""


def _int_text(values: np.ndarray) -> np.ndarray:
    return np.where(np.isfinite(values), np.nan_to_num(values).astype(np.int64).astype(str), "")


def _bytes(fields: dict[str, np.ndarray], dtype: np.ndarray) -> np.ndarray:
    """Message bytes: max of in/out sizes, else max of in/out element counts x dtype size."""

    def num(f):
        return pd.to_numeric(pd.Series(fields[f], dtype=object), errors="coerce").to_numpy(
            dtype=np.float64
        )

    size = np.fmax(num("In msg size"), num("Out msg size"))
    nelems = np.fmax(num("In msg nelems"), num("Out msg nelems"))
    kinds = np.unique(dtype)
    per_dtype = {d: float(_DTYPE_BYTES.get(_dtype_key(d), np.nan)) for d in kinds}
    elem = pd.Series(dtype, dtype=object).map(per_dtype).to_numpy(dtype=np.float64)
    return np.where(np.isfinite(size), size, nelems * elem)


def _dtype_key(dtype: str) -> str:
    return re.sub(r"[^a-z0-9]", "", dtype.lower().removeprefix("c10::").removeprefix("torch."))
