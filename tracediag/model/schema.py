"""The canonical trace: column names, dtypes and the validation every parser output passes.

Every reader produces the same five tables (see ARCHITECTURE.md):

- ``events``: one row per interval; the row position is the event id.
- ``tracks``: one row per serial resource (engine queue, DMA queue, CUDA stream, CPU thread, CC core);
  the row position is the track id.
- ``edges``: explicit dependencies recorded by the format (event id -> event id).
- ``collectives``: one row per (collective instance, rank).
- ``meta``: a :class:`RankMeta` per rank.

Times are int64 nanoseconds on one time base per rank (aligned across ranks by ``align``).
Optional numeric columns are float64 with NaN for "unknown", so that no column needs a Python
object per row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd


# ---- events -------------------------------------------------------------------------------
RANK = "rank"
TRACK = "track"
KIND = "kind"
NAME = "name"
TS = "ts_ns"
DUR = "dur_ns"
BYTES = "bytes"
FLOPS = "flops"
WAIT = "wait_ns"  # stall once ready (Neuron evt_wait_time_ns; a consumer's dma_wait_time_ns)
LAYER = "layer"
OP = "op"
SOURCE = "source_location"
STEP = "step"
COLL_KEY = "coll_key"
SRC_ID = "src_id"  # the event's id in its source format (instruction id, correlation id...)
#: The transfer a DMA packet serves (Neuron ``packet_aggregation_id``, a legacy ``block_id``
#: run): packets of one rank with the same id are one transfer; -1 when the format says none.
TRANSFER = "transfer"
TRANSPOSE_FLOPS = "transpose_flops"  # FLOPs of the event spent on transposes (Neuron tensor engine)
#: A tensor-engine instruction's tile (Neuron ``operands``): the PE array rows (K) and columns
#: (M) it uses, the moving tensor's free size (N), and the addresses it reads and writes.
TILE_ROWS = "tile_rows"
TILE_COLS = "tile_cols"
TILE_MOVING = "tile_moving"
SRC_ADDRESS = "src_address"
DST_ADDRESS = "dst_address"
TILE_FIELDS = (TILE_ROWS, TILE_COLS, TILE_MOVING, SRC_ADDRESS, DST_ADDRESS)
#: Elements a vector, scalar or GpSimd instruction processes (its ``operands``' source access
#: pattern): what the engine's lanes x clock rate times.
ELEMENTS = "elements"

#: Event kinds. ``marker`` events (annotations, CPU op ranges, steps) are kept for drill-down
#: but are not nodes of the dependency graph.
KINDS = ("compute", "dma", "collective", "sync", "host", "marker")

EVENT_REQUIRED = {
    RANK: "int32",
    TRACK: "int32",
    KIND: "category",
    NAME: "category",
    TS: "int64",
    DUR: "int64",
}
EVENT_OPTIONAL = {
    BYTES: "float64",
    FLOPS: "float64",
    WAIT: "float64",
    LAYER: "category",
    OP: "category",
    SOURCE: "category",
    STEP: "float64",
    COLL_KEY: "int64",
    SRC_ID: "int64",  # informational; -1 when the format gives none
    TRANSFER: "int64",  # -1: the packet is a transfer of its own
    # DTYPE (defined with the collectives): the event's numeric format, "bf16", "fp32"... as
    # tracediag.model.numeric_formats normalises it; missing when unknown.
    "dtype": "category",
    TRANSPOSE_FLOPS: "float64",
    **dict.fromkeys(TILE_FIELDS, "float64"),  # NaN: not a tensor instruction, not stated
    ELEMENTS: "float64",  # NaN: not an elementwise instruction, not stated
}

# ---- tracks -------------------------------------------------------------------------------
TRACK_NAME = "name"  # e.g. "tensor", "qSyncIO0", "stream 7", "thread 1234"
TRACK_KIND = "kind"
ENGINE = "engine"  # normalised engine: tensor/vector/scalar/gpsimd/sync, dma, cc, gpu, cpu
DEVICE = "device"  # e.g. "nd0/nc1", "gpu0", "host"
CLOCK = "clock"  # clock domain: events on tracks of one domain share one clock

TRACK_KINDS = ("compute_engine", "dma_queue", "cc_core", "gpu_stream", "cpu_thread", "other")
TRACK_COLUMNS = {
    RANK: "int32",
    TRACK_NAME: "object",
    TRACK_KIND: "category",
    ENGINE: "object",
    DEVICE: "object",
    CLOCK: "object",
}

# ---- edges --------------------------------------------------------------------------------
SRC = "src"
DST = "dst"
EDGE_KIND = "kind"
#: Edge kinds recorded by formats. ``dma_trigger``: an instruction triggered a DMA (the gap is
#: DMA queueing); ``launch``: a CPU runtime call launched GPU work (the gap is launch latency);
#: ``dependency``: a data/semaphore dependency; ``flow``: a generic flow arrow; ``sync``: a stream
#: or event wait.
EDGE_KINDS = ("dependency", "dma_trigger", "launch", "flow", "sync")
EDGE_COLUMNS = {SRC: "int64", DST: "int64", EDGE_KIND: "category"}

# ---- collectives --------------------------------------------------------------------------
EVENT = "event"  # event id of the rank's collective event
MATCH_KEY = "match_key"  # parser-provided string that is equal for one instance across ranks
COLL_OP = "op"
GROUP = "group"  # canonical sorted member list, "0,1,2,3"; "" when unknown
SEQ = "seq"
ARRIVAL = "arrival_ns"
START = "start_ns"
END = "end_ns"
ALGORITHM = "algorithm"
ALGBW = "algbw"  # bytes/s as the format reports it (NaN when absent)
BUSBW = "busbw"
DTYPE = "dtype"

COLLECTIVE_COLUMNS = {
    COLL_KEY: "int64",
    RANK: "int32",
    EVENT: "int64",
    MATCH_KEY: "object",
    COLL_OP: "object",
    GROUP: "object",
    SEQ: "int64",
    BYTES: "float64",
    ARRIVAL: "int64",
    START: "int64",
    END: "int64",
    ALGORITHM: "object",
    ALGBW: "float64",
    BUSBW: "float64",
    DTYPE: "object",
}


@dataclass
class RankMeta:
    """What we know about one rank beyond its events."""

    rank: int
    sources: list[str] = field(default_factory=list)
    format: str = ""
    hardware: str = ""  # instance type or GPU name, e.g. "trn1.32xlarge", "NVIDIA H100"
    clock_offset_ns: int = 0  # added to this rank's times by alignment
    summary: dict = field(default_factory=dict)  # vendor summary metrics, as reported
    repairs: dict[str, int] = field(default_factory=dict)  # rows repaired/dropped, by reason
    info: dict = field(default_factory=dict)  # format metadata (schema version, device ids...)

    def count(self, reason: str, n: int = 1) -> None:
        """Count ``n`` rows repaired or dropped for ``reason`` (nothing is dropped silently)."""
        if n:
            self.repairs[reason] = self.repairs.get(reason, 0) + int(n)


@dataclass
class InputFile:
    """One input as the user gave it, with the format it was read as."""

    path: str
    format: str
    ranks: list[int]


@dataclass
class Trace:
    """The canonical multi-rank trace. Tables are validated by :func:`validate`."""

    events: pd.DataFrame
    tracks: pd.DataFrame
    edges: pd.DataFrame
    collectives: pd.DataFrame
    meta: dict[int, RankMeta]
    inputs: list[InputFile] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # files in input directories nobody reads

    @property
    def ranks(self) -> list[int]:
        """The ranks present, sorted."""
        return sorted(self.meta)

    def __len__(self) -> int:
        return len(self.events)


class SchemaError(ValueError):
    """A parser produced tables that break the canonical schema (a bug or an unusable file)."""


def strings(col: pd.Series) -> np.ndarray:
    """A column's values as a numpy object array of str (None where missing).

    For a categorical column this indexes its few categories by code instead of converting every
    row, which on a million events is the difference between milliseconds and a second.
    """
    import numpy as np
    import pandas as pd

    if isinstance(col.dtype, pd.CategoricalDtype):
        cats = np.append(np.asarray(col.cat.categories.astype(str), dtype=object), None)
        return cats[col.cat.codes.to_numpy()]  # code -1 (missing) picks the trailing None
    return col.astype(object).where(col.notna(), None).to_numpy()


def text_codes(col: pd.Series) -> tuple[list[str], np.ndarray]:
    """A column's distinct values as str and each row's index into them (-1 where missing): a
    categorical's own categories and codes (no pass over its rows), else a factorize. Classify
    the few values, then index by code, instead of testing a string per row."""
    import pandas as pd

    if isinstance(col.dtype, pd.CategoricalDtype):
        return [str(c) for c in col.cat.categories], col.cat.codes.to_numpy()
    codes, uniques = pd.factorize(col)
    return [str(u) for u in uniques], codes


def empty_frame(columns: dict[str, str]) -> pd.DataFrame:
    """An empty frame with the given columns and dtypes."""
    import pandas as pd

    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in columns.items()})


def _coerce(df: pd.DataFrame, columns: dict[str, str], required: bool) -> pd.DataFrame:
    import pandas as pd

    for col, dtype in columns.items():
        if col not in df.columns:
            if required:
                raise SchemaError(f"missing column {col!r}")
            continue
        if dtype == "category":
            if not isinstance(df[col].dtype, pd.CategoricalDtype):
                df[col] = df[col].astype("category")
        elif dtype == "object":
            if df[col].dtype != object:
                df[col] = df[col].astype(object)
        elif str(df[col].dtype) != dtype:
            if dtype.startswith("int") and df[col].isna().any():
                if required:
                    raise SchemaError(f"column {col!r} has missing values")
                # An optional id (a format that gives none for some rows): -1, "none".
                df[col] = df[col].fillna(-1)
            df[col] = df[col].astype(dtype)
    return df


def validate(trace: Trace) -> Trace:
    """Check and coerce every table of ``trace`` to the canonical schema, in place.

    Raises :class:`SchemaError` on anything a rule could not trust: missing columns, negative
    durations, dangling edge or track references, unknown kinds.
    """
    import pandas as pd

    ev = _coerce(trace.events, EVENT_REQUIRED, required=True)
    ev = _coerce(ev, EVENT_OPTIONAL, required=False)
    if not isinstance(ev.index, pd.RangeIndex) or ev.index.start != 0:
        ev.reset_index(drop=True, inplace=True)
    unknown = set(ev[KIND].cat.categories) - set(KINDS)
    if unknown:
        raise SchemaError(f"unknown event kinds {sorted(unknown)}")
    if len(ev) and (ev[DUR].to_numpy() < 0).any():
        raise SchemaError("negative event durations")
    tr = _coerce(trace.tracks, TRACK_COLUMNS, required=True)
    if len(ev) and (ev[TRACK].to_numpy() < 0).any() | (ev[TRACK].to_numpy() >= len(tr)).any():
        raise SchemaError("events refer to unknown tracks")
    ed = _coerce(trace.edges, EDGE_COLUMNS, required=True)
    if len(ed):  # each end column's range (no array of both: on 12M edges, 0.26 s of faults)
        src, dst = ed[SRC].to_numpy(), ed[DST].to_numpy()
        if min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= len(ev):
            raise SchemaError("edges refer to unknown events")
    co = _coerce(trace.collectives, COLLECTIVE_COLUMNS, required=True)
    if len(co):
        evs = co[EVENT].to_numpy()
        if evs.min() < 0 or evs.max() >= len(ev):
            raise SchemaError("collectives refer to unknown events")
    missing = set(pd.unique(ev[RANK].to_numpy()).tolist()) - set(trace.meta)  # (hashed: no sort)
    if missing:
        raise SchemaError(f"events of ranks without meta: {sorted(missing)}")
    trace.events, trace.tracks, trace.edges, trace.collectives = ev, tr, ed, co
    return trace
