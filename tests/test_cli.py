"""The command line, in process through ``main(argv)``: exit codes, one-line errors, options.

Most tests load the worked example (``tracediag.loading.loader.load`` is swapped for it) and diagnose it
with the probe rules of tests/fake_rules.py: COL990 (warning, saving 150 ns) and DMA990 (info).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from tests.fake_rules import use_probe_rules
from tests.gate_runs import cli
from tests.worked_example import example_trace


def _one_line_error(err: str) -> str:
    assert err.startswith("tracediag: error: "), err
    assert err.count("\n") == 1, err
    assert "Traceback" not in err
    return err


run = cli  # ``run(*argv) -> (exit code, stdout, stderr)`` in an empty directory


@pytest.fixture
def loads(monkeypatch):
    """Every load returns the worked example; the calls are recorded. The probes are the rules."""
    use_probe_rules(monkeypatch)
    calls = []

    def fake_load(paths, *, align=True, progress=None, **_reading):
        calls.append({"paths": [str(p) for p in paths], "align": align, "progress": progress})
        return example_trace()

    monkeypatch.setattr("tracediag.loading.loader.load", fake_load)
    return calls


def _json(out: str) -> dict:
    data = orjson.loads(out)
    assert data["schema"] == "tracediag.report/1"
    return data


# ---- report -------------------------------------------------------------------------------


def test_report_prints_text_and_progress(run, loads):
    code, out, err = run("report", "a", "b")
    assert code == 0
    assert "Critical path: 780 ns, by category" in out
    assert "tracediag: diagnosing 2 ranks, 12 events" in err
    assert loads == [{"paths": ["a", "b"], "align": True, "progress": loads[0]["progress"]}]
    assert loads[0]["progress"] is not None


def test_report_quiet_and_no_align(run, loads):
    code, out, err = run("report", "a", "--quiet", "--no-align")
    assert (code, err) == (0, "")
    assert loads[0]["align"] is False and loads[0]["progress"] is None


def test_report_json(run, loads):
    code, out, _ = run("report", "a", "--format", "json")
    data = _json(out)
    assert code == 0
    assert data["critical_path"]["length_ns"] == 780
    assert data["critical_path"]["by_category_ns"]["collective_skew"] == 150
    assert [f["code"] for f in data["findings"]] == ["COL990", "DMA990"]
    assert data["config"]["rules_run"] == ["COL990", "DMA990"]


def test_report_exits_zero_whatever_it_finds(run, loads):
    assert run("report", "a", "--quiet")[0] == 0


def test_report_output_file(run, loads, tmp_path):
    code, out, err = run("report", "a", "--format", "markdown", "-o", tmp_path / "r.md")
    assert (code, out) == (0, "")
    assert (tmp_path / "r.md").read_text().startswith("## tracediag report")
    assert f"wrote {tmp_path / 'r.md'}" in err


def test_report_output_into_missing_directory(run, loads, tmp_path):
    code, _, err = run("report", "a", "-q", "-o", tmp_path / "no" / "r.txt")
    assert code == 2
    assert "No such file or directory" in _one_line_error(err)


# ---- check: the gate ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ((), 0),  # default gate: error; COL990 is a warning
        (("--fail-on", "warning"), 1),
        (("--fail-on", "info"), 1),
        (("--fail-on", "warning", "--exit-zero"), 0),
        (("--fail-on", "warning", "--ignore", "COL990"), 0),  # DMA990 is only info
        (("--fail-on", "info", "--ignore", "col,dma"), 0),
    ],
)
def test_check_exit_codes(run, loads, flags, expected):
    assert run("check", "a", "-q", *flags)[0] == expected


def test_check_verdict_on_stderr(run, loads):
    code, _, err = run("check", "a", "--fail-on", "warning")
    assert code == 1
    assert err.splitlines()[-1] == "tracediag: check failed: 1 finding at or above warning"
    assert (
        run("check", "a")[2].splitlines()[-1]
        == "tracediag: check passed: no finding at or above error"
    )


def test_check_json_shows_the_gate_applied(run, loads):
    code, out, _ = run("check", "a", "-q", "--format", "json", "--fail-on", "info")
    assert code == 1
    assert _json(out)["config"]["fail_on"] == "info"


def test_config_fail_on_is_found_and_the_flag_wins(run, loads, tmp_path):
    (tmp_path / "tracediag.toml").write_text('fail-on = "warning"\n')
    assert run("check", "a", "-q")[0] == 1
    code, out, _ = run("check", "a", "-q", "--fail-on", "error", "--format", "json")
    assert code == 0
    assert _json(out)["config"]["source"].endswith("tracediag.toml")


# ---- selection ------------------------------------------------------------------------------


def _rules_run(run, *flags) -> list[str]:
    code, out, _ = run("report", "a", "-q", "--format", "json", *flags)
    assert code == 0
    return _json(out)["config"]["rules_run"]


def test_select_extend_select_ignore(run, loads, tmp_path):
    assert _rules_run(run, "--select", "DMA") == ["DMA990"]
    assert _rules_run(run, "--select", "dma", "--extend-select", "COL990") == ["COL990", "DMA990"]
    assert _rules_run(run, "--ignore", "COL") == ["DMA990"]
    (tmp_path / "tracediag.toml").write_text('ignore = ["COL"]\n')
    assert _rules_run(run) == ["DMA990"]
    assert _rules_run(run, "--extend-select", "COL990") == ["DMA990"]  # the file's ignore stays
    assert _rules_run(run, "--select", "COL990") == ["COL990"]  # --select starts afresh


def test_select_of_no_rule_suggests_one(run, loads):
    code, _, err = run("report", "a", "--select", "CLO990")
    assert code == 2
    assert "--select: CLO990 matches no rule (did you mean COL990?)" in _one_line_error(err)


# ---- configuration and input errors ---------------------------------------------------------


def test_bad_config_key(run, loads, tmp_path):
    (tmp_path / "tracediag.toml").write_text("colour = true\n")
    code, _, err = run("check", "a")
    assert code == 2
    assert "unknown keys ['colour']" in _one_line_error(err)


def test_missing_config_file(run, loads, tmp_path):
    code, _, err = run("report", "a", "--config", tmp_path / "none.toml")
    assert code == 2
    assert "none.toml: config file not found" in _one_line_error(err)


def test_missing_input(run, tmp_path):
    code, _, err = run("report", tmp_path / "nope.json")
    assert code == 2
    assert (
        _one_line_error(err)
        == f"tracediag: error: {tmp_path / 'nope.json'}: no such file or directory\n"
    )


def test_unknown_format_input(run, tmp_path):
    (tmp_path / "notes.txt").write_text("hello\n")
    code, _, err = run("check", tmp_path / "notes.txt")
    assert code == 2
    assert "notes.txt: unknown format" in _one_line_error(err)


def test_bad_inputs_give_one_line_and_exit_2(run, tmp_path):
    """Empty, truncated, cut-off and corrupt inputs: the file named, what is wrong, exit 2."""
    sample = Path(__file__).resolve().parents[1] / "sample_traces" / "chrome_straggler" / "chrome"
    (tmp_path / "empty.json").write_bytes(b"")
    gz = (sample / "rank_0.json.gz").read_bytes()
    (tmp_path / "cut.json.gz").write_bytes(gz[: len(gz) // 2])
    (tmp_path / "cut.json").write_text('{"traceEvents": [{"ph": "X", "ts": 1')
    want = {
        "empty.json": "empty file",
        "cut.json.gz": "truncated gzip stream",
        "cut.json": "not valid JSON",
    }
    for name, problem in want.items():
        code, _, err = run("report", "-q", tmp_path / name)
        assert code == 2, name
        line = _one_line_error(err)
        assert f"{tmp_path / name}: {problem}" in line, line


@pytest.mark.parametrize(
    "argv",
    [
        (),
        ("report",),
        ("report", "a", "--format", "xml"),
        ("check", "a", "--fail-on", "fatal"),
        ("lint",),
    ],
)
def test_usage_errors_are_one_line(run, argv):
    code, out, err = run(*argv)
    assert (code, out) == (2, "")
    assert "--help" in _one_line_error(err)


def test_help_and_version(run):
    code, out, _ = run("--help")
    assert code == 0 and "exit codes" in out
    assert run("--version") == (0, "tracediag 0.1.0\n", "")


# ---- rules and rule -------------------------------------------------------------------------


def test_rules_table_of_the_built_in_rules(run):
    from tracediag.engine.rule import all_rules

    code, out, _ = run("rules")
    lines = out.splitlines()
    assert code == 0
    assert lines[0].split() == ["code", "name", "family", "severity", "title"]
    assert [line.split()[0] for line in lines[1:]] == list(all_rules())
    # Not a terminal: whole titles, nothing cut (test_report_readability checks a terminal's cut).
    rules = all_rules().values()
    assert all(line.endswith(c.title) for line, c in zip(lines[1:], rules, strict=True))


def test_rules_by_family(run, loads):
    code, out, _ = run("rules", "--family", "dma")
    assert code == 0
    assert out.splitlines()[1].split()[:4] == ["DMA990", "dma-wait-probe", "dma", "info"]
    assert len(out.splitlines()) == 2


@pytest.mark.parametrize("name", ["COL990", "col990", "skew-probe"])
def test_rule_document(run, loads, name):
    code, out, _ = run("rule", name)
    assert code == 0
    assert out.startswith("# COL990 skew-probe\n")
    assert "## How to fix" in out and "- `count` (default `1`)" in out


def test_unknown_rule_suggests_one(run, loads):
    code, out, err = run("rule", "COL909")
    assert (code, out) == (2, "")
    assert _one_line_error(err) == "tracediag: error: no rule COL909 (did you mean COL990?)\n"


# ---- generate -------------------------------------------------------------------------------


def test_generate_lists_scenarios(run):
    from tracediag.generator import SCENARIOS

    code, out, _ = run("generate", "--list")
    assert code == 0
    assert [line.split()[0] for line in out.splitlines()] == list(SCENARIOS)


def test_generate_usage_errors(run, tmp_path):
    from tracediag.generator import SCENARIOS

    name = next(iter(SCENARIOS))
    code, _, err = run("generate", name[:-1], tmp_path)
    assert code == 2 and f"(did you mean {name}?)" in _one_line_error(err)
    assert run("generate", name)[0] == 2  # no OUT
    assert run("generate", name, tmp_path, "--formats", "parquet,xml")[0] == 2
    assert run("generate", "--list", "--samples", tmp_path)[0] == 2


def test_generate_then_check_end_to_end(run, tmp_path):
    gen = tmp_path / "gen"
    code, _, err = run("generate", "straggler", gen, "--formats", "parquet", "--ranks", "2")
    assert code == 0 and "truth.json" in err
    truth = orjson.loads((gen / "truth.json").read_bytes())
    code, out, _ = run("check", gen / "parquet", "-q", "--format", "json", "--fail-on", "warning")
    data = _json(out)
    assert code == 1
    assert [i["format"] for i in data["inputs"]] == ["neuron-parquet"]
    assert data["critical_path"]["length_ns"] == truth["step_time_ns"]
    assert [r["clock_offset_ns"] for r in data["ranks"]] == truth["align_to_rank0_ns"]
    top, fault = data["findings"][0], truth["faults"][0]
    assert (top["code"], top["ranks"]) == ("COL201", fault["ranks"])
    assert top["saving_ns"] == pytest.approx(fault["saving_ns"], rel=0.05)


# ---- the installed console script -----------------------------------------------------------


def test_console_script_error_is_one_line(tmp_path):
    script = shutil.which("tracediag", path=str(Path(sys.executable).parent))
    if script is None:
        pytest.skip("the tracediag console script is not installed (pip install -e .)")
    done = subprocess.run(
        [script, "check", str(tmp_path / "nope")], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert done.stdout == ""
    _one_line_error(done.stderr)
