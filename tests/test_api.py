"""The Python API (tracediag.load / diagnose / what_if / open_tui) on generated jobs.

The straggler job (rank 1's tensor and vector work on layers 1 and 2 is 1.5x slower) and the
slow_dma job (layer_1's forward weight DMA on qSyncIO0 at 25% bandwidth), 2 ranks, Parquet.
"""

from __future__ import annotations

import asyncio
import json
import runpy
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tracediag
from tracediag.api.job import Diagnosis, Job, tui_app
from tracediag.cli.main import main
from tracediag.engine.config import Config
from tracediag.generator import generate
from tracediag.model.errors import UsageError

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    root = tmp_path_factory.mktemp("api")
    out = {}
    for scenario in ("straggler", "slow_dma"):
        truth = generate(scenario, root / scenario, formats=("parquet",), ranks=2, seed=0)
        out[scenario] = (str(root / scenario / "parquet"), truth["device"])
    return out


@pytest.fixture(scope="module")
def straggler(generated):
    path, truth = generated["straggler"]
    job = tracediag.load(path)
    return job, tracediag.diagnose(job), truth


@pytest.fixture(scope="module")
def slow_dma(generated):
    path, truth = generated["slow_dma"]
    return tracediag.load([Path(path)]), truth


def _cli_json(path: str, tmp_path: Path, monkeypatch, *extra: str) -> str:
    monkeypatch.chdir(tmp_path)  # no config file found upward: the defaults, as in the API
    out = tmp_path / "report.json"
    assert main(["report", path, "--format", "json", "-q", "-o", str(out), *extra]) == 0
    return out.read_text(encoding="utf-8")


# ---- package ---------------------------------------------------------------------------------
def test_import_is_cheap_and_every_public_name_resolves():
    code = (
        "import sys, tracediag;"
        "heavy=[m for m in ('pandas','numpy','pyarrow','textual') if m in sys.modules];"
        "print(heavy); sys.exit(1 if heavy else 0)"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    for name in tracediag.__all__:
        assert getattr(tracediag, name) is not None
    assert tracediag.Diagnosis is Diagnosis and tracediag.Job is Job
    assert (ROOT / "tracediag" / "py.typed").is_file()


def test_load_is_the_api_function_and_the_loader_stays_a_module(straggler):
    import tracediag.loading.loader as loader
    from tracediag.api import job as api

    assert tracediag.load is api.load  # importing tracediag.loading.loader does not shadow it
    assert callable(loader.load) and callable(loader.discover)
    assert isinstance(tracediag.load(straggler[0].files["path"][0]), Job)


# ---- load ------------------------------------------------------------------------------------
def test_load_tables_are_the_traces_without_copies(generated, straggler):
    job = straggler[0]
    trace = tracediag.loading.loader.load([generated["straggler"][0]])
    assert job.ranks == [0, 1]
    for table in ("events", "tracks", "edges", "collectives"):
        assert len(getattr(job, table)) == len(getattr(trace, table)), table
    assert (len(job.events), len(job.tracks), len(job.collectives)) == (7376, 16, 8)
    assert np.shares_memory(job.events["ts_ns"].to_numpy(), job.trace.events["ts_ns"].to_numpy())
    assert job.events["kind"].dtype == "category" and job.tracks["name"].dtype == "category"
    assert job.collectives["op"].dtype == "category"
    assert (job.edges["src_rank"] == job.events["rank"].to_numpy()[job.edges["src"]]).all()
    assert job.events["ts_ns"].dtype == np.int64


def test_writing_to_a_job_table_leaves_the_trace_alone(straggler):
    job = straggler[0]
    before = int(job.trace.events["dur_ns"].iat[0])
    events = job.events.copy(deep=False)
    events.loc[0, "dur_ns"] = before + 1
    assert int(job.trace.events["dur_ns"].iat[0]) == before


def test_ranks_info_and_files(generated, straggler):
    job = straggler[0]
    info = job.ranks_info
    assert list(info.index) == [0, 1]
    assert set(info["format"]) == {"neuron-parquet"}
    assert list(info["clock_offset_ns"]) == [job.meta[r].clock_offset_ns for r in (0, 1)]
    assert list(info["clock_offset_ns"]) == straggler[2]["align_to_rank0_ns"]
    assert info["events"].sum() == len(job.events)
    assert list(job.files["path"]) == [generated["straggler"][0]]
    assert job.files["ranks"][0] == [0, 1]
    assert "2 ranks, 7376 events" in repr(job)


def test_load_options_pass_through_and_are_checked(generated, capsys):
    path = generated["straggler"][0]
    unaligned = tracediag.load(path, align=False, progress=True, cache=False)
    assert all(unaligned.meta[r].clock_offset_ns == 0 for r in unaligned.ranks)
    assert "tracediag: reading" in capsys.readouterr().err
    with pytest.raises(TypeError, match="unknown options \\['algn'\\].*align"):
        tracediag.load(path, algn=False)
    with pytest.raises(ValueError, match="no trace path"):
        tracediag.load([])


def test_load_errors_name_the_file(tmp_path):
    with pytest.raises(tracediag.TraceInputError, match="no such file"):
        tracediag.load(tmp_path / "missing")


# ---- diagnose --------------------------------------------------------------------------------
def test_diagnose_finds_the_straggler_with_the_cli_saving(
    generated, straggler, tmp_path, monkeypatch
):
    _, d, truth = straggler
    top = d.findings[0]
    assert (top.code, top.ranks) == ("COL201", (1,))
    report = json.loads(_cli_json(generated["straggler"][0], tmp_path, monkeypatch))
    cli_top = report["findings"][0]
    assert (cli_top["code"], cli_top["ranks"], cli_top["saving_ns"]) == (
        "COL201",
        [1],
        top.saving_ns,
    )
    assert (
        abs(top.saving_ns - truth["faults"][0]["saving_ns"])
        <= 0.15 * truth["faults"][0]["saving_ns"]
    )
    assert d.step_time_ns == truth["step_time_ns"] == report["critical_path"]["length_ns"]


def test_to_json_is_the_cli_report_byte_for_byte(generated, straggler, tmp_path, monkeypatch):
    assert straggler[1].to_json() == _cli_json(generated["straggler"][0], tmp_path, monkeypatch)
    assert json.loads(straggler[1].to_json()) == json.loads(
        json.dumps(straggler[1].to_dict(), default=int)
    )


def test_findings_df_mirrors_the_findings(straggler):
    d = straggler[1]
    df = d.findings_df
    assert list(df["code"]) == [f.code for f in d.findings]
    assert list(df["saving_ns"]) == [f.saving_ns for f in d.findings]
    assert list(df["ranks"]) == [f.ranks for f in d.findings]
    assert df["severity"].cat.ordered and str(df["severity"].iat[0]) == str(d.findings[0].severity)
    assert df["saving_pct"].iat[0] == round(100 * d.findings[0].saving_ns / d.step_time_ns, 2)
    assert (df["severity"] >= "warning").sum() == len(d.at_or_above("warning"))
    assert df["start_ns"].dtype == np.int64 and len(df.columns) == 17


def test_critical_path_and_breakdowns_add_up(straggler):
    d = straggler[1]
    cp = d.critical_path
    assert cp["dur_ns"].sum() == d.step_time_ns
    assert (cp["start_ns"].diff().dropna() >= 0).all()  # time order
    assert cp["end_ns"].iat[-1] - cp["start_ns"].iat[0] == d.step_time_ns
    assert d.path_by_category.sum() == d.step_time_ns
    assert d.path_by_rank.to_numpy().sum() == d.step_time_ns
    skew = d.path_by_category["collective_skew"]
    # COL201's impact is the others' whole wait (from arrivals); the path holds this part of it.
    assert (
        d.path_by_rank.loc[1, "collective_skew"] == skew == d.findings[0].evidence["path_wait_ns"]
    )
    assert list(d.breakdown.index) == [0, 1]
    pct = d.breakdown[[f"{c}_pct" for c in ("compute", "communication", "memory", "idle")]]
    assert np.allclose(pct.sum(axis=1), 100.0)
    assert set(cp["category"].cat.categories) >= {"compute", "collective_skew"}
    assert f"{len(d.findings)} findings" in repr(d)


def test_config_as_mapping_path_or_config(generated, straggler, tmp_path, monkeypatch):
    job = straggler[0]
    only_dma = tracediag.diagnose(job, {"select": ["DMA"]})
    assert only_dma.findings and {f.code[:3] for f in only_dma.findings} == {"DMA"}
    extended = tracediag.diagnose(job, {"select": ["DMA"], "extend_select": ["COL201"]})
    assert "COL201" in {f.code for f in extended.findings}
    toml = tmp_path / "tracediag.toml"
    toml.write_text('ignore = ["COL"]\n[severity]\nDMA101 = "error"\n')
    from_file = tracediag.diagnose(job, toml)
    assert not [f for f in from_file.findings if f.code.startswith("COL")]
    assert all(str(f.severity) == "error" for f in from_file.findings if f.code == "DMA101")
    assert from_file.to_json() == _cli_json(
        generated["straggler"][0], tmp_path, monkeypatch, "--config", str(toml)
    )
    as_config = tracediag.diagnose(job, Config(ignore=["COL"]))
    assert [f.code for f in as_config.findings] == [f.code for f in from_file.findings]
    with pytest.raises(UsageError, match="unknown keys"):
        tracediag.diagnose(job, {"selct": ["DMA"]})
    with pytest.raises(TypeError, match="config must be"):
        tracediag.diagnose(job, 3)
    with pytest.raises(TypeError, match="needs a Job"):
        tracediag.diagnose("some/path")


def test_per_trace_ignores_apply_as_in_the_cli(straggler):
    d = tracediag.diagnose(straggler[0], {"per-trace-ignores": {"rank:1": ["COL"]}})
    # dropped: the findings on rank 1 alone; kept: the all-reduce both ranks expose (COL202)
    assert not [f for f in d.findings if f.code.startswith("COL") and set(f.ranks) == {1}]
    assert [f.ranks for f in d.findings if f.code.startswith("COL")] == [(0, 1)]
    full = tracediag.diagnose(straggler[0])
    assert {f.code for f in full.findings if set(f.ranks) == {1}} >= {"COL201"}


# ---- what_if ---------------------------------------------------------------------------------
def test_what_if_straggler_at_peer_pace_matches_col201(straggler):
    job, d, truth = straggler
    col201 = d.findings[0]
    change = tracediag.Scale(
        rank=1, engine=["tensor", "vector"], layer=["layer_1", "layer_2"], factor=1 / 1.5
    )
    result = tracediag.what_if(job, change)
    assert result.old_step_ns == d.step_time_ns
    assert result.new_step_ns == result.old_step_ns - result.saving_ns
    assert abs(result.saving_ns - col201.saving_ns) <= 0.02 * col201.saving_ns
    assert abs(result.saving_ns - truth["faults"][0]["saving_ns"]) <= 0.02 * col201.saving_ns
    whole_rank = tracediag.what_if(d, tracediag.Scale(rank=1, factor=0.8))
    assert abs(whole_rank.saving_ns - col201.saving_ns) <= 0.05 * col201.saving_ns
    assert d.what_if(change) == job.what_if(change) == result


def test_what_if_slow_dma_queue_matches_the_truth(slow_dma):
    job, truth = slow_dma
    fault = truth["faults"][0]
    result = tracediag.what_if(
        job, tracediag.Scale(queue=fault["queue"], layer=fault["layers"], factor=0.25)
    )
    assert abs(result.saving_ns - fault["saving_ns"]) <= 0.15 * fault["saving_ns"]
    assert result.old_step_ns == truth["step_time_ns"]


def test_what_if_changes_combine_and_can_cost(straggler):
    job = straggler[0]
    same = tracediag.what_if(job, tracediag.Scale(rank=1, factor=1.0))
    assert same.saving_ns == 0 and same.new_step_ns == same.old_step_ns
    on_rank1 = (job.events["rank"] == 1) & (job.events["kind"] != "marker")
    assert same.events == int(on_rank1.sum())
    slower = tracediag.what_if(job, tracediag.Scale(rank=0, factor=1.5))
    assert slower.saving_ns < 0 and slower.saving_pct < 0
    half, quarter = (
        tracediag.Scale(engine="tensor", factor=0.5),
        tracediag.Scale(engine="tensor", factor=0.25),
    )
    twice = tracediag.what_if(job, [half, half])  # changes apply in order: 0.5 * 0.5
    assert twice == tracediag.what_if(job, quarter)
    wait = tracediag.what_if(job, tracediag.RemoveWait(kind="dma", after="dma_trigger"))
    both = tracediag.what_if(
        job, [tracediag.Scale(rank=1, factor=0.8), tracediag.RemoveWait(kind="dma")]
    )
    assert wait.saving_ns >= 0 and both.saving_ns >= wait.saving_ns
    assert tracediag.what_if(job, tracediag.RemoveWait()).saving_ns >= wait.saving_ns


@pytest.mark.parametrize(
    ("selection", "message"),
    [
        ({"rank": 5}, "unknown rank 5; this job's ranks: 0, 1"),
        ({"engine": "tensr"}, "did you mean 'tensor'.*engines: cc, dma"),
        ({"queue": "qSync"}, "unknown queue 'qSync'.*qSyncIO0, qVectorIO0"),
        ({"layer": "layer_9"}, "layers: layer_0, layer_1"),
        ({"track": "stream 7"}, "unknown track 'stream 7'.*tensor"),
        ({"kind": "marker"}, "choose from collective, compute, dma, host, sync"),
        ({"op": "no_such_op"}, r"ops: .*\(\d+ in all\)"),
        ({"engine": "dma", "kind": "compute"}, "selects no event"),
    ],
)
def test_what_if_names_the_known_values(straggler, selection, message):
    with pytest.raises(ValueError, match=message):
        tracediag.what_if(straggler[0], tracediag.Scale(factor=0.5, **selection))


def test_what_if_rejects_bad_changes(straggler):
    job = straggler[0]
    with pytest.raises(ValueError, match="finite number >= 0"):
        tracediag.Scale(rank=1, factor=-0.5)
    with pytest.raises(TypeError, match="rank takes int"):
        tracediag.Scale(rank="1", factor=0.5)
    with pytest.raises(ValueError, match="empty list"):
        tracediag.Scale(layer=[], factor=0.5)
    with pytest.raises(ValueError, match="unknown after 'trigger'.*dma_trigger"):
        tracediag.RemoveWait(after="trigger")
    with pytest.raises(ValueError, match="needs a change"):
        tracediag.what_if(job, [])
    with pytest.raises(TypeError, match="Scale or a RemoveWait"):
        tracediag.what_if(job, [{"rank": 1}])
    with pytest.raises(TypeError, match="a list of them, not 0.8"):
        tracediag.what_if(job, 0.8)
    with pytest.raises(TypeError, match="needs a Job"):
        tracediag.what_if("trace/", tracediag.Scale(factor=0.5))
    assert repr(tracediag.Scale(rank=1, factor=0.5)) == "Scale(rank=1, factor=0.5)"


# ---- TUI and the example ---------------------------------------------------------------------
def test_the_tui_opens_on_a_loaded_job(straggler):
    from tracediag.tui.overview_screen import OverviewScreen

    job = straggler[0]
    app = tui_app(job, {"select": ["COL"]})

    async def main_():
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            assert isinstance(app.screen, OverviewScreen)
            assert app.session.trace is job.trace
            assert {f.code[:3] for f in app.session.diagnosis.findings} == {"COL"}
            await pilot.press("f")
            assert [f.code for f in app.screen.shown][0] == "COL201"

    asyncio.run(main_())
    with pytest.raises(ValueError, match="already configured"):
        tui_app(straggler[1], {"select": ["COL"]})


def test_notebook_example_runs_on_a_generated_job(generated, capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["notebook.py", generated["straggler"][0]])
    runpy.run_path(str(ROOT / "docs" / "examples" / "notebook.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "COL201" in out and "Scale(rank=1, factor=0.9)" in out
