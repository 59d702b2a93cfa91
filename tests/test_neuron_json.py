"""Legacy Neuron device JSON and summary-json: mappings, time unit, ids, ranks and bad input."""

from __future__ import annotations

import gzip

import numpy as np
import orjson
import pytest

from tests.neuron_fixtures import legacy_doc, write_json
from tracediag.model import schema as S
from tracediag.model.assembly import assemble
from tracediag.model.errors import TraceInputError
from tracediag.parsers import neuron_json

T0 = 10261883214


def _one(path):
    parts = neuron_json.read(path)
    assert len(parts) == 1
    return parts[0]


def _edge_set(part):
    ed = part.edges
    return {
        (int(s), int(d), str(k))
        for s, d, k in zip(ed[S.SRC], ed[S.DST], ed[S.EDGE_KIND], strict=True)
    }


def test_sniff(tmp_path):
    assert neuron_json.sniff(write_json(tmp_path / "ntff.json", legacy_doc()))
    assert neuron_json.sniff(write_json(tmp_path / "ntff.json.gz", legacy_doc()))
    bom = tmp_path / "bom.json"
    bom.write_bytes(b"\xef\xbb\xbf" + orjson.dumps(legacy_doc()))
    assert neuron_json.sniff(bom) and len(_one(bom).events) == 5
    assert neuron_json.sniff(
        write_json(tmp_path / "only_summary.json", {"summary": [{"total_time": 1.0}]})
    )
    assert neuron_json.sniff(
        write_json(tmp_path / "s.json", {"sg00": {"total_time": 0.1, "dma_active_time": 0.01}})
    )
    assert not neuron_json.sniff(
        write_json(tmp_path / "c.json", {"traceEvents": [], "instruction": []})
    )
    assert not neuron_json.sniff(
        write_json(tmp_path / "l.json", [{"ph": "X", "name": "a", "ts": 1, "dur": 2}])
    )
    assert not neuron_json.sniff(write_json(tmp_path / "o.json", {"foo": {"bar": 1}}))
    assert not neuron_json.sniff(
        write_json(tmp_path / "sys.json", {"trace_events": [{"name": "nrt_execute"}]})
    )
    (tmp_path / "bin").write_bytes(b"\x00\x01garbage")
    assert not neuron_json.sniff(tmp_path / "bin")
    assert not neuron_json.sniff(tmp_path)


def test_instruction_events(tmp_path):
    part = _one(write_json(tmp_path / "ntff.json", legacy_doc()))
    compute = part.events[part.events[S.KIND] == "compute"]
    assert compute[S.SRC_ID].tolist() == [100, 101, 102]
    assert compute[S.NAME].tolist() == ["MATMUL", "ACTIVATE", "PSEUDO_TRIGGER_COLLECTIVE"]
    assert compute["track_label"].tolist() == ["tensor", "scalar", "gpsimd"]  # subgroup, else label
    assert set(compute["track_device"]) == {"nd2/nc0"}
    assert compute[S.TS].tolist() == [T0, T0 + 186, T0 + 286]
    assert compute[S.DUR].tolist() == [148, 60, 100]
    assert compute[S.OP].tolist()[0] == "%add.1 = add(%dot, %custom-call.44)"
    assert compute[S.LAYER].tolist()[:2] == ["layer_0", "layer_0"]
    assert compute[S.SOURCE].tolist()[1] == "kernel.py:42"
    np.testing.assert_array_equal(compute[S.WAIT].to_numpy(), [12.0, np.nan, np.nan])
    np.testing.assert_array_equal(compute[S.BYTES].to_numpy(), [256.0, np.nan, np.nan])
    assert part.meta.info["timestamp_unit"] == "ns"
    assert part.meta.hardware == "trn1.2xlarge" and part.meta.format == "neuron-json"
    assert part.meta.summary == {"total_time": 4.0e-7, "dma_transfer_count": 1.0}
    assert part.meta.info["extra_tables"] == ["cc_stream"]


def test_dma_events_and_edges(tmp_path):
    part = _one(write_json(tmp_path / "ntff.json", legacy_doc()))
    dma = part.events[part.events[S.KIND] == "dma"]
    assert dma["track_label"].tolist() == ["qSyncIO0"] and dma[S.NAME].tolist() == ["qSyncIO0"]
    assert (
        dma[S.BYTES].tolist() == [4096.0]
        and dma[S.TS].tolist() == [T0 + 156]
        and dma[S.DUR].tolist() == [25]
    )
    i100, i101, i102, d200, c3 = range(5)
    assert _edge_set(part) == {
        (i100, i101, "dependency"),  # inst_dep_ids of 101
        (d200, i102, "dependency"),  # inst_dep_ids naming a DMA id
        (i100, d200, "dma_trigger"),  # dma trigger_id
        (i102, c3, "dependency"),  # cc_op pseudo trigger: same engine, start = trigger_start_ts
    }
    assert part.meta.repairs == {"instruction.inst_dep_ids: id matches no event": 1}  # 555


def test_dma_inst_dep_ids_are_triggers(tmp_path):
    doc = legacy_doc()
    doc["dma"][0].pop("trigger_id")
    doc["dma"][0]["inst_dep_ids"] = [101, 999]
    part = _one(write_json(tmp_path / "ntff.json", doc))
    assert (1, 3, "dma_trigger") in _edge_set(part)
    assert part.meta.repairs["dma.inst_dep_ids: id matches no event"] == 1


def test_cc_op_extension(tmp_path):
    part = _one(write_json(tmp_path / "rank_1.json", legacy_doc()))
    co = part.collectives
    assert co[S.EVENT].tolist() == [4] and co[S.MATCH_KEY].tolist() == ["[[0,1]]|0|3"]
    assert (
        co[S.GROUP].tolist() == ["0,1"]
        and co[S.SEQ].tolist() == [3]
        and co[S.BYTES].tolist() == [1024.0]
    )
    assert co[S.ARRIVAL].tolist() == [T0 + 286] and co[S.START].tolist() == [T0 + 336]
    assert co[S.END].tolist() == [T0 + 396]
    assert (
        part.events[S.NAME].tolist()[4] == "AllReduce"
        and part.events["track_label"].tolist()[4] == "cc stream 0"
    )


def test_picoseconds_are_detected_and_converted(tmp_path):
    ns = _one(write_json(tmp_path / "ns.json", legacy_doc()))
    ps = _one(write_json(tmp_path / "ps.json", legacy_doc(scale=1000)))
    assert ps.meta.info["timestamp_unit"] == "ps" and ns.meta.info["timestamp_unit"] == "ns"
    for col in (S.TS, S.DUR, S.WAIT):
        np.testing.assert_array_equal(ps.events[col].to_numpy(), ns.events[col].to_numpy())
    assert ps.collectives[[S.ARRIVAL, S.START, S.END]].equals(
        ns.collectives[[S.ARRIVAL, S.START, S.END]]
    )
    assert _edge_set(ps) == _edge_set(ns)


def test_unit_is_assumed_ns_without_summary(tmp_path):
    doc = legacy_doc(scale=1000)
    del doc["summary"]
    part = _one(write_json(tmp_path / "ntff.json", doc))
    assert (
        part.meta.info["timestamp_unit"] == "ns"
        and "assumed" in part.meta.info["timestamp_unit_basis"]
    )
    assert part.events[S.DUR].tolist()[0] == 148_000


def test_nan_literals_are_read_as_null(tmp_path):
    text = orjson.dumps(legacy_doc()).decode()
    text = text.replace('"evt_wait_time":12', '"evt_wait_time":NaN').replace(
        '"dma_transfer_count":1', '"dma_transfer_count": -Infinity'
    )
    path = tmp_path / "old.json"
    path.write_text(text)
    part = _one(path)
    assert part.meta.repairs["NaN/Infinity literals read as null"] == 2
    assert np.isnan(part.events[S.WAIT].to_numpy()[0])
    assert part.meta.summary == {"total_time": 4.0e-7}


def test_negative_and_unsigned_ids(tmp_path):
    doc = legacy_doc()
    doc["instruction"][0]["id"] = 2**64 - 1  # unsigned: wraps to -1
    doc["instruction"][1]["id"] = -5
    doc["instruction"][1]["inst_dep_ids"] = [2**64 - 1]
    doc["instruction"][2]["inst_dep_ids"] = [-5]  # signed and unsigned mixed across rows
    doc["dma"][0]["trigger_id"] = -1
    part = _one(write_json(tmp_path / "ntff.json", doc))
    assert part.events[S.SRC_ID].tolist()[:2] == [-1, -5]
    assert _edge_set(part) >= {(0, 1, "dependency"), (1, 2, "dependency"), (0, 3, "dma_trigger")}
    assert not part.meta.repairs


def test_unsigned_ids_only(tmp_path):
    doc = legacy_doc()
    doc["instruction"][0]["id"] = 2**63 + 1
    doc["instruction"][1]["inst_dep_ids"] = [2**63 + 1]
    part = _one(write_json(tmp_path / "ntff.json", doc))
    assert part.events[S.SRC_ID].tolist()[0] == -(2**63) + 1
    assert (0, 1, "dependency") in _edge_set(part)


def test_large_ids_and_times_with_gaps_stay_exact(tmp_path):
    doc = legacy_doc()
    big = 2**60 + 1  # beyond float64's exact integers
    doc["instruction"][0]["id"] = big
    doc["instruction"][0]["timestamp"] = big
    del doc["instruction"][1]["id"]  # a gap: pandas reads the column as float64
    del doc["instruction"][2]["timestamp"]
    del doc["summary"]  # the span would no longer match total_time in ns
    part = _one(write_json(tmp_path / "ntff.json", doc))
    assert part.events[S.SRC_ID].tolist()[:2] == [big, -1]
    assert part.events[S.TS].tolist()[0] == big
    assert part.meta.repairs["instruction: dropped, no valid timestamp or duration"] == 1


def test_bad_json_names_the_file(tmp_path):
    data = orjson.dumps(legacy_doc())
    truncated = tmp_path / "cut.json"
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceInputError, match="truncated") as err:
        neuron_json.read(truncated)
    assert err.value.path == str(truncated)
    garbage = tmp_path / "garbage.json"
    garbage.write_bytes(b'{"instruction": [}}}')
    with pytest.raises(TraceInputError, match="invalid JSON") as err:
        neuron_json.read(garbage)
    assert err.value.path == str(garbage)
    cut_gz = tmp_path / "cut.json.gz"
    cut_gz.write_bytes(gzip.compress(data)[:60])
    with pytest.raises(TraceInputError) as err:
        neuron_json.read(cut_gz)
    assert err.value.path == str(cut_gz)
    chrome = write_json(tmp_path / "chrome.json", [{"ph": "X"}])
    with pytest.raises(TraceInputError, match="not Neuron JSON"):
        neuron_json.read(chrome)


def test_malformed_tables_name_the_file(tmp_path):
    doc = legacy_doc()
    doc["instruction"] = [1, 2, 3]
    with pytest.raises(TraceInputError, match="instruction") as err:
        neuron_json.read(write_json(tmp_path / "a.json", doc))
    assert err.value.path == str(tmp_path / "a.json")
    doc = legacy_doc()
    for row in doc["instruction"]:
        del row["timestamp"]
    with pytest.raises(TraceInputError, match="start_ts"):
        neuron_json.read(write_json(tmp_path / "b.json", doc))
    doc = legacy_doc()
    doc["instruction"][1]["inst_dep_ids"] = "100"
    with pytest.raises(TraceInputError, match="inst_dep_ids"):
        neuron_json.read(write_json(tmp_path / "c.json", doc))


def test_summary_json(tmp_path):
    doc = {
        "sg00": {"total_time": 0.25, "tensor_engine_active_time": 0.1, "note": "x"},
        "sg01": {"total_time": 0.5},
    }
    part = _one(write_json(tmp_path / "profile_rank_4_summary.json", doc))
    assert part.meta.info["summary_only"] is True and not len(part.events)
    assert part.meta.summary == {
        "sg00": {"total_time": 0.25, "tensor_engine_active_time": 0.1},
        "sg01": {"total_time": 0.5},
    }
    assert part.meta.rank == 4 and part.meta.info["rank_source"] == "filename"
    assert assemble([part]).ranks == [4]


@pytest.mark.parametrize(
    ("name", "rank"), [("rank_3.json", 3), ("profile_rank_3.json", 3), ("ntff_rank12.json.gz", 12)]
)
def test_rank_from_file_name(tmp_path, name, rank):
    part = _one(write_json(tmp_path / name, legacy_doc()))
    assert part.meta.rank == rank and part.meta.info["rank_source"] == "filename"


def test_rank_from_metadata_or_default(tmp_path):
    doc = legacy_doc()
    doc["metadata"][0]["worker_gid"] = 7
    part = _one(write_json(tmp_path / "ntff.json", doc))
    assert part.meta.rank == 7 and part.meta.info["rank_source"] == "metadata"
    part = _one(write_json(tmp_path / "other.json", legacy_doc()))
    assert part.meta.rank == 0 and part.meta.info["rank_source"] == "default"


def test_two_ranks_assemble(tmp_path):
    parts = neuron_json.read(write_json(tmp_path / "rank_0.json", legacy_doc()))
    parts += neuron_json.read(write_json(tmp_path / "rank_1.json.gz", legacy_doc(scale=1000)))
    trace = assemble(parts)
    assert trace.ranks == [0, 1] and len(trace.events) == 10 and len(trace.edges) == 8
    assert trace.collectives[S.COLL_KEY].tolist() == [0, 0]  # one instance, both ranks
