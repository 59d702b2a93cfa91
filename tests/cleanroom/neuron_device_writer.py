"""Clean-room fixture writer for AWS Neuron *device* profiles.

Written from ``shared/reference`` only (neuron-real-output.md, neuron-formats.md,
neuron-parquet-fields.md and the official pages under neuron-docs/, plus the public AWS
profile-querying skill for how real tables are queried), without reading the project's own
readers, rules or generator. It imports nothing from ``tracediag``.

What it does: it simulates a small Neuron job as a discrete-event schedule it computes itself
(a few transformer-ish layers, forward and backward, on one or more ranks) and writes that
schedule in the layouts real tools produce:

* the Neuron Explorer Parquet profile, one directory per rank
  (``<out>/profiles/global/<display-name>@latest/<Table>.parquet`` or a flat directory);
* the legacy ``neuron-profile view --output-format json`` file, one per rank;
* optionally the UI's CSV export (``Instruction.csv`` ... with a leading ``timeline_track``).

The model of the hardware follows the reference: the Tensor, Vector, Scalar, GpSimd and Sync
engines of a NeuronCore each execute their instruction stream in order; a DMA transfer is split
into packets that the 16 DMA engines (rings, ``engine_idx``) of the core serve in parallel, so
the packets of one queue overlap in time; weight transfers are triggered by an instruction
(``DGE_TRIGGER`` edges in ``Flow``) and consumed by LDWEIGHTS/MATMUL (``FLOW_DEPENDENCE``);
collectives are rendezvous of their replica group; pipeline transfers are CollectivePermute
ops; every rank has its own device clock.

Ground truth (``truth.json``, also returned) comes from the simulation, never from reading the
output back: step times, clock offsets, per-queue busy time (interval union), the layout, the
collectives, and for each injected cause the step time saved when the simulation is re-run with
that cause removed.

Public API: :func:`write_job`, :data:`SCENARIOS`, :func:`write_scenario` (and :func:`simulate`,
the truth without writing anything).

Truth keys (all times in ns, ranks as string keys): ``ranks``, ``world_size``, ``layout``
(dp/tp/pp/lnc, rank coordinates, replica groups, pipeline pairs), ``files`` (paths relative to
the output directory per format and rank, plus unrelated profiles), ``time`` (``clock_offset_ns``:
device clock minus true time; ``written_ts_offset_ns[format][rank]``: written timestamp minus true
time), ``executions``, ``step_time_ns`` (per rank) and ``step_time_ns_true`` (first start to last
end over all ranks), ``engine_busy_ns``, ``instruction_count``, ``dma`` (per-queue busy as the
union of packet intervals, packet-time sums, bytes, duplicates), ``collectives`` (every op with
its participants and per-rank op/stream ids, wait and exposed time, saving if a family of
collectives were removed), ``pipeline`` (bubble per stage), ``findings`` (one per injected cause
with ``kind`` and ``saving_ns`` from a re-simulation without the cause), ``expected_findings``,
``expected_clean``, ``variation`` (the full configuration).

ExecutionInfo time base (``execution_time_base``): the reference gives ``execution_start_ts`` /
``execution_end_ts`` "relative to the start of the profile" without saying which start, so the
writer can write either documented reading; every execution's span holds exactly its rows.

* ``"first_hw_timestamp"`` (default): relative to ``Metadata.first_hw_timestamp`` ("first
  timestamp in the trace"), which the writer puts a short lead before the first row. This is
  also the zero of the ``relative`` Parquet time base and the zero-based JSON, so there an
  execution's span can be compared with the rows directly; with device-clock timestamps add
  ``first_hw_timestamp``. Truth: ExecutionInfo = true time - ``time.profile_start_true_ns``.
* ``"first_event"``: relative to the first row the rank recorded (the first instruction or DMA
  of execution 0), so execution 0 starts at 0 and every span is earlier than on the default by
  the lead. Truth: ExecutionInfo = true time + ``time.execution_ts_offset_ns[rank]`` (this key
  and ``time.execution_time_base`` are written only for this value).
"""

from __future__ import annotations

import dataclasses
import heapq
import json
import math
import os
import re
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

KiB = 1024
MiB = 1024 * 1024

# ----------------------------------------------------------------------------------- hardware

_HW = {
    # trn1: TE 128x128 at 2.8 GHz (91.75 TFLOPS bf16), 410e9 B/s per core (reference, 3P note).
    "trn1": dict(
        instance_type="trn1.32xlarge",
        te_rows=128,
        te_cols=128,
        te_clock=2.8,
        dma_bw=410e9,
        hbm_bw=410e9,
        vector_clock=1.4,
        scalar_clock=1.4,
        gpsimd_clock=1.4,
        nc_clock=1.4,
        cores_per_device=2,
    ),
    # trn2: TE at 2.4 GHz (78.6 TFLOPS), ~435 GB/s DMA peak (AWS worked examples).
    "trn2": dict(
        instance_type="trn2.48xlarge",
        te_rows=128,
        te_cols=128,
        te_clock=2.4,
        dma_bw=435e9,
        hbm_bw=2.9e12 / 4,
        vector_clock=0.96,
        scalar_clock=0.96,
        gpsimd_clock=1.2,
        nc_clock=1.4,
        cores_per_device=8,
    ),
}
N_RINGS = 16  # DMA engines per NeuronCore (Metadata.num_dma_engines_per_neuroncore)

ENGINES = ("Tensor", "Vector", "Scalar", "GpSimd", "Sync")
_HW_ALIAS = {"Tensor": "pe", "Vector": "dve", "Scalar": "act", "GpSimd": "pool", "Sync": "sp"}
# CcOp.trigger_engine spelling of the engine that ran PSEUDO_TRIGGER_COLLECTIVE (Pool = GpSimd).
_TRIGGER_NAME = {
    "Tensor": "Tensor",
    "Vector": "Vector",
    "Scalar": "Act",
    "GpSimd": "Pool",
    "Sync": "Sync",
}

# queue key -> (queue_name, queue_type, DmaQueuesInfo.type, rings, source, dest, op, queue_idx, sem)
_QUEUES = {
    "weights": (
        "qSyncDynamicHW",
        "hardware_dynamic",
        "weights",
        tuple(range(16)),
        "[[INPUT]]",
        "[SB]",
        "read",
        2,
        10,
    ),
    "input": ("qSyncIO0", "input", "io", tuple(range(8)), "[[INPUT]]", "[SB]", "read", 0, 4),
    "output": ("qSyncIO0", "output", "io", tuple(range(8)), "[[SB]]", "[OUTPUT]", "write", 0, 4),
    "spill_save": (
        "qSyncSpillReload0",
        "data",
        "spill",
        tuple(range(8, 16)),
        "[[SB]]",
        "[VIRTUAL]",
        "write",
        1,
        6,
    ),
    "bwd_reload": (
        "qSyncSpillReload0",
        "data",
        "spill",
        tuple(range(8, 16)),
        "[[VIRTUAL]]",
        "[SB]",
        "read",
        1,
        6,
    ),
    "spill_reload": (
        "qScalarSpillReload0-Q1-E64",
        "data",
        "spill",
        tuple(range(4, 12)),
        "[[VIRTUAL]]",
        "[SB]",
        "read",
        1,
        7,
    ),
    "pio": ("qSyncPIOParam0", "instruction", "instruction", (0,), "[[SB]]", "[SB]", "write", 3, 11),
}

# base instruction durations in ns (before pace and jitter)
_DUR = dict(
    LDWEIGHTS=64,
    MATMUL=240,
    ACTIVATE=380,
    LN=700,
    RESIDUAL=600,
    REDUCE=520,
    MASK=450,
    IOTA=900,
    TRIGGER=60,
    CC_TRIGGER=90,
    OPTIM=1500,
    BARRIER=200,
)
_DMA_LATENCY = 900  # trigger end -> first packet may start (descriptor fetch)
_PACKET_OVERHEAD = 150  # per packet, ns
_CC_SYNC = 250  # rendezvous to start
_CC_LAT = {"Ring": 4000, "Mesh": 2500, "Direct": 2000}

# ------------------------------------------------------------------------------------ config


@dataclasses.dataclass
class _Cfg:
    ranks: int = 2
    layers: int = 4
    seed: int = 0
    formats: tuple = ("parquet", "json")
    name: str = "custom"
    job_name: str = "llama_train"
    # layout and size
    dp: int | None = None
    tp: int = 1
    pp: int = 1
    lnc: int = 1
    hardware: str = "trn1"
    steps: int = 1
    scale: Any = 1
    backward: bool = True
    tiles: int = 20
    microbatches: int = 8
    # timing model
    jitter: float = 0.03
    rank_pace_jitter: float = 0.005
    launch_skew_ns: int = 2000
    host_gap_ns: int = 40000
    weight_bytes: int = 3 * MiB // 2
    packet_bytes: int = 64 * KiB
    blocks_per_weight: int = 4
    link_bw: float = 100e9
    # collectives
    dp_sync: str = "bucketed"  # bucketed | end | zero1 | none
    dp_bucket_bytes: int = 512 * KiB
    dp_last_bucket_bytes: int = 64 * KiB
    dp_end_bytes: int = 512 * KiB
    tp_style: str = "allreduce"  # allreduce | sequence_parallel
    tp_ar_per: str = "layer"  # layer | subblock
    tp_ar_bytes: int = 64 * KiB
    tp_ar_fraction: float | None = None  # calibrate the TP collectives to this share of the step
    pp_act_bytes: int = 128 * KiB
    # injected causes
    slow_dma_layer: int | None = None
    slow_dma_factor: float = 6.0
    slow_dma_tensor: str = "mlp"
    straggler_rank: Any = None  # None | int | "auto"
    straggler_factor: float = 1.35
    slow_stage: int | None = None
    slow_stage_factor: float = 1.3
    # session capture
    session_capture: bool = False
    barrier_executions: bool = False
    unrelated_profiles: int = 0
    # Parquet variations
    parquet_layout: str = "data_path"  # data_path | flat
    parquet_time_base: str = "relative"  # relative | device
    table_file_names: str = "capitalised"  # capitalised | snake
    flow_table_names: str = "capitalised"  # capitalised | snake | legacy
    flow_dma_ids: str = "aggregated"  # aggregated | packet
    id_spaces: str = "overlap"  # overlap | disjoint
    engine_case: str = "capitalised"  # capitalised | lower
    dma_tables: Any = "present"  # present | empty | absent, or a tuple per rank
    dma_variable_unknown: bool = False
    duplicate_packets: float = 0.0
    semaphore_instructions: bool = False
    # consumers of a collective's result (receives, AllReduce outputs) name their wait on the CC
    # completion semaphore (S[15], as in SemaphoreUpdate) in their operand text
    consumer_semaphores: bool = False
    consumer_semaphore_column: str = "compiler_operands"  # compiler_operands | operands
    consumer_semaphore_spelling: str = "dollar"  # dollar ($S[15]>=3) | named (S[15] (Pool)>=3)
    dma_wait_on: str = "trigger"  # trigger | consumer
    schema_version: str = "7.4.0"
    rename_fields: dict = dataclasses.field(default_factory=dict)
    float_type: str = "float64"  # float64 | float32
    string_type: str = "string"  # string | large_string
    nki_source_as_list: bool = False
    percent_scale: float = 100.0  # 100 (percent) | 1 (fraction)
    sparse_columns: bool = False
    split_rows: int | None = None
    weights_tensor_type: str = "IN"  # IN | WEIGHT
    tensorinfo_load_stats: bool = True
    replica_group_empty: bool = False
    layer_naming: str = "layer"  # layer | framework
    # legacy JSON variations
    json_time_base: str = "zero"  # zero | device
    # what ExecutionInfo's "relative to the start of the profile" counts from
    execution_time_base: str = "first_hw_timestamp"  # first_hw_timestamp | first_event
    json_time_unit: str = "ns"  # ns | ps
    json_dma_queue_key: str = "dma_queue"  # dma_queue | subgroup | alternate
    json_engine_names: str = "engine"  # engine | hw
    json_nan: bool = False
    json_id_style: str = "small"  # small | u64 | negative
    json_wrong_neff_ranks: tuple = ()
    json_percent_scale: float = 1.0  # summary *_percent as 0-1 fractions (as summary-json)
    # CSV
    csv_duplicate_track: bool = False


_FIELDS = {f.name for f in dataclasses.fields(_Cfg)}


def _make_cfg(**kw) -> _Cfg:
    bad = sorted(set(kw) - _FIELDS)
    if bad:
        raise TypeError(f"unknown variation(s): {', '.join(bad)}")
    cfg = _Cfg(**kw)
    cfg.formats = tuple(cfg.formats)
    if cfg.dp is None:
        cfg.dp = max(1, cfg.ranks // (cfg.tp * cfg.pp))
    if cfg.dp * cfg.tp * cfg.pp != cfg.ranks:
        raise ValueError(f"dp*tp*pp = {cfg.dp}*{cfg.tp}*{cfg.pp} != ranks {cfg.ranks}")
    if cfg.pp > 1 and cfg.layers % cfg.pp:
        raise ValueError("layers must divide into pp stages")
    if cfg.lnc not in (1, 2):
        raise ValueError("lnc must be 1 or 2")
    if cfg.hardware not in _HW:
        raise ValueError(f"hardware must be one of {sorted(_HW)}")
    if cfg.consumer_semaphore_column not in ("compiler_operands", "operands"):
        raise ValueError("consumer_semaphore_column must be compiler_operands or operands")
    if cfg.consumer_semaphore_spelling not in ("dollar", "named"):
        raise ValueError("consumer_semaphore_spelling must be dollar or named")
    if cfg.execution_time_base not in ("first_hw_timestamp", "first_event"):
        raise ValueError("execution_time_base must be first_hw_timestamp or first_event")
    return cfg


# ------------------------------------------------------------------------------- scenarios

SCENARIOS: dict[str, dict] = {
    "clean": dict(
        description="2-rank data-parallel step, weights prefetched under compute, gradient "
        "AllReduce buckets overlapped with backward: nothing should be flagged.",
        variation=dict(ranks=2, layers=4),
    ),
    "slow_weight_dma": dict(
        description="One layer's MLP weight DMA is 6x slower (every load of that tensor, every "
        "rank), so the LDWEIGHTS/MATMULs that consume it wait on the DMA.",
        variation=dict(
            ranks=2,
            layers=4,
            slow_dma_layer=2,
            flow_table_names="snake",
            json_dma_queue_key="subgroup",
            semaphore_instructions=True,
        ),
    ),
    "slow_weight_dma_consumer": dict(
        description="slow_weight_dma written with the other reading of the DMA fields: the "
        "consuming LDWEIGHTS/MATMUL also carries dma_trigger_start_ts/end_ts of the DMA it waited "
        "for and dma_wait_time_ns = its wait; device-clock timestamps; waits only in "
        "evt_wait_time_ns.",
        variation=dict(
            ranks=2,
            layers=4,
            slow_dma_layer=1,
            dma_wait_on="consumer",
            parquet_time_base="device",
            json_time_base="device",
        ),
    ),
    "straggler": dict(
        description="4 data-parallel ranks, one AllReduce per step (two buckets at the end); "
        "one rank (chosen by the seed) computes 35% slower, the others wait in the AllReduce.",
        variation=dict(
            ranks=4,
            layers=4,
            steps=2,
            dp_sync="end",
            straggler_rank="auto",
            parquet_time_base="device",
            json_time_base="device",
            flow_table_names="legacy",
            launch_skew_ns=6000,
        ),
    ),
    "tp_exposed_allreduce": dict(
        description="2-way tensor parallel; an AllReduce after every layer (forward and "
        "backward) that the next layer waits for, about 1/3 of the step.",
        variation=dict(
            ranks=2,
            tp=2,
            layers=4,
            tp_ar_fraction=1 / 3,
            parquet_layout="flat",
            engine_case="lower",
            percent_scale=1.0,
            json_dma_queue_key="alternate",
            json_engine_names="hw",
        ),
    ),
    "pipeline_1f1b": dict(
        description="4 pipeline stages, 8 microbatches, 1F1B schedule, activations and "
        "gradients moved by CollectivePermute; balanced stages (bubbles only).",
        variation=dict(
            ranks=4,
            pp=4,
            layers=4,
            tiles=8,
            microbatches=8,
            sparse_columns=True,
            split_rows=800,
            id_spaces="disjoint",
        ),
    ),
    "pipeline_1f1b_slow_stage": dict(
        description="pipeline_1f1b with stage 2 computing 30% slower.",
        variation=dict(
            ranks=4,
            pp=4,
            layers=4,
            tiles=8,
            microbatches=8,
            slow_stage=2,
            parquet_time_base="device",
            flow_dma_ids="packet",
        ),
    ),
    "pipeline_1f1b_semaphores": dict(
        description="pipeline_1f1b (balanced) where every instruction that waits on a "
        "collective's completion (a CollectivePermute receive, an AllReduce result) names the "
        "wait in compiler_operands as $S[15]>=v, v the value that completion sets in "
        "SemaphoreUpdate; same job and truth as pipeline_1f1b.",
        variation=dict(
            ranks=4,
            pp=4,
            layers=4,
            tiles=8,
            microbatches=8,
            sparse_columns=True,
            split_rows=800,
            id_spaces="disjoint",
            consumer_semaphores=True,
            consumer_semaphore_column="compiler_operands",
            consumer_semaphore_spelling="dollar",
        ),
    ),
    "pipeline_1f1b_slow_stage_semaphores": dict(
        description="pipeline_1f1b_slow_stage where every instruction that waits on a "
        "collective's completion (a CollectivePermute receive, an AllReduce result) names the "
        "wait in operands as S[15] (Pool)>=v, v the value that completion sets in "
        "SemaphoreUpdate; same job and truth as pipeline_1f1b_slow_stage.",
        variation=dict(
            ranks=4,
            pp=4,
            layers=4,
            tiles=8,
            microbatches=8,
            slow_stage=2,
            parquet_time_base="device",
            flow_dma_ids="packet",
            consumer_semaphores=True,
            consumer_semaphore_column="operands",
            consumer_semaphore_spelling="named",
        ),
    ),
    "no_dma_tables": dict(
        description="Clean job captured without DGE notifications: rank 0 has no DmaPacket / "
        "DmaPacketAggregated files, rank 1 has them empty; a Warning row says so.",
        variation=dict(ranks=2, layers=4, dma_tables=("absent", "empty")),
    ),
    "lnc2": dict(
        description="Clean job on trn2 with LNC=2: every row carries pcore_idx 0/1, each "
        "physical core has its own engines and DMA rings.",
        variation=dict(
            ranks=2,
            layers=4,
            lnc=2,
            hardware="trn2",
            dp_bucket_bytes=256 * KiB,
            float_type="float32",
            nki_source_as_list=True,
            schema_version="12.0.1",
            layer_naming="framework",
        ),
    ),
    "session_capture": dict(
        description="Clean job captured as a session: display names with _session_, "
        "barrier_*.neff executions between model steps, an unrelated profile in the data path.",
        variation=dict(
            ranks=2,
            layers=4,
            steps=2,
            session_capture=True,
            barrier_executions=True,
            unrelated_profiles=1,
        ),
    ),
    "duplicate_dma_packets": dict(
        description="Clean job with the known profiler defect: ~5% of DMA packets appear twice.",
        variation=dict(
            ranks=2, layers=4, duplicate_packets=0.05, json_nan=True, json_id_style="u64"
        ),
    ),
    "tp_sequence_parallel": dict(
        description="4 ranks as tp=2 x dp=2 with sequence parallelism: exposed AllGather before "
        "and ReduceScatter after every sub-block; ZeRO-1 gradient ReduceScatter + AllGather; some "
        "replica groups shown as [] (as the UI can).",
        variation=dict(
            ranks=4,
            tp=2,
            layers=2,
            tp_style="sequence_parallel",
            tp_ar_bytes=256 * KiB,
            dp_sync="zero1",
            replica_group_empty=True,
        ),
    ),
}


# ------------------------------------------------------------------------------ simulation


class _Sim:
    """Task graph plus discrete-event scheduler.

    kinds: 'i' instruction on an in-order engine, 'h' host/launch gap (not written),
    'd' DMA block (packets on rings), 'c' collective (rendezvous of its group),
    'r' receive side of an eager CollectivePermute (mirrors the sender's op).
    """

    def __init__(self):
        self.kind: list[str] = []
        self.rank: list[int] = []
        self.pcore: list[int] = []
        self.exe: list[int] = []
        self.dur: list[int] = []
        self.deps: list[list] = []
        self.pred: list[int] = []
        self.info: list[dict] = []
        self.last: dict = {}
        self.host: dict = {}
        self.cc_members: dict = {}
        self.send_key: dict = {}
        self.recv_pending: dict = {}
        self.start: list[int] = []
        self.end: list[int] = []

    def add(self, kind, rank, pcore, exe, dur, deps, res, info):
        t = len(self.kind)
        deps = list(deps)
        if res is not None:
            prev = self.last.get(res, -1)
            self.last[res] = t
            if prev < 0 and kind == "i":
                deps.append((self.host[(rank, exe)], 0, "host"))
        else:
            prev = -1
        self.kind.append(kind)
        self.rank.append(rank)
        self.pcore.append(pcore)
        self.exe.append(exe)
        self.dur.append(int(dur))
        self.deps.append(deps)
        self.pred.append(prev)
        self.info.append(info)
        return t

    def run(self):
        n = len(self.kind)
        for t, key in self.recv_pending.items():
            self.deps[t].append((self.send_key[key], 0, "pp"))
        succ = [[] for _ in range(n)]
        npend = [0] * n
        for t in range(n):
            for d, lat, _ in self.deps[t]:
                succ[d].append((t, lat, False))
                npend[t] += 1
            p = self.pred[t]
            if p >= 0:
                succ[p].append((t, 0, True))
                npend[t] += 1
        ready = [0] * n
        dready = [0] * n
        pend = [0] * n
        start = [0] * n
        end = [0] * n
        heap = [(0, t) for t in range(n) if npend[t] == 0]
        heapq.heapify(heap)
        rings: dict = {}
        arrived: dict = {}
        done = 0

        def release(t):
            e = end[t]
            for s, lat, is_pred in succ[t]:
                v = e + lat
                if is_pred:
                    pend[s] = max(pend[s], e)
                else:
                    dready[s] = max(dready[s], v)
                if v > ready[s]:
                    ready[s] = v
                npend[s] -= 1
                if npend[s] == 0:
                    heapq.heappush(heap, (ready[s], s))

        while heap:
            now, t = heapq.heappop(heap)
            k = self.kind[t]
            info = self.info[t]
            if k in "ih":
                start[t] = now
                end[t] = now + self.dur[t]
                if k == "i":
                    info["evt_wait"] = max(0, dready[t] - pend[t]) if self.pred[t] >= 0 else 0
                done += 1
                release(t)
            elif k == "d":
                r, p = self.rank[t], self.pcore[t]
                ps, pe, pr = [], [], []
                for _nbytes, pdur in info["packets"]:
                    best = None
                    for ring in info["rings"]:
                        f = rings.get((r, p, ring), 0)
                        if best is None or f < best[0]:
                            best = (f, ring)
                    s0 = max(now, best[0])
                    rings[(r, p, best[1])] = s0 + pdur
                    ps.append(s0)
                    pe.append(s0 + pdur)
                    pr.append(best[1])
                info["pk_start"], info["pk_end"], info["pk_ring"] = ps, pe, pr
                start[t] = min(ps)
                end[t] = max(pe)
                done += 1
                release(t)
            elif k == "c":
                key = info["key"]
                members = self.cc_members[key]
                arr = arrived.setdefault(key, {})
                arr[t] = now
                if len(arr) == len(members):
                    s0 = max(arr.values()) + _CC_SYNC
                    for m in members:
                        start[m] = s0
                        end[m] = s0 + self.dur[m]
                        self.info[m]["arrival"] = arr[m]
                        done += 1
                    for m in members:
                        release(m)
            elif k == "r":
                src = info["src"] = self.send_key[info["key"]]
                start[t] = start[src]
                end[t] = end[src]
                info["arrival"] = now
                done += 1
                release(t)
        if done != n:
            raise RuntimeError(f"simulation deadlocked: {n - done} of {n} tasks never ran")
        self.start, self.end = start, end


# ----------------------------------------------------------------------- program generation


def _cc_factor(op: str, n: int) -> float:
    if op == "AllReduce":
        return 2 * (n - 1) / n
    if op in ("AllGather", "ReduceScatter"):
        return (n - 1) / n
    return 1.0


def _cc_duration(op, n, nbytes, algorithm, bw):
    return int(_CC_LAT[algorithm] + _cc_factor(op, n) * nbytes / bw * 1e9)


def _layout(cfg):
    """rank -> (dp_idx, tp_idx, pp_idx); tp fastest, then dp, then pp."""
    out = {}
    for r in range(cfg.ranks):
        tp_i = r % cfg.tp
        dp_i = (r // cfg.tp) % cfg.dp
        pp_i = r // (cfg.tp * cfg.dp)
        out[r] = (dp_i, tp_i, pp_i)
    return out


def _groups(cfg):
    lay = _layout(cfg)
    tp_groups, dp_groups = {}, {}
    for r, (d, t, p) in lay.items():
        tp_groups.setdefault((d, p), []).append(r)
        dp_groups.setdefault((t, p), []).append(r)
    return lay, tp_groups, dp_groups


class _Ctx:
    """Per rank and execution program state."""

    def __init__(self, r, exe, pace):
        self.r = r
        self.exe = exe
        self.pace = pace
        self.loads: list[dict] = []
        self.load_dma: dict = {}
        self.load_mm: dict = {}
        self.spill: dict = {}
        self.async_cc: list[int] = []
        self.pc: dict = {}
        self.cc_seq: dict = {}
        self.fwd_out: dict = {}


class _Gen:
    def __init__(self, cfg: _Cfg, mods: dict):
        self.cfg = cfg
        self.mods = mods
        self.sim = _Sim()
        self.rng = np.random.default_rng([cfg.seed, 7])
        self.hw = _HW[cfg.hardware]
        self.ring_bw = self.hw["dma_bw"] / N_RINGS
        self.lay, self.tp_groups, self.dp_groups = _groups(cfg)
        self.exec_plan: list[tuple[str, int]] = []
        if cfg.barrier_executions:
            for s in range(cfg.steps):
                self.exec_plan += [("barrier", s), ("model", s)]
        else:
            self.exec_plan = [("model", s) for s in range(cfg.steps)]
        self.cc_dur_override = mods.get("cc_dur", {})
        self.mb_arrival: dict = {}

    # -- primitives
    def _jit(self):
        return float(self.rng.lognormal(0.0, self.cfg.jitter))

    def inst(self, ctx, p, eng, op, base, deps, **info):
        dur = max(1, int(round(base * ctx.pace * self._jit())))
        key = (ctx.r, p, eng, ctx.exe)
        pc = ctx.pc.get((p, eng), 0)
        ctx.pc[(p, eng)] = pc + 1
        prog = ctx.pc.get("prog", 0)
        ctx.pc["prog"] = prog + 1  # position in the program: equal on ranks that run the same NEFF
        info.update(engine=eng, opcode=op, pc=pc, prog=prog)
        return self.sim.add("i", ctx.r, p, ctx.exe, dur, deps, key, info)

    def dma(self, ctx, p, qkey, variable, nbytes, trigger, extra_deps=(), slow=1.0, **info):
        q = _QUEUES[qkey]
        pk = self.cfg.packet_bytes if qkey != "pio" else 4
        packets = []
        left = nbytes
        while left > 0:
            b = min(pk, left)
            left -= b
            d = (_PACKET_OVERHEAD + b / self.ring_bw * 1e9) * slow * self._jit()
            packets.append((b, max(1, int(round(d)))))
        deps = [(trigger, _DMA_LATENCY, "dge")] + list(extra_deps)
        info.update(
            qkey=qkey, queue=q[0], variable=variable, nbytes=nbytes, packets=packets, rings=q[3]
        )
        info.setdefault("slow", slow)
        return self.sim.add("d", ctx.r, p, ctx.exe, 0, deps, None, info)

    def cc(
        self,
        ctx,
        op,
        members,
        label,
        nbytes,
        deps,
        trigger_engine="GpSimd",
        stream_index=0,
        algorithm="Ring",
        blocking=True,
        group_id=0,
    ):
        """A collective over members (ranks); returns the task that consumers depend on."""
        cfg = self.cfg
        seq = ctx.cc_seq.get(stream_index, 0)
        ctx.cc_seq[stream_index] = seq + 1
        key = (op, tuple(members), ctx.exe, label)
        ctype = {
            "AllReduce": "ALL_REDUCE",
            "AllGather": "ALL_GATHER",
            "ReduceScatter": "REDUCE_SCATTER",
        }[op]
        trig = self.inst(
            ctx,
            0,
            trigger_engine,
            "PSEUDO_TRIGGER_COLLECTIVE",
            _DUR["CC_TRIGGER"],
            deps,
            compiler_opcode="PSEUDO_TRIGGER_COLLECTIVE",
            operands=f"$S[15]>=1 $S[15]++@complete ctype={ctype} op=ADD dtype=bfloat16 "
            f"stream_id={stream_index} group_id={group_id}",
            chain=f"PSEUDO_TRIGGER_COLLECTIVE_2 $S[15]>=1 $S[15]++@complete ctype={ctype} op=ADD "
            f"dtype=bfloat16 cc_dim=0 src0_var_id={1300 + seq} src0_var_offset=0\n PSEUDO_EXTENSION "
            f"group_id={group_id} channel_id=0 stream_id={stream_index} dst_var_id={1400 + seq}",
            cc_label=label,
        )
        n = len(members)
        dur = self.cc_dur_override.get(label, _cc_duration(op, n, nbytes, algorithm, cfg.link_bw))
        removed = label.startswith(tuple(self.mods.get("remove_cc", ())))
        if removed:
            dur = 0
        info = dict(
            key=key,
            op=op,
            members=list(members),
            nbytes=nbytes,
            algorithm=algorithm,
            trigger=trig,
            trigger_engine=trigger_engine,
            stream_index=stream_index,
            op_seq=seq,
            label=label,
            group_id=group_id,
        )
        t = self.sim.add(
            "c",
            ctx.r,
            0,
            ctx.exe,
            dur,
            [(trig, 0, "cc")],
            ("cc", ctx.r, stream_index, ctx.exe),
            info,
        )
        self.sim.cc_members.setdefault(key, []).append(t)
        if removed:
            return None  # consumers do not wait for it
        if not blocking:
            ctx.async_cc.append(t)
            return None
        return t

    def permute_send(self, ctx, dst, label, nbytes, deps):
        seq = ctx.cc_seq.get(1, 0)
        ctx.cc_seq[1] = seq + 1
        pair = f"{{{{{ctx.r},{dst}}}}}"
        trig = self.inst(
            ctx,
            0,
            "Sync",
            "PSEUDO_TRIGGER_COLLECTIVE",
            _DUR["CC_TRIGGER"],
            deps,
            compiler_opcode="PSEUDO_TRIGGER_COLLECTIVE",
            operands=f"$S[16]>=1 $S[16]++@complete ctype=COLLECTIVE_PERMUTE dtype=bfloat16 "
            f"stream_id=1 group_id=0 source_target_pairs={pair}",
            chain=f"PSEUDO_TRIGGER_COLLECTIVE_2 ctype=COLLECTIVE_PERMUTE source_target_pairs={pair} "
            f"src0_var_id={1500 + seq}\n PSEUDO_EXTENSION channel_id=0 stream_id=1",
            cc_label=label,
        )
        key = ("CollectivePermute", (ctx.r, dst), ctx.exe, label)
        dur = _cc_duration("CollectivePermute", 2, nbytes, "Direct", self.cfg.link_bw)
        if label.startswith(tuple(self.mods.get("remove_cc", ()))):
            dur = 0  # the data still has to arrive, in no time
        info = dict(
            key=key,
            op="CollectivePermute",
            members=[ctx.r, dst],
            nbytes=nbytes,
            algorithm="Direct",
            trigger=trig,
            trigger_engine="Sync",
            stream_index=1,
            op_seq=seq,
            label=label,
            group_id=0,
            role="send",
        )
        t = self.sim.add(
            "c", ctx.r, 0, ctx.exe, dur, [(trig, 0, "cc")], ("cc", ctx.r, 1, ctx.exe), info
        )
        self.sim.cc_members[key] = [t]
        self.sim.send_key[key] = t
        return t

    def permute_recv(self, ctx, src, label, nbytes):
        seq = ctx.cc_seq.get(2, 0)
        ctx.cc_seq[2] = seq + 1
        key = ("CollectivePermute", (src, ctx.r), ctx.exe, label)
        info = dict(
            key=key,
            op="CollectivePermute",
            members=[src, ctx.r],
            nbytes=nbytes,
            algorithm="Direct",
            trigger=None,
            trigger_engine="Sync",
            stream_index=2,
            op_seq=seq,
            label=label,
            group_id=0,
            role="recv",
        )
        t = self.sim.add("r", ctx.r, 0, ctx.exe, 0, [], None, info)
        self.sim.recv_pending[t] = key
        return t

    # -- weights: double-buffered prefetch, one load ahead
    def ensure_load(self, ctx, idx):
        cfg = self.cfg
        if idx >= len(ctx.loads) or idx in ctx.load_dma:
            return
        ld = ctx.loads[idx]
        nb = max(1, cfg.blocks_per_weight // cfg.lnc)
        bbytes = cfg.weight_bytes // (nb * cfg.lnc)
        slow = 1.0
        if (
            self.mods.get("slow_dma", True)
            and cfg.slow_dma_layer is not None
            and ld["L"] == cfg.slow_dma_layer
            and ld["kind"] == cfg.slow_dma_tensor
        ):
            slow = cfg.slow_dma_factor
        per_p = []
        for p in range(cfg.lnc):
            deps = []
            prev = ctx.load_mm.get(idx - 2)
            if prev is not None:
                deps.append((prev[p], 0, "anti"))
            var = ld["variable"]
            trig = self.inst(
                ctx,
                p,
                "Sync",
                "WRITE",
                _DUR["TRIGGER"],
                deps,
                compiler_opcode="PSEUDO_DMA_TRIGGER",
                compiler_operands=f"qSyncDynamicHW block_id={idx}",
                operands="data=0x1,0x1 size=4,4 dst=0xffff1009038,0xffff1008038",
                layer_idx=ld["L"],
                sub=ld["kind"],
                phase=ld["phase"],
                hbm_read=cfg.weight_bytes // cfg.lnc,
                weight_queue=cfg.weight_bytes // cfg.lnc,
                role="weight_trigger",
            )
            blocks = [
                self.dma(
                    ctx,
                    p,
                    "weights",
                    var,
                    bbytes,
                    trig,
                    slow=slow,
                    layer_idx=ld["L"],
                    sub=ld["kind"],
                    weight_load=idx,
                )
                for _ in range(nb)
            ]
            self.dma(ctx, p, "pio", "unknown", 8, trig, layer_idx=ld["L"], sub=ld["kind"])
            per_p.append(blocks)
        ctx.load_dma[idx] = per_p

    def subblock(self, ctx, sb, x):
        """Emit one attention or MLP block (forward or backward); returns the output deps."""
        cfg = self.cfg
        L, kind, phase, mb = sb["L"], sb["kind"], sb["phase"], sb["mb"]
        lname = self.layer_name(L, kind)
        src_line = {"attn": 312, "mlp": 188}[kind] + (40 if phase == "bwd" else 0)
        common = dict(
            layer_idx=L,
            sub=kind,
            phase=phase,
            mb=mb,
            layer=lname,
            src=f"modeling_llama.py:{src_line}",
        )
        # activation reloads are issued first so that they overlap the previous block
        reloads, reloads_fwd = [], []
        for p in range(cfg.lnc):
            if phase == "bwd":
                saved = ctx.spill.get((L, mb, p))
                trig = self.inst(
                    ctx,
                    p,
                    "Sync",
                    "WRITE",
                    _DUR["TRIGGER"],
                    [],
                    compiler_opcode="PSEUDO_DMA_TRIGGER",
                    compiler_operands="qSyncSpillReload0 block_id=0",
                    operands="data=0x1,0x1 size=4,4 dst=0xffff1009038,0xffff1008038",
                    hbm_read=256 * KiB,
                    spill_reload=256 * KiB,
                    role="spill_trigger",
                    **common,
                )
                reloads.append(
                    self.dma(
                        ctx,
                        p,
                        "bwd_reload",
                        f"spill.layers.{L}.{kind}.act",
                        256 * KiB,
                        trig,
                        extra_deps=[(saved, 0, "flow")] if saved is not None else [],
                        **common,
                    )
                )
            if kind == "mlp" and phase == "fwd":
                trig = self.inst(
                    ctx,
                    p,
                    "Scalar",
                    "WRITE",
                    _DUR["TRIGGER"],
                    [],
                    compiler_opcode="PSEUDO_DMA_TRIGGER",
                    compiler_operands="qScalarSpillReload0-Q1-E64 block_id=0",
                    operands="data=0x1,0x1 size=4,4 dst=0xffff1209038,0xffff1208038",
                    hbm_read=256 * KiB,
                    spill_reload=256 * KiB,
                    role="spill_trigger",
                    **common,
                )
                reloads_fwd.append(
                    self.dma(
                        ctx,
                        p,
                        "spill_reload",
                        f"spill.layers.{L}.mlp.act",
                        256 * KiB,
                        trig,
                        **common,
                    )
                )
        self.ensure_load(ctx, sb["load"])
        if sb["first_use"]:
            self.ensure_load(ctx, sb["load"] + 1)
        blocks_pp = ctx.load_dma[sb["load"]]
        tiles = cfg.tiles * (2 if phase == "bwd" else 1)
        if cfg.tp > 1:
            tiles = max(2, tiles // cfg.tp)
        tp_ = max(1, tiles // cfg.lnc)
        outs, mms = [], []
        for p in range(cfg.lnc):
            deps_x = [(d, 0, "flow") for d in x]
            if reloads:
                deps_x = deps_x + [(reloads[p], 0, "flow")]
            ln = self.inst(
                ctx,
                p,
                "Vector",
                "TENSOR_REDUCE",
                _DUR["LN"],
                deps_x,
                operands="src=bf16@0x40000[1,0,0][512,1,1] dst=fp32@0x48000 op=add 128*512",
                hlo_name=f"reduce.{100 + L * 10}",
                sbuf_read=128 * KiB,
                sbuf_write=512,
                **common,
            )
            gp = None
            if kind == "attn" and phase == "fwd":
                gp = self.inst(
                    ctx,
                    p,
                    "GpSimd",
                    "IOTA",
                    _DUR["IOTA"],
                    [(d, 0, "flow") for d in x],
                    operands="dst=int32@0x60000 128*512",
                    hlo_name=f"iota.{L}",
                    **common,
                )
            last_act = None
            reload_fwd = reloads_fwd[p] if reloads_fwd else None
            for i in range(tp_):
                blk = blocks_pp[p][min(len(blocks_pp[p]) - 1, i * len(blocks_pp[p]) // tp_)]
                self.inst(
                    ctx,
                    p,
                    "Tensor",
                    "LDWEIGHTS",
                    _DUR["LDWEIGHTS"],
                    [(blk, 0, "flow")],
                    operands=f"src=bf16@0x{0x5600 + 0x100 * i:x}[1,0,0][128,1,1] 128*128",
                    hlo_name=f"dot.{200 + L * 10}",
                    bir=f"{L}.{kind}.{phase}.{i}",
                    sbuf_read=32 * KiB,
                    wait_dma=blk,
                    **common,
                )
                transpose = kind == "attn" and phase == "fwd" and i == tp_ - 1
                mm = self.inst(
                    ctx,
                    p,
                    "Tensor",
                    "MATMUL",
                    _DUR["MATMUL"],
                    [(ln, 0, "flow")] if i == 0 else [],
                    operands=f"S[5] (Tensor)++@complete acc_flags=3 row_grp=q0 "
                    f"src=bf16@0x{0x5600 + 0x100 * i:x}[1,0,0][512,1,1] dst=0x2000000[1,0,0][512,1,1] "
                    f"128*128 ",
                    hlo_name=f"dot.{200 + L * 10}",
                    bir=f"{L}.{kind}.{phase}.{i}",
                    flops=2 * 128 * 128 * 512,
                    transpose=transpose,
                    sbuf_read=128 * KiB,
                    psum_write=256 * KiB,
                    wait_dma=blk,
                    **common,
                )
                mms.append(mm)
                if i % 2 == 1 or i == tp_ - 1:
                    last_act = self.inst(
                        ctx,
                        p,
                        "Scalar",
                        "ACTIVATE",
                        _DUR["ACTIVATE"],
                        [(mm, 0, "flow")],
                        operands="func=gelu src=fp32@0x2000000 dst=bf16@0x50000 128*512",
                        hlo_name=f"{'exp' if kind == 'attn' else 'gelu'}.{300 + L}",
                        act_fn="Exp" if kind == "attn" else "Gelu",
                        psum_read=256 * KiB,
                        sbuf_write=128 * KiB,
                        **common,
                    )
                if gp is not None and i == tp_ // 2:
                    self.inst(
                        ctx,
                        p,
                        "Vector",
                        "TENSOR_SCALAR",
                        _DUR["MASK"],
                        [(gp, 0, "flow"), (mm, 0, "flow")],
                        operands="src=fp32@0x2000000 imm=-inf dst=fp32@0x2000000 128*512",
                        hlo_name=f"select.{L}",
                        perf="2x",
                        **common,
                    )
            rdeps = [(last_act, 0, "flow")]
            if reload_fwd is not None:
                rdeps.append((reload_fwd, 0, "flow"))
            res = self.inst(
                ctx,
                p,
                "Vector",
                "TENSOR_TENSOR",
                _DUR["RESIDUAL"],
                rdeps,
                operands="src0=bf16@0x50000 src1=bf16@0x40000 dst=bf16@0x40000 op=add 128*512",
                hlo_name=f"add.{400 + L * 10}",
                sbuf_read=256 * KiB,
                sbuf_write=128 * KiB,
                **common,
            )
            if kind == "attn" and phase == "fwd" and cfg.backward:
                trig = self.inst(
                    ctx,
                    p,
                    "Sync",
                    "WRITE",
                    _DUR["TRIGGER"],
                    [(res, 0, "flow")],
                    compiler_opcode="PSEUDO_DMA_TRIGGER",
                    compiler_operands="qSyncSpillReload0 block_id=1",
                    operands="data=0x1,0x1 size=4,4 dst=0xffff1009038,0xffff1008038",
                    hbm_write=256 * KiB,
                    spill_save=256 * KiB,
                    role="spill_trigger",
                    **common,
                )
                ctx.spill[(L, mb, p)] = self.dma(
                    ctx, p, "spill_save", f"spill.layers.{L}.attn.act", 256 * KiB, trig, **common
                )
            outs.append(res)
            ctx.load_mm[sb["load"]] = ctx.load_mm.get(sb["load"], [None] * cfg.lnc)
            ctx.load_mm[sb["load"]][p] = mms[-1]
        return outs

    def layer_name(self, L, kind):
        if self.cfg.layer_naming == "framework":
            return f"model/NeuronLlamaDecoderLayer[{L}]/{'self_attn' if kind == 'attn' else 'mlp'}"
        return f"layer_{L}"

    # -- collectives inside the step
    def tp_cc(self, ctx, label, x, where):
        cfg = self.cfg
        if cfg.tp == 1:
            return x
        d, _, p = self.lay[ctx.r]
        members = self.tp_groups[(d, p)]
        gid = sorted(self.tp_groups).index((d, p))
        deps = [(t, 0, "flow") for t in x]
        if cfg.tp_style == "sequence_parallel":
            op = "AllGather" if where == "pre" else "ReduceScatter"
        else:
            if where == "pre":
                return x
            op = "AllReduce"
        t = self.cc(
            ctx,
            op,
            members,
            f"tp.{label}.{where}",
            cfg.tp_ar_bytes,
            deps,
            trigger_engine="Tensor",
            algorithm="Mesh",
            group_id=gid,
        )
        return x if t is None else [t]

    def dp_members(self, r):
        _, t, p = self.lay[r]
        return self.dp_groups[(t, p)], sorted(self.dp_groups).index((t, p))

    # -- whole execution
    def plan(self, ctx):
        """Sub-block sequence and weight loads of one model execution."""
        cfg = self.cfg
        _, _, stage = self.lay[ctx.r]
        if cfg.pp == 1:
            layers = list(range(cfg.layers))
            seq = [("F", None)]
            if cfg.backward:
                seq.append(("B", None))
        else:
            per = cfg.layers // cfg.pp
            layers = list(range(stage * per, (stage + 1) * per))
            P, M = cfg.pp, cfg.microbatches
            warm = min(P - stage - 1, M)
            seq = [("F", i) for i in range(warm)]
            for i in range(M - warm):
                seq += [("F", warm + i), ("B", i)]
            seq += [("B", i) for i in range(M - warm, M)]
        subs = []
        loads = {}
        for ph, mb in seq:
            order = [(L, k) for L in layers for k in ("attn", "mlp")]
            if ph == "B":
                order = order[::-1]
            for L, k in order:
                phase = "fwd" if ph == "F" else "bwd"
                lkey = (L, k) if cfg.pp > 1 else (L, k, phase)
                first = lkey not in loads
                if first:
                    loads[lkey] = len(ctx.loads)
                    ctx.loads.append(
                        dict(L=L, kind=k, phase=phase, variable=f"layers.{L}.{k}.weight")
                    )
                subs.append(
                    dict(L=L, kind=k, phase=phase, mb=mb, load=loads[lkey], first_use=first, ph=ph)
                )
        return layers, seq, subs

    def model_exec(self, ctx):
        cfg = self.cfg
        layers, seq, subs = self.plan(ctx)
        _, _, stage = self.lay[ctx.r]
        P = cfg.pp
        # input
        x = []
        if cfg.pp == 1:
            x = self.input_dma(ctx, "input0", 512 * KiB)
        it = iter(subs)
        for ph, mb in seq:
            if cfg.pp > 1:
                if ph == "F":
                    if stage == 0:
                        x = self.input_dma(ctx, f"input0.mb{mb}", 64 * KiB)
                    else:
                        x = [
                            self.permute_recv(
                                ctx, ctx.r - cfg.tp * cfg.dp, f"act.mb{mb}", cfg.pp_act_bytes
                            )
                        ]
                else:
                    if stage == P - 1:
                        x = ctx.fwd_out[mb]
                    else:
                        x = [
                            self.permute_recv(
                                ctx, ctx.r + cfg.tp * cfg.dp, f"grad.mb{mb}", cfg.pp_act_bytes
                            )
                        ]
                self.mb_arrival[(ctx.r, ctx.exe, "fwd" if ph == "F" else "bwd", mb)] = list(x)
            nsub = len(layers) * 2
            for j in range(nsub):
                sb = next(it)
                if cfg.tp_ar_per == "subblock" or cfg.tp_style == "sequence_parallel":
                    x = self.tp_cc(ctx, f"{sb['L']}.{sb['kind']}.{sb['phase']}.{mb}", x, "pre")
                x = self.subblock(ctx, sb, x)
                last_of_layer = j % 2 == 1
                if cfg.tp_ar_per == "subblock" or cfg.tp_style == "sequence_parallel":
                    x = self.tp_cc(ctx, f"{sb['L']}.{sb['kind']}.{sb['phase']}.{mb}", x, "post")
                elif last_of_layer:
                    x = self.tp_cc(ctx, f"{sb['L']}.{sb['phase']}.{mb}", x, "post")
                if (
                    sb["phase"] == "bwd"
                    and cfg.dp > 1
                    and cfg.dp_sync == "bucketed"
                    and cfg.pp == 1
                ):
                    members, gid = self.dp_members(ctx.r)
                    lastb = sb["L"] == 0 and sb["kind"] == "attn"
                    nbytes = cfg.dp_last_bucket_bytes if lastb else cfg.dp_bucket_bytes
                    self.cc(
                        ctx,
                        "AllReduce",
                        members,
                        f"dp.grad.{sb['L']}.{sb['kind']}",
                        nbytes,
                        [(t, 0, "flow") for t in x],
                        blocking=False,
                        group_id=gid,
                    )
            if cfg.pp > 1:
                if ph == "F":
                    if stage < P - 1:
                        self.permute_send(
                            ctx,
                            ctx.r + cfg.tp * cfg.dp,
                            f"act.mb{mb}",
                            cfg.pp_act_bytes,
                            [(t, 0, "flow") for t in x],
                        )
                    else:
                        ctx.fwd_out[mb] = x
                else:
                    if stage > 0:
                        self.permute_send(
                            ctx,
                            ctx.r - cfg.tp * cfg.dp,
                            f"grad.mb{mb}",
                            cfg.pp_act_bytes,
                            [(t, 0, "flow") for t in x],
                        )
        # gradient sync / optimizer
        if cfg.pp > 1:
            x = list(x) + [t for t in self.sim_last_sends(ctx)]
        if cfg.backward and cfg.dp > 1:
            members, gid = self.dp_members(ctx.r)
            deps = [(t, 0, "flow") for t in x]
            if cfg.dp_sync == "end" or (cfg.dp_sync == "bucketed" and cfg.pp > 1):
                a = self.cc(
                    ctx, "AllReduce", members, "dp.grad.end.0", cfg.dp_end_bytes, deps, group_id=gid
                )
                b = self.cc(
                    ctx, "AllReduce", members, "dp.grad.end.1", cfg.dp_end_bytes, deps, group_id=gid
                )
                x = [v for v in (a, b) if v is not None] or x
            elif cfg.dp_sync == "zero1":
                a = self.cc(
                    ctx,
                    "ReduceScatter",
                    members,
                    "dp.grad.rs",
                    cfg.dp_end_bytes,
                    deps,
                    group_id=gid,
                )
                x = [a] if a is not None else x
        if cfg.backward:
            deps = [(t, 0, "flow") for t in x] + [(t, 0, "flow") for t in ctx.async_cc]
            opt = self.inst(
                ctx,
                0,
                "Vector",
                "TENSOR_TENSOR",
                _DUR["OPTIM"],
                deps,
                operands="src0=fp32@0x70000 src1=bf16@0x78000 dst=fp32@0x70000 op=add 128*2048",
                hlo_name="add.optimizer",
                layer="optimizer",
                src="optim.py:88",
            )
            x = [opt]
            if cfg.dp > 1 and cfg.dp_sync == "zero1":
                members, gid = self.dp_members(ctx.r)
                ag = self.cc(
                    ctx,
                    "AllGather",
                    members,
                    "dp.param.ag",
                    cfg.dp_end_bytes // cfg.dp,
                    [(opt, 0, "flow")],
                    group_id=gid,
                )
                x = [ag] if ag is not None else x
        if cfg.pp == 1 or stage == P - 1:
            trig = self.inst(
                ctx,
                0,
                "Sync",
                "WRITE",
                _DUR["TRIGGER"],
                [(t, 0, "flow") for t in x],
                compiler_opcode="PSEUDO_DMA_TRIGGER",
                compiler_operands="qSyncIO0 block_id=9",
                operands="data=0x1,0x1 size=4,4 dst=0xffff1009038,0xffff1008038",
                hbm_write=256 * KiB,
                output_queue=256 * KiB,
                role="output_trigger",
                layer="output",
            )
            self.dma(ctx, 0, "output", "output0", 256 * KiB, trig, layer="output")

    def sim_last_sends(self, ctx):
        return [
            t
            for t in range(len(self.sim.kind))
            if self.sim.kind[t] == "c"
            and self.sim.rank[t] == ctx.r
            and self.sim.exe[t] == ctx.exe
            and self.sim.info[t].get("role") == "send"
        ]

    def input_dma(self, ctx, var, nbytes):
        trig = self.inst(
            ctx,
            0,
            "Sync",
            "DMA_TRIGGER",
            _DUR["TRIGGER"],
            [],
            compiler_opcode="PSEUDO_DMA_TRIGGER",
            compiler_operands="qSyncIO0 block_id=0",
            operands="data=0x1,0x1 size=4,4 dst=0xffff1009038,0xffff1008038",
            hbm_read=nbytes,
            input_queue=nbytes,
            role="input_trigger",
            layer="input",
        )
        d = self.dma(ctx, 0, "input", var, nbytes, trig, layer="input")
        return [d]

    def barrier_exec(self, ctx):
        members = list(range(self.cfg.ranks))
        a = self.inst(
            ctx,
            0,
            "Sync",
            "WRITE",
            _DUR["BARRIER"],
            [],
            operands="data=0x1 size=4",
            compiler_opcode="PSEUDO_CORE_BARRIER",
            layer="barrier",
        )
        t = self.cc(ctx, "AllReduce", members, "barrier", 4, [(a, 0, "flow")], group_id=99)
        self.inst(
            ctx,
            0,
            "Sync",
            "EVENT_SEMAPHORE",
            _DUR["BARRIER"],
            [(t, 0, "cc")],
            operands="S[3] (Sync)>=1",
            layer="barrier",
        )

    def build(self, paces, skews, gaps):
        sim = self.sim
        prev_tasks = {r: [] for r in range(self.cfg.ranks)}
        for e, (kind, _s) in enumerate(self.exec_plan):
            for r in range(self.cfg.ranks):
                if e == 0:
                    h = sim.add("h", r, 0, e, skews[r], [], None, dict(role="launch"))
                else:
                    deps = self._exec_tail(prev_tasks[r])
                    gap = (
                        gaps[r][e]
                        if self.exec_plan[e - 1][0] == "model"
                        else max(1, gaps[r][e] // 10)
                    )
                    h = sim.add("h", r, 0, e, gap, deps, None, dict(role="gap"))
                sim.host[(r, e)] = h
                ctx = _Ctx(r, e, paces[r] if kind == "model" else 1.0)
                n0 = len(sim.kind)
                if kind == "model":
                    self.model_exec(ctx)
                else:
                    self.barrier_exec(ctx)
                prev_tasks[r] = list(range(n0, len(sim.kind)))
        return sim

    def _exec_tail(self, tids):
        sim = self.sim
        last_res = {}
        out = []
        for t in tids:
            k = sim.kind[t]
            if k == "i":
                last_res[(sim.pcore[t], sim.info[t]["engine"])] = t
            elif k in "dcr":
                out.append(t)
        return [(t, 0, "host") for t in list(last_res.values()) + out]


# ---------------------------------------------------------------------------- run and truth


def _draws(cfg):
    """Per-rank pace, launch skew, host gaps, clocks: a stream separate from the program's."""
    rng = np.random.default_rng([cfg.seed, 11])
    n = cfg.ranks
    pace = 1.0 + rng.normal(0, cfg.rank_pace_jitter, n)
    skew = rng.integers(0, max(1, cfg.launch_skew_ns), n)
    nexec = cfg.steps * (2 if cfg.barrier_executions else 1)
    gaps = rng.integers(
        int(cfg.host_gap_ns * 0.6), int(cfg.host_gap_ns * 1.4) + 1, (n, max(1, nexec))
    )
    clock = rng.integers(5 * 10**10, 5 * 10**11, n)
    lead = rng.integers(1000, 30000, n)
    strag = int(rng.integers(0, n))
    crc = int(rng.integers(0, 2**31))
    return dict(pace=pace, skew=skew, gaps=gaps, clock=clock, lead=lead, strag=strag, crc=crc)


def _straggler_rank(cfg, dr):
    if cfg.straggler_rank is None:
        return None
    if cfg.straggler_rank == "auto":
        return dr["strag"]
    return int(cfg.straggler_rank)


def _paces(cfg, dr, mods):
    pace = [float(v) for v in dr["pace"]]
    s = _straggler_rank(cfg, dr)
    if s is not None:
        if mods.get("straggler_median"):
            others = [pace[r] for r in range(cfg.ranks) if r != s]
            pace[s] = float(np.median(others))
        else:
            pace[s] *= cfg.straggler_factor
    if cfg.slow_stage is not None and not mods.get("slow_stage_fixed"):
        for r, (_d, _t, p) in _layout(cfg).items():
            if p == cfg.slow_stage:
                pace[r] *= cfg.slow_stage_factor
    return pace


def _simulate(cfg, mods=None):
    mods = dict(mods or {})
    dr = _draws(cfg)
    gen = _Gen(cfg, mods)
    sim = gen.build(_paces(cfg, dr, mods), [int(v) for v in dr["skew"]], dr["gaps"].tolist())
    sim.run()
    return gen, sim, dr


def _exec_spans(gen, sim):
    """(rank, exe) -> [start, end] over the written tasks of that execution (host gaps excluded)."""
    spans = {}
    for t in range(len(sim.kind)):
        k = sim.kind[t]
        if k == "h":
            continue
        key = (sim.rank[t], sim.exe[t])
        s, e = sim.start[t], sim.end[t]
        cur = spans.get(key)
        spans[key] = [s, e] if cur is None else [min(cur[0], s), max(cur[1], e)]
    return spans


def _model_step_times(gen, sim):
    spans = _exec_spans(gen, sim)
    per_rank = {}
    true = []
    for e, (kind, _s) in enumerate(gen.exec_plan):
        if kind != "model":
            continue
        ss = [spans[(r, e)] for r in range(gen.cfg.ranks)]
        for r, (a, b) in enumerate(ss):
            per_rank.setdefault(r, []).append(b - a)
        true.append(max(b for _, b in ss) - min(a for a, _ in ss))
    return per_rank, true


def _union(iv):
    if not iv:
        return 0, []
    iv = sorted(iv)
    out = [list(iv[0])]
    for s, e in iv[1:]:
        if s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1][1] = e
        else:
            out.append([s, e])
    return sum(e - s for s, e in out), out


def _calibrate(cfg):
    """TP collective durations so that they take cfg.tp_ar_fraction of the step."""
    if cfg.tp_ar_fraction is None or cfg.tp == 1:
        return {}
    gen, sim, _ = _simulate(cfg, {"remove_cc": ("tp.",)})
    _, true = _model_step_times(gen, sim)
    base = float(np.mean(true))
    labels = sorted(
        {
            sim.info[t]["label"]
            for t in range(len(sim.kind))
            if sim.kind[t] == "c" and sim.info[t]["label"].startswith("tp.")
        }
    )
    per_rank_labels = len(labels) // max(1, cfg.steps)
    f = cfg.tp_ar_fraction
    total = base * f / (1 - f)
    dur = int(total / max(1, per_rank_labels))
    return {lab: dur for lab in labels}


_CC_FAMILIES = {"tp": ("tp.",), "dp": ("dp.",), "pp": ("act.", "grad.")}


def _labels(res):
    sim = res.sim
    return {sim.info[t]["label"] for t in range(len(sim.kind)) if sim.kind[t] == "c"}


class _Result:
    def __init__(self, cfg, mods=None):
        self.cfg = cfg
        self.mods = dict(mods or {})
        self.gen, self.sim, self.dr = _simulate(cfg, self.mods)
        self.step_per_rank, self.step_true = _model_step_times(self.gen, self.sim)

    @property
    def mean_true(self):
        return float(np.mean(self.step_true))


def _saving(base: _Result, cf: _Result):
    per = [b - c for b, c in zip(base.step_true, cf.step_true, strict=True)]
    return int(round(np.mean(per))), int(sum(per))


def _truth(cfg: _Cfg, base: _Result, cfs: dict, copies: int, files: dict, offsets: dict) -> dict:
    gen, sim = base.gen, base.sim
    R = range(cfg.ranks)
    lay, tp_groups, dp_groups = _groups(cfg)
    spans = _exec_spans(gen, sim)
    t = {
        "writer": "tests/cleanroom/neuron_device_writer.py",
        "truth_version": 1,
        "scenario": cfg.name,
        "seed": cfg.seed,
        "unit": "ns",
        "ranks": list(R),
        "world_size": cfg.ranks,
        "layout": {
            "dp": cfg.dp,
            "tp": cfg.tp,
            "pp": cfg.pp,
            "lnc": cfg.lnc,
            "hardware": cfg.hardware,
            "rank_coords": {str(r): {"dp": lay[r][0], "tp": lay[r][1], "pp": lay[r][2]} for r in R},
            "tp_groups": [sorted(v) for _, v in sorted(tp_groups.items())] if cfg.tp > 1 else [],
            "dp_groups": [sorted(v) for _, v in sorted(dp_groups.items())] if cfg.dp > 1 else [],
            "pp_pairs": [[r, r + cfg.tp * cfg.dp] for r in R if lay[r][2] < cfg.pp - 1]
            if cfg.pp > 1
            else [],
        },
        "files": files,
        "time": {
            "clock_offset_ns": {str(r): int(base.dr["clock"][r]) for r in R},
            "clock_note": "device clock of rank r = true time + clock_offset_ns[r]",
            "written_ts_offset_ns": offsets,
            "written_note": "written timestamp = true time + written_ts_offset_ns[format][rank] "
            "(ExecutionInfo times are always relative to the profile start)",
            "profile_start_true_ns": {str(r): int(_profile_start(base, r)) for r in R},
        },
    }
    if cfg.execution_time_base != "first_hw_timestamp":  # default: truth as before the option
        t["time"]["written_note"] = (
            "written timestamp = true time + written_ts_offset_ns[format][rank]; ExecutionInfo "
            "times = true time + execution_ts_offset_ns[rank]"
        )
        t["time"]["execution_time_base"] = cfg.execution_time_base
        t["time"]["execution_ts_offset_ns"] = {
            str(r): -int(_execution_zero(cfg, base, r)) for r in R
        }
    n_model = len(base.step_true)
    exec_list = []
    for e, (kind, _s) in enumerate(gen.exec_plan):
        exec_list.append(
            {
                "execution_index": e,
                "kind": kind,
                "neff": _neff_name(cfg, kind, 0),
                "start_true_ns": {str(r): int(spans[(r, e)][0]) for r in R},
                "end_true_ns": {str(r): int(spans[(r, e)][1]) for r in R},
            }
        )
    t["executions"] = {
        "simulated": exec_list,
        "repeats": copies,
        "total_executions": len(exec_list) * copies,
        "model_executions": n_model * copies,
    }
    t["step_time_ns"] = {str(r): int(round(np.mean(v))) for r, v in base.step_per_rank.items()}
    t["step_time_ns_per_step"] = {
        str(r): [int(x) for x in v] for r, v in base.step_per_rank.items()
    }
    t["step_time_ns_true"] = int(round(base.mean_true))
    t["step_time_ns_true_per_step"] = [int(x) for x in base.step_true]
    t["step_note"] = (
        "per rank: first to last event of that rank's model execution; true: first "
        "start to last end over all ranks; repeated copies (scale) are identical"
    )
    # engines and instruction counts
    busy, icount, waits = {}, {}, {}
    for r in R:
        ivs: dict = {}
        n = 0
        w = 0
        for tt in range(len(sim.kind)):
            if sim.rank[tt] != r or sim.kind[tt] != "i":
                continue
            n += 1
            w += sim.info[tt].get("evt_wait", 0)
            ivs.setdefault(sim.info[tt]["engine"].lower(), []).append((sim.start[tt], sim.end[tt]))
        busy[str(r)] = {e: _union(v)[0] * copies for e, v in sorted(ivs.items())}
        icount[str(r)] = n * copies
        waits[str(r)] = w * copies
    t["engine_busy_ns"] = busy
    t["instruction_count"] = icount
    t["evt_wait_ns_total"] = waits
    # dma
    q_busy, q_sum, q_bytes, var_bytes, all_busy = {}, {}, {}, {}, {}
    for r in R:
        qi: dict = {}
        alliv = []
        qb: dict = {}
        vb: dict = {}
        for tt in range(len(sim.kind)):
            if sim.rank[tt] != r or sim.kind[tt] != "d":
                continue
            info = sim.info[tt]
            pcq = info["queue"] if cfg.lnc == 1 else f"{info['queue']}@pcore{sim.pcore[tt]}"
            for s0, e0 in zip(info["pk_start"], info["pk_end"], strict=True):
                qi.setdefault(pcq, []).append((s0, e0))
                alliv.append((s0, e0))
            qb[pcq] = qb.get(pcq, 0) + info["nbytes"]
            vb[info["variable"]] = vb.get(info["variable"], 0) + info["nbytes"]
        q_busy[str(r)] = {q: _union(v)[0] * copies for q, v in sorted(qi.items())}
        q_sum[str(r)] = {q: sum(e - s for s, e in v) * copies for q, v in sorted(qi.items())}
        q_bytes[str(r)] = {q: b * copies for q, b in sorted(qb.items())}
        var_bytes[str(r)] = {v: b * copies for v, b in sorted(vb.items())}
        all_busy[str(r)] = _union(alliv)[0] * copies
    t["dma"] = {
        "queue_busy_ns": q_busy,
        "queue_packet_time_sum_ns": q_sum,
        "queue_bytes": q_bytes,
        "dma_active_ns": all_busy,
        "variable_bytes": var_bytes,
        "note": "busy = union of packet intervals (rings overlap); bytes exclude duplicated packets; "
        "with lnc=2 queues are keyed <queue>@pcore<i>",
        "tables_written": {str(r): _dma_mode(cfg, r) for r in R},
        "duplicate_packets": {},
        "peak_bandwidth_Bps": _HW[cfg.hardware]["dma_bw"],
        "ring_count": N_RINGS,
    }
    # collectives
    t["collectives"] = _truth_collectives(cfg, base, copies)
    # findings
    findings = []
    if cfg.slow_dma_layer is not None:
        cf = cfs["slow_dma"]
        sv, tot = _saving(base, cf)
        transfers = []
        for tt in range(len(sim.kind)):
            if sim.kind[tt] == "d" and sim.info[tt].get("slow", 1.0) != 1.0:
                info = sim.info[tt]
                dur = sim.end[tt] - sim.start[tt]
                cdur = cf.sim.end[tt] - cf.sim.start[tt]
                transfers.append(
                    {
                        "rank": sim.rank[tt],
                        "pcore": sim.pcore[tt],
                        "variable": info["variable"],
                        "queue": info["queue"],
                        "bytes": info["nbytes"],
                        "start_true_ns": sim.start[tt],
                        "end_true_ns": sim.end[tt],
                        "duration_ns": dur,
                        "bandwidth_Bps": info["nbytes"] / dur * 1e9,
                        "normal_duration_ns": cdur,
                        "normal_bandwidth_Bps": info["nbytes"] / cdur * 1e9,
                    }
                )
        mm_wait = {}
        mm_wait_cf = {}
        for res_, dst in ((base, mm_wait), (cf, mm_wait_cf)):
            for tt in range(len(res_.sim.kind)):
                inf = res_.sim.info[tt]
                if (
                    res_.sim.kind[tt] == "i"
                    and inf.get("layer_idx") == cfg.slow_dma_layer
                    and inf.get("opcode") in ("MATMUL", "LDWEIGHTS")
                    and inf.get("sub") == cfg.slow_dma_tensor
                ):
                    k = str(res_.sim.rank[tt])
                    dst[k] = dst.get(k, 0) + inf.get("evt_wait", 0) * copies
        findings.append(
            {
                "kind": "slow_weight_dma",
                "saving_ns": sv,
                "saving_total_ns": tot * copies,
                "saving_fraction": sv / base.mean_true,
                "method": "re-simulated with the slow transfers at normal speed",
                "layer": cfg.slow_dma_layer,
                "tensor": f"layers.{cfg.slow_dma_layer}.{cfg.slow_dma_tensor}.weight",
                "queue": _QUEUES["weights"][0],
                "factor": cfg.slow_dma_factor,
                "ranks": list(R),
                "bytes_per_load": cfg.weight_bytes,
                "transfers": transfers,
                "consumer_wait_ns": mm_wait,
                "consumer_wait_ns_if_fixed": mm_wait_cf,
            }
        )
    s = _straggler_rank(cfg, base.dr)
    if s is not None:
        cf = cfs["straggler"]
        sv, tot = _saving(base, cf)
        findings.append(
            {
                "kind": "straggler",
                "saving_ns": sv,
                "saving_total_ns": tot * copies,
                "saving_fraction": sv / base.mean_true,
                "method": "re-simulated with the straggler at the median pace of the other ranks",
                "rank": s,
                "ranks": [s],
                "factor": cfg.straggler_factor,
                "collective_wait_ns": t["collectives"]["wait_ns"],
            }
        )
    saving_removed = {}
    for key, cf in cfs.items():
        if key.startswith("cc."):
            saving_removed[key[3:]] = _saving(base, cf)[0]
    t["collectives"]["saving_if_removed_ns"] = saving_removed
    t["collectives"]["saving_note"] = (
        "step time saved per step when a family of collectives "
        "(tp, dp, pp transfers) takes no time and nothing waits on it"
    )
    if cfg.tp > 1 and (cfg.tp_ar_fraction is not None or cfg.tp_style == "sequence_parallel"):
        cf = cfs["cc.tp"]
        sv, tot = _saving(base, cf)
        cc_total = {}
        for tt in range(len(sim.kind)):
            if sim.kind[tt] == "c" and sim.info[tt]["label"].startswith("tp."):
                k = str(sim.rank[tt])
                cc_total[k] = cc_total.get(k, 0) + (sim.end[tt] - sim.start[tt]) * copies
        findings.append(
            {
                "kind": "exposed_allreduce"
                if cfg.tp_style == "allreduce"
                else "exposed_collective",
                "saving_ns": sv,
                "saving_total_ns": tot * copies,
                "saving_fraction": sv / base.mean_true,
                "method": "re-simulated with the TP collectives removed (zero time, nothing waits on them)",
                "operation": "AllReduce"
                if cfg.tp_style == "allreduce"
                else "AllGather/ReduceScatter",
                "ranks": list(R),
                "collective_time_ns": cc_total,
                "fraction_of_step": sum(cc_total.values())
                / len(cc_total)
                / copies
                / len(base.step_true)
                / base.mean_true,
            }
        )
    if cfg.pp > 1:
        t["pipeline"] = _truth_pipeline(cfg, base, copies)
        if cfg.slow_stage is not None:
            cf = cfs["stage"]
            sv, tot = _saving(base, cf)
            srank = [r for r in R if lay[r][2] == cfg.slow_stage]
            findings.append(
                {
                    "kind": "slow_pipeline_stage",
                    "saving_ns": sv,
                    "saving_total_ns": tot * copies,
                    "saving_fraction": sv / base.mean_true,
                    "method": "re-simulated with the slow stage at normal pace",
                    "stage": cfg.slow_stage,
                    "ranks": srank,
                    "factor": cfg.slow_stage_factor,
                }
            )
        pl = t["pipeline"]
        findings.append(
            {
                "kind": "pipeline_bubble",
                "saving_ns": int(pl["step_time_ns_true"] - max(pl["stage_work_ns"].values())),
                "saving_fraction": 1 - max(pl["stage_work_ns"].values()) / pl["step_time_ns_true"],
                "method": "from the simulation: step time minus the busiest stage's microbatch work (what "
                "a bubble-free pipeline would take)",
                "ranks": list(R),
                "bubble_ns": pl["bubble_ns"],
            }
        )
    t["findings"] = findings
    t["expected_findings"] = [f["kind"] for f in findings]
    t["expected_clean"] = not findings
    if not findings:
        t["clean_note"] = (
            "nothing injected: weights are prefetched under compute, gradient "
            "collectives overlap backward; only the cold start of each execution "
            "waits for its first weights and input, which is inherent"
        )
    return t


def _truth_collectives(cfg, base, copies):
    sim = base.sim
    ops = {}
    wait = {str(r): 0 for r in range(cfg.ranks)}
    exposed = {}
    for t in range(len(sim.kind)):
        if sim.kind[t] not in "cr":
            continue
        info = sim.info[t]
        key = info["key"]
        kstr = f"{key[0]}|{'-'.join(map(str, key[1]))}|exec{key[2]}|{key[3]}"
        o = ops.setdefault(
            kstr,
            {
                "id": kstr,
                "operation": info["op"],
                "algorithm": info["algorithm"],
                "label": info["label"],
                "execution_index": key[2],
                "ranks": list(info["members"]),
                "bytes": info["nbytes"],
                "start_true_ns": sim.start[t],
                "end_true_ns": sim.end[t],
                "per_rank": {},
            },
        )
        trig = info.get("trigger")
        pr = {
            "op_id": _op_id(cfg, sim, t),
            "stream_index": info["stream_index"],
            "stream_id": _stream_id(info["stream_index"], key[2]),
            "role": info.get("role", "member"),
        }
        if trig is not None:
            pr["trigger_start_true_ns"] = sim.start[trig]
            pr["arrival_true_ns"] = info.get("arrival")
            pr["trigger_to_start_ns"] = sim.start[t] - sim.start[trig]
            w = sim.start[t] - info.get("arrival", sim.end[trig])
            pr["wait_ns"] = w
            if gen_kind(base, key[2]) == "model":
                wait[str(sim.rank[t])] += w * copies
        o["per_rank"][str(sim.rank[t])] = pr
    for r in range(cfg.ranks):
        cc_iv = [
            (sim.start[t], sim.end[t])
            for t in range(len(sim.kind))
            if sim.rank[t] == r
            and sim.kind[t] in "cr"
            and sim.end[t] > sim.start[t]
            and gen_kind(base, sim.exe[t]) == "model"
        ]
        comp = [
            (sim.start[t], sim.end[t])
            for t in range(len(sim.kind))
            if sim.rank[t] == r
            and sim.kind[t] == "i"
            and sim.info[t]["opcode"] != "PSEUDO_TRIGGER_COLLECTIVE"
        ]
        _, cu = _union(cc_iv)
        _, ku = _union(comp)
        exposed[str(r)] = _interval_minus(cu, ku) * copies
    return {
        "ops": list(ops.values()),
        "count_per_rank": {
            str(r): sum(1 for o in ops.values() if str(r) in o["per_rank"]) * copies
            for r in range(cfg.ranks)
        },
        "wait_ns": wait,
        "exposed_ns": exposed,
        "note": "wait = collective start minus the time this rank was ready for it (its trigger "
        "instruction ended and its stream was free): time spent waiting for the other ranks; "
        "trigger_to_start_ns is what cc_trigger_start_delay shows; exposed = collective time with no "
        "compute instruction running on that rank; wait and exposed cover model executions only "
        "(not barrier_*.neff); ops listed once for the simulated executions (repeated per copy when "
        "scale > 1)",
    }


def gen_kind(res, exe):
    return res.gen.exec_plan[exe][0]


def _interval_minus(a, b):
    """Total length of union a not covered by union b (both sorted disjoint)."""
    tot = 0
    j = 0
    for s, e in a:
        cur = s
        while j < len(b) and b[j][1] <= cur:
            j += 1
        k = j
        while k < len(b) and b[k][0] < e:
            if b[k][0] > cur:
                tot += b[k][0] - cur
            cur = max(cur, b[k][1])
            k += 1
        if cur < e:
            tot += e - cur
    return tot


_CC_SEM = "S[15] (Pool)"  # the semaphore a collective's completion increments (SemaphoreUpdate)

_NON_COMPUTE = ("WRITE", "DMA_TRIGGER", "PSEUDO_TRIGGER_COLLECTIVE", "EVENT_SEMAPHORE")


def _truth_pipeline(cfg, base, copies):
    """Bubble per stage: the step minus the time the stage works on a microbatch, a window running
    from the later of the microbatch's arrival (permute received, input loaded, or the loss for the
    last stage's backward) and the end of the previous window, to its last compute instruction."""
    sim, gen = base.sim, base.gen
    lay = _layout(cfg)
    P, M = cfg.pp, cfg.microbatches
    last_end: dict = {}
    for t in range(len(sim.kind)):
        if sim.kind[t] != "i":
            continue
        inf = sim.info[t]
        if inf.get("mb") is None or inf.get("phase") is None or inf["opcode"] in _NON_COMPUTE:
            continue
        k = (sim.rank[t], sim.exe[t], inf["phase"], inf["mb"])
        last_end[k] = max(last_end.get(k, 0), sim.end[t])
    work: dict = {}
    fwd, bwd = [], []
    for r in range(cfg.ranks):
        keys = sorted((k for k in last_end if k[0] == r), key=lambda k: last_end[k])
        prev = {}
        for k in keys:
            arr = max(sim.end[d] for d in gen.mb_arrival[k])
            a = max(arr, prev.get(k[1], 0))
            w = max(0, last_end[k] - a)
            prev[k[1]] = last_end[k]
            work[r] = work.get(r, 0) + w
            (fwd if k[2] == "fwd" else bwd).append(w)
    nsteps = max(1, len(base.step_true))
    step_true = base.mean_true
    name = (
        (lambda r: str(lay[r][2])) if cfg.dp * cfg.tp == 1 else (lambda r: f"{lay[r][2]}@rank{r}")
    )
    busy = {name(r): int(work.get(r, 0) / nsteps) for r in range(cfg.ranks)}
    bubble = {k: int(step_true - v) for k, v in busy.items()}
    tf, tb = float(np.median(fwd)), float(np.median(bwd))
    return {
        "stages": P,
        "microbatches": M,
        "schedule": "1F1B",
        "stage_of_rank": {str(r): lay[r][2] for r in range(cfg.ranks)},
        "step_time_ns_true": int(step_true),
        "stage_work_ns": busy,
        "bubble_ns": bubble,
        "bubble_note": "per step: step time minus the stage's microbatch work windows (see docstring of "
        "_truth_pipeline); includes the stage's share of transfer waits",
        "ideal_bubble_ns": int((P - 1) * (tf + tb)),
        "ideal_bubble_fraction": (P - 1) / (M + P - 1),
        "median_fwd_ns": int(tf),
        "median_bwd_ns": int(tb),
    }


def _profile_start(res: _Result, r: int) -> int:
    spans = _exec_spans(res.gen, res.sim)
    return spans[(r, 0)][0] - int(res.dr["lead"][r])


def _execution_zero(cfg, res: _Result, r: int) -> int:
    """True time that ExecutionInfo's execution_start_ts/end_ts count from on rank r.

    first_hw_timestamp: the profile start (Metadata.first_hw_timestamp, the zero of the relative
    Parquet and zero-based JSON timestamps); first_event: the first written row's timestamp (the
    start of execution 0), so execution 0 starts at 0.
    """
    if cfg.execution_time_base == "first_event":
        return _exec_spans(res.gen, res.sim)[(r, 0)][0]
    return _profile_start(res, r)


def _dma_mode(cfg, r):
    v = cfg.dma_tables
    if isinstance(v, (tuple, list)):
        return v[r % len(v)]
    return v


def _neff_name(cfg, kind, stage):
    if kind == "barrier":
        return "barrier_0.neff"
    return f"stage{stage}.neff" if cfg.pp > 1 else "model.neff"


def _stream_id(stream_index, exe):
    return 7 + 3 * exe + stream_index


def _op_id(cfg, sim, t):
    info = sim.info[t]
    # same NEFF on every rank of a dp/tp group: compiler op ids match; pipeline stages run their
    # own NEFF so op ids are local ordinals on each rank
    return 1000 * info["stream_index"] + info["op_seq"]


# ------------------------------------------------------------------------------- table specs

_SPECS = {
    "Instruction": "start_ts:i64!,end_ts:i64!,duration_ns:i64!,engine:s!,timeline_track:s,pcore_idx:i64,"
    "opcode:s!,operands:s!,compiler_opcode:s,compiler_operands:s,id:i64!,pc:i64!,compiler_pc:i64,"
    "penguin_id:s,raw_penguin_id:i64,bir_id:s!,raw_bir_id:i64,bir_instruction_name:s,kernel_instruction_name:s,"
    "evt_wait_time_ns:i64,hlo_attrs:s,hlo_name:s,raw_hlo_id:i64,raw_framework_id:i64,layer:s,stack_frame_ids:s,"
    "nki_source_location:s,bir_debug_info_source_location:s,dma_trigger_start_ts:i64,dma_trigger_end_ts:i64,"
    "dma_wait_time_ns:i64,instruction_chain:s,hbm_read_bytes:i64,hbm_write_bytes:i64,sbuf_read_bytes:i64,"
    "sbuf_write_bytes:i64,spill_save_bytes:i64,spill_reload_bytes:i64,psum_read_bytes:i64,psum_write_bytes:i64,"
    "input_queue_bytes:i64,output_queue_bytes:i64,weight_queue_bytes:i64,performance_mode:s,"
    "tensor_instruction_type:s,tensor_elements:i64,raw_flops:i64,adjusted_flops:i64,tensor_elements_transpose:i64,"
    "flops_transpose:i64,adjusted_flops_transpose:i64,scalar_activation_fn:s",
    "DmaPacket": "start_ts:i64!,end_ts:i64!,duration_ns:i64!,pcore_idx:i64,id:i64!,packet_idx:i32!,"
    "packet_aggregation_id:i64!,engine_idx:i64,read_bytes:i64!,write_bytes:i64!,transfer_bytes:i64!,"
    "throughput:f!,queue_type:s!,variable:s,queue_name:s,queue_idx:i64,crc:i64!",
    "DmaPacketAggregated": "start_ts:i64!,end_ts:i64!,duration_ns:i64!,id:i64!,pcore_idx:i64,block_id:i32!,"
    "queue_idx:i64!,queue_name:s!,queue_type:s,op:s!,variable:s!,read_bytes:i64!,write_bytes:i64!,"
    "transfer_bytes:i64!,throughput:f!,source:s!,dest:s!,semaphore_id:s!,modular_flow_function:s,"
    "read_sbuf_partitions:s!,read_num_sbuf_partitions:i32!,read_shape:s!,read_offset:s!,read_steps:s!,"
    "write_sbuf_partitions:s!,write_num_sbuf_partitions:i32!,write_shape:s!,write_offset:s!,write_steps:s!,"
    "is_transpose_mode:b,trigger:i64,completion:i64",
    "Flow": "in_id:i64!,out_id:i64!,in_table:s!,out_table:s!,dependency_type:s,gap_time:i64",
    "CcOp": "start_ts:i64!,end_ts:i64!,duration_ns:i64!,operation:s!,algorithm:s!,num_elements:i64!,dtype:s!,"
    "op_id:i64!,stream_id:i64!,stream_index:i64!,trigger_engine:s!,input_size:i64,output_size:i64,"
    "algorithm_bandwidth:f,bus_bandwidth:f,trigger_start_ts:i64,cc_trigger_start_delay:i64,replica_group_id:i64,"
    "replica_group:s",
    "CcInstruction": "start_ts:i64!,end_ts:i64!,duration_ns:i64!,core_idx:i64!,description:s!,trigger_engine:s,"
    "trigger_start_ts:i64",
    "CcStream": "stream_id:i64!,stream_index:i64!,cc_core_ids:s!",
    "ActiveTime": "start_ts:i64!,end_ts:i64!,engine:s!,pcore_idx:i64!,duration_ns:i64!",
    "SemaphoreUpdate": "timestamp:i64!,id:s!,value:i32!,update_source:s,double_set_or_clear:b,update_mode:i32,"
    "update_operation_type:s,update_trigger_timing:s,pcore_idx:i64",
    "Metadata": "profile_schema_version:s!,ntff_version:i32!,num_physical_cores:i32!,vnc_enabled:b!,"
    "first_hw_timestamp:i64!,last_hw_timestamp:i64!,first_ts:s!,last_ts:s!,dma_ddr_bandwidth:f!,"
    "num_dma_engines_per_neuroncore:i32!,hbm_ddr_bandwidth:f!,tensor_engine_num_rows:i64!,"
    "tensor_engine_num_cols:i64!,tensor_engine_clock_freq:f!,vector_engine_clock_freq:f!,"
    "vector_engine_num_channels:i64!,scalar_engine_clock_freq:f!,scalar_engine_num_channels:i64!,"
    "gpsimd_engine_clock_freq:f!,gpsimd_engine_num_channels:i64!,neuroncore_clock_freq:f!,ticks_per_nanosec:i64!,"
    "instance_type:s,runtime_version:s,collectives_version:s,driver_version:s,explorer_version:s,"
    "compiler_version:s,neuroncore_idx:i64,neuron_device_idx:i64,profile_name:s,is_simulation:b",
    "ExecutionInfo": "execution_index:i32!,neff_name:s,execution_start_ts:i64,execution_end_ts:i64,"
    "num_subgraphs:i32,row_count:i64",
    "TensorInfo": "variable_name:s,type:s,format:s,shape:s,size:i64,node:i64,pcore_idx:i64,"
    "load_to_sbuf_avg_size_bytes:i64,load_to_sbuf_total_size_bytes:i64,load_to_sbuf_dma_count:i64,"
    "load_to_sbuf_repeat_factor:f",
    "DmaQueuesInfo": "name:s!,type:s!,pcore_idx:i64!,idx:i64!,engine_idx:i64!,axi_port:i64!,dram_channel:i64!",
    "Warning": "message:s!,category:s!",
    "NeffHeader": "network_name:s,uuid:s,hash:s,enabled_features:s,header_size:i64,data_size:i64,"
    "major_version:i64,minor_version:i64,package_version:s,build_version:s,cc_participant_count:i64,"
    "neuroncore_count:i64,logical_neuroncore_count:i64,pcore_count_per_lnc:i64",
    "Summary": "total_time:f,neuroncore_cycle_count:i64,model_flops:i64,hardware_flops:i64,transpose_flops:i64,"
    "mm_arithmetic_intensity:f,peak_flops_bandwidth_ratio:f,event_count:i64,dma_active_time:f,"
    "dma_active_time_percent:f,dma_transfer_average_bytes:f,dma_transfer_count:i64,dma_transfer_total_bytes:i64,"
    "dma_queue_count:i64,mbu_estimated_percent:f,hbm_write_bytes:i64,hbm_read_bytes:i64,spill_save_bytes:i64,"
    "spill_reload_bytes:i64,tensor_engine_instruction_time:f,tensor_engine_active_time:f,"
    "tensor_engine_active_time_percent:f,tensor_engine_instruction_count:i64,matmul_instruction_count:i64,"
    "mfu_estimated_percent:f,hfu_estimated_percent:f,vector_engine_instruction_time:f,vector_engine_active_time:f,"
    "vector_engine_active_time_percent:f,vector_engine_instruction_count:i64,scalar_engine_instruction_time:f,"
    "scalar_engine_active_time:f,scalar_engine_active_time_percent:f,scalar_engine_instruction_count:i64,"
    "sync_engine_instruction_time:f,sync_engine_active_time:f,sync_engine_active_time_percent:f,"
    "sync_engine_instruction_count:i64,gpsimd_engine_instruction_time:f,gpsimd_engine_active_time:f,"
    "gpsimd_engine_active_time_percent:f,gpsimd_engine_instruction_count:i64,cc_op_time:f,cc_op_active_time:f,"
    "cc_op_active_time_percent:f,cc_op_count:i64,total_exec_time:f,total_active_time:f,total_active_time_percent:f",
    "SchemaFields": "table_name:s!,table_description:s!,field_name:s!,field_description:s!,field_example:s,"
    "field_type:s!,field_required:b!,field_format:s,field_unit:s,field_minimum:f,field_maximum:f,"
    "field_enum_values:s",
}


def _parse_spec(spec):
    out = []
    for part in spec.split(","):
        name, typ = part.split(":")
        req = typ.endswith("!")
        out.append((name, typ.rstrip("!"), req))
    return out


SPECS = {k: _parse_spec(v) for k, v in _SPECS.items()}

_DESCRIPTIONS = {
    "Instruction": "Instructions executed on NeuronCore compute engines.",
    "DmaPacket": "DMA packets moving data within the Neuron Device.",
    "DmaPacketAggregated": "Aggregated DMA transfers, one row per set of packets.",
    "Flow": "Dependency edges between rows of timeline tables.",
    "CcOp": "Collective communication operations.",
    "CcInstruction": "Instructions executed by the CC-Cores.",
    "CcStream": "Collective communication streams.",
    "ActiveTime": "Merged busy intervals per engine.",
    "SemaphoreUpdate": "Semaphore updates.",
    "Metadata": "Profile metadata.",
    "ExecutionInfo": "Per-execution information.",
    "TensorInfo": "Tensors used in the NEFF.",
    "DmaQueuesInfo": "DMA queues.",
    "Warning": "Warnings produced during profile processing.",
    "NeffHeader": "NEFF header.",
    "Summary": "Profile-wide summary metrics.",
    "SchemaFields": "One row per table and field of this profile.",
}


def _unit(name, typ):
    if (
        name.endswith("_ts")
        or name.endswith("_ns")
        or name
        in (
            "timestamp",
            "gap_time",
            "trigger",
            "completion",
            "first_hw_timestamp",
            "last_hw_timestamp",
            "cc_trigger_start_delay",
        )
    ):
        return "nanoseconds"
    if name.endswith("_bytes") or name in ("input_size", "output_size", "size"):
        return "bytes"
    if name in (
        "throughput",
        "algorithm_bandwidth",
        "bus_bandwidth",
        "dma_ddr_bandwidth",
        "hbm_ddr_bandwidth",
    ):
        return "bytes_per_second"
    if name.endswith("_percent"):
        return "percent"
    if name.endswith("clock_freq"):
        return "gigahertz"
    if typ == "f" and name.endswith("_time"):
        return "seconds"
    return None


# ------------------------------------------------------------------------------- table data


class _Frame:
    """Columns of one table for the simulated executions, in true time; tiled on write."""

    def __init__(self, table, cols: dict, n: int, ts=(), ids=(), rel_ts=(), exec_idx=()):
        self.table = table
        self.cols = cols
        self.n = n
        self.ts = set(ts)
        self.ids = dict(ids) if isinstance(ids, dict) else {c: table for c in ids}
        self.rel_ts = set(rel_ts)
        self.exec_idx = set(exec_idx)


def _nz(v):
    return np.nan if v is None else v


class _RankTables:
    """Builds every table of one rank from the simulation."""

    def __init__(self, cfg: _Cfg, res: _Result, r: int):
        self.cfg, self.res, self.r = cfg, res, r
        sim = res.sim
        self.sim = sim
        self.tids = [t for t in range(len(sim.kind)) if sim.rank[t] == r]
        self.stage = _layout(cfg)[r][2]
        self.dup_count = 0
        self._build()

    # --- ids
    def _build(self):
        cfg, sim = self.cfg, self.sim
        insts = [t for t in self.tids if sim.kind[t] == "i"]
        dmas = [t for t in self.tids if sim.kind[t] == "d"]
        ccs = [t for t in self.tids if sim.kind[t] in "cr"]
        insts.sort(key=lambda t: (sim.start[t], t))
        dmas.sort(key=lambda t: (sim.start[t], t))
        self.insts, self.dmas, self.ccs = insts, dmas, ccs
        disjoint = cfg.id_spaces == "disjoint"
        self.ibase = 0
        self.abase = 50_000_000 if disjoint else 0
        self.pbase = 90_000_000 if disjoint else 0
        self.iid = {t: i for i, t in enumerate(insts)}
        self.aid = {t: i for i, t in enumerate(dmas)}
        # packets: global order by start
        pk = []
        for t in dmas:
            inf = sim.info[t]
            for j, (s0, e0, ring) in enumerate(
                zip(inf["pk_start"], inf["pk_end"], inf["pk_ring"], strict=True)
            ):
                pk.append((s0, t, j, e0, ring))
        pk.sort()
        self.packets = pk
        # a block stands for its first-starting packet as the target of an edge and for its
        # last-ending packet as the source (flow_dma_ids="packet"): gap_time stays exact
        self.first_packet, self.last_packet = {}, {}
        for i, (s0, t, _j, e0, _ring) in enumerate(pk):
            if t not in self.first_packet or s0 < pk[self.first_packet[t]][0]:
                self.first_packet[t] = i
            if t not in self.last_packet or e0 > pk[self.last_packet[t]][3]:
                self.last_packet[t] = i
        # trigger -> blocks, blocks -> consumers
        self.trig_blocks: dict = {}
        self.block_trigger: dict = {}
        for t in dmas:
            for d, _lat, typ in sim.deps[t]:
                if typ == "dge":
                    self.trig_blocks.setdefault(d, []).append(t)
                    self.block_trigger[t] = d
        # semaphore-wait instructions (variant)
        self.sem_rows = []
        if cfg.semaphore_instructions:
            for t in insts:
                w = sim.info[t].get("evt_wait", 0)
                if w > 200 and sim.info[t]["opcode"] in (
                    "LDWEIGHTS",
                    "TENSOR_REDUCE",
                    "TENSOR_TENSOR",
                ):
                    self.sem_rows.append(t)

    def cc_waits(self):
        """instruction task -> {semaphore id: value} it waits for (collective completions)."""
        sim = self.sim
        value = {t: v for _ts, sid, _p, _s, v, t in self.semaphore_rows() if sid == _CC_SEM}
        waits: dict = {}
        for t in self.insts:
            for d, _lat, _typ in sim.deps[t]:
                if sim.kind[d] in "cr" and d in value:
                    w = waits.setdefault(t, {})
                    w[_CC_SEM] = max(w.get(_CC_SEM, 0), value[d])
        return waits

    def engine_name(self, eng):
        return eng.lower() if self.cfg.engine_case == "lower" else eng

    def instruction_frame(self):
        cfg, sim = self.cfg, self.sim
        rows = []
        for t in self.insts:
            rows.append(("i", t))
        for t in self.sem_rows:
            rows.append(("s", t))

        def key(rw):
            k, t = rw
            if k == "s":
                return (sim.start[t] - sim.info[t]["evt_wait"], 0, t)
            return (sim.start[t], 1, t)

        rows.sort(key=key)
        n = len(rows)
        c = {name: [None] * n for name, _, _ in SPECS["Instruction"]}
        iid_of = {}
        for i, (k, t) in enumerate(rows):
            if k == "i":
                iid_of[t] = i
        self.iid = iid_of
        for i, (k, t) in enumerate(rows):
            inf = sim.info[t]
            eng = inf["engine"]
            if k == "s":
                w = inf["evt_wait"]
                s0, e0 = sim.start[t] - w, sim.start[t]
                c["start_ts"][i], c["end_ts"][i], c["duration_ns"][i] = s0, e0, w
                c["engine"][i] = self.engine_name(eng)
                c["timeline_track"][i] = eng
                c["opcode"][i] = "EVENT_SEMAPHORE"
                c["operands"][i] = f"S[{5 + ENGINES.index(eng)}] ({eng})>=1 wait"
                c["id"][i] = i
                c["bir_id"][i] = f"sg0000:{900000 + inf['prog'] + 20000 * self.stage}"
                c["pcore_idx"][i] = sim.pcore[t]
                c["layer"][i] = inf.get("layer")
                c["evt_wait_time_ns"][i] = 0
                continue
            s0, e0 = sim.start[t], sim.end[t]
            op = inf["opcode"]
            c["start_ts"][i], c["end_ts"][i], c["duration_ns"][i] = s0, e0, e0 - s0
            c["engine"][i] = self.engine_name(eng)
            c["timeline_track"][i] = "TensorMatrix" if op == "MATMUL" else eng
            c["pcore_idx"][i] = sim.pcore[t]
            c["opcode"][i] = op
            c["operands"][i] = inf.get("operands", "")
            c["compiler_opcode"][i] = inf.get("compiler_opcode", op)
            c["compiler_operands"][i] = inf.get("compiler_operands", inf.get("operands", ""))
            c["id"][i] = i
            c["compiler_pc"][i] = inf["pc"]
            bir = 1000 + inf["prog"] + 20000 * self.stage
            c["penguin_id"][i] = f"sg0000:{bir // 4}"
            c["raw_penguin_id"][i] = bir // 4
            c["bir_id"][i] = f"sg0000:{bir}"
            c["raw_bir_id"][i] = bir
            c["bir_instruction_name"][i] = f"I-{bir}-{sim.pcore[t]}_sg0000"
            c["kernel_instruction_name"][i] = f"inst.{bir}:{bir // 4}"
            c["evt_wait_time_ns"][i] = 0 if t in self.sem_rows else inf.get("evt_wait", 0)
            c["hlo_name"][i] = inf.get("hlo_name")
            c["raw_hlo_id"][i] = (
                None if inf.get("hlo_name") is None else 5000 + _hash_str(inf["hlo_name"]) % 1000
            )
            c["layer"][i] = inf.get("layer")
            src = inf.get("src")
            c["bir_debug_info_source_location"][i] = src
            if inf.get("sub") == "attn" and src is not None:
                nki = ["attention_kernel.py:77", src]
                c["nki_source_location"][i] = nki if cfg.nki_source_as_list else nki[0]
            c["stack_frame_ids"][i] = f"[{101 + (inf.get('layer_idx') or 0)}, 102]" if src else None
            if op == "PSEUDO_TRIGGER_COLLECTIVE":
                c["instruction_chain"][i] = inf.get("chain")
            for src_k, col in (
                ("hbm_read", "hbm_read_bytes"),
                ("hbm_write", "hbm_write_bytes"),
                ("sbuf_read", "sbuf_read_bytes"),
                ("sbuf_write", "sbuf_write_bytes"),
                ("spill_save", "spill_save_bytes"),
                ("spill_reload", "spill_reload_bytes"),
                ("psum_read", "psum_read_bytes"),
                ("psum_write", "psum_write_bytes"),
                ("input_queue", "input_queue_bytes"),
                ("output_queue", "output_queue_bytes"),
                ("weight_queue", "weight_queue_bytes"),
            ):
                if src_k in inf:
                    c[col][i] = inf[src_k]
            if eng in ("Vector", "Scalar") and inf.get("perf"):
                c["performance_mode"][i] = inf["perf"]
            if op == "MATMUL":
                tr = inf.get("transpose")
                c["tensor_instruction_type"][i] = "TRANSPOSE" if tr else "REGULAR"
                c["tensor_elements"][i] = 128 * 128
                c["raw_flops"][i] = inf["flops"]
                c["adjusted_flops"][i] = inf["flops"]
                c["tensor_elements_transpose"][i] = 128 * 128 if tr else 0
                c["flops_transpose"][i] = inf["flops"] if tr else 0
                c["adjusted_flops_transpose"][i] = inf["flops"] if tr else 0
            elif op == "LDWEIGHTS":
                c["tensor_instruction_type"][i] = "REGULAR"
            if op == "ACTIVATE":
                c["scalar_activation_fn"][i] = inf.get("act_fn")
            blocks = self.trig_blocks.get(t)
            if blocks:
                bs = min(sim.start[b] for b in blocks)
                be = max(sim.end[b] for b in blocks)
                c["dma_trigger_start_ts"][i], c["dma_trigger_end_ts"][i] = bs, be
                c["dma_wait_time_ns"][i] = bs - e0
            elif cfg.dma_wait_on == "consumer" and inf.get("wait_dma") is not None:
                # variant: the consuming LDWEIGHTS/MATMUL names the DMA it waited for and how long
                b = inf["wait_dma"]
                ready = s0 - inf.get("evt_wait", 0)
                c["dma_trigger_start_ts"][i], c["dma_trigger_end_ts"][i] = sim.start[b], sim.end[b]
                c["dma_wait_time_ns"][i] = max(0, min(s0, sim.end[b]) - ready)
        if cfg.consumer_semaphores:
            self._name_cc_waits(c, rows)
        # runtime pc: index on the engine within the execution (inserted semaphore waits count)
        pcs: dict = {}
        for i, (_k, t) in enumerate(rows):
            key = (sim.exe[t], sim.pcore[t], sim.info[t]["engine"])
            c["pc"][i] = pcs.get(key, 0)
            pcs[key] = c["pc"][i] + 1
        if _dma_mode(cfg, self.r) != "present":
            for i in range(n):
                c["dma_trigger_start_ts"][i] = c["dma_trigger_end_ts"][i] = c["dma_wait_time_ns"][
                    i
                ] = None
        self.inst_rows = rows
        return _Frame(
            "Instruction",
            c,
            n,
            ts=("start_ts", "end_ts", "dma_trigger_start_ts", "dma_trigger_end_ts"),
            ids=("id",),
        )

    def _name_cc_waits(self, c, rows):
        """Variant: waits on collective completions named in the operand text."""
        cfg = self.cfg
        col = cfg.consumer_semaphore_column
        named = cfg.consumer_semaphore_spelling == "named"

        def sem(sid):
            return sid if named else "$" + sid.split(" ")[0]

        waits = self.cc_waits()
        for i, (k, t) in enumerate(rows):
            if k != "i":
                continue
            if c["opcode"][i] == "PSEUDO_TRIGGER_COLLECTIVE":
                # the trigger's fixed "$S[1x]>=1" is no recorded wait: drop it; its increment
                # names the semaphore SemaphoreUpdate shows for the collective's completion
                for name in ("operands", "compiler_operands", "instruction_chain"):
                    v = c[name][i]
                    if v:
                        v = re.sub(r"\$S\[\d+\]>=1 ", "", v)
                        inc = sem(_CC_SEM) if name == col else "$S[15]"
                        c[name][i] = re.sub(r"\$S\[\d+\]\+\+@complete", inc + "++@complete", v)
            w = waits.get(t)
            if w:
                txt = " ".join(f"{sem(sid)}>={v}" for sid, v in sorted(w.items()))
                old = c[col][i] or ""
                c[col][i] = f"{txt} {old}" if old else txt

    def dma_frames(self, rng):
        cfg, sim = self.cfg, self.sim
        unknown = cfg.dma_variable_unknown
        # aggregated
        na = len(self.dmas)
        ca = {name: [None] * na for name, _, _ in SPECS["DmaPacketAggregated"]}
        block_ctr: dict = {}
        for i, t in enumerate(self.dmas):
            inf = sim.info[t]
            q = _QUEUES[inf["qkey"]]
            s0, e0 = sim.start[t], sim.end[t]
            nb = inf["nbytes"]
            ca["start_ts"][i], ca["end_ts"][i], ca["duration_ns"][i] = s0, e0, e0 - s0
            ca["id"][i] = self.abase + i
            ca["pcore_idx"][i] = sim.pcore[t]
            bk = (q[0], sim.pcore[t])
            ca["block_id"][i] = block_ctr.get(bk, 0)
            block_ctr[bk] = ca["block_id"][i] + 1
            ca["queue_idx"][i] = q[7]
            ca["queue_name"][i] = q[0]
            ca["queue_type"][i] = q[1]
            ca["op"][i] = q[6]
            ca["variable"][i] = "unknown" if unknown else inf["variable"]
            ca["read_bytes"][i] = nb
            ca["write_bytes"][i] = nb
            ca["transfer_bytes"][i] = nb
            ca["throughput"][i] = nb / max(1, e0 - s0) * 1e9
            ca["source"][i], ca["dest"][i] = q[4], q[5]
            ca["semaphore_id"][i] = f"S[{q[8]}] ({q[0]})"
            ca["modular_flow_function"][i] = "sg0000:0"
            parts = max(1, min(128, nb // 2048))
            sb_parts = f"0-{parts - 1}" if parts > 1 else "0"
            rows_ = nb // (2 * 512) if nb >= 1024 else 1
            ca["read_sbuf_partitions"][i] = sb_parts if q[4] == "[[SB]]" else ""
            ca["read_num_sbuf_partitions"][i] = parts if q[4] == "[[SB]]" else 0
            ca["read_shape"][i] = f"[{rows_}, 512]"
            ca["read_offset"][i] = f"[0x{0x2000 + 0x400 * (i % 64):x}]"
            ca["read_steps"][i] = "[1, 1024]"
            ca["write_sbuf_partitions"][i] = sb_parts if q[5] == "[SB]" else ""
            ca["write_num_sbuf_partitions"][i] = parts if q[5] == "[SB]" else 0
            ca["write_shape"][i] = f"[{rows_}, 512]"
            ca["write_offset"][i] = f"[0x{0x1000 + 0x400 * (i % 64):x}]"
            ca["write_steps"][i] = "[1, 32]"
            ca["is_transpose_mode"][i] = False
            trig = self.block_trigger.get(t)
            if trig is not None:
                ca["trigger"][i] = sim.start[trig]
                ca["completion"][i] = sim.end[trig]
        fa = _Frame(
            "DmaPacketAggregated",
            ca,
            na,
            ts=("start_ts", "end_ts", "trigger", "completion"),
            ids=("id",),
        )
        # packets
        pk = self.packets
        rows = list(range(len(pk)))
        dup = []
        if cfg.duplicate_packets > 0 and pk:
            k = int(round(cfg.duplicate_packets * len(pk)))
            dup = sorted(rng.choice(len(pk), size=min(k, len(pk)), replace=False).tolist())
            rows = sorted(rows + dup)
        self.dup_count = len(dup)
        npk = len(rows)
        cp = {name: [None] * npk for name, _, _ in SPECS["DmaPacket"]}
        crc_rng = np.random.default_rng([cfg.seed, 13, self.r])
        crcs = crc_rng.integers(0, 2**32, len(pk))
        for i, j in enumerate(rows):
            s0, t, idx, e0, ring = pk[j]
            inf = sim.info[t]
            q = _QUEUES[inf["qkey"]]
            b = inf["packets"][idx][0]
            cp["start_ts"][i], cp["end_ts"][i], cp["duration_ns"][i] = s0, e0, e0 - s0
            cp["pcore_idx"][i] = sim.pcore[t]
            cp["id"][i] = self.pbase + j
            cp["packet_idx"][i] = idx
            cp["packet_aggregation_id"][i] = self.abase + self.aid[t]
            cp["engine_idx"][i] = ring
            cp["read_bytes"][i] = cp["write_bytes"][i] = cp["transfer_bytes"][i] = b
            cp["throughput"][i] = b / max(1, e0 - s0) * 1e9
            cp["queue_type"][i] = q[1]
            cp["variable"][i] = "unknown" if unknown else inf["variable"]
            cp["queue_name"][i] = q[0]
            cp["queue_idx"][i] = q[7]
            cp["crc"][i] = int(crcs[j])
        fp = _Frame(
            "DmaPacket",
            cp,
            npk,
            ts=("start_ts", "end_ts"),
            ids={"id": "DmaPacket", "packet_aggregation_id": "DmaPacketAggregated"},
        )
        return fa, fp

    def flow_frame(self):
        cfg, sim = self.cfg, self.sim
        dma_ok = _dma_mode(cfg, self.r) == "present"
        names = {
            "capitalised": ("Instruction", "DmaPacketAggregated", "DmaPacket"),
            "snake": ("instruction", "dma_packet_aggregated", "dma_packet"),
            "legacy": ("instruction", "dma_block", "dma_packet"),
        }[cfg.flow_table_names]
        rows = []
        for t in self.tids:
            k = sim.kind[t]
            if k not in "id":
                continue
            for d, _lat, typ in sim.deps[t]:
                kd = sim.kind[d]
                if typ in ("host", "cc", "pp") or kd not in "id":
                    continue
                if (k == "d" or kd == "d") and not dma_ok:
                    continue
                dt = {"flow": "FLOW_DEPENDENCE", "dge": "DGE_TRIGGER", "anti": "ANTI_DEPENDENCE"}[
                    typ
                ]
                rows.append((d, t, dt))
        n = len(rows)
        c = {name: [None] * n for name, _, _ in SPECS["Flow"]}
        kinds_in, kinds_out = [], []
        for i, (a, b, dt) in enumerate(rows):
            for side, tt, kl in (("in", a, kinds_in), ("out", b, kinds_out)):
                if sim.kind[tt] == "i":
                    c[f"{side}_id"][i] = self.iid[tt]
                    c[f"{side}_table"][i] = names[0]
                    kl.append("Instruction")
                elif cfg.flow_dma_ids == "packet":
                    rep = self.first_packet if side == "out" else self.last_packet
                    c[f"{side}_id"][i] = self.pbase + rep[tt]
                    c[f"{side}_table"][i] = names[2]
                    kl.append("DmaPacket")
                else:
                    c[f"{side}_id"][i] = self.abase + self.aid[tt]
                    c[f"{side}_table"][i] = names[1]
                    kl.append("DmaPacketAggregated")
            c["dependency_type"][i] = dt
            c["gap_time"][i] = sim.start[b] - sim.end[a]
        f = _Frame("Flow", c, n)
        f.row_tables = (kinds_in, kinds_out)
        return f

    def cc_frames(self):
        cfg, sim = self.cfg, self.sim
        ccs = sorted(self.ccs, key=lambda t: (sim.start[t], t))
        n = len(ccs)
        c = {name: [None] * n for name, _, _ in SPECS["CcOp"]}
        ci = {name: [] for name, _, _ in SPECS["CcInstruction"]}
        rg_rng = np.random.default_rng([cfg.seed, 17, self.r])
        for i, t in enumerate(ccs):
            inf = sim.info[t]
            s0, e0 = sim.start[t], sim.end[t]
            op = inf["op"]
            nm = len(inf["members"])
            nb = inf["nbytes"]
            out = nb * nm if op == "AllGather" else (nb // nm if op == "ReduceScatter" else nb)
            dur = max(1, e0 - s0)
            c["start_ts"][i], c["end_ts"][i], c["duration_ns"][i] = s0, e0, e0 - s0
            c["operation"][i] = op
            c["algorithm"][i] = inf["algorithm"]
            c["num_elements"][i] = nb // 2
            c["dtype"][i] = "bf16" if nb > 4 else "fp32"
            c["op_id"][i] = _op_id(cfg, sim, t)
            c["stream_id"][i] = _stream_id(inf["stream_index"], sim.exe[t])
            c["stream_index"][i] = inf["stream_index"]
            c["trigger_engine"][i] = _TRIGGER_NAME[inf["trigger_engine"]]
            c["input_size"][i], c["output_size"][i] = nb, out
            c["algorithm_bandwidth"][i] = max(nb, out) / dur * 1e9
            c["bus_bandwidth"][i] = c["algorithm_bandwidth"][i] * _cc_factor(op, nm)
            trig = inf.get("trigger")
            if trig is not None:
                # queued behind the previous op of its stream (back to back): no trigger fields
                pred = sim.pred[t]
                back_to_back = pred >= 0 and sim.end[pred] >= sim.end[trig]
                if not back_to_back:
                    c["trigger_start_ts"][i] = sim.start[trig]
                    c["cc_trigger_start_delay"][i] = s0 - sim.start[trig]
            members = inf["members"]
            c["replica_group_id"][i] = inf["group_id"]
            if op == "CollectivePermute":
                c["replica_group"][i] = f"[[{members[0]}, {members[1]}]]"
            else:
                c["replica_group"][i] = self._replica_group(members)
            if cfg.replica_group_empty and rg_rng.random() < 0.3:
                c["replica_group"][i] = "[]"
            # CC-core instructions
            cores = _cc_cores(inf["stream_index"])
            for j, core in enumerate(cores):
                a = s0 + (e0 - s0) * j // (2 * len(cores))
                b = e0 - (e0 - s0) * j // (4 * len(cores))
                ci["start_ts"].append(a)
                ci["end_ts"].append(b)
                ci["duration_ns"].append(b - a)
                ci["core_idx"].append(core)
                ci["description"].append("DMA_ADVANCE" if j % 2 == 0 else "SEM_INCREMENT")
                ci["trigger_engine"].append(_TRIGGER_NAME[inf["trigger_engine"]])
                ci["trigger_start_ts"].append(sim.start[trig] if trig is not None else None)
        fc = _Frame(
            "CcOp", c, n, ts=("start_ts", "end_ts", "trigger_start_ts"), ids={"stream_id": "stream"}
        )
        fi = _Frame(
            "CcInstruction", ci, len(ci["start_ts"]), ts=("start_ts", "end_ts", "trigger_start_ts")
        )
        streams = sorted(
            {
                (_stream_id(sim.info[t]["stream_index"], sim.exe[t]), sim.info[t]["stream_index"])
                for t in ccs
            }
        )
        cs = {
            "stream_id": [a for a, _ in streams],
            "stream_index": [b for _, b in streams],
            "cc_core_ids": ["[" + ",".join(map(str, _cc_cores(b))) + "]" for _, b in streams],
        }
        fs = _Frame("CcStream", cs, len(streams), ids={"stream_id": "stream"})
        return fc, fi, fs

    def _replica_group(self, members):
        cfg = self.cfg
        _, tpg, dpg = _groups(cfg)
        ms = sorted(members)
        if len(ms) == cfg.ranks:
            return "[[" + ", ".join(map(str, ms)) + "]]"
        for groups in (tpg, dpg):
            vals = [sorted(v) for _, v in sorted(groups.items())]
            if ms in vals:
                return "[" + ", ".join("[" + ", ".join(map(str, g)) + "]" for g in vals) + "]"
        return "[[" + ", ".join(map(str, ms)) + "]]"

    def active_frame(self):
        sim = self.sim
        ivs: dict = {}
        for t in self.insts:
            key = (sim.info[t]["engine"].lower(), sim.pcore[t])
            ivs.setdefault(key, []).append((sim.start[t], sim.end[t]))
        c = {"start_ts": [], "end_ts": [], "engine": [], "pcore_idx": [], "duration_ns": []}
        for (eng, p), v in sorted(ivs.items()):
            for s0, e0 in _union(v)[1]:
                c["start_ts"].append(s0)
                c["end_ts"].append(e0)
                c["engine"].append(eng)
                c["pcore_idx"].append(p)
                c["duration_ns"].append(e0 - s0)
        self.active = c
        return _Frame("ActiveTime", c, len(c["start_ts"]), ts=("start_ts", "end_ts"))

    def semaphore_rows(self):
        """(timestamp, semaphore id, pcore, source, value, task) of every SemaphoreUpdate row."""
        sim = self.sim
        rows = []
        for t in self.dmas:
            q = _QUEUES[sim.info[t]["qkey"]]
            rows.append((sim.end[t], f"S[{q[8]}] ({q[0]})", sim.pcore[t], "AXI", t))
        for t in self.ccs:
            rows.append((sim.end[t], _CC_SEM, 0, "GpSimd", t))
        rows.sort(key=lambda x: x[:4])
        val: dict = {}
        out = []
        for ts, sid, p, src, t in rows:
            val[sid] = val.get(sid, 0) + 1
            out.append((ts, sid, p, src, val[sid], t))
        return out

    def semaphore_frame(self):
        rows = self.semaphore_rows()
        c = {name: [] for name, _, _ in SPECS["SemaphoreUpdate"]}
        for ts, sid, p, src, _v, _t in rows:
            c["timestamp"].append(ts)
            c["id"].append(sid)
            c["value"].append(_v)
            c["update_source"].append(src)
            c["double_set_or_clear"].append(False)
            c["update_mode"].append(0)
            c["update_operation_type"].append("sem_inc")
            c["update_trigger_timing"].append("complete")
            c["pcore_idx"].append(p)
        return _Frame("SemaphoreUpdate", c, len(rows), ts=("timestamp",))

    def exec_frame(self):
        """ExecutionInfo in true time; _tile moves it onto the execution time base (rel_ts)."""
        res = self.res
        spans = _exec_spans(res.gen, res.sim)
        c = {name: [] for name, _, _ in SPECS["ExecutionInfo"]}
        for e, (kind, _s) in enumerate(res.gen.exec_plan):
            a, b = spans[(self.r, e)]
            c["execution_index"].append(e)
            c["neff_name"].append(_neff_name(self.cfg, kind, self.stage))
            c["execution_start_ts"].append(a)
            c["execution_end_ts"].append(b)
            c["num_subgraphs"].append(self.cfg.lnc)
            c["row_count"].append(sum(1 for t in self.insts if self.sim.exe[t] == e))
        return _Frame(
            "ExecutionInfo",
            c,
            len(c["execution_index"]),
            rel_ts=("execution_start_ts", "execution_end_ts"),
            exec_idx=("execution_index",),
        )


def _cc_cores(stream_index):
    return [8 + 4 * stream_index + k for k in range(4)]


def _hash_str(s: str) -> int:
    """Stable small hash (Python's hash() is salted per process)."""
    h = 2166136261
    for ch in s.encode():
        h = ((h ^ ch) * 16777619) & 0xFFFFFFFF
    return h


# -------------------------------------------------------------------------------- tiling / arrow


def _arrow_type(typ, cfg):
    if typ == "i64":
        return pa.int64()
    if typ == "i32":
        return pa.int32()
    if typ == "f":
        return pa.float32() if cfg.float_type == "float32" else pa.float64()
    if typ == "d":
        return pa.float64()
    if typ == "b":
        return pa.bool_()
    return pa.large_string() if cfg.string_type == "large_string" else pa.string()


def _to_arrow(values, typ, cfg, name=None):
    at = _arrow_type(typ, cfg)
    if typ in ("i64", "i32"):
        if isinstance(values, np.ndarray) and values.dtype.kind in "iu":
            return pa.array(values.astype(np.int64), type=pa.int64()).cast(at)
        arr = (
            np.array([_nz(v) for v in values], dtype=np.float64)
            if not isinstance(values, np.ndarray)
            else values
        )
        if arr.dtype.kind == "f":
            mask = np.isnan(arr)
            ints = np.where(mask, 0, arr).astype(np.int64)
            return pa.array(ints, type=pa.int64(), mask=mask if mask.any() else None).cast(at)
        return pa.array(arr.astype(np.int64), type=pa.int64()).cast(at)
    if typ in ("f", "d"):
        arr = np.array([_nz(v) for v in values], dtype=np.float64)
        mask = np.isnan(arr)
        return pa.array(arr, type=pa.float64(), mask=mask if mask.any() else None).cast(at)
    if typ == "b":
        return pa.array(list(values), type=pa.bool_())
    vals = list(values)
    if name == "nki_source_location" and cfg.nki_source_as_list:
        return pa.array([v if v is None else list(v) for v in vals], type=pa.list_(pa.string()))
    return pa.array(vals, type=at)


def _tile(frame: _Frame, cfg, copies, shift, sizes, off, rel_off, n_exec, raw=False):
    """Arrow table for `copies` repeats of a frame. ts + off; rel ts + rel_off; ids shifted."""
    spec = SPECS[frame.table]
    arrays, names = [], []
    row_tables = getattr(frame, "row_tables", None)
    reps = np.repeat(np.arange(copies, dtype=np.int64), frame.n) if copies > 1 else None
    for name, typ, _req in spec:
        vals = frame.cols.get(name)
        if vals is None:
            vals = [None] * frame.n
        is_ts = name in frame.ts or name in frame.rel_ts
        is_id = (
            name in frame.ids
            or name in frame.exec_idx
            or (row_tables is not None and name in ("in_id", "out_id"))
        )
        if (is_ts or is_id) and typ in ("i64", "i32"):
            base = np.array([_nz(v) for v in vals], dtype=np.float64)
            if copies > 1:
                arr = np.tile(base, copies)
                if is_ts:
                    arr = arr + reps * shift
                elif name in frame.exec_idx:
                    arr = arr + reps * n_exec
                elif row_tables is not None and name in ("in_id", "out_id"):
                    kinds = row_tables[0] if name == "in_id" else row_tables[1]
                    per = np.array([sizes[k] for k in kinds], dtype=np.float64)
                    arr = arr + reps * np.tile(per, copies)
                else:
                    arr = arr + reps * sizes[frame.ids[name]]
            else:
                arr = base
            if name in frame.ts:
                arr = arr + off
            elif name in frame.rel_ts:
                arr = arr + rel_off
            arrays.append(_to_arrow(arr, typ, cfg, name))
        else:
            a = _to_arrow(vals, typ, cfg, name)
            if copies > 1:
                a = pa.concat_arrays([a] * copies)
            arrays.append(a)
        names.append(name)
    tbl = pa.Table.from_arrays(arrays, names=names)
    if raw:  # the JSON writer reads the documented names
        return tbl
    ren = cfg.rename_fields.get(frame.table, {})
    if ren:
        tbl = tbl.rename_columns([ren.get(n, n) for n in tbl.column_names])
    if cfg.sparse_columns:
        keep = [
            i for i, (nm, _t, req) in enumerate(spec) if req or tbl.column(i).null_count < len(tbl)
        ]
        tbl = tbl.select(keep)
    return tbl


def _small_table(table, rows: dict, cfg):
    spec = SPECS[table]
    n = len(next(iter(rows.values()))) if rows else 0
    arrays = [_to_arrow(rows.get(nm, [None] * n), typ, cfg, nm) for nm, typ, _ in spec]
    tbl = pa.Table.from_arrays(arrays, names=[nm for nm, _, _ in spec])
    ren = cfg.rename_fields.get(table, {})
    if ren:
        tbl = tbl.rename_columns([ren.get(x, x) for x in tbl.column_names])
    return tbl


def _file_name(table, cfg):
    if cfg.table_file_names == "snake":
        out = []
        for i, ch in enumerate(table):
            if ch.isupper() and i:
                out.append("_")
            out.append(ch.lower())
        return "".join(out)
    return table


def _write_parquet(tbl, directory, table, cfg):
    base = _file_name(table, cfg)
    if cfg.split_rows and len(tbl) > cfg.split_rows:
        k = 0
        for s in range(0, len(tbl), cfg.split_rows):
            pq.write_table(
                tbl.slice(s, cfg.split_rows), os.path.join(directory, f"{base}_{k}.parquet")
            )
            k += 1
        return [f"{base}_{i}.parquet" for i in range(k)]
    pq.write_table(tbl, os.path.join(directory, f"{base}.parquet"))
    return [f"{base}.parquet"]


# ------------------------------------------------------------------------------ rank writer


class _RankWriter:
    def __init__(self, cfg: _Cfg, res: _Result, r: int, copies: int):
        self.cfg, self.res, self.r, self.copies = cfg, res, r, copies
        self.rt = _RankTables(cfg, res, r)
        spans = _exec_spans(res.gen, res.sim)
        ends = [spans[(rr, e)][1] for rr in range(cfg.ranks) for e in range(len(res.gen.exec_plan))]
        starts = [spans[(rr, 0)][0] for rr in range(cfg.ranks)]
        self.shift = (max(ends) - min(starts)) + cfg.host_gap_ns if copies > 1 else 0
        self.n_exec = len(res.gen.exec_plan)
        self.pstart = _profile_start(res, r)
        # true time of the zero of ExecutionInfo's start/end (cfg.execution_time_base)
        self.exec_zero = _execution_zero(cfg, res, r)
        self.clock = int(res.dr["clock"][r])
        self.pend = (
            max(spans[(r, e)][1] for e in range(self.n_exec)) + self.shift * (copies - 1) + 2000
        )
        self.frames = {}
        rng = np.random.default_rng([cfg.seed, 19, r])
        self.frames["Instruction"] = self.rt.instruction_frame()
        fa, fp = self.rt.dma_frames(rng)
        self.frames["DmaPacketAggregated"], self.frames["DmaPacket"] = fa, fp
        self.frames["Flow"] = self.rt.flow_frame()
        fc, fi, fs = self.rt.cc_frames()
        self.frames["CcOp"], self.frames["CcInstruction"], self.frames["CcStream"] = fc, fi, fs
        self.frames["ActiveTime"] = self.rt.active_frame()
        self.frames["SemaphoreUpdate"] = self.rt.semaphore_frame()
        self.frames["ExecutionInfo"] = self.rt.exec_frame()
        self.sizes = {
            "Instruction": self.frames["Instruction"].n,
            "DmaPacketAggregated": self.frames["DmaPacketAggregated"].n,
            "DmaPacket": len(self.rt.packets),
            "stream": len(fs.cols["stream_id"]) and 3 * self.n_exec,
        }

    def offset(self, fmt):
        cfg = self.cfg
        base = cfg.parquet_time_base if fmt == "parquet" else cfg.json_time_base
        if base in ("device",):
            return self.clock
        return -self.pstart

    def table(self, name, fmt="parquet"):
        return _tile(
            self.frames[name],
            self.cfg,
            self.copies,
            self.shift,
            self.sizes,
            self.offset(fmt),
            -self.exec_zero,
            self.n_exec,
            raw=fmt == "json",
        )

    # ---- small tables
    def metadata(self):
        cfg, hw = self.cfg, _HW[self.cfg.hardware]
        first = self.pstart + self.clock
        last = self.pend + self.clock
        return {
            "profile_schema_version": [cfg.schema_version],
            "ntff_version": [6],
            "num_physical_cores": [cfg.lnc],
            "vnc_enabled": [cfg.lnc > 1],
            "first_hw_timestamp": [first],
            "last_hw_timestamp": [last],
            "first_ts": ["1970-01-01 00:00:00+00:00"],
            "last_ts": ["1970-01-01 00:00:00+00:00"],
            "dma_ddr_bandwidth": [hw["dma_bw"]],
            "num_dma_engines_per_neuroncore": [N_RINGS],
            "hbm_ddr_bandwidth": [hw["hbm_bw"]],
            "tensor_engine_num_rows": [hw["te_rows"]],
            "tensor_engine_num_cols": [hw["te_cols"]],
            "tensor_engine_clock_freq": [hw["te_clock"]],
            "vector_engine_clock_freq": [hw["vector_clock"]],
            "vector_engine_num_channels": [128],
            "scalar_engine_clock_freq": [hw["scalar_clock"]],
            "scalar_engine_num_channels": [128],
            "gpsimd_engine_clock_freq": [hw["gpsimd_clock"]],
            "gpsimd_engine_num_channels": [8],
            "neuroncore_clock_freq": [hw["nc_clock"]],
            "ticks_per_nanosec": [1],
            "instance_type": [hw["instance_type"]],
            "runtime_version": ["2.28.19"],
            "collectives_version": ["2.28.20"],
            "driver_version": ["2.24.7"],
            "explorer_version": ["2.33.0" if cfg.schema_version.startswith("12") else "2.31.0"],
            "compiler_version": ["2.21.18"],
            "neuroncore_idx": [0],  # process-local: every rank's process sees its core as 0
            "neuron_device_idx": [(self.r * cfg.lnc // hw["cores_per_device"]) % 16],
            "profile_name": [self.display_name()],
            "is_simulation": [False],
        }

    def display_name(self):
        cfg = self.cfg
        if cfg.session_capture:
            return f"{cfg.job_name}_rank{self.r}_pid{4100 + self.r}_session_{cfg.seed % 97:02d}"
        return f"{cfg.job_name}_rank{self.r}"

    def summary(self, percent):
        cfg, rt, sim = self.cfg, self.rt, self.rt.sim
        k = self.copies
        total_ns = self.pend - self.pstart
        act = rt.active
        per_eng_active = {}
        for e, s0, e0 in zip(act["engine"], act["start_ts"], act["end_ts"], strict=True):
            per_eng_active[e] = per_eng_active.get(e, 0) + (e0 - s0)
        per_eng_time: dict = {}
        per_eng_cnt: dict = {}
        for t in rt.insts:
            e = sim.info[t]["engine"].lower()
            per_eng_time[e] = per_eng_time.get(e, 0) + sim.end[t] - sim.start[t]
            per_eng_cnt[e] = per_eng_cnt.get(e, 0) + 1
        mm = [t for t in rt.insts if sim.info[t]["opcode"] == "MATMUL"]
        hw_flops = sum(sim.info[t]["flops"] for t in mm) * k
        tr_flops = sum(sim.info[t]["flops"] for t in mm if sim.info[t].get("transpose")) * k
        hw = _HW[cfg.hardware]
        peak = hw["te_rows"] * hw["te_cols"] * 2 * hw["te_clock"] * 1e9 * cfg.lnc
        pk = [(s0, e0) for s0, t, j, e0, _ in rt.packets]
        dma_union = _union(pk)[0] * k
        kernel_bytes = (
            sum(sim.info[t]["nbytes"] for t in rt.dmas if sim.info[t]["qkey"] != "pio") * k
        )
        nblocks = len(rt.dmas) * k
        hbm_r = (
            sum(
                sim.info[t]["nbytes"]
                for t in rt.dmas
                if _QUEUES[sim.info[t]["qkey"]][4] != "[[SB]]"
            )
            * k
        )
        hbm_w = (
            sum(sim.info[t]["nbytes"] for t in rt.dmas if _QUEUES[sim.info[t]["qkey"]][5] != "[SB]")
            * k
        )
        spill_s = (
            sum(sim.info[t]["nbytes"] for t in rt.dmas if sim.info[t]["qkey"] == "spill_save") * k
        )
        spill_r = (
            sum(
                sim.info[t]["nbytes"]
                for t in rt.dmas
                if sim.info[t]["qkey"] in ("spill_reload", "bwd_reload")
            )
            * k
        )
        cc_iv = [(sim.start[t], sim.end[t]) for t in rt.ccs]
        cc_time = sum(e - s for s, e in cc_iv) * k
        cc_act = _union(cc_iv)[0] * k
        all_iv = [(sim.start[t], sim.end[t]) for t in rt.insts]
        tot_act = _union(all_iv)[0] * k
        T = total_ns / 1e9
        out = {
            "total_time": T,
            "neuroncore_cycle_count": int(total_ns * hw["nc_clock"]),
            "model_flops": hw_flops - tr_flops,
            "hardware_flops": hw_flops,
            "transpose_flops": tr_flops,
            "mm_arithmetic_intensity": hw_flops / max(1, hbm_r + hbm_w),
            "peak_flops_bandwidth_ratio": peak / hw["dma_bw"],
            "event_count": (len(rt.insts) + len(rt.packets) + len(rt.ccs)) * k,
            "dma_active_time": dma_union / 1e9,
            "dma_active_time_percent": dma_union / total_ns * percent,
            "dma_transfer_average_bytes": kernel_bytes / max(1, nblocks),
            "dma_transfer_count": nblocks,
            "dma_transfer_total_bytes": kernel_bytes,
            "dma_queue_count": len({sim.info[t]["queue"] for t in rt.dmas}),
            "mbu_estimated_percent": (hbm_r + hbm_w) / max(T, 1e-12) / hw["dma_bw"] * percent,
            "hbm_write_bytes": hbm_w,
            "hbm_read_bytes": hbm_r,
            "spill_save_bytes": spill_s,
            "spill_reload_bytes": spill_r,
            "matmul_instruction_count": len(mm) * k,
            "mfu_estimated_percent": (hw_flops - tr_flops) / max(T, 1e-12) / peak * percent,
            "hfu_estimated_percent": hw_flops / max(T, 1e-12) / peak * percent,
            "cc_op_time": cc_time / 1e9,
            "cc_op_active_time": cc_act / 1e9,
            "cc_op_active_time_percent": cc_act / total_ns * percent,
            "cc_op_count": len(rt.ccs) * k,
            "total_exec_time": T,
            "total_active_time": tot_act / 1e9,
            "total_active_time_percent": tot_act / total_ns * percent,
        }
        for e in ("tensor", "vector", "scalar", "sync", "gpsimd"):
            out[f"{e}_engine_instruction_time"] = per_eng_time.get(e, 0) * k / 1e9
            out[f"{e}_engine_active_time"] = per_eng_active.get(e, 0) * k / 1e9
            out[f"{e}_engine_active_time_percent"] = (
                per_eng_active.get(e, 0) * k / total_ns * percent
            )
            out[f"{e}_engine_instruction_count"] = per_eng_cnt.get(e, 0) * k
        if _dma_mode(cfg, self.r) != "present":
            for key in (
                "dma_active_time",
                "dma_active_time_percent",
                "dma_transfer_average_bytes",
                "dma_transfer_count",
                "dma_transfer_total_bytes",
            ):
                out[key] = None
        return out

    def tensorinfo(self):
        cfg, rt, sim = self.cfg, self.rt, self.rt.sim
        var_loads: dict = {}
        for t in rt.dmas:
            inf = sim.info[t]
            if inf["qkey"] in ("weights", "input"):
                d = var_loads.setdefault(inf["variable"], [0, 0])
                d[0] += inf["nbytes"]
                d[1] += 1
        rows = {nm: [] for nm, _, _ in SPECS["TensorInfo"]}

        def add(var, typ, shape, size, fmt, node):
            ld = var_loads.get(var)
            rows["variable_name"].append(var)
            rows["type"].append(typ)
            rows["format"].append(fmt)
            rows["shape"].append(shape)
            rows["size"].append(size)
            rows["node"].append(node)
            rows["pcore_idx"].append(0)
            stats = cfg.tensorinfo_load_stats and ld is not None
            rows["load_to_sbuf_avg_size_bytes"].append(
                ld[0] * self.copies // (ld[1] * self.copies) if stats else None
            )
            rows["load_to_sbuf_total_size_bytes"].append(ld[0] * self.copies if stats else None)
            rows["load_to_sbuf_dma_count"].append(ld[1] * self.copies if stats else None)
            rows["load_to_sbuf_repeat_factor"].append(ld[0] * self.copies / size if stats else None)

        inputs = sorted(
            {sim.info[t]["variable"] for t in rt.dmas if sim.info[t]["qkey"] == "input"}
        )
        for i, v in enumerate(inputs):
            add(
                v,
                "IN",
                "512 256 1 1" if v == "input0" else "64 512 1 1",
                512 * KiB if v == "input0" else 64 * KiB,
                "NHWC",
                10 + i,
            )
        wts = sorted({sim.info[t]["variable"] for t in rt.dmas if sim.info[t]["qkey"] == "weights"})
        for i, v in enumerate(wts):
            add(v, cfg.weights_tensor_type, "1024 1024 1 1", cfg.weight_bytes, "NCHW", 50 + i)
        if any(sim.info[t]["qkey"] == "output" for t in rt.dmas):
            add("output0", "OUT", "512 128 1 1", 256 * KiB, "NHWC", 99)
        return rows

    def dmaqueues(self):
        cfg = self.cfg
        rows = {nm: [] for nm, _, _ in SPECS["DmaQueuesInfo"]}
        seen = set()
        for p in range(cfg.lnc):
            for _k, q in _QUEUES.items():
                for ring in q[3]:
                    key = (q[0], p, ring)
                    if key in seen:
                        continue
                    seen.add(key)
                    rows["name"].append(q[0])
                    rows["type"].append(q[2])
                    rows["pcore_idx"].append(p)
                    rows["idx"].append(q[7])
                    rows["engine_idx"].append(ring)
                    rows["axi_port"].append(ring % 2)
                    rows["dram_channel"].append(ring % 4)
        return rows

    def warnings(self):
        cfg = self.cfg
        rows = {"message": [], "category": []}
        if _dma_mode(cfg, self.r) != "present" or cfg.dma_variable_unknown:
            rows["message"].append(
                "DMA results may not be accurate: DGE notifications were not collected. "
                "Recapture with --enable-dge-notifs for accurate DMA metrics."
            )
            rows["category"].append("Missing Data")
        return rows

    def neffheader(self):
        cfg = self.cfg
        return {
            "network_name": [_neff_name(cfg, "model", self.rt.stage)],
            "uuid": [f"{_hash_str(cfg.job_name + str(self.rt.stage)):08x}ac9c4104b0e01ece540d4097"],
            "hash": [f"{_hash_str(cfg.name):08x}cffd23c20fa431a0b1472002"],
            "enabled_features": ["coalesced-cc, queue-set-instances, on-chip-functions"],
            "header_size": [1024],
            "data_size": [48 * MiB],
            "major_version": [2],
            "minor_version": [0],
            "package_version": ["0"],
            "build_version": ["0"],
            "cc_participant_count": [cfg.ranks],
            "neuroncore_count": [cfg.lnc],
            "logical_neuroncore_count": [1],
            "pcore_count_per_lnc": [cfg.lnc],
        }

    # ---- writers
    def write_parquet(self, directory):
        cfg = self.cfg
        os.makedirs(directory, exist_ok=True)
        mode = _dma_mode(cfg, self.r)
        written = {}
        tables = {}
        for name in ("Instruction", "Flow", "ActiveTime", "SemaphoreUpdate", "ExecutionInfo"):
            tables[name] = self.table(name)
        if self.frames["CcOp"].n:
            for name in ("CcOp", "CcInstruction", "CcStream"):
                tables[name] = self.table(name)
        if mode == "present":
            tables["DmaPacketAggregated"] = self.table("DmaPacketAggregated")
            tables["DmaPacket"] = self.table("DmaPacket")
        elif mode == "empty":
            for name in ("DmaPacketAggregated", "DmaPacket"):
                tables[name] = self.table(name).slice(0, 0)
        tables["Metadata"] = _small_table("Metadata", self.metadata(), cfg)
        tables["Summary"] = _small_table(
            "Summary", {k: [v] for k, v in self.summary(cfg.percent_scale).items()}, cfg
        )
        tables["TensorInfo"] = _small_table("TensorInfo", self.tensorinfo(), cfg)
        tables["DmaQueuesInfo"] = _small_table("DmaQueuesInfo", self.dmaqueues(), cfg)
        tables["Warning"] = _small_table("Warning", self.warnings(), cfg)
        tables["NeffHeader"] = _small_table("NeffHeader", self.neffheader(), cfg)
        tables["SchemaFields"] = _schema_fields(tables, cfg)
        for name, tbl in tables.items():
            written[name] = _write_parquet(tbl, directory, name, cfg)
        return written

    def json_doc(self):
        cfg = self.cfg
        if self.r in tuple(cfg.json_wrong_neff_ranks):
            return {"profile_info": self.profile_info()}
        unit = 1000 if cfg.json_time_unit == "ps" else 1
        off = self.offset("json")
        ids = _json_ids(cfg)
        inst = self.table("Instruction", "json").to_pydict()
        rt, sim = self.rt, self.rt.sim
        n = len(inst["id"])
        deps_by_row = [[] for _ in range(self.frames["Instruction"].n)]
        for i, (k, t) in enumerate(rt.inst_rows):
            if k != "i":
                continue
            for d, _lat, typ in sim.deps[t]:
                if sim.kind[d] == "i" and typ != "host":
                    deps_by_row[i].append(rt.iid[d])
        nb = self.frames["Instruction"].n
        out_inst = []
        for i in range(n):
            eng = inst["engine"][i]
            eng_c = eng[0].upper() + eng[1:] if eng else eng
            eng_c = {"Gpsimd": "GpSimd"}.get(eng_c, eng_c)
            row = {
                "timestamp": inst["start_ts"][i] * unit,
                "duration": inst["duration_ns"][i] * unit,
                "label": inst["timeline_track"][i],
                "subgroup": _HW_ALIAS.get(eng_c, eng) if cfg.json_engine_names == "hw" else eng_c,
                "opcode": inst["opcode"][i],
                "operands": inst["operands"][i],
                "hlo_name": inst["hlo_name"][i],
                "pc": inst["pc"][i],
                "id": ids(inst["id"][i]),
                "inst_dep_ids": [ids(d + (i // nb) * nb) for d in deps_by_row[i % nb]],
                "layer": inst["layer"][i],
                "fully_qualified_subgraph": "/sg00",
                "evt_wait_time": inst["evt_wait_time_ns"][i] * unit
                if inst["evt_wait_time_ns"][i] is not None
                else None,
                "hbm_read_bytes": inst["hbm_read_bytes"][i] or 0,
                "hbm_write_bytes": inst["hbm_write_bytes"][i] or 0,
                "sbuf_read_bytes": inst["sbuf_read_bytes"][i] or 0,
                "sbuf_write_bytes": inst["sbuf_write_bytes"][i] or 0,
                "nki_source_location": _first(inst["nki_source_location"][i]),
                "bir_id": inst["bir_id"][i],
            }
            if cfg.lnc > 1:
                row["pcore_idx"] = inst["pcore_idx"][i]
            if (
                cfg.json_nan
                and row["evt_wait_time"] in (None, 0)
                and row["subgroup"] in ("Sync", "sp")
            ):
                row["evt_wait_time"] = float("nan")
            elif row["evt_wait_time"] is None:
                del row["evt_wait_time"]
            out_inst.append(row)
        doc = {"instruction": out_inst}
        mode = _dma_mode(cfg, self.r)
        if mode != "absent":
            dma_rows = []
            if mode == "present":
                pk = self.table("DmaPacket", "json").to_pydict()
                agg = self.frames["DmaPacketAggregated"]
                agg_src = {
                    self.rt.abase + j: (
                        agg.cols["source"][j],
                        agg.cols["dest"][j],
                        agg.cols["block_id"][j],
                    )
                    for j in range(agg.n)
                }
                na = agg.n
                for i in range(len(pk["id"])):
                    a = pk["packet_aggregation_id"][i]
                    src, dst, blk = agg_src[self.rt.abase + ((a - self.rt.abase) % na)]
                    qk = cfg.json_dma_queue_key
                    if qk == "alternate":
                        qk = "dma_queue" if self.r % 2 == 0 else "subgroup"
                    dma_rows.append(
                        {
                            "timestamp": pk["start_ts"][i] * unit,
                            "duration": pk["duration_ns"][i] * unit,
                            qk: pk["queue_name"][i],
                            "transfer_size": pk["transfer_bytes"][i],
                            "variable": pk["variable"][i],
                            "queue_type": pk["queue_type"][i],
                            "engine_idx": pk["engine_idx"][i],
                            "block_id": blk,
                            "source": src,
                            "dest": dst,
                        }
                    )
            doc["dma"] = dma_rows
        summ = self.summary(cfg.json_percent_scale)
        doc["summary"] = [summ]
        md = {k: v[0] for k, v in self.metadata().items()}
        md["first_hw_timestamp"] = (self.pstart + off) * unit
        md["last_hw_timestamp"] = (self.pend + off) * unit
        doc["metadata"] = [md]
        cc = self.table("CcOp", "json").to_pydict() if self.frames["CcOp"].n else None
        if cc is not None:
            rows = []
            for i in range(len(cc["start_ts"])):
                row = {
                    "timestamp": cc["start_ts"][i] * unit,
                    "duration": cc["duration_ns"][i] * unit,
                    "operation": cc["operation"][i],
                    "algorithm": cc["algorithm"][i],
                    "dtype": cc["dtype"][i],
                    "input_size": cc["input_size"][i],
                    "output_size": cc["output_size"][i],
                    "replica_group": cc["replica_group"][i],
                    "trigger_engine": cc["trigger_engine"][i],
                }
                if cc["trigger_start_ts"][i] is not None:
                    row["cc_trigger"] = cc["trigger_start_ts"][i] * unit
                    row["cc_trigger_start_delay"] = cc["cc_trigger_start_delay"][i] * unit
                rows.append(row)
            doc["cc_ops"] = rows
        act = self.table("ActiveTime", "json").to_pydict()
        at = [
            {"start_ts": s * unit, "end_ts": e * unit, "engine": g}
            for s, e, g in zip(act["start_ts"], act["end_ts"], act["engine"], strict=True)
        ]
        if self.frames["CcInstruction"].n:
            ci = self.table("CcInstruction", "json").to_pydict()
            for s, e in _union(list(zip(ci["start_ts"], ci["end_ts"], strict=True)))[1]:
                at.append({"start_ts": s * unit, "end_ts": e * unit, "engine": "cc_instruction"})
        doc["active_time"] = at
        # per layer: first start, the sum over executions of its span, and its instruction count
        ex = self.table("ExecutionInfo", "json").to_pydict()
        bounds = [
            (a_ + off + self.exec_zero, b_ + off + self.exec_zero)
            for a_, b_ in zip(ex["execution_start_ts"], ex["execution_end_ts"], strict=True)
        ]
        spans: dict = {}
        for i in range(n):
            lay_ = inst["layer"][i]
            if lay_ is None:
                continue
            s0, e0 = inst["start_ts"][i], inst["end_ts"][i]
            k = next((j for j, (a_, b_) in enumerate(bounds) if a_ <= s0 <= b_), -1)
            d = spans.setdefault(lay_, {})
            cur = d.get(k)
            d[k] = [s0, e0, 1] if cur is None else [min(cur[0], s0), max(cur[1], e0), cur[2] + 1]
        doc["layer_summary"] = [
            {
                "layer": lay_,
                "timestamp": min(v[0] for v in d.values()) * unit,
                "duration": sum(v[1] - v[0] for v in d.values()) * unit,
                "instruction_count": sum(v[2] for v in d.values()),
            }
            for lay_, d in spans.items()
        ]
        doc["profile_info"] = self.profile_info()
        return doc

    def profile_info(self):
        cfg = self.cfg
        return [
            {
                "neff_path": f"/tmp/neuron-compile-cache/{cfg.job_name}/{_neff_name(cfg, 'model', self.rt.stage)}",
                "ntff_path": f"output/profile_rank_{self.r}.ntff",
                "profiler_version": "2.33.0",
                "num_executions": self.n_exec * self.copies,
            }
        ]

    def write_json(self, path):
        text = json.dumps(self.json_doc(), allow_nan=True, separators=(",", ":"))  # C encoder
        with open(path, "w") as f:
            f.write(text)

    def write_csv(self, directory):
        cfg = self.cfg
        os.makedirs(directory, exist_ok=True)
        mode = _dma_mode(cfg, self.r)
        out = []
        for name, track in (
            ("Instruction", "timeline_track"),
            ("DmaPacketAggregated", "queue_name"),
            ("DmaPacket", "queue_name"),
            ("CcInstruction", "core_idx"),
            ("SemaphoreUpdate", "id"),
        ):
            if name.startswith("Dma") and mode != "present":
                continue
            if name == "CcInstruction" and not self.frames[name].n:
                continue
            tbl = self.table(name)
            tcol = tbl.column(track)
            if name == "CcInstruction":
                tcol = pa.array([f"CC-core {v}" for v in tcol.to_pylist()])
            cols = [(c, tbl.column(c)) for c in tbl.column_names]
            if name == "Instruction" and not cfg.csv_duplicate_track:
                cols = [(c, a) for c, a in cols if c != "timeline_track"]
            fixed = []
            for c, a in cols:
                if pa.types.is_list(a.type):
                    a = pa.array([None if v is None else ";".join(v) for v in a.to_pylist()])
                fixed.append((c, a))
            csv_tbl = pa.Table.from_arrays(
                [tcol] + [a for _, a in fixed], names=["timeline_track"] + [c for c, _ in fixed]
            )
            pacsv.write_csv(csv_tbl, os.path.join(directory, f"{name}.csv"))
            out.append(f"{name}.csv")
        return out


def _first(v):
    if isinstance(v, list):
        return v[0] if v else None
    return v


def _json_ids(cfg):
    if cfg.json_id_style == "u64":
        return lambda i: None if i is None else int(i) + (2**64 - 2**40)
    if cfg.json_id_style == "negative":
        return lambda i: None if i is None else int(i) - 2**62
    return lambda i: None if i is None else int(i)


def _schema_fields(tables: dict, cfg):
    rows = {nm: [] for nm, _, _ in SPECS["SchemaFields"]}
    tnames = {
        "i64": ("integer", "int64"),
        "i32": ("integer", "int32"),
        "f": ("number", "float"),
        "d": ("number", "double"),
        "b": ("boolean", None),
        "s": ("string", None),
    }
    for table in list(tables) + ["SchemaFields"]:
        present = set(tables[table].column_names) if table in tables else None
        for nm, typ, req in SPECS[table]:
            ren = cfg.rename_fields.get(table, {}).get(nm, nm)
            if present is not None and ren not in present:
                continue
            t, fmt = tnames[typ]  # nki_source_location stays "string" even when it holds a list
            rows["table_name"].append(table)
            rows["table_description"].append(_DESCRIPTIONS.get(table, ""))
            rows["field_name"].append(ren)
            rows["field_description"].append("")
            rows["field_example"].append(None)
            rows["field_type"].append(t)
            rows["field_required"].append(req)
            rows["field_format"].append(fmt)
            rows["field_unit"].append(_unit(nm, typ))
            rows["field_minimum"].append(None)
            rows["field_maximum"].append(None)
            rows["field_enum_values"].append(
                "instruction,input,output,data,software_dynamic,hardware_dynamic,unknown"
                if nm == "queue_type"
                else None
            )
    return _small_table("SchemaFields", rows, cfg)


# ------------------------------------------------------------------------------------- API


def _copies(cfg, res):
    s = cfg.scale
    if isinstance(s, str):
        txt = s.strip().lower()
        mult = 1
        if txt.endswith("k"):
            mult, txt = 1000, txt[:-1]
        elif txt.endswith("m"):
            mult, txt = 1_000_000, txt[:-1]
        target = float(txt) * mult
        per = max(
            1,
            sum(
                1
                for t in range(len(res.sim.kind))
                if res.sim.kind[t] == "i" and res.sim.rank[t] == 0
            ),
        )
        return max(1, int(math.ceil(target / per)))
    return max(1, int(s))


def _unrelated(directory, cfg):
    """A tiny single-core kernel profile that has nothing to do with the job."""
    os.makedirs(directory, exist_ok=True)
    n = 40
    ts = np.arange(n, dtype=np.int64) * 500 + 1000
    c = {nm: [None] * n for nm, _, _ in SPECS["Instruction"]}
    c.update(
        start_ts=ts,
        end_ts=ts + 400,
        duration_ns=np.full(n, 400),
        engine=["Tensor"] * n,
        opcode=["MATMUL"] * n,
        operands=["128*128 "] * n,
        id=np.arange(n),
        pc=np.arange(n),
        bir_id=[f"sg0000:{i}" for i in range(n)],
        timeline_track=["TensorMatrix"] * n,
    )
    _write_parquet(_small_table("Instruction", c, cfg), directory, "Instruction", cfg)
    hw = _HW[cfg.hardware]
    md = {nm: [None] for nm, _, _ in SPECS["Metadata"]}
    md.update(
        profile_schema_version=[cfg.schema_version],
        ntff_version=[6],
        num_physical_cores=[1],
        vnc_enabled=[False],
        first_hw_timestamp=[10**11],
        last_hw_timestamp=[10**11 + 30000],
        first_ts=["1970-01-01 00:00:00+00:00"],
        last_ts=["1970-01-01 00:00:00+00:00"],
        dma_ddr_bandwidth=[hw["dma_bw"]],
        num_dma_engines_per_neuroncore=[N_RINGS],
        hbm_ddr_bandwidth=[hw["hbm_bw"]],
        tensor_engine_num_rows=[128],
        tensor_engine_num_cols=[128],
        tensor_engine_clock_freq=[hw["te_clock"]],
        vector_engine_clock_freq=[1.4],
        vector_engine_num_channels=[128],
        scalar_engine_clock_freq=[1.4],
        scalar_engine_num_channels=[128],
        gpsimd_engine_clock_freq=[1.4],
        gpsimd_engine_num_channels=[8],
        neuroncore_clock_freq=[1.4],
        ticks_per_nanosec=[1],
        profile_name=["mlp_nki_mm"],
        neuroncore_idx=[0],
    )
    _write_parquet(_small_table("Metadata", md, cfg), directory, "Metadata", cfg)


def write_job(
    out_dir, *, ranks=2, layers=4, seed=0, formats=("parquet", "json"), **variation
) -> dict:
    """Simulate a small Neuron job and write its device profiles; returns the truth dict.

    formats: any of "parquet", "json", "csv". See ``_Cfg`` for the variations (layout: dp/tp/pp,
    lnc, steps, scale; injected causes: slow_dma_layer, straggler_rank, slow_stage,
    tp_ar_fraction; format variants: parquet_layout, parquet_time_base, flow_table_names, ...).
    """
    cfg = _make_cfg(ranks=ranks, layers=layers, seed=seed, formats=formats, **variation)
    return _write(cfg, out_dir)


def write_scenario(name, out_dir, seed=0, **overrides) -> dict:
    """Write one of :data:`SCENARIOS` (overrides replace its variations); returns the truth."""
    if name not in SCENARIOS:
        raise KeyError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}")
    kw = dict(SCENARIOS[name]["variation"])
    kw.update(overrides)
    kw.setdefault("formats", ("parquet", "json"))
    cfg = _make_cfg(seed=seed, name=name, **kw)
    return _write(cfg, out_dir)


def simulate(name_or_cfg=None, seed=0, **variation) -> dict:
    """Truth only (nothing written): handy for tests and for sizing benchmarks."""
    if isinstance(name_or_cfg, str):
        kw = dict(SCENARIOS[name_or_cfg]["variation"])
        kw.update(variation)
        cfg = _make_cfg(seed=seed, name=name_or_cfg, **kw)
    else:
        cfg = _make_cfg(seed=seed, **variation)
    return _write(cfg, None)


def _write(cfg: _Cfg, out_dir) -> dict:
    overrides = _calibrate(cfg)
    base_mods = {"cc_dur": overrides} if overrides else {}
    base = _Result(cfg, base_mods)
    cfs = {}
    if cfg.slow_dma_layer is not None:
        cfs["slow_dma"] = _Result(cfg, dict(base_mods, slow_dma=False))
    if cfg.straggler_rank is not None:
        cfs["straggler"] = _Result(cfg, dict(base_mods, straggler_median=True))
    for fam, prefixes in _CC_FAMILIES.items():
        if any(sim_lbl.startswith(prefixes) for sim_lbl in _labels(base)):
            cfs["cc." + fam] = _Result(cfg, dict(base_mods, remove_cc=prefixes))
    if cfg.slow_stage is not None:
        cfs["stage"] = _Result(cfg, dict(base_mods, slow_stage_fixed=True))
    copies = _copies(cfg, base)
    files: dict = {"parquet": {}, "json": {}, "csv": {}, "unrelated_profiles": []}
    offsets: dict = {"parquet": {}, "json": {}, "csv": {}}
    dups, sem_rows = {}, {}
    for r in range(cfg.ranks):
        w = _RankWriter(cfg, base, r, copies)
        offsets["parquet"][str(r)] = int(w.offset("parquet"))
        offsets["csv"][str(r)] = int(w.offset("parquet"))
        offsets["json"][str(r)] = int(w.offset("json"))
        dups[str(r)] = w.rt.dup_count * copies
        sem_rows[str(r)] = len(w.rt.sem_rows) * copies
        if out_dir is None:
            continue
        if "parquet" in cfg.formats:
            if cfg.parquet_layout == "flat":
                rel = os.path.join("parquet", f"rank{r}")
            else:
                rel = os.path.join("profiles", "global", f"{w.display_name()}@latest")
            w.write_parquet(os.path.join(out_dir, rel))
            files["parquet"][str(r)] = rel
        if "json" in cfg.formats:
            rel = os.path.join("json", f"profile_rank_{r}.json")
            os.makedirs(os.path.join(out_dir, "json"), exist_ok=True)
            w.write_json(os.path.join(out_dir, rel))
            files["json"][str(r)] = rel
        if "csv" in cfg.formats:
            rel = os.path.join("csv", f"rank{r}")
            w.write_csv(os.path.join(out_dir, rel))
            files["csv"][str(r)] = rel
    if out_dir is not None and "parquet" in cfg.formats and cfg.parquet_layout == "data_path":
        for k in range(cfg.unrelated_profiles):
            rel = os.path.join("profiles", "global", f"unrelated_kernel_{k}@latest")
            _unrelated(os.path.join(out_dir, rel), cfg)
            files["unrelated_profiles"].append(rel)
    truth = _truth(cfg, base, cfs, copies, files, offsets)
    truth["dma"]["duplicate_packets"] = dups
    truth["semaphore_wait_rows"] = sem_rows
    for r, k in sem_rows.items():
        truth["instruction_count"][r] += k
    truth["instruction_count_note"] = (
        "rows of the Instruction table, including EVENT_SEMAPHORE wait rows of the "
        "semaphore_instructions variant (ActiveTime and engine_busy_ns exclude those waits)"
    )
    truth["variation"] = {
        k: (list(v) if isinstance(v, tuple) else v)
        for k, v in dataclasses.asdict(cfg).items()
        # option off: the truth file stays as before the option existed
        if cfg.consumer_semaphores or not k.startswith("consumer_semaphore")
        if k != "execution_time_base" or v != "first_hw_timestamp"
    }
    truth = json.loads(json.dumps(truth))
    if out_dir is not None:
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, "truth.json"), "w") as f:
            json.dump(truth, f, indent=1, sort_keys=True)
    return truth
