"""``tracediag export``: the Perfetto export reads back with our reader (round trip), carries the
critical path as flows and the findings as annotated slices; the Chrome JSON export; the
column-wise protobuf encoder."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pandas as pd
import pytest
from google.protobuf.internal.encoder import _VarintBytes

from tracediag.cli.main import main
from tracediag.engine.config import Config
from tracediag.engine.diagnose import diagnose
from tracediag.export.chrome_trace import write_chrome
from tracediag.export.perfetto_trace import critical_path_events, overlap_lanes, write_perfetto
from tracediag.io import protowire as W
from tracediag.loading.loader import load
from tracediag.model import schema as S
from tracediag.parsers import perfetto
from tracediag.parsers.protos.perfetto_trace_pb2 import Trace

SAMPLE = Path(__file__).resolve().parents[1] / "sample_traces" / "neuron_parquet_straggler"


@pytest.fixture(scope="module")
def diagnosis():
    return diagnose(load([SAMPLE]), Config())


def _rows(trace_events, track_names, rank):
    ev = trace_events[trace_events[S.RANK] == rank]
    label = track_names[ev[S.TRACK].to_numpy()]
    return sorted(
        zip(label, ev[S.NAME].astype(str), ev[S.KIND].astype(str), ev[S.TS], ev[S.DUR], strict=True)
    )


def test_perfetto_export_reads_back_event_for_event(diagnosis, tmp_path):
    out = tmp_path / "job.pftrace"
    write_perfetto(diagnosis, out)
    assert perfetto.sniff(out)
    parts = perfetto.read(out)
    trace = diagnosis.trace
    assert [p.meta.rank for p in parts] == trace.ranks
    names = trace.tracks[S.TRACK_NAME].astype(str).to_numpy()
    for part in parts:
        ev = part.events
        back = sorted(
            zip(
                ev["track_label"].astype(str).str.removesuffix(" (overlap)"), ev[S.NAME].astype(str),
                ev[S.KIND].astype(str), ev[S.TS], ev[S.DUR], strict=True,
            )
        )  # fmt: skip
        assert back == _rows(trace.events, names, part.meta.rank)
        assert part.meta.info["rank_source"] == "rank process"
        tracks = trace.tracks[trace.tracks[S.RANK] == part.meta.rank]
        kinds = dict(zip(tracks[S.TRACK_NAME], tracks[S.TRACK_KIND].astype(str), strict=True))
        got = dict(zip(ev["track_label"].astype(str), ev["track_kind"].astype(str), strict=False))
        assert {k: v for k, v in got.items() if k in kinds} == {
            k: kinds[k] for k in got if k in kinds
        }
    assert all("tracediag findings: skipped" not in p.meta.repairs for p in parts)


def test_critical_path_is_one_flow_and_findings_are_annotated_slices(diagnosis, tmp_path):
    out = tmp_path / "job.pftrace"
    write_perfetto(diagnosis, out)
    parts = perfetto.read(out)
    path = critical_path_events(diagnosis)
    packets = Trace.FromString(out.read_bytes()).packet
    on_flow = [p for p in packets if list(p.track_event.flow_ids) == [1]]
    assert len(on_flow) == len(path)  # one flow through every event of the path
    # a drawing, not a dependency: reading back gives the job's own edges, of their own kinds
    back = pd.concat([p.edges for p in parts])[S.EDGE_KIND].astype(str).value_counts()
    assert (
        back.to_dict()
        == diagnosis.trace.edges[S.EDGE_KIND].astype(str).value_counts()[lambda c: c > 0].to_dict()
    )
    slices = [p.track_event for p in packets if p.track_event.categories[:] == ["finding"]]
    assert [s.name.split()[0] for s in slices] == [f.code for f in diagnosis.findings]
    notes = {a.name: a for a in slices[0].debug_annotations}
    first = diagnosis.findings[0]
    assert (notes["saving_ns"].int_value, notes["message"].string_value) == (
        first.saving_ns,
        first.message,
    )


def test_chrome_export_is_exact_json(diagnosis, tmp_path):
    out = tmp_path / "job.json"
    write_chrome(diagnosis, out)
    doc = orjson.loads(out.read_bytes())
    events = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] != "finding"]
    assert len(events) == len(diagnosis.trace.events)
    first = diagnosis.trace.events.iloc[0]
    assert events[0]["ts"] == pytest.approx(first[S.TS] / 1000, abs=5e-4)
    assert out.read_text().count(f'"ts":{first[S.TS] // 1000}.{first[S.TS] % 1000:03d}') >= 1
    flows = [e for e in doc["traceEvents"] if e["ph"] in ("s", "f")]
    assert len(flows) == 2 * (len(critical_path_events(diagnosis)) - 1)
    findings = [e for e in doc["traceEvents"] if e.get("cat") == "finding"]
    assert [e["args"]["code"] for e in findings] == [f.code for f in diagnosis.findings]


def test_export_command(tmp_path, capsys):
    out = tmp_path / "job.pftrace"
    assert main(["export", str(SAMPLE), "-o", str(out), "-q"]) == 0
    assert perfetto.sniff(out)
    assert (
        main(["export", str(SAMPLE), "-o", str(tmp_path / "j.json"), "--format", "chrome", "-q"])
        == 0
    )
    assert main(["export", str(SAMPLE), "-q"]) == 2
    assert "export needs -o FILE" in capsys.readouterr().err


def test_protowire_matches_protobuf_encoding():
    values = np.array([0, 1, 127, 128, 300, 2**35, 2**63 - 1, -1], dtype=np.int64)
    flat, length = W.varints(values)
    assert flat.tobytes() == b"".join(_VarintBytes(int(v) & (2**64 - 1)) for v in values)
    assert length.tolist() == [1, 1, 1, 2, 2, 6, 9, 10]
    event = W.join(
        [
            W.field_varint(9, np.array([1, 2])),
            W.masked(W.field_varint(10, np.array([7, 7])), np.array([True, False])),
        ]
    )
    packet = W.join([W.field_varint(8, np.array([5, 2**40])), W.field_message(11, event)])
    trace = Trace.FromString(W.field_message(1, packet)[0].tobytes())
    assert [(p.timestamp, p.track_event.type, p.track_event.name_iid) for p in trace.packet] == [
        (5, 1, 7),
        (2**40, 2, 0),
    ]


def test_partly_overlapping_events_round_trip_on_an_overlap_lane(tmp_path):
    chrome = SAMPLE.parent / "chrome_straggler" / "chrome"
    diagnosis = diagnose(load([chrome]), Config())
    trace = diagnosis.trace
    lanes = overlap_lanes(trace)
    assert np.bincount(lanes).tolist() == [1716, 5, 5]
    out = tmp_path / "chrome.pftrace"
    write_perfetto(diagnosis, out)
    names = trace.tracks[S.TRACK_NAME].astype(str).to_numpy()
    for part in perfetto.read(out):
        ev = part.events
        labels = ev["track_label"].astype(str)
        back = sorted(
            zip(
                labels.str.replace(r" \(overlap(?: \d+)?\)$", "", regex=True),
                ev[S.NAME].astype(str), ev[S.KIND].astype(str),
                ev[S.TS], ev[S.DUR], strict=True,
            )
        )  # fmt: skip
        assert back == _rows(trace.events, names, part.meta.rank)
        # drawn on overlap threads (Perfetto slices nest), read back on their own track
        assert not labels.str.contains(r" \(overlap(?: \d+)?\)$").any()
    threads = [p.track_descriptor.name for p in Trace.FromString(out.read_bytes()).packet]
    assert sum(" (overlap" in t for t in threads) == 4  # stream 7 of each rank, lanes 1 and 2
