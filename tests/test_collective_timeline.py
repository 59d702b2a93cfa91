"""Collective timeline JSON Lines: sniffing, records to events and collectives, bad records, and
skew diagnosed from the timeline alone."""

from __future__ import annotations

import gzip

import orjson
import pytest

from tracediag.engine.diagnose import diagnose
from tracediag.loading.loader import load
from tracediag.model import schema as S
from tracediag.model.assembly import assemble
from tracediag.model.errors import TraceInputError
from tracediag.parsers import chrome_json, collective_timeline, neuron_json

LATE_NS = 300_000


def _records(ranks: int = 4, instances: int = 20, late_rank: int = 2) -> list[dict]:
    out, t = [], 1_000_000
    for seq in range(instances):
        arrival = {r: t + r * 1_000 + (LATE_NS if r == late_rank else 0) for r in range(ranks)}
        end = max(arrival.values()) + 500_000
        for r in range(ranks):
            out.append(
                {"rank": r, "group": list(range(ranks))[::-1], "op": "AllReduce", "seq": seq,
                 "bytes": 1 << 26, "arrival_ns": arrival[r], "start_ns": arrival[r], "end_ns": end}
            )  # fmt: skip
        t = end + 200_000
    return out


def _write(path, records, header: bool = True, gz: bool = False):
    lines = (
        [orjson.dumps({"format": "tracediag-collective-timeline", "version": 1})] if header else []
    )
    data = b"\n".join(lines + [orjson.dumps(r) for r in records]) + b"\n"
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def test_sniff_with_or_without_header(tmp_path):
    assert collective_timeline.sniff(_write(tmp_path / "a.jsonl", _records()))
    assert collective_timeline.sniff(_write(tmp_path / "b.jsonl", _records(), header=False))
    assert collective_timeline.sniff(_write(tmp_path / "c.jsonl.gz", _records(), gz=True))
    path = tmp_path / "a.jsonl"
    assert not chrome_json.sniff(path) and not neuron_json.sniff(path)
    (tmp_path / "d.json").write_text('{"traceEvents": []}')
    assert not collective_timeline.sniff(tmp_path / "d.json")


def test_records_become_events_and_matched_collectives(tmp_path):
    parts = collective_timeline.read(_write(tmp_path / "t.jsonl", _records(instances=3)))
    assert [p.meta.rank for p in parts] == [0, 1, 2, 3]
    late = parts[2]
    assert late.events[S.TS].tolist() == [1_302_000, 2_304_000, 3_306_000]
    assert late.events[S.DUR].tolist() == [500_000] * 3
    assert set(late.events["track_label"].astype(str)) == {"collectives 0,1,2,3"}
    co = late.collectives
    assert co[S.MATCH_KEY].tolist() == [f"0,1,2,3|AllReduce|{i}" for i in range(3)]
    assert co[S.GROUP].tolist() == ["0,1,2,3"] * 3 and co[S.BYTES].tolist() == [2.0**26] * 3
    trace = assemble(parts)
    assert trace.collectives.groupby(S.COLL_KEY)[S.RANK].nunique().tolist() == [4, 4, 4]


def test_skew_is_diagnosed_from_the_timeline_alone(tmp_path):
    trace = load([_write(tmp_path / "t.jsonl", _records())])
    straggler = [f for f in diagnose(trace).findings if f.code == "COL201"]
    assert len(straggler) == 1 and straggler[0].ranks == (2,)


def test_incomplete_records_are_counted_and_bad_lines_stop_the_read(tmp_path):
    records = _records(instances=2)
    records[0].pop("end_ns")
    records[1]["seq"] = None
    part = collective_timeline.read(_write(tmp_path / "t.jsonl", records))[0]
    assert part.meta.repairs == {"records missing a required value: skipped": 2}
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(orjson.dumps(_records()[0]) + b"\nnot json\n")
    with pytest.raises(TraceInputError, match="not a valid collective timeline"):
        collective_timeline.read(bad)
    typed = _records(instances=1)
    typed[1]["rank"] = "one"
    with pytest.raises(TraceInputError, match="rank"):
        collective_timeline.read(_write(tmp_path / "typed.jsonl", typed))
    with pytest.raises(TraceInputError, match="required field"):
        collective_timeline.read(_write(tmp_path / "none.jsonl", [{"rank": 0, "op": "x"}]))
