"""``tracediag --version`` and ``--help`` print without importing the numeric stack (pandas,
numpy, pyarrow: ~0.5 s of a command's start)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("pandas", "numpy", "pyarrow")


@pytest.mark.parametrize("argv", [["--version"], ["--help"], ["report", "--help"]])
def test_version_and_help_import_no_numeric_library(argv):
    code = (
        "import contextlib, io, sys\n"
        "from tracediag.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        f"    rc = main({argv!r})\n"
        f"print(rc, len(out.getvalue()) > 0, [m for m in {HEAVY!r} if m in sys.modules])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split("\n")[0] == "0 True []", done.stdout + done.stderr


@pytest.mark.parametrize(
    "argv",
    [["rules"], ["rules", "--format", "json"], ["rule", "DMA101"], ["rule", "--all"]],
)
def test_listing_and_describing_rules_import_no_numeric_library(argv):
    """The rule table and documents come from the rule classes' attributes: the numeric stack
    is imported by ``check`` only."""
    code = (
        "import contextlib, io, sys\n"
        "from tracediag.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        f"    rc = main({argv!r})\n"
        f"print(rc, out.getvalue().count('DMA101') > 0, [m for m in {HEAVY!r} if m in sys.modules])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split("\n")[0] == "0 True []", done.stdout + done.stderr


# Imports every module of a package, one after another, and prints per module the heavy
# libraries that importing it brought in (the first offender is named even though imports add up).
_PER_MODULE = """
import importlib, json, pkgutil, sys
sys.path.insert(0, sys.argv[2])
pkg = importlib.import_module(sys.argv[1])
found = {}
for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
    importlib.import_module(f"{pkg.__name__}.{info.name}")
    found[info.name] = [m for m in HEAVY if m in sys.modules]
print(json.dumps(found))
"""


def _heavy_imports_per_module(package: str, path: str = "") -> dict[str, list[str]]:
    code = f"HEAVY = {HEAVY!r}\n{_PER_MODULE}"
    done = subprocess.run(
        [sys.executable, "-c", code, package, path], capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout)


def test_no_rule_module_imports_the_numeric_stack_at_import_time():
    """Every module of tracediag.rules (a new one included: the package is walked) keeps numpy,
    pandas and pyarrow, and the analysis layers that import them, inside its functions."""
    found = _heavy_imports_per_module("tracediag.rules")
    assert len(found) >= 22 and "dma101_dma_wait_on_critical_path" in found
    assert {m: libs for m, libs in found.items() if libs} == {}


def test_the_per_module_check_names_a_module_that_imports_pandas(tmp_path):
    pkg = tmp_path / "probe_rules"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a_light.py").write_text("import re\n")
    (pkg / "b_heavy.py").write_text("import pandas as pd\n")
    found = _heavy_imports_per_module("probe_rules", str(tmp_path))
    assert found["a_light"] == []
    assert "pandas" in found["b_heavy"] and "numpy" in found["b_heavy"]


# Offers one file to the readers in order until one accepts it, as discovery does, and prints
# the format and the tracediag.parsers modules imported by sniffing alone; then discovers it
# (which imports the chosen reader's module, to read it) and prints the modules again.
_SNIFF_ONE = """
import json, sys
from tracediag.loading.loader import discover
from tracediag.parsers import READERS
def loaded():
    return sorted(m.rsplit(".", 1)[-1] for m in sys.modules if m.startswith("tracediag.parsers."))
fmt = next(r.FORMAT for r in READERS if r.sniff(sys.argv[1]))
sniffed, protobuf = loaded(), "google.protobuf" in sys.modules
found, _ = discover([sys.argv[1]])
print(json.dumps([fmt, sniffed, protobuf, found[0][1].__name__, loaded()]))
"""


def _sniffed(path) -> tuple[str, list[str], bool, str, list[str]]:
    done = subprocess.run(
        [sys.executable, "-c", _SNIFF_ONE, str(path)], capture_output=True, text=True, check=True
    )
    return tuple(json.loads(done.stdout))


def test_sniffing_a_chrome_trace_imports_no_other_readers_parse_path(tmp_path):
    """The Neuron readers, tried first, sniff with their light declaration modules; the
    Perfetto, XPlane and collective-timeline readers, tried after, are never imported."""
    trace = tmp_path / "rank_0.json"
    trace.write_text('{"traceEvents": [{"ph": "X", "name": "k", "ts": 1, "dur": 2, "pid": 0}]}')
    fmt, sniffed, protobuf, module, loaded = _sniffed(trace)
    assert fmt == "chrome-json" and module == "tracediag.parsers.chrome_json"
    assert "chrome_json" not in sniffed and "chrome_json_sniff" in sniffed
    reader_modules = {
        "neuron_system_parquet", "neuron_system_json", "neuron_system_runtime", "neuron_parquet",
        "neuron_csv", "neuron_json", "perfetto", "xplane", "collective_timeline",
    }  # fmt: skip
    assert sorted(reader_modules & set(loaded)) == []
    other_paths = [
        m
        for m in loaded
        if m.startswith(("perfetto", "xplane", "protos", "neuron_json_"))
        and not m.endswith("_sniff")
    ]
    assert other_paths == [] and not protobuf
    assert {"neuron_parquet_sniff", "neuron_json_sniff", "chrome_json", "kineto"} <= set(loaded)


def test_sniffing_a_neuron_json_file_stops_at_its_reader(tmp_path):
    trace = tmp_path / "profile.json"
    trace.write_text('{"instruction": [], "dma": [], "summary": [{"total_time": 1.0}]}')
    fmt, sniffed, _, module, loaded = _sniffed(trace)
    assert fmt == "neuron-json" and "neuron_json" not in sniffed
    assert module == "tracediag.parsers.neuron_json" and "neuron_json" in loaded
    assert [m for m in loaded if m.startswith(("chrome", "perfetto", "kineto"))] == []


def test_every_reader_is_found_by_format_with_its_declared_attributes():
    """The registry's lazy readers give what the reader modules declare: the same ``FORMAT``,
    ``sniff``, ``read`` and attributes, and each format's reader by name."""
    import importlib

    from tracediag.parsers import BY_FORMAT, READERS

    assert len(READERS) == 11 and len(BY_FORMAT) == 11
    for reader in READERS:
        module = importlib.import_module(reader.__name__)
        assert BY_FORMAT[module.FORMAT] is reader
        assert reader.sniff is module.sniff and reader.read is module.read
        for attr in ("NEURON_DEVICE_PROFILE", "DEFAULT_HARDWARE", "rank_units"):
            assert getattr(reader, attr, None) == getattr(module, attr, None), (reader, attr)
    assert BY_FORMAT["neuron-parquet"].NEURON_DEVICE_PROFILE is True
    assert BY_FORMAT["neuron-parquet"].rank_units is not None
    assert BY_FORMAT.get("chrome-json").__name__ == "tracediag.parsers.chrome_json"
    assert getattr(BY_FORMAT["chrome-json"], "DEFAULT_HARDWARE", None) is None
    assert BY_FORMAT.get("no-such-format") is None


def test_sniffing_a_perfetto_trace_imports_neither_the_chrome_nor_a_neuron_parse_path(tmp_path):
    """The Chrome reader, tried before Perfetto, sniffs with ``chrome_json_sniff`` alone, and
    Perfetto with ``perfetto_sniff``: the parse paths are imported by discovery, for the read."""
    from tracediag.parsers.protos.perfetto_trace_pb2 import Trace, TrackEvent

    trace = Trace()
    packet = trace.packet.add(timestamp=1000, trusted_packet_sequence_id=1)
    packet.track_event.type = TrackEvent.TYPE_SLICE_BEGIN
    packet.track_event.name = "kernel"
    path = tmp_path / "rank_0.perfetto-trace"
    path.write_bytes(trace.SerializeToString())
    fmt, sniffed, _, module, loaded = _sniffed(path)
    assert fmt == "perfetto" and module == "tracediag.parsers.perfetto" and "perfetto" in loaded
    assert {"chrome_json_sniff", "perfetto_sniff"} <= set(sniffed) and "perfetto" not in sniffed
    perfetto = [m for m in sniffed if m.startswith("perfetto")]
    assert perfetto == ["perfetto_sniff", "perfetto_stream", "perfetto_trace_pb2"]  # no decoder
    heavy = [m for m in sniffed if m.startswith(("chrome_", "kineto", "neuron_json", "neuron_csv"))]
    assert heavy == ["chrome_json_sniff", "neuron_csv_sniff", "neuron_json_sniff"]


def test_each_reader_is_named_after_its_module():
    """``reader.__name__`` (what a worker process looks the reader up by) is its module's."""
    from tracediag.parsers import READERS

    assert [r.__name__ for r in READERS] == [r.module().__name__ for r in READERS]
    assert all(r.module().sniff is r.sniff for r in READERS)
