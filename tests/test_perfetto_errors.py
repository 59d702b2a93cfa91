"""Perfetto input errors: truncated and corrupted bytes of the real trace give one line naming the
file, the byte offset and the problem; the generated code is current."""

from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

import pytest

from tests.chrome_helpers import shared
from tests.test_perfetto import TraceBuilder
from tracediag.cli.main import main
from tracediag.model.errors import TraceInputError
from tracediag.parsers import perfetto
from tracediag.parsers.protos import regen


def _real_bytes() -> bytes:
    return shared("perfetto_nested_tracks.perfetto-trace").read_bytes()


def _problem(path: Path) -> str:
    with pytest.raises(TraceInputError) as err:
        perfetto.read(path)
    assert err.value.path == str(path)
    return err.value.problem


def test_truncated_real_trace_names_the_cut_record(tmp_path):
    data = _real_bytes()
    cut = tmp_path / "cut.perfetto-trace"
    cut.write_bytes(data[:70001])
    assert perfetto.sniff(cut)
    assert _problem(cut) == (
        "truncated at byte offset 70001: the record at byte offset 69972 declares 46 bytes, "
        "only 27 remain"
    )
    gz = tmp_path / "cut.pftrace.gz"
    gz.write_bytes(gzip.compress(data)[:-40])
    assert "truncated gzip stream" in _problem(gz)


def test_corrupted_real_trace_names_the_byte_offset(tmp_path):
    data = bytearray(_real_bytes())
    inside = tmp_path / "inside.perfetto-trace"
    inside.write_bytes(bytes(data[:100000]) + b"\xff" * 4 + bytes(data[100004:]))
    assert _problem(inside).startswith("byte offset 99988: packet does not decode as a TracePacket")
    framing = tmp_path / "framing.perfetto-trace"
    framing.write_bytes(bytes(data[:1]) + b"\x07" * 4 + bytes(data[5:]))
    assert _problem(framing) == "byte offset 14: not a packet record (field 1, wire type 3)"
    length = tmp_path / "length.perfetto-trace"
    length.write_bytes(bytes(data[:1]) + b"\xff" * 4 + bytes(data[5:]))
    assert _problem(length) == "byte offset 0: record declares 805306367 bytes (corrupt length)"


def test_cli_reports_one_line_and_exit_2(tmp_path, capsys):
    cut = tmp_path / "cut.perfetto-trace"
    cut.write_bytes(_real_bytes()[:70001])
    assert main(["report", str(cut)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        f"tracediag: error: {cut}: truncated at byte offset 70001: the record at byte offset "
        "69972 declares 46 bytes, only 27 remain"
    )


def test_bad_compressed_bundle_and_trace_without_slices(tmp_path):
    b = TraceBuilder()
    b.packet(1).compressed_packets = b"not deflate"
    path = b.write(tmp_path / "bundle.pftrace")
    assert _problem(path).startswith("byte offset 0: compressed packets do not inflate")
    b = TraceBuilder()
    b.track(1, "t")
    assert _problem(b.write(tmp_path / "empty.pftrace")) == (
        "no slices (the trace holds no track events we can read)"
    )


def test_report_runs_on_the_real_trace(capsys):
    path = shared("perfetto_nested_tracks.perfetto-trace")
    assert main(["report", str(path)]) == 0
    assert "perfetto" in capsys.readouterr().out


def test_committed_generated_code_is_current(tmp_path):
    if importlib.util.find_spec("grpc_tools") is None:
        pytest.skip("grpcio-tools (the dev extra) is not installed")
    for fresh in regen.generate(tmp_path):
        committed = regen.PROTO_DIR / fresh.name
        assert committed.read_text() == fresh.read_text(), (
            f"{committed.name} is stale: run python -m tracediag.parsers.protos.regen"
        )
