"""Fixtures for the gate tests: generated runs (diagnosed once per session) and the CLI over the
worked example with the probe rules (one input file per rank, so paths and ranks can be told
apart)."""

from __future__ import annotations

import copy
from functools import cache
from pathlib import Path

import orjson
import pytest

from tests.fake_rules import use_probe_rules
from tests.worked_example import example_trace
from tracediag.cli.main import main
from tracediag.model import schema as S

#: name -> (scenario, seed): three clean reruns differ slightly, like reruns of one build.
RUNS = {
    "clean0": ("clean", 0),
    "clean1": ("clean", 1),
    "clean2": ("clean", 2),
    "clean3": ("clean", 3),
    "slow_dma": ("slow_dma", 0),
    "straggler": ("straggler", 0),
}


class _Runs(dict):
    """name -> profile directory, generated on first use into the session's temporary folder."""

    def __init__(self, root: Path):
        super().__init__()
        self.root = root

    def __missing__(self, name: str) -> Path:
        from tracediag.generator import generate

        scenario, seed = RUNS[name]
        out = self.root / name
        if not (out / "truth.json").is_file():
            generate(scenario, out, formats=("parquet",), ranks=2, seed=seed)
        self[name] = out / "parquet"
        return self[name]


@cache
def _diagnose(path: Path):
    from tracediag.engine.diagnose import diagnose
    from tracediag.loading.loader import load

    return diagnose(load([path]))


@cache
def _report(path: Path) -> dict:
    return _diagnose(path).to_dict()


@pytest.fixture(scope="session")
def run_dirs(tmp_path_factory) -> dict[str, Path]:
    """Each run of RUNS on two ranks (Parquet), generated when first asked for."""
    return _Runs(tmp_path_factory.getbasetemp() / "gate_runs")


@pytest.fixture(scope="session")
def diagnosed(run_dirs):
    """``diagnosed(name) -> Diagnosis`` of a generated run with the built-in rules (cached for
    the session, across test modules)."""
    return lambda name: _diagnose(run_dirs[name])


@pytest.fixture(scope="session")
def truths(run_dirs):
    """``truths(name) -> dict``: what the generator injected and simulated for a run (its
    truth.json): the step time the diagnosis must find, independent of the code under test."""
    return lambda name: orjson.loads((run_dirs[name].parent / "truth.json").read_bytes())


@pytest.fixture(scope="session")
def reports(run_dirs):
    """``reports(name) -> dict``: the JSON report of a generated run (a fresh copy each call)."""
    return lambda name: copy.deepcopy(_report(run_dirs[name]))


@pytest.fixture
def cli(monkeypatch, tmp_path, capsys):
    """``cli(*argv) -> (exit code, stdout, stderr)`` in an empty directory (no config found)."""
    monkeypatch.chdir(tmp_path)

    def invoke(*argv):
        code = main([str(a) for a in argv])
        out, err = capsys.readouterr()
        return code, out, err

    return invoke


@pytest.fixture
def probes(monkeypatch):
    """Every load returns the worked example with one input per rank, named after the paths
    given (``a`` holds rank 0, ``b`` rank 1); the probes COL990 (warning, rank 1, 150 ns of
    skew) and DMA990 (info) are the rules."""
    use_probe_rules(monkeypatch)

    def fake_load(paths, *, align=True, progress=None, **_reading):
        trace = example_trace()
        names = [str(p) for p in paths] + ["b"]
        trace.inputs = [S.InputFile(names[0], "test", [0]), S.InputFile(names[1], "test", [1])]
        return trace

    monkeypatch.setattr("tracediag.loading.loader.load", fake_load)
