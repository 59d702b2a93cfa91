"""The Chrome flavour's cross-stream synchronisation: event records, stream waits, CUPTI records.

Every dependency of the simulated program between work on two CUDA streams must show as
Kineto shows it, so that a reader can rebuild the edge from correlation order alone.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tracediag.generator import generate
from tracediag.generator import hardware as hw
from tracediag.generator.program import CC, DMA, INSTR, WorkloadShape
from tracediag.generator.scenarios import scenario_faults
from tracediag.generator.workload import build_program
from tracediag.loading.loader import load
from tracediag.model import schema as S

RANKS = 2
SEED = 3
TRIGGERS = ("PSEUDO_DMA_TRIGGER", "PSEUDO_TRIGGER_COLLECTIVE")


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    made = {}

    def get(scenario: str) -> tuple[Path, dict]:
        if scenario not in made:
            out = tmp_path_factory.mktemp(scenario)
            made[scenario] = (out, generate(scenario, out, ("chrome",), RANKS, SEED))
        return made[scenario]

    return get


def _program_waits(scenario: str) -> set[tuple[tuple[int, int], tuple[int, int]]]:
    """Cross-stream dependencies of the program, straight from the device program: ((producer
    stream, n-th work on it), (consumer stream, n-th work on it)). A DMA's transfers share its
    trigger's dependencies; only the first one waits (the rest follow it on their stream)."""
    program = build_program(WorkloadShape(), scenario_faults(scenario, RANKS, 4))
    kind, opcode, engine = program.kind, program.opcode, program.engine
    trigger = (kind == INSTR) & np.isin(opcode, TRIGGERS)
    stream = np.full(len(kind), hw.COMPUTE_STREAM)
    stream[kind == CC] = hw.NCCL_STREAM
    dma = np.flatnonzero(kind == DMA)
    stream[dma] = pd.Series(engine[dma]).map(hw.COPY_STREAMS).to_numpy()
    work = np.flatnonzero(~trigger)
    nth = pd.Series(stream[work]).groupby(stream[work]).cumcount().to_numpy()
    places = zip(stream[work].tolist(), nth.tolist(), strict=True)
    place = dict(zip(work.tolist(), places, strict=True))
    src, dst = program.edges()
    # Transfers and collectives take the dependencies of the trigger that starts them.
    first_dep = program.dep_src[program.dep_ptr[work]]
    cause = np.where(np.isin(kind[work], [DMA, CC]), first_dep, work)
    first_of_trigger = ~pd.Series(cause).duplicated().to_numpy() | (kind[work] == INSTR)
    waits = set()
    for consumer, via in zip(work[first_of_trigger], cause[first_of_trigger], strict=True):
        for producer in src[(dst == via) & ~trigger[src]]:
            if stream[producer] != stream[consumer]:
                waits.add((place[int(producer)], place[int(consumer)]))
    return waits


def _frames(out: Path, rank: int) -> dict[str, pd.DataFrame]:
    doc = json.loads(gzip.decompress((out / "chrome" / f"rank_{rank}.json.gz").read_bytes()))
    events = pd.DataFrame(doc["traceEvents"])
    x = events[events["ph"] == "X"].reset_index(drop=True)
    x = pd.concat([x.drop(columns="args"), pd.DataFrame(list(x["args"]))], axis=1)
    x["end"] = x["ts"] + x["dur"]
    work = x[x["cat"].isin(["kernel", "gpu_memcpy"])].sort_values("correlation").copy()
    work["nth"] = work.groupby("tid").cumcount()
    calls = x[x["cat"] == "cuda_runtime"]
    return {
        "work": work,
        "calls": calls,
        "record": calls[calls["name"] == "cudaEventRecord"],
        "wait": calls[calls["name"] == "cudaStreamWaitEvent"],
        "cupti": x[x["cat"] == "cuda_sync"],
        "flows": events[events["cat"] == "ac2g"],
    }


def _work_on(work: pd.DataFrame, stream: int, corr: int, after: bool) -> pd.Series:
    """The first work launched on ``stream`` after ``corr``, or the last one before it."""
    on = work[work["tid"] == stream]
    return on[on["correlation"] > corr].iloc[0] if after else on[on["correlation"] < corr].iloc[-1]


@pytest.mark.parametrize("scenario", ["clean", "fragmented_dma", "mixed"])
def test_every_cross_stream_dependency_has_its_record_wait_and_cupti_record(jobs, scenario):
    out, _ = jobs(scenario)
    expected = _program_waits(scenario)
    kinds = {(p[0], c[0]) for p, c in expected}
    # Compute waits for weights (22) and activations (23); copies wait for compute (buffer
    # reuse, saved tiles); the AllReduce waits for the gradients; the optimizer for AllReduces.
    assert {(22, 7), (23, 7), (7, 22), (7, 23), (7, 28), (28, 7)} == kinds
    for rank in range(RANKS):
        f = _frames(out, rank)
        wait, record, cupti, work = f["wait"], f["record"], f["cupti"], f["work"]
        assert len(wait) == len(cupti) == len(expected) and len(record) < len(wait)
        # CUPTI numbers API calls in call order.
        calls = f["calls"].sort_values("ts")
        assert calls["correlation"].is_monotonic_increasing and calls["correlation"].is_unique
        # One CUPTI record per wait call, on the waiting stream, inside the call.
        cupti = cupti.set_index("correlation").loc[wait["correlation"]]
        assert (cupti["name"] == "Stream Wait Event").all()
        assert (cupti["cuda_sync_kind"] == "Stream Wait Event").all()
        assert (cupti["tid"] == cupti["stream"]).all() and (cupti["pid"] == cupti["device"]).all()
        assert (cupti["External id"].to_numpy() == wait["External id"].to_numpy()).all()
        assert (cupti["ts"].to_numpy() > wait["ts"].to_numpy()).all()
        assert (np.isclose(cupti["end"].to_numpy(), wait["end"].to_numpy())).all()
        # Every wait names a record call; each record directly follows its producer's launch.
        by_record = record.set_index("correlation")
        by_corr = f["calls"].set_index("correlation")
        assert set(cupti["wait_on_cuda_event_record_corr_id"]) == set(by_record.index)
        ids = cupti.groupby("wait_on_cuda_event_record_corr_id")["wait_on_cuda_event_id"]
        assert (ids.nunique() == 1).all() and ids.first().is_unique
        found = set()
        for corr, row in cupti.iterrows():
            rec = int(row["wait_on_cuda_event_record_corr_id"])
            producer = _work_on(work, row["wait_on_stream"], rec, after=False)
            consumer = _work_on(work, row["stream"], corr, after=True)
            assert producer["correlation"] == rec - 1  # launch, then record: no call between
            assert row["wait_on_stream"] != row["stream"]
            # The consumer starts after its producer ended (plus the event's resolution).
            assert consumer["ts"] >= producer["end"] + hw.CROSS_STREAM_LATENCY_NS / 1000 - 1e-6
            assert np.isclose(by_record.loc[rec, "ts"], by_corr.loc[rec - 1, "end"])
            found.add(((producer["tid"], producer["nth"]), (consumer["tid"], consumer["nth"])))
        assert found == expected
        # Kineto's flows: the wait starts one, its CUPTI record and the event record finish one.
        flows = f["flows"]
        assert set(wait["correlation"]) <= set(flows.loc[flows["ph"] == "s", "id"])
        on_device = flows[(flows["ph"] == "f") & (flows["pid"] == cupti["pid"].iloc[0])]
        assert set(wait["correlation"]) <= set(on_device["id"])
        assert set(record["correlation"]) <= set(flows.loc[flows["ph"] == "f", "id"])


def test_sync_calls_take_host_time_and_are_in_their_ops(jobs):
    out, _ = jobs("clean")
    f = _frames(out, 0)
    assert (np.isclose(f["record"]["dur"], hw.EVENT_RECORD_CALL_NS / 1000)).all()
    assert (np.isclose(f["wait"]["dur"], hw.STREAM_WAIT_CALL_NS / 1000)).all()
    doc = json.loads(gzip.decompress((out / "chrome" / "rank_0.json.gz").read_bytes()))
    ops = pd.DataFrame([e for e in doc["traceEvents"] if e.get("cat") == "cpu_op"])
    ext = pd.DataFrame(list(ops["args"]))["External id"].to_numpy()
    span = {"ts": ops["ts"].to_numpy(), "end": (ops["ts"] + ops["dur"]).to_numpy()}
    op_of = pd.DataFrame(span, index=ext)
    op_of = op_of[~op_of.index.duplicated()]  # record_param_comms repeats its op's id
    for frame in (f["record"], f["wait"]):
        op = op_of.loc[frame["External id"]]
        assert (frame["ts"].to_numpy() >= op["ts"].to_numpy()).all()
        assert (frame["end"].to_numpy() <= op["end"].to_numpy() + 1e-6).all()


def test_reader_turns_every_wait_into_an_edge(jobs):
    out, _ = jobs("slow_dma")
    trace = load([out / "chrome"])
    edges = trace.edges[trace.edges[S.EDGE_KIND] == "sync"]
    kind = trace.events[S.KIND].astype(str).to_numpy()
    gpu = ["compute", "dma", "collective"]
    gpu_to_gpu = np.isin(kind[edges[S.SRC]], gpu) & np.isin(kind[edges[S.DST]], gpu)
    waits = sum(len(_frames(out, r)["wait"]) for r in range(RANKS))
    assert gpu_to_gpu.sum() == waits
    ts, end = trace.events[S.TS].to_numpy(), trace.events[S.TS] + trace.events[S.DUR]
    src, dst = edges[S.SRC].to_numpy()[gpu_to_gpu], edges[S.DST].to_numpy()[gpu_to_gpu]
    assert (ts[dst] >= end.to_numpy()[src]).all()


def test_chrome_truth_names_streams(jobs):
    for scenario, queue, engines in (
        ("slow_dma", "stream 22", []),
        ("fragmented_dma", "stream 22", []),
        ("straggler", None, ["stream 7"]),
    ):
        _, truth = jobs(scenario)
        (fault,) = truth["chrome"]["faults"]
        assert (fault["queue"], fault["engines"]) == (queue, engines), scenario
        assert fault["tracks"] == [queue or "stream 7"]
