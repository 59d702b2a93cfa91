"""Clean-room judge: one simulated multi-rank Neuron training run, written in every layout.

Written from the vendor documentation and the notes in shared/reference only (never from the
tool's readers): a job of ``n_ranks`` NeuronCores, each step (one NEFF execution) loads each
layer's weights by DMA, runs a matmul (Tensor engine) and an activation (Scalar engine) per
layer, then an AllReduce across the ranks. A cause can be injected: a straggler rank whose
compute is slower, or one layer's weight DMA ``k`` times slower on every rank. The simulator
computes its own truth (arrivals, the late rank, the analysed window) and re-simulates the same
run (same jitter) with the cause removed, so the saving is measured, not assumed.

The same run is then written as
- Explorer Parquet: ``<data>/profiles/global/<name>@latest/<Table>.parquet`` per rank, with
  ``Instruction``, ``DmaPacketAggregated`` (and optionally ``DmaPacket``), ``Flow``, ``CcOp``,
  ``Metadata``, ``Summary``, ``ExecutionInfo``, ``ActiveTime``;
- the legacy device JSON (``instruction``, ``dma``, ``cc_ops``, ``summary``, ``metadata``,
  ``active_time``, ``profile_info``), one file per rank; or without the ``cc_ops`` table, the
  collectives then told only by their ``PSEUDO_TRIGGER_COLLECTIVE`` instructions' operands (the
  semaphore each op increments on completion, and optionally the instructions that wait on it);
- ``system_profile.json`` with the ``trace_event`` list (host clock, hardware events adjusted);
- a Perfetto ``system_profile.pftrace`` with the screenshots' process and thread naming;
- Perfetto device traces (``device_profile_model_<id>.pftrace``: engine, DMA-queue, semaphore
  and CC-core tracks), written by ``neuron_judge_perfetto``.

Where the documentation leaves a point open, :class:`Variants` picks one reading from a seed.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

EPOCH_NS = 1_752_016_143_399_927_135  # a host clock reading from the sync-point screenshot
NEFF = "/tmp/tmp87r7u86p/file.neff"
TE_PEAK = 128 * 128 * 2 * 2.8e9  # rows x cols x 2 x clock (GHz) of Metadata below
DMA_BYTES_PER_NS = 160  # nominal weight-load rate (bytes/ns), 80% of dma_ddr_bandwidth
XFER_BYTES = 262_144  # AllReduce payload


@dataclass(frozen=True)
class Cause:
    """What slows the run: ``clean``, ``straggler`` (``rank`` computes ``factor`` x slower) or
    ``dma`` (``layer``'s weight DMA takes ``factor`` x longer on every rank)."""

    kind: str = "clean"
    rank: int = 2
    factor: float = 1.0
    layer: int = 2


CLEAN = Cause()


def straggler(rank: int = 2, slower_pct: float = 30.0) -> Cause:
    """A rank whose matmuls and activations take ``slower_pct`` % longer."""
    return Cause("straggler", rank=rank, factor=1 + slower_pct / 100)


def slow_dma(layer: int = 2, k: float = 10.0) -> Cause:
    """One layer's weight DMA ``k`` times slower (same bytes) on every rank."""
    return Cause("dma", layer=layer, factor=k)


@dataclass(frozen=True)
class Shape:
    """Sizes and nominal durations (ns) of the simulated job."""

    n_ranks: int = 4
    n_layers: int = 4
    n_steps: int = 2
    mm_ns: int = 30_000
    act_ns: int = 8_000
    trig_ns: int = 200
    dma_issue_ns: int = 300  # trigger end -> DMA start (dma_wait_time_ns)
    dma_ns: tuple = (2_000, 10_000, 10_000, 10_000)
    cc_trig_ns: int = 150
    cc_delay_ns: int = 400  # collective trigger end -> the op's local start
    xfer_ns: int = 6_000
    launch_ns: int = 3_000  # nrt_execute start -> device start
    return_ns: int = 1_500
    host_idle_ns: int = 1_000
    jitter: float = 0.004


@dataclass(frozen=True)
class Variants:
    """Readings of what the documentation leaves open, one per option."""

    rank_base: int = 0  # worker_gid of the first rank (the gid screenshot starts at 33)
    device_clock: str = "zero"  # device profiles: 'zero' (per profile) or 'device' (raw clock)
    cc_start: str = "local"  # CcOp start: 'local' (own trigger + delay) or 'common' (all arrived)
    op_id: str = "same"  # CcOp.op_id per execution: 'same' program op or 'distinct'
    flow_tables: str = "pascal"  # Flow table names: 'pascal' or 'snake' (instruction/dma_block)
    id_space: str = "overlap"  # DMA block ids: 'overlap' instruction ids or 'disjoint'
    engine_case: str = "title"  # Instruction.engine: 'title' (Tensor) or 'lower' (tensor)
    schema: str = "7.4.0"
    parquet_name: str = "plain"  # 'plain' profile_rank_<g> or 'session' <name>_..._session_...
    split_instruction: bool = False  # Instruction_0/_1.parquet
    dma_packets: bool = False  # also write DmaPacket
    source_field: str = "nki"  # 'nki' (nki_source_location) or 'bir' (bir_debug_info_...)
    json_unit: str = "ns"  # legacy JSON times: 'ns' or 'ps'
    json_queue_key: str = "subgroup"  # legacy DMA row queue key: 'subgroup' or 'dma_queue'
    json_layout: str = "flat"  # 'flat' profile_rank_<g>.json or 'dirs' profile_rank_<g>/ntff.json
    sys_gid: bool = True  # system_profile.json rows carry worker_gid
    instances: int = 1  # EC2 instances (host clocks) the ranks are spread over
    sys_unit: str = "ns"  # system_profile.json timestamp_unit: 'ns' or 'us'
    pf_naming: str = "gid"  # 'gid', 'gid-nrt', 'nrt' or 'thread' (no thread name)
    pf_interned: bool = False  # Perfetto event names interned per sequence
    neff_suffix: bool = True  # hardware slices named 'nc_exec_running <neff path>'
    # Perfetto device traces (neuron_judge_perfetto.py says which reference line each stands on)
    pfd_files: str = "rank_dirs"  # 'rank_dirs', 'ntff_dirs', 'flat' (one file a rank) or 'one'
    pfd_clock: str = "zero"  # 'zero' (profile-relative) or 'device' (raw device clock)
    pfd_pid: str = "one"  # a rank's own file: process pid 1 or 'gid' (the worker_gid)
    pfd_track_desc: str = "thread"  # track name in 'thread' (thread_name) or 'named' (name)
    pfd_interned: bool = False  # event names, annotation names and strings interned
    pfd_engine_names: str = "engine"  # 'engine' (Scalar, GpSimd) or 'track' (Act, Pool)
    pfd_rows: str = "packed"  # 'packed' (first free row) or 'spread' (round robin, 4 rows)
    pfd_dma_tracks: str = "queue"  # 'queue' (qSyncIO0 - Row k) or 'engine' (DMA Engine n)
    pfd_dma_unit: str = "block"  # a slice per DMA 'block' or per 'packet' (4, on 2 rings)
    pfd_dma_names: str = "variable"  # DMA slice named by 'variable' or 'unknown'
    pfd_args: str = "visible"  # 'visible' (the screenshot's keys) or 'full' (+ waits, bytes)
    pfd_ids: str = "mixed"  # 'mixed' (id signed, inst_dep_ids unsigned) or 'signed'
    pfd_sem: str = "named"  # DMA consumer's wait: 'named' S[10] (qSyncIO0)>=v or 'dollar'
    pfd_sem_event: str = "id"  # semaphore instants named by the semaphore 'id' or 'value'
    pfd_flows: bool = False  # --show-perfetto-flows
    pfd_cc_track: str = "row"  # 'row' (CC-core 0 - Row 0) or 'bare' (CC-core 0)
    pfd_cc_name: str = "operation"  # 'operation' (AllReduce) or 'box' (CC Op 0 - AllReduce)
    pfd_counters: bool = True  # DMA Throughput and Pending DMA Count counter tracks
    # legacy JSON collectives: 'cc_ops' (the table written) or 'triggers' (no collective table:
    # only the PSEUDO_TRIGGER_COLLECTIVE instructions say there was one, ``$S[15]++@complete``)
    json_collectives: str = "cc_ops"
    # with 'triggers', who names a wait on S[15] (v = completions counted so far, see
    # _JSON_CC_SEM): 'consumer' (an instruction of the same execution consuming the result waits
    # $S[15]>=v, and each later trigger waits for the previous op as in the reference example),
    # 'trigger' (only the next trigger waits for the previous op) or 'none' (nothing after a
    # trigger names it: its completion shows only as the core resuming, or the profile's end)
    json_cc_wait: str = "consumer"

    @classmethod
    def from_seed(cls, seed: int) -> Variants:
        """One reading per open point, drawn from ``seed`` (seed 0 is the defaults)."""
        if seed == 0:
            return cls()
        g = random.Random(seed)
        sys_gid = g.random() < 0.6
        v = cls(
            rank_base=g.choice([0, 32]) if sys_gid else 0,
            device_clock=g.choice(["zero", "device"]),
            cc_start=g.choice(["local", "common"]),
            op_id=g.choice(["same", "distinct"]),
            flow_tables=g.choice(["pascal", "snake"]),
            id_space=g.choice(["overlap", "disjoint"]),
            engine_case=g.choice(["title", "lower"]),
            schema=g.choice(["7.4.0", "12.0.1"]),
            parquet_name=g.choice(["plain", "session"]),
            split_instruction=g.random() < 0.5,
            dma_packets=g.random() < 0.5,
            source_field=g.choice(["nki", "bir"]),
            json_unit=g.choice(["ns", "ps"]),
            json_queue_key=g.choice(["subgroup", "dma_queue"]),
            json_layout=g.choice(["flat", "dirs"]),
            sys_gid=sys_gid,
            instances=g.choice([1, 2]),
            sys_unit=g.choice(["ns", "us"]),
            pf_naming=g.choice(["gid", "gid-nrt", "nrt", "thread"]),
            pf_interned=g.random() < 0.5,
            neff_suffix=g.random() < 0.5,
            # drawn after the others, so the earlier readings of a seed stay as they were
            pfd_files=g.choice(["rank_dirs", "ntff_dirs", "flat", "one"]),
            pfd_clock=g.choice(["zero", "device"]),
            pfd_pid=g.choice(["one", "gid"]),
            pfd_track_desc=g.choice(["thread", "named"]),
            pfd_interned=g.random() < 0.5,
            pfd_engine_names=g.choice(["engine", "track"]),
            pfd_rows=g.choice(["packed", "spread"]),
            pfd_dma_tracks=g.choice(["queue", "engine"]),
            pfd_dma_unit=g.choice(["block", "packet"]),
            pfd_dma_names=g.choice(["variable", "unknown"]),
            pfd_args=g.choice(["visible", "full"]),
            pfd_ids=g.choice(["mixed", "signed"]),
            pfd_sem=g.choice(["named", "dollar"]),
            pfd_sem_event=g.choice(["id", "value"]),
            pfd_flows=g.random() < 0.5,
            pfd_cc_track=g.choice(["row", "bare"]),
            pfd_cc_name=g.choice(["operation", "box"]),
            pfd_counters=g.random() < 0.5,
            # drawn last, so every earlier reading of a seed stays as it was
            json_collectives=g.choice(["cc_ops", "triggers"]),
            json_cc_wait=g.choice(["consumer", "trigger", "none"]),
        )
        if v.json_collectives == "cc_ops":  # the wait reading only matters without the table
            v = replace(v, json_cc_wait=cls.json_cc_wait)
        return v

    def describe(self) -> str:
        """The options that differ from the defaults, for test ids and reports."""
        base = asdict(Variants())
        return ",".join(f"{k}={v}" for k, v in asdict(self).items() if base[k] != v) or "defaults"


@dataclass
class Sim:
    """Simulated true times (int64 ns from the job's start), arrays indexed [step, layer, rank]
    or [step, rank]."""

    shape: Shape
    cause: Cause
    step_start: np.ndarray
    trig_s: np.ndarray
    dma_s: np.ndarray
    dma_e: np.ndarray
    mm_s: np.ndarray
    mm_e: np.ndarray
    act_s: np.ndarray
    act_e: np.ndarray
    cct_s: np.ndarray  # collective trigger start = the rank's arrival
    cc_local: np.ndarray  # trigger end + delay: the op's local start
    cc_e: np.ndarray  # the op's end, common to all ranks


def simulate(shape: Shape, cause: Cause, seed: int = 0) -> Sim:
    """Run the job; the jitter comes from ``seed`` only, so a re-run without the cause differs
    from this one by the cause alone."""
    rng = np.random.default_rng(seed)
    S, L, R = shape.n_steps, shape.n_layers, shape.n_ranks
    j = shape.jitter
    jit = 1 + rng.uniform(-j, j, size=(S, L, 2, R))
    djit = 1 + rng.uniform(-j, j, size=(S, L, R))
    idle = shape.host_idle_ns + rng.integers(0, 600, size=(S, R))
    t = rng.integers(0, 2_000, size=R).astype(np.int64) + 10_000
    speed = np.ones(R)
    dmaf = np.ones(L)
    if cause.kind == "straggler":
        speed[cause.rank] = cause.factor
    elif cause.kind == "dma":
        dmaf[cause.layer] = cause.factor
    z3, z2 = np.zeros((S, L, R), np.int64), np.zeros((S, R), np.int64)
    a = {k: z3.copy() for k in ("trig_s", "dma_s", "dma_e", "mm_s", "mm_e", "act_s", "act_e")}
    step_start, cct_s, cc_local, cc_e = z2.copy(), z2.copy(), z2.copy(), z2.copy()
    dma_nom = np.asarray(shape.dma_ns, float)[:, None]
    for s in range(S):
        step_start[s] = t
        a["trig_s"][s] = t + np.arange(L)[:, None] * shape.trig_ns
        a["dma_s"][s] = a["trig_s"][s] + shape.trig_ns + shape.dma_issue_ns
        a["dma_e"][s] = a["dma_s"][s] + np.rint(dma_nom * dmaf[:, None] * djit[s]).astype(np.int64)
        prev_mm, prev_act = t.copy(), t.copy()
        for lay in range(L):  # layers are a chain; ranks are vectorised
            ms = np.maximum.reduce([a["dma_e"][s, lay], prev_act, prev_mm])
            me = ms + np.rint(shape.mm_ns * speed * jit[s, lay, 0]).astype(np.int64)
            as_ = np.maximum(me, prev_act)
            ae = as_ + np.rint(shape.act_ns * speed * jit[s, lay, 1]).astype(np.int64)
            a["mm_s"][s, lay], a["mm_e"][s, lay], a["act_s"][s, lay], a["act_e"][s, lay] = (
                ms,
                me,
                as_,
                ae,
            )
            prev_mm, prev_act = me, ae
        cct_s[s] = prev_act
        cc_local[s] = prev_act + shape.cc_trig_ns + shape.cc_delay_ns
        cc_e[s] = cc_local[s].max() + shape.xfer_ns
        t = cc_e[s] + 200 + shape.return_ns + idle[s] + shape.launch_ns
    return Sim(shape, cause, step_start, cct_s=cct_s, cc_local=cc_local, cc_e=cc_e, **a)


def window_ns(sim: Sim) -> int:
    """The analysed window: first device start to last device end over every rank."""
    return int(sim.cc_e[-1].max() - sim.trig_s[0, 0].min())


def truth(shape: Shape, cause: Cause, seed: int = 0, rank_base: int = 0) -> dict:
    """What a correct diagnosis should say about this run, from the simulator alone."""
    sim, clean = simulate(shape, cause, seed), simulate(shape, CLEAN, seed)
    arr = sim.cct_s
    late = arr.argmax(axis=1)
    others = [np.median(np.delete(arr[s], late[s])) for s in range(shape.n_steps)]
    return {
        "ranks": [rank_base + r for r in range(shape.n_ranks)],
        "window_ns": window_ns(sim),
        "clean_window_ns": window_ns(clean),
        "saving_ns": window_ns(sim) - window_ns(clean),
        "late_rank": [rank_base + int(r) for r in late],
        "lateness_ns": [int(arr[s, late[s]] - others[s]) for s in range(shape.n_steps)],
        "arrival_rel_ns": (arr - arr.min(axis=1, keepdims=True)).tolist(),
        "cause": cause,
    }


# --------------------------------------------------------------------------- clocks


def _device_offset(r: int) -> int:
    return 144_439_359_083 + r * 1_234_567_891 + (r * 7919) % 4093


def _capture_start(sim: Sim, r: int) -> int:
    return int(sim.step_start[0, r]) - 500


def _instance_of(r: int, v: Variants, n: int) -> int:
    return r * v.instances // n


def _host_offset(inst: int) -> int:
    return EPOCH_NS + inst * 3_217_004  # a second instance's host clock runs 3.2 ms ahead


def _sync_error(r: int) -> int:
    return ((r * 613) % 3001) - 1500  # each core's sync point: within +-1.5 us


# --------------------------------------------------------------------------- device tables


def device_tables(sim: Sim, r: int, v: Variants) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """One rank's instructions, DMA blocks and collective ops in true time, with their links:
    ``dma.trig``/``dma.consumer`` and ``ins.deps`` are row positions in the instruction frame."""
    sh, S, L = sim.shape, sim.shape.n_steps, sim.shape.n_layers
    step = np.repeat(np.arange(S), L)
    layer = np.tile(np.arange(L), S)

    def part(kind, engine, s_, e_, st, lay):
        return pd.DataFrame(
            {"kind": kind, "engine": engine, "start": s_, "end": e_, "step": st, "layer": lay}
        )

    trig = part(
        "trig",
        "Sync",
        sim.trig_s[:, :, r].ravel(),
        sim.trig_s[:, :, r].ravel() + sh.trig_ns,
        step,
        layer,
    )
    mm = part("mm", "Tensor", sim.mm_s[:, :, r].ravel(), sim.mm_e[:, :, r].ravel(), step, layer)
    act = part("act", "Scalar", sim.act_s[:, :, r].ravel(), sim.act_e[:, :, r].ravel(), step, layer)
    cct = part(
        "cct", "GpSimd", sim.cct_s[:, r], sim.cct_s[:, r] + sh.cc_trig_ns, np.arange(S), L - 1
    )
    ins = pd.concat([trig, mm, act, cct], ignore_index=True).sort_values(
        ["start", "kind"], kind="stable"
    )
    ins = ins.reset_index(drop=True)
    pos = {
        (k, s, lay): i
        for i, (k, s, lay) in enumerate(zip(ins.kind, ins.step, ins.layer, strict=True))
    }
    # ready-to-issue = the engine's previous instruction's end (or the step's start)
    st0 = sim.step_start[ins.step.to_numpy(), r]
    prev_end = (
        ins.groupby(["engine", "step"]).end.shift(1).fillna(pd.Series(st0)).to_numpy(np.int64)
    )
    ins["wait"] = np.maximum(ins.start.to_numpy() - prev_end, 0)
    deps = []
    for k, s, lay in zip(ins.kind, ins.step, ins.layer, strict=True):
        d = []
        if k == "mm" and lay > 0:
            d.append(pos[("act", s, lay - 1)])
        elif k == "act":
            d.append(pos[("mm", s, lay)])
        elif k == "cct":
            d.append(pos[("act", s, L - 1)])
        deps.append(d)
    ins["deps"] = deps
    dma = pd.DataFrame(
        {
            "start": sim.dma_s[:, :, r].ravel(),
            "end": sim.dma_e[:, :, r].ravel(),
            "step": step,
            "layer": layer,
            "bytes": np.tile(np.asarray(sh.dma_ns) * DMA_BYTES_PER_NS, S),
            "trig": [pos[("trig", s, lay)] for s, lay in zip(step, layer, strict=True)],
            "consumer": [pos[("mm", s, lay)] for s, lay in zip(step, layer, strict=True)],
        }
    )
    common = sim.cc_local.max(axis=1)
    cc = pd.DataFrame(
        {
            "step": np.arange(S),
            "trigger": sim.cct_s[:, r],
            "start": sim.cc_local[:, r] if v.cc_start == "local" else common,
            "end": sim.cc_e[:, r],
            "trig_row": [pos[("cct", s, L - 1)] for s in range(S)],
        }
    )
    return ins, dma, cc


def _opcode(kind: str) -> str:
    return {
        "trig": "DMA_TRIGGER",
        "mm": "MATMUL",
        "act": "ACTIVATE",
        "cct": "PSEUDO_TRIGGER_COLLECTIVE",
    }[kind]


def _operands(kind: str, layer: int) -> str:
    if kind == "mm":
        return f"S[5] (Tensor)++@complete acc_flags=3 row_grp=q0 src=bf16@0x5600[1,0,0][128,1,1] layer={layer}"
    if kind == "cct":
        return "ctype=ALL_REDUCE op=ADD dtype=bfloat16 cc_dim=0 group_id=0 channel_id=0 stream_id=0"
    if kind == "trig":
        return f"name=sg0000 args_table_var_id={layer} queue=qSyncIO0"
    return "func=gelu"


def _mm_flops(sh: Shape) -> int:
    return int(sh.mm_ns * 1e-9 * TE_PEAK * 0.75)


def _replica_group(v: Variants, n: int) -> str:
    return "[[" + ", ".join(str(v.rank_base + i) for i in range(n)) + "]]"


# --------------------------------------------------------------------------- Explorer Parquet


def _profile_name(v: Variants, g: int) -> str:
    return (
        f"profile_rank_{g}"
        if v.parquet_name == "plain"
        else f"llama_profile_rank_{g}_20261201_session_1"
    )


def write_parquet(sim: Sim, v: Variants, root: Path) -> Path:
    """Explorer Parquet: ``root/profiles/global/<name>@latest/<Table>.parquet`` per rank."""
    sh = sim.shape
    for r in range(sh.n_ranks):
        g = v.rank_base + r
        cap = _capture_start(sim, r)
        off = -cap if v.device_clock == "zero" else _device_offset(r)
        d = root / "profiles" / "global" / f"{_profile_name(v, g)}@latest"
        d.mkdir(parents=True, exist_ok=True)
        ins, dma, cc = device_tables(sim, r, v)
        n_i = len(ins)
        ins_id = np.arange(n_i, dtype=np.int64) + 1
        dma_id = np.arange(len(dma), dtype=np.int64) + (1 if v.id_space == "overlap" else 1_000_000)
        eng = ins.engine if v.engine_case == "title" else ins.engine.str.lower()
        is_mm = (ins.kind == "mm").to_numpy()
        t_s, t_e = ins.start.to_numpy() + off, ins.end.to_numpy() + off
        trig_dma = np.full(n_i, -1, np.int64)
        trig_dma[dma.trig.to_numpy()] = np.arange(len(dma))
        has_dma = trig_dma >= 0
        frame = pd.DataFrame(
            {
                "start_ts": t_s,
                "end_ts": t_e,
                "duration_ns": t_e - t_s,
                "engine": eng,
                "timeline_track": ins.engine.map(
                    {"Tensor": "TensorMatrix", "Scalar": "Act", "Sync": "Sync", "GpSimd": "Pool"}
                ),
                "pcore_idx": 0,
                "opcode": ins.kind.map(_opcode),
                "operands": [_operands(k, lay) for k, lay in zip(ins.kind, ins.layer, strict=True)],
                "compiler_opcode": ins.kind.map(
                    {"trig": "PSEUDO_DMA_TRIGGER", "cct": "PSEUDO_TRIGGER_COLLECTIVE"}
                ).fillna(""),
                "id": ins_id,
                "pc": 64 * np.arange(n_i),
                "bir_id": [f"sg0000:{100 + i}" for i in range(n_i)],
                "evt_wait_time_ns": ins.wait.to_numpy(np.int64),
                "hlo_name": [
                    f"dot.{lay}" if k == "mm" else f"gelu.{lay}" if k == "act" else ""
                    for k, lay in zip(ins.kind, ins.layer, strict=True)
                ],
                "layer": [f"layer_{lay}" for lay in ins.layer],
                (
                    "nki_source_location"
                    if v.source_field == "nki"
                    else "bir_debug_info_source_location"
                ): [
                    f"model.py:{40 + 2 * lay + (k == 'act')}"
                    for k, lay in zip(ins.kind, ins.layer, strict=True)
                ],
                "dma_trigger_start_ts": np.where(has_dma, dma.start.to_numpy()[trig_dma] + off, 0),
                "dma_trigger_end_ts": np.where(has_dma, dma.end.to_numpy()[trig_dma] + off, 0),
                "dma_wait_time_ns": np.where(has_dma, sh.dma_issue_ns, 0),
                "raw_flops": np.where(is_mm, _mm_flops(sh), 0),
                "adjusted_flops": np.where(is_mm, _mm_flops(sh), 0),
                "tensor_instruction_type": np.where(is_mm, "REGULAR", ""),
                "hbm_read_bytes": 0,
                "hbm_write_bytes": 0,
            }
        )
        if v.split_instruction:
            half = n_i // 2
            frame.iloc[:half].to_parquet(d / "Instruction_0.parquet", index=False)
            frame.iloc[half:].to_parquet(d / "Instruction_1.parquet", index=False)
        else:
            frame.to_parquet(d / "Instruction.parquet", index=False)
        ds, de = dma.start.to_numpy() + off, dma.end.to_numpy() + off
        nb = dma.bytes.to_numpy(np.int64)
        pd.DataFrame(
            {
                "start_ts": ds,
                "end_ts": de,
                "duration_ns": de - ds,
                "id": dma_id,
                "pcore_idx": 0,
                "block_id": np.arange(len(dma), dtype=np.int32),
                "queue_idx": 0,
                "queue_name": "qSyncIO0",
                "queue_type": "data",
                "op": "read",
                "variable": [f"weight_{lay}" for lay in dma.layer],
                "read_bytes": nb,
                "write_bytes": nb,
                "transfer_bytes": nb,
                "throughput": nb / ((de - ds) * 1e-9),
                "source": "[HBM]",
                "dest": "[SB]",
                "semaphore_id": "S[10] (qSyncIO0)",
                "read_sbuf_partitions": "",
                "read_num_sbuf_partitions": np.int32(0),
                "read_shape": "[1024, 512]",
                "read_offset": "[0x0]",
                "read_steps": "[1, 1024]",
                "write_sbuf_partitions": "0-127",
                "write_num_sbuf_partitions": np.int32(128),
                "write_shape": "[128, 4096]",
                "write_offset": "[0x0]",
                "write_steps": "[1, 128]",
            }
        ).to_parquet(d / "DmaPacketAggregated.parquet", index=False)
        if v.dma_packets:
            _write_dma_packets(d, ds, de, nb, dma_id, dma.layer.to_numpy())
        _write_flow(d, v, ins, dma, ins_id, dma_id)
        cs, ce = cc.start.to_numpy() + off, cc.end.to_numpy() + off
        pd.DataFrame(
            {
                "start_ts": cs,
                "end_ts": ce,
                "duration_ns": ce - cs,
                "operation": "AllReduce",
                "algorithm": "Ring",
                "num_elements": XFER_BYTES // 2,
                "dtype": "bf16",
                "op_id": np.full(len(cc), 7) if v.op_id == "same" else 7 + np.arange(len(cc)),
                "stream_id": 0,
                "stream_index": 0,
                "trigger_engine": "Pool",
                "input_size": XFER_BYTES,
                "output_size": XFER_BYTES,
                "algorithm_bandwidth": XFER_BYTES / ((ce - cs) * 1e-9),
                "bus_bandwidth": XFER_BYTES
                / ((ce - cs) * 1e-9)
                * 2
                * (sh.n_ranks - 1)
                / sh.n_ranks,
                "trigger_start_ts": cc.trigger.to_numpy() + off,
                "cc_trigger_start_delay": cs - (cc.trigger.to_numpy() + off),
                "replica_group_id": 0,
                "replica_group": _replica_group(v, sh.n_ranks),
            }
        ).to_parquet(d / "CcOp.parquet", index=False)
        last = int(sim.cc_e[-1, r]) + 200
        _write_parquet_meta(d, sim, v, r, g, cap, last, off, ins, dma)
    return root


def _write_dma_packets(d, ds, de, nb, dma_id, layer) -> None:
    # four packets per block on two rings of the queue: pairs overlap in time
    k = np.repeat(np.arange(4), len(ds))
    blk = np.tile(np.arange(len(ds)), 4)
    half = (de - ds) // 2
    s = ds[blk] + (k // 2) * half[blk]
    e = np.where(k // 2 == 1, de[blk], s + half[blk])
    b = nb[blk] // 4
    pd.DataFrame(
        {
            "start_ts": s,
            "end_ts": e,
            "duration_ns": e - s,
            "pcore_idx": 0,
            "id": np.arange(len(s)) + 500_000,
            "packet_idx": k.astype(np.int32),
            "packet_aggregation_id": dma_id[blk],
            "engine_idx": (k % 2) + 2 * layer[blk],
            "read_bytes": b,
            "write_bytes": b,
            "transfer_bytes": b,
            "throughput": b / ((e - s) * 1e-9),
            "queue_type": "data",
            "variable": [f"weight_{x}" for x in layer[blk]],
            "queue_name": "qSyncIO0",
            "queue_idx": 0,
            "crc": 2847562039,
        }
    ).sort_values("start_ts").to_parquet(d / "DmaPacket.parquet", index=False)


def _write_flow(d, v, ins, dma, ins_id, dma_id) -> None:
    it, dt = (
        ("Instruction", "DmaPacketAggregated")
        if v.flow_tables == "pascal"
        else ("instruction", "dma_block")
    )
    s_, e_ = ins.start.to_numpy(), ins.end.to_numpy()
    rows = []
    for i, deps in enumerate(ins.deps):
        for j in deps:
            rows.append((ins_id[j], ins_id[i], it, it, "FLOW_DEPENDENCE", s_[i] - e_[j]))
    for k, (t, c) in enumerate(zip(dma.trig, dma.consumer, strict=True)):
        rows.append((ins_id[t], dma_id[k], it, dt, "DGE_TRIGGER", dma.start[k] - e_[t]))
        rows.append((dma_id[k], ins_id[c], dt, it, "FLOW_DEPENDENCE", s_[c] - dma.end[k]))
    pd.DataFrame(
        rows, columns=["in_id", "out_id", "in_table", "out_table", "dependency_type", "gap_time"]
    ).astype({"in_id": "int64", "out_id": "int64", "gap_time": "int64"}).to_parquet(
        d / "Flow.parquet", index=False
    )


def _write_parquet_meta(d, sim, v, r, g, cap, last, off, ins, dma) -> None:
    sh = sim.shape
    first_hw = 0 if v.device_clock == "zero" else cap + _device_offset(r)
    pd.DataFrame(
        [
            {
                "profile_schema_version": v.schema,
                "ntff_version": np.int32(5),
                "num_physical_cores": np.int32(1),
                "vnc_enabled": False,
                "first_hw_timestamp": first_hw,
                "last_hw_timestamp": last + off,
                "first_ts": "1970-01-01 00:00:00+00:00",
                "last_ts": "1970-01-01 00:00:00+00:00",
                "dma_ddr_bandwidth": 200e9,
                "num_dma_engines_per_neuroncore": np.int32(16),
                "hbm_ddr_bandwidth": 820e9,
                "tensor_engine_num_rows": 128,
                "tensor_engine_num_cols": 128,
                "tensor_engine_clock_freq": 2.8,
                "vector_engine_clock_freq": 1.4,
                "vector_engine_num_channels": 128,
                "scalar_engine_clock_freq": 1.4,
                "scalar_engine_num_channels": 128,
                "gpsimd_engine_clock_freq": 1.4,
                "gpsimd_engine_num_channels": 8,
                "neuroncore_clock_freq": 1.4,
                "ticks_per_nanosec": 1,
                "instance_type": "trn1.32xlarge",
                "neuroncore_idx": r % 2,
                "neuron_device_idx": r // 2,
                "profile_name": _profile_name(v, g),
            }
        ]
    ).to_parquet(d / "Metadata.parquet", index=False)
    ex_s = sim.step_start[:, r] - cap
    ex_e = sim.cc_e[:, r] + 200 - cap
    pd.DataFrame(
        {
            "execution_index": np.arange(sh.n_steps, dtype=np.int32),
            "neff_name": "file.neff",
            "execution_start_ts": ex_s,
            "execution_end_ts": ex_e,
            "num_subgraphs": np.int32(1),
        }
    ).to_parquet(d / "ExecutionInfo.parquet", index=False)
    busy = (ins.end - ins.start).groupby(ins.engine).sum()
    total_s = (last - cap) * 1e-9
    pd.DataFrame(
        [
            {
                "total_time": total_s,
                "total_exec_time": float((ex_e - ex_s).sum() * 1e-9),
                "tensor_engine_active_time": busy.get("Tensor", 0) * 1e-9,
                "scalar_engine_active_time": busy.get("Scalar", 0) * 1e-9,
                "dma_active_time": float((dma.end - dma.start).sum() * 1e-9),
                "dma_transfer_count": len(dma),
                "dma_transfer_total_bytes": int(dma.bytes.sum()),
                "cc_op_count": sh.n_steps,
                "tensor_engine_instruction_count": int((ins.kind == "mm").sum()),
            }
        ]
    ).to_parquet(d / "Summary.parquet", index=False)
    at = pd.DataFrame(
        {
            "start_ts": ins.start + off,
            "end_ts": ins.end + off,
            "engine": ins.engine.str.lower(),
            "pcore_idx": 0,
            "duration_ns": ins.end - ins.start,
        }
    )
    at.to_parquet(d / "ActiveTime.parquet", index=False)


# --------------------------------------------------------------------------- legacy device JSON


# The collective's semaphore in the legacy JSON without a ``cc_ops`` table: S[15], as in the
# reference's trigger example (neuron-parquet-fields.md, Instruction ``instruction_chain``:
# ``PSEUDO_TRIGGER_COLLECTIVE_2 $S[15]>=1 $S[15]++@complete ctype=ALL_REDUCE ...``). ``++@complete``
# counts it up once per completed op, and one engine increments while another waits for the
# value (neuron-docs/glossary.rst, Semaphore), written ``$S[n]>=v`` (profile-schema-reference.rst,
# CoreBarriers ``compiler_operands``). Read here as counting over the whole profile, as the
# judge's Perfetto DMA semaphore does: the op of step s (0-based) sets S[15] to s + 1, so a
# consumer of its result waits ``$S[15]>=s+1`` and the next op's trigger, ordered after it on
# the stream (the example's second trigger waiting >=1), waits ``$S[15]>=s+1`` too.
_JSON_CC_SEM = 15
_JSON_CC_CONSUMER_NS = 100  # the consumer's own run time, inside the execution's last 200 ns


def _json_instructions(sim: Sim, r: int, v: Variants, ins: pd.DataFrame) -> pd.DataFrame:
    """One rank's legacy JSON instruction rows (true time) with their ``opcode``, ``operands``
    and ``src`` line: ``ins`` as the other layouts have it, except with ``json_collectives``
    'triggers': the triggers' operands name S[15] and, with ``json_cc_wait`` 'consumer', one
    Scalar ACTIVATE per collective (averaging the summed result over the ranks) waits for it."""
    sh, L = sim.shape, sim.shape.n_layers
    ins = ins.copy()
    ins["opcode"] = [_opcode(k) for k in ins.kind]
    ins["operands"] = [_operands(k, lay) for k, lay in zip(ins.kind, ins.layer, strict=True)]
    ins["src"] = [40 + 2 * lay + (k == "act") for k, lay in zip(ins.kind, ins.layer, strict=True)]
    if v.json_collectives == "cc_ops":
        return ins
    sem = f"$S[{_JSON_CC_SEM}]"
    waits_prev = v.json_cc_wait in ("consumer", "trigger")
    is_cct = (ins.kind == "cct").to_numpy()
    ins.loc[is_cct, "operands"] = [
        (f"{sem}>={s} " if waits_prev and s >= 1 else "") + f"{sem}++@complete " + text
        for s, text in zip(ins.step[is_cct], ins.operands[is_cct], strict=True)
    ]
    if v.json_cc_wait != "consumer":
        return ins
    cct_pos = {int(s): i for i, s in zip(np.flatnonzero(is_cct), ins.step[is_cct], strict=True)}
    S = sh.n_steps
    start = sim.cc_e[:, r].astype(np.int64)  # its wait is met when the op completes
    extra = pd.DataFrame(
        {
            "kind": "ccw",
            "engine": "Scalar",
            "start": start,
            "end": start + _JSON_CC_CONSUMER_NS,
            "step": np.arange(S),
            "layer": L - 1,
            # ready when the Scalar engine's previous instruction (the last activation) ended
            "wait": start - sim.act_e[:, L - 1, r],
            "deps": [[cct_pos[s]] for s in range(S)],
            "opcode": "ACTIVATE",
            "operands": [f"{sem}>={s + 1} func=copy scale={1 / sh.n_ranks:g}" for s in range(S)],
            "src": 40 + 2 * L,
        }
    )
    both = pd.concat([ins, extra], ignore_index=True)
    order = np.argsort(both.start.to_numpy(), kind="stable")
    new_pos = np.empty(len(both), np.int64)
    new_pos[order] = np.arange(len(both))
    both["deps"] = [[int(new_pos[j]) for j in d] for d in both.deps]
    return both.iloc[order].reset_index(drop=True)


def write_legacy_json(sim: Sim, v: Variants, root: Path) -> Path:
    """``neuron-profile view --output-format json`` per rank, with the ``cc_ops`` table, or
    (``json_collectives`` 'triggers') without it: see :func:`_json_instructions`."""
    sh = sim.shape
    root.mkdir(parents=True, exist_ok=True)
    scale = 1000 if v.json_unit == "ps" else 1
    for r in range(sh.n_ranks):
        g = v.rank_base + r
        cap = _capture_start(sim, r)
        off = -cap if v.device_clock == "zero" else _device_offset(r)
        ins, dma, cc = device_tables(sim, r, v)
        ins = _json_instructions(sim, r, v, ins)

        def tt(x, off=off):
            return [int(a) for a in (np.asarray(x, np.int64) + off) * scale]

        def dd(x):
            return [int(a) for a in np.asarray(x, np.int64) * scale]

        ids = (np.arange(len(ins)) + 4_000_000_000).tolist()  # 64-bit ids
        instr = [
            {
                "timestamp": ts,
                "duration": du,
                "label": {"Tensor": "TensorMatrix", "Scalar": "Act"}.get(e, e),
                "subgroup": e,
                "opcode": op,
                "operands": text,
                "id": i,
                "pc": 64 * n,
                "inst_dep_ids": [ids[j] for j in dep],
                "layer": f"layer_{lay}",
                "fully_qualified_subgraph": "/sg00",
                "hlo_name": f"%dot.{lay} = dot()" if k == "mm" else "",
                "evt_wait_time": w * scale,
                "nki_source_location": f"model.py:{line}",
                "hbm_read_bytes": 0,
            }
            for n, (ts, du, e, k, lay, i, dep, w, op, text, line) in enumerate(
                zip(
                    tt(ins.start),
                    dd(ins.end - ins.start),
                    ins.engine,
                    ins.kind,
                    ins.layer,
                    ids,
                    ins.deps,
                    ins.wait.astype(int),
                    ins.opcode,
                    ins.operands,
                    ins.src,
                    strict=True,
                )
            )
        ]
        dmas = [
            {
                v.json_queue_key: "qSyncIO0",
                "transfer_size": int(b),
                "timestamp": ts,
                "duration": du,
                "variable": f"weight_{lay}",
            }
            for ts, du, b, lay in zip(
                tt(dma.start), dd(dma.end - dma.start), dma.bytes, dma.layer, strict=True
            )
        ]
        ccs = [
            {
                "timestamp": ts,
                "duration": du,
                "operation": "AllReduce",
                "algorithm": "Ring",
                "dtype": "bf16",
                "input_size": XFER_BYTES,
                "output_size": XFER_BYTES,
                "replica_group": _replica_group(v, sh.n_ranks),
                "trigger_engine": "Pool",
                "cc_trigger": trig,
                "cc_trigger_start_delay": ts - trig,
            }
            for ts, du, trig in zip(
                tt(cc.start), dd(cc.end - cc.start), tt(cc.trigger), strict=True
            )
        ]
        last = int(sim.cc_e[-1, r]) + 200
        doc = {
            "summary": [
                {
                    "total_time": (last - cap) * 1e-9,
                    "event_count": len(instr) + len(dmas),
                    "nc_idx": r % 2,
                    "nd_idx": r // 2,
                }
            ],
            "metadata": [
                {
                    "first_hw_timestamp": tt([cap])[0],
                    "last_hw_timestamp": tt([last])[0],
                    "instance_type": "trn1.32xlarge",
                }
            ],
            "instruction": instr,
            "dma": dmas,
            "cc_ops": ccs,
            "active_time": [
                {"start_ts": a, "end_ts": a + b, "engine": e.lower()}
                for a, b, e in zip(tt(ins.start), dd(ins.end - ins.start), ins.engine, strict=True)
            ],
            "profile_info": [{"neff": "file.neff", "ntff": f"profile_rank_{g}.ntff"}],
        }
        if v.json_collectives == "triggers":
            del doc["cc_ops"]  # no collective table: only the trigger instructions tell
        path = (
            root / f"profile_rank_{g}.json"
            if v.json_layout == "flat"
            else root / f"profile_rank_{g}" / "ntff.json"
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc))
    return root


# --------------------------------------------------------------------------- system profiles


def system_events(sim: Sim, v: Variants) -> pd.DataFrame:
    """The system profile's events on the host clocks: ``nrt_execute`` (runtime), the hardware
    ``nc_exec_running`` and ``cc_running`` (moved to the host clock by a sync point whose capture
    is off by a few hundred ns), and the ``timestamp_sync_point`` of each execution."""
    sh = sim.shape
    R, S = sh.n_ranks, sh.n_steps
    rows = []
    for r in range(R):
        inst = _instance_of(r, v, R)
        host, hw = _host_offset(inst), _host_offset(inst) + _sync_error(r)
        nc = r - min(q for q in range(R) if _instance_of(q, v, R) == inst)
        base = {
            "rank": r,
            "gid": v.rank_base + r,
            "inst": inst,
            "nc": nc,
            "pid": 1113579 + 1000 * inst,
            "tid": 2077393 + 17 * r,
            "dev_off": _device_offset(r),
        }
        for s in range(S):
            st, end = int(sim.step_start[s, r]), int(sim.cc_e[s, r])
            sync_t = end + 700
            for name, src, a, b, clk in (
                ("nrt_execute", "neuron_rt", st - sh.launch_ns, end + 200 + sh.return_ns, host),
                ("nc_exec_running", "neuron_hw", st, end + 200, hw),
                ("cc_running", "neuron_hw", int(sim.cc_local[s, r]), end, hw),
                ("timestamp_sync_point", "neuron_rt", sync_t, sync_t, host),
            ):
                rows.append(
                    {
                        **base,
                        "name": name,
                        "src": src,
                        "ts": a + clk,
                        "dur": b - a,
                        "exec_id": s + 1,
                        "cpu_ts": sync_t + hw,
                        "nc_ts": sync_t + base["dev_off"],
                    }
                )
    return pd.DataFrame(rows).sort_values(["ts", "rank"], kind="stable").reset_index(drop=True)


def _instance_id(inst: int) -> str:
    return ["i-006704e60c940ac33", "i-0f207fb2a99bd2d08"][inst]


def write_system_json(sim: Sim, v: Variants, root: Path) -> Path:
    """``system_profile.json`` of ``neuron-explorer view --output-format json``: ``trace_event``."""
    root.mkdir(parents=True, exist_ok=True)
    ev = system_events(sim, v)
    div = 1000.0 if v.sys_unit == "us" else 1
    out = []
    for e in ev.itertuples():
        row = {
            "name": e.name,
            "timestamp": e.ts / div if div != 1 else int(e.ts),
            "duration": e.dur / div if div != 1 else int(e.dur),
            "timestamp_unit": v.sys_unit,
            "exec_id": e.exec_id,
            "model_id": 10001,
            "device_core_idx": e.nc,
            "lnc_idx": e.nc,
            "nc_idx": e.nc,
            "process_id": str(e.pid),
            "thread_id": e.tid,
            "model_name": NEFF,
            "instance_id": _instance_id(e.inst),
            "trace_event_source": e.src,
        }
        if v.sys_gid:
            row["worker_gid"] = e.gid
        if e.name == "timestamp_sync_point":
            row["cpu_timestamp_ns"], row["nc_timestamp_ns"] = int(e.cpu_ts), int(e.nc_ts)
        out.append(row)
    mem = [
        {
            "timestamp": int(ev.ts.min()),
            "hbm_idx": 0,
            "total_bytes": 1 << 30,
            "dram_spill_bytes": 0,
            "instance_id": _instance_id(0),
        }
    ]
    (root / "system_profile.json").write_text(
        json.dumps({"trace_event": out, "device_mem_usage": mem})
    )
    return root


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _fv(num: int, val: int) -> bytes:
    return _varint(num << 3) + _varint(val)


def _fb(num: int, val) -> bytes:
    b = val.encode() if isinstance(val, str) else val
    return _varint((num << 3) | 2) + _varint(len(b)) + b


def _annotation(name: str, val) -> bytes:
    return _fb(4, _fb(10, name) + (_fv(4, val) if isinstance(val, int) else _fb(6, str(val))))


def _thread_name(v: Variants, e, src: str) -> str | None:
    if v.pf_naming == "gid":
        return f"gid{e.gid}-nc{e.nc}-tid{e.tid}-{src}"
    if v.pf_naming == "gid-nrt":
        return f"gid{e.gid}-nrt-nc{e.nc}-tid{e.tid}-{src}"
    if v.pf_naming == "nrt":
        return f"nrt-nc{e.nc}-tid{e.tid}-{src}"
    return None  # 'Thread <tid>': the UI's name for a thread track without a name


def write_perfetto(sim: Sim, v: Variants, root: Path) -> Path:
    """``system_profile.pftrace``: TrackEvent slices on per-core runtime/hardware thread tracks
    under ``<instance_id>-pid<pid>`` processes, the fields as debug annotations."""
    root.mkdir(parents=True, exist_ok=True)
    ev = system_events(sim, v)
    seq = _fv(10, 7)
    packets, tracks, names = [], {}, {}
    for e in ev.drop_duplicates(["inst", "pid"]).itertuples():
        uuid = 1000 + e.inst
        tracks[("p", e.inst)] = uuid
        desc = _fv(1, uuid) + _fb(3, _fv(1, e.pid) + _fb(6, f"{_instance_id(e.inst)}-pid{e.pid}"))
        packets.append((0, _fb(60, desc) + seq))
    next_tid = 38
    for e in ev.drop_duplicates(["rank", "src"]).sort_values(["rank", "src"]).itertuples():
        src = e.src if v.pf_naming != "thread" else "one"
        if (e.rank, src) in tracks:
            continue
        name = _thread_name(v, e, e.src)
        tid = e.tid if name is None else next_tid
        next_tid += 1
        uuid = 2000 + len(tracks)
        tracks[(e.rank, src)] = uuid
        th = _fv(1, e.pid) + _fv(2, tid) + (_fb(5, name) if name else b"")
        packets.append(
            (0, _fb(60, _fv(1, uuid) + _fv(5, tracks[("p", e.inst)]) + _fb(4, th)) + seq)
        )
    first = True
    for e in ev.itertuples():
        uuid = tracks[(e.rank, e.src if v.pf_naming != "thread" else "one")]
        name = (
            e.name
            if (e.src == "neuron_rt" or not v.neff_suffix or e.name == "cc_running")
            else f"{e.name} {NEFF}"
        )
        ann = b"".join(
            _annotation(k, x)
            for k, x in (
                ("duration", int(e.dur)),
                ("exec_id", int(e.exec_id)),
                ("instance_id", _instance_id(e.inst)),
                ("lnc_idx", int(e.nc)),
                ("nc_idx", int(e.nc)),
                ("model_name", NEFF),
                ("process_id", int(e.pid)),
                ("thread_id", int(e.tid)),
                ("timestamp", int(e.ts)),
                ("timestamp_unit", "ns"),
                ("trace_event_source", e.src),
                ("worker_gid", int(e.gid)),
            )
        )
        if e.name == "timestamp_sync_point":
            ann += _annotation("cpu_timestamp_ns", int(e.cpu_ts)) + _annotation(
                "nc_timestamp_ns", int(e.nc_ts)
            )
        if e.name == "nrt_execute":
            ann += _annotation("device_profile", "device_profile_model_10001.pftrace")
        extra = b""
        if v.pf_interned:
            if name not in names:
                names[name] = len(names) + 1
                extra += _fb(12, _fb(2, _fv(1, names[name]) + _fb(2, name)))
            flags = 1 if first else 2
            extra += _fv(13, flags)
            label = _fv(10, names[name])
        else:
            label = _fb(23, name)
        first = False
        if e.dur == 0:
            body = _fv(9, 3) + _fv(11, uuid) + label + ann
            packets.append((int(e.ts), _fv(8, int(e.ts)) + _fb(11, body) + seq + extra))
            continue
        packets.append(
            (
                int(e.ts),
                _fv(8, int(e.ts)) + _fb(11, _fv(9, 1) + _fv(11, uuid) + label + ann) + seq + extra,
            )
        )
        end = int(e.ts + e.dur)
        packets.append((end, _fv(8, end) + _fb(11, _fv(9, 2) + _fv(11, uuid)) + seq))
    # time order (an end before a begin at the same instant); descriptors (ts 0) first
    packets.sort(key=lambda p: p[0])
    (root / "system_profile.pftrace").write_bytes(b"".join(_fb(1, body) for _, body in packets))
    return root


def write_perfetto_device(sim: Sim, v: Variants, root: Path) -> Path:
    """Perfetto device traces (``device_profile_model_<id>.pftrace``), in their own module."""
    # imported here: that module builds on this one's tables and protobuf helpers
    from tests.cleanroom.neuron_judge_perfetto import write_perfetto_device as write

    return write(sim, v, root)


LAYOUTS = {
    "parquet": write_parquet,
    "legacy_json": write_legacy_json,
    "system_json": write_system_json,
    "perfetto": write_perfetto,
    "perfetto_device": write_perfetto_device,
}
DEVICE_LAYOUTS = ("parquet", "legacy_json", "perfetto_device")


def write_run(root: Path, cause: Cause, seed: int = 0, shape: Shape | None = None) -> dict:
    """Write one run in every layout under ``root/<layout>``; returns the paths, the variants and
    the truth."""
    shape = shape or Shape()
    v = Variants.from_seed(seed)
    sim = simulate(shape, cause, seed)
    paths = {name: fn(sim, v, Path(root) / name) for name, fn in LAYOUTS.items()}
    return {
        "paths": paths,
        "variants": v,
        "truth": truth(shape, cause, seed, v.rank_base),
        "sim": sim,
    }
