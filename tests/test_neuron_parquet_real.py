"""Explorer Parquet profiles as the profiler really writes them (issue 15, items 3-5), from the
clean-room writer (tests/cleanroom/neuron_device_writer.py, written without reading our readers):
schema versions, the Warning table, DMA tables absent or empty, LNC=2, session captures with
barrier executions, a data path with an unrelated profile, duplicate packets, bytes as AWS counts
them, per-transfer efficiency, hardware peaks from Metadata, empty replica groups and ranks from
the profiler's names. Expected numbers come from the writer's truth or its documented constants.
"""

from __future__ import annotations

import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.cleanroom.neuron_device_writer import write_scenario
from tracediag.analysis.context import analyse
from tracediag.engine.diagnose import diagnose
from tracediag.loading.loader import load
from tracediag.model import schema as S
from tracediag.model.errors import TraceInputError
from tracediag.model.findings import Severity

#: The writer's trn2 constants (its _HW table): TE 128x128 at 2.4 GHz, DMA 435 GB/s.
TRN2_TE_PEAK_LNC2 = 128 * 128 * 2 * 2.4e9 * 2


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """scenario -> (data path, truth), each written once."""
    out = {}
    cases = {
        "lnc2": {},
        "no_dma_tables": {},
        "session_capture": {},
        "duplicate_dma_packets": {},
        "tp_sequence_parallel": {},
        "renamed": dict(
            scenario="clean",
            schema_version="13.0.0",
            rename_fields={"Instruction": {"opcode": "op_code"}, "CcOp": {"stream_id": "stream"}},
        ),
        "small_packets": dict(scenario="clean", packet_bytes=16 * 1024),
        "snake_split": dict(scenario="clean", table_file_names="snake", split_rows=500),
    }
    for name, kw in cases.items():
        kw = dict(kw)
        root = tmp_path_factory.mktemp(name)
        out[name] = (
            root,
            write_scenario(kw.pop("scenario", name), root, formats=("parquet",), **kw),
        )
    return out


def _codes(d, code, severity=Severity.INFO):
    return [f for f in d.findings if f.code == code and f.severity >= severity]


def test_lnc2_list_source_locations_pcores_apart_and_metadata_peaks(written):
    root, truth = written["lnc2"]
    trace = load([root], cache=False)  # the data path itself
    assert trace.ranks == [0, 1]
    names = set(trace.tracks[S.TRACK_NAME].astype(str))
    assert {"tensor/pcore0", "tensor/pcore1"} <= names
    assert any(n.startswith("qSyncDynamicHW") and "pcore1" in n for n in names)
    # nki_source_location written as list<string> is read as text.
    assert trace.events[S.SOURCE].notna().any()
    a = analyse(trace)
    for r in (0, 1):
        hw = a.hardware[r]
        assert hw.source == "profile Metadata"
        assert hw.peak_flops == pytest.approx(TRN2_TE_PEAK_LNC2)
        # The writer's DMA peak is one physical core's; a logical core of two moves data on
        # both (its DMA busy time is the union of both cores' queues), so its peak is twice.
        assert hw.hbm_bw == pytest.approx(2 * truth["dma"]["peak_bandwidth_Bps"])
    # The report says which peaks it used, per rank (not as a finding: it is no problem).
    ranks = diagnose(trace).to_dict()["ranks"]
    assert [r["hardware_peaks"]["source"] for r in ranks] == ["profile Metadata"] * 2


def test_builtin_table_is_the_fallback_and_says_so(written, tmp_path):
    root, _ = written["lnc2"]
    copy = tmp_path / "p"
    shutil.copytree(root / "profiles", copy)
    for meta in copy.glob("global/*/Metadata.parquet"):
        t = pq.read_table(meta)
        keep = [c for c in t.column_names if not c.startswith(("tensor_engine", "dma_ddr"))]
        pq.write_table(t.select(keep), meta)
    a = analyse(load([copy], cache=False))
    assert a.hardware[0].source == "built-in table"
    assert a.hardware[0].name.startswith("trn2")


def test_no_dma_tables_is_said_and_dma_analyses_marked_unavailable(written):
    root, truth = written["no_dma_tables"]
    trace = load([root / "profiles" / "global"], cache=False)
    assert truth["dma"]["tables_written"] == {"0": "absent", "1": "empty"}
    assert [trace.meta[r].info["dma_tables"] for r in (0, 1)] == ["absent", "empty"]
    assert not (trace.events[S.KIND] == "dma").any()
    d = diagnose(trace)
    # One finding for the one cause (absent on rank 0, empty on rank 1, and the profiler's own
    # Warning row), at info: the job is clean and everything else stands.
    (f,) = [f for f in d.findings if f.code == "TRC507"]
    assert f.severity == Severity.INFO and f.ranks == (0, 1)
    assert f.evidence["kind"] == "dma tables missing"
    assert "rank 0: no DmaPacket or DmaPacketAggregated table" in f.message
    assert "rank 1: DmaPacket and DmaPacketAggregated tables without rows" in f.message
    assert "DGE notifications were not collected" in f.message
    assert "Unavailable on these ranks: DMA101" in f.message
    assert not [f for f in d.findings if f.severity >= Severity.WARNING]
    assert not [f for f in d.findings if f.code.startswith("DMA")]


def test_session_capture_skips_the_unrelated_profile_and_splits_executions(written):
    root, truth = written["session_capture"]
    trace = load([root], cache=False)
    assert trace.ranks == [0, 1]  # unrelated_kernel_0 is not a rank
    skipped = [n for n in trace.meta[0].info["profile_notes"] if n["kind"] == "profiles skipped"]
    assert len(skipped) == 1 and "unrelated_kernel_0" in skipped[0]["message"]
    sim = truth["executions"]["simulated"]
    for r in (0, 1):
        got = trace.meta[r].info["executions"]
        assert [(e["kind"], e["neff"]) for e in got] == [(e["kind"], e["neff"]) for e in sim]
        # Lengths, not starts: the writer offsets ExecutionInfo by the profile start twice.
        for e, want in zip(got, sim, strict=True):
            length = want["end_true_ns"][str(r)] - want["start_true_ns"][str(r)]
            assert e["end_ns"] - e["start_ns"] == length
    ev = trace.events
    steps = ev[S.STEP].to_numpy()
    assert set(np.unique(steps[np.isfinite(steps)])) == {0.0, 1.0}
    # The barrier executions' events are kept, with no step.
    assert np.isnan(steps).sum() > 0
    a = analyse(trace)
    assert a.steps == {0: truth["executions"]["model_executions"], 1: 2}


def test_duplicate_packets_removed_and_bytes_counted_as_aws_does(written):
    root, truth = written["duplicate_dma_packets"]
    trace = load([root], cache=False)
    a = analyse(trace)
    dma = a.dma
    for r in (0, 1):
        meta = trace.meta[r]
        assert meta.info["dma_duplicate_packets"] == truth["dma"]["duplicate_packets"][str(r)] > 0
        assert (
            meta.repairs["DmaPacket: duplicate packet removed (a known profiler defect)"]
            == truth["dma"]["duplicate_packets"][str(r)]
        )
        mine = dma[dma["rank"] == r].groupby("queue")["bytes"].sum(min_count=1)
        for queue, nbytes in truth["dma"]["queue_bytes"][str(r)].items():
            if queue == "qSyncPIOParam0":  # the instruction queue: no data bytes
                assert np.isnan(mine.get(queue, np.nan))
            else:
                assert mine[queue] == nbytes, (r, queue)
    # The 4-byte instruction-queue packets are not small data transfers.
    assert not [f for f in diagnose(trace).findings if f.code == "DMA102"]


def test_efficiency_is_per_transfer_not_per_packet(written):
    root, truth = written["small_packets"]
    trace = load([root], cache=False)
    stats = trace.meta[0].info["dma_transfers"]["qSyncDynamicHW"]
    cfg = truth["variation"]
    per_transfer = cfg["weight_bytes"] // cfg["blocks_per_weight"]  # 384 KiB transfers
    assert cfg["packet_bytes"] < 32 * 1024 <= per_transfer  # packets small, transfers not
    assert stats["mean_transfer_bytes"] == per_transfer
    assert stats["transfers_at_32KiB_pct"] == 100.0
    assert stats["bytes"] == truth["dma"]["queue_bytes"]["0"]["qSyncDynamicHW"]
    assert stats["packets"] == stats["transfers"] * per_transfer // cfg["packet_bytes"]


def test_unknown_schema_major_names_the_missing_fields_in_one_note(written):
    root, _ = written["renamed"]
    trace = load([root], cache=False)
    assert trace.meta[0].info["schema_fields_missing"] == ["Instruction.opcode", "CcOp.stream_id"]
    notes = [
        f for f in _codes(diagnose(trace), "TRC507", Severity.WARNING)
        if f.evidence["kind"] == "unknown schema version"
    ]  # fmt: skip
    assert len(notes) == 1 and notes[0].ranks == (0, 1)
    assert "13.0.0" in notes[0].message and "Instruction.opcode, CcOp.stream_id" in notes[0].message


def test_a_renamed_required_field_is_one_line_naming_file_and_schema(tmp_path):
    write_scenario(
        "clean", tmp_path, formats=("parquet",), ranks=1, schema_version="13.1.0",
        rename_fields={"Instruction": {"engine": "engine_name"}},
    )  # fmt: skip
    with pytest.raises(TraceInputError) as err:
        load([tmp_path], cache=False)
    text = str(err.value)
    assert "Instruction.parquet" in text and "engine" in text and "13.1.0" in text
    assert "\n" not in text


def test_empty_replica_groups_still_match_every_collective(written):
    root, truth = written["tp_sequence_parallel"]
    trace = load([root], cache=False)
    assert sum(m.repairs.get("CcOp: empty replica group taken from its stream's other ops", 0)
               for m in trace.meta.values()) > 0  # fmt: skip
    co = trace.collectives
    ev_src = trace.events[S.SRC_ID].to_numpy()
    key_of = {
        (int(r), int(ev_src[e])): k
        for r, e, k in zip(co[S.RANK], co[S.EVENT], co[S.MATCH_KEY], strict=True)
    }
    for op in truth["collectives"]["ops"]:
        keys = {key_of[(int(r), p["op_id"])] for r, p in op["per_rank"].items()}
        assert len(keys) == 1, op["id"]


def test_snake_case_and_split_tables_read_whole(written):
    root, truth = written["snake_split"]
    trace = load([root], cache=False)
    ev = trace.events
    for r in (0, 1):
        n = int(((ev[S.RANK] == r) & (ev[S.KIND] == "compute")).sum())
        assert n == truth["instruction_count"][str(r)]


def _rename_profiles(root, names):
    base = root / "profiles" / "global"
    for r, name in names.items():
        (base / f"llama_train_rank{r}@latest").rename(base / f"{name}@latest")
    return base


def test_ranks_from_vnc_and_from_process_order(written, tmp_path):
    root, _ = written["duplicate_dma_packets"]
    vnc = tmp_path / "vnc"
    shutil.copytree(root, vnc)
    _rename_profiles(vnc, {0: "14382885_instid_0_vnc_5", 1: "14382885_instid_0_vnc_2"})
    trace = load([vnc], cache=False)
    by_source = {m.rank: (m.sources[0].rsplit("/", 1)[1], m.info["rank_source"])
                 for m in trace.meta.values()}  # fmt: skip
    assert by_source == {
        5: ("14382885_instid_0_vnc_5@latest", "vnc in name"),
        2: ("14382885_instid_0_vnc_2@latest", "vnc in name"),
    }
    pid = tmp_path / "pid"
    shutil.copytree(root, pid)
    _rename_profiles(
        pid, {0: "i-012590440bb9fd263_pid_98399_nc_0", 1: "i-012590440bb9fd263_pid_1200_nc_0"}
    )
    trace = load([pid], cache=False)
    ranks = {m.sources[0].rsplit("/", 1)[1]: m.rank for m in trace.meta.values()}
    assert ranks == {  # processes in pid order; nc_0 is process-local
        "i-012590440bb9fd263_pid_1200_nc_0@latest": 0,
        "i-012590440bb9fd263_pid_98399_nc_0@latest": 1,
    }


def test_other_compiled_models_are_never_ranks(written, tmp_path):
    root, _ = written["duplicate_dma_packets"]
    job = tmp_path / "models"
    shutil.copytree(root, job)
    base = _rename_profiles(job, {0: "train_model_1_rank0", 1: "train_model_1_rank1"})
    shutil.copytree(base / "train_model_1_rank0@latest", base / "train_model_7_rank0@latest")
    trace = load([job], cache=False)
    assert trace.ranks == [0, 1]
    assert all("model_1" in m.sources[0] for m in trace.meta.values())
    notes = [n["message"] for n in trace.meta[0].info["profile_notes"]]
    assert any("train_model_7_rank0" in n and "not a rank" in n for n in notes)


def test_csv_export_reads_as_the_parquet_tables(tmp_path):
    truth = write_scenario("duplicate_dma_packets", tmp_path, formats=("parquet", "csv"))
    csv_trace = load([tmp_path / "csv"], cache=False)
    pq_trace = load([tmp_path / "profiles" / "global"], cache=False)
    assert csv_trace.ranks == [0, 1]
    assert {m.format for m in csv_trace.meta.values()} == {"neuron-csv"}
    ev, ref = csv_trace.events, pq_trace.events
    for r in (0, 1):
        m = csv_trace.meta[r]
        assert m.info["dma_duplicate_packets"] == truth["dma"]["duplicate_packets"][str(r)]
        n = int(((ev[S.RANK] == r) & (ev[S.KIND] == "compute")).sum())
        assert n == truth["instruction_count"][str(r)]
        for kind in ("compute", "dma"):
            mine = ev[(ev[S.RANK] == r) & (ev[S.KIND] == kind)]
            theirs = ref[(ref[S.RANK] == r) & (ref[S.KIND] == kind)]
            assert sorted(mine[S.DUR].tolist()) == sorted(theirs[S.DUR].tolist())
            assert mine[S.BYTES].sum() == theirs[S.BYTES].sum()
