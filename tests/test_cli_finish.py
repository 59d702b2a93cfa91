"""The command line's finish: ``python -m tracediag``, ``--version``, shell completion, "did you
mean" for commands, rule codes, config keys and rule options, NO_COLOR, and output that fits
the terminal's width."""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import sys

import pytest

from tests import gate_runs
from tracediag import __version__
from tracediag.cli.completion import SHELLS, describe, rule_codes, script
from tracediag.cli.main import build_parser

# the shared fixtures (see tests/gate_runs.py): `cli(*argv)` in an empty directory; `probes`
# makes every load the worked example, diagnosed by the probe rules
cli = gate_runs.cli
probes = gate_runs.probes

COMMANDS = list(describe(build_parser()))


def _error(err: str) -> str:
    assert err.startswith("tracediag: error: ") and err.count("\n") == 1, err
    return err.strip()


# ---- python -m, --version ---------------------------------------------------------------------


def test_python_dash_m_prints_the_version():
    out = subprocess.run(
        [sys.executable, "-m", "tracediag", "--version"], capture_output=True, text=True
    )
    assert (out.returncode, out.stdout, out.stderr) == (0, f"tracediag {__version__}\n", "")


def test_version_in_process(cli):
    code, out, _ = cli("--version")
    assert (code, out) == (0, "tracediag 0.1.0\n")


# ---- did you mean -----------------------------------------------------------------------------


def test_mistyped_command_gets_a_suggestion(cli):
    code, out, err = cli("reprot", "traces/")
    assert (code, out) == (2, "")
    assert _error(err) == "tracediag: error: unknown command 'reprot'; did you mean 'report'?"


def test_unknown_command_without_a_close_one(cli):
    code, _, err = cli("frobnicate")
    assert code == 2
    assert _error(err) == "tracediag: error: unknown command 'frobnicate' (see 'tracediag --help')"


def test_a_path_still_opens_the_tui_route(cli, monkeypatch):
    opened = []
    monkeypatch.setattr("tracediag.cli.tui_cmd.run", lambda args: opened.append(args.paths) or 0)
    assert cli("./traces")[0] == 0
    assert opened == [["./traces"]]


def test_mistyped_rule_code_gets_a_suggestion(cli, probes):
    code, _, err = cli("report", "a", "--select", "COL99O")
    assert code == 2
    assert "--select: COL99O matches no rule (did you mean COL990?)" in _error(err)


def test_mistyped_rule_name_gets_a_suggestion(cli):
    code, _, err = cli("rule", "DAM101")
    assert code == 2
    assert "no rule DAM101 (did you mean DMA101?)" in _error(err)
    # with nothing close, the message says where the codes are listed
    code, _, err = cli("rule", "XYZ999")
    assert (code, _error(err)) == (
        2,
        "tracediag: error: no rule XYZ999 ('tracediag rules' lists them)",
    )


def test_mistyped_config_key_gets_a_suggestion(cli, probes, tmp_path):
    (tmp_path / "tracediag.toml").write_text('fail_on = "warning"\n', encoding="utf-8")
    code, _, err = cli("report", "a")
    assert code == 2
    assert "unknown keys ['fail_on']; did you mean 'fail-on'?" in _error(err)


def test_mistyped_rule_option_gets_a_suggestion(cli, probes, tmp_path):
    (tmp_path / "tracediag.toml").write_text("[rules.COL990]\ncounts = 2\n", encoding="utf-8")
    code, _, err = cli("report", "a", "-q")
    assert code == 2
    assert "unknown options for COL990: ['counts']; did you mean 'count'?" in _error(err)


def test_mistyped_rule_code_in_the_config_gets_a_suggestion(cli, probes, tmp_path):
    (tmp_path / "tracediag.toml").write_text('[severity]\nCOL99 = "info"\n', encoding="utf-8")
    code, _, err = cli("report", "a", "-q")
    assert code == 2
    assert "no rule COL99 (did you mean COL990?)" in _error(err)


# ---- completion -------------------------------------------------------------------------------


def test_every_shell_gets_every_command_and_rule_code(cli):
    for shell in SHELLS:
        code, out, _ = cli("completion", shell)
        assert code == 0
        assert out == script(shell, build_parser())
        for cmd in COMMANDS:
            assert cmd.name in out, (shell, cmd.name)
        assert all(c in out for c in rule_codes())
        assert "extend-select" in out


def test_unknown_shell_is_a_usage_error(cli):
    code, _, err = cli("completion", "powershell")
    assert code == 2
    assert "invalid choice: 'powershell'" in _error(err)


@pytest.fixture
def bash_script(tmp_path):
    if shutil.which("bash") is None:
        pytest.skip("bash is not installed")
    (tmp_path / "completion").mkdir()
    path = tmp_path / "completion" / "tracediag.bash"
    path.write_text(script("bash", build_parser()), encoding="utf-8")
    return path


def test_bash_script_is_valid_bash(bash_script):
    out = subprocess.run(["bash", "-n", str(bash_script)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def _complete(bash_script, tmp_path, *words: str) -> list[str]:
    """What bash offers for the last of ``words`` (``tracediag`` first), run from tmp_path."""
    program = (
        f"source {bash_script}\n"
        f"COMP_WORDS=({' '.join(repr(w) for w in words)}); COMP_CWORD={len(words) - 1}\n"
        '_tracediag; printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    out = subprocess.run(["bash", "-c", program], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    return sorted(w for w in out.stdout.splitlines() if w)


def test_bash_completes_commands_options_codes_choices_and_files(bash_script, tmp_path):
    (tmp_path / "traces").mkdir()
    assert _complete(bash_script, tmp_path, "tracediag", "re") == ["report"]
    assert _complete(bash_script, tmp_path, "tracediag", "") == sorted(c.name for c in COMMANDS)
    assert _complete(bash_script, tmp_path, "tracediag", "check", "--fail") == ["--fail-on"]
    assert _complete(bash_script, tmp_path, "tracediag", "check", "--fail-on", "w") == ["warning"]
    assert _complete(bash_script, tmp_path, "tracediag", "report", "--select", "DMA10") == [
        f"DMA10{i}" for i in range(1, 6)
    ]
    assert _complete(bash_script, tmp_path, "tracediag", "report", "--ignore", "DMA101,TRC50") == [
        f"DMA101,{c}" for c in rule_codes() if c.startswith("TRC50")
    ]
    assert _complete(bash_script, tmp_path, "tracediag", "rule", "COL20") == [
        c for c in rule_codes() if c.startswith("COL20")
    ]
    assert _complete(bash_script, tmp_path, "tracediag", "report", "tr") == ["traces"]
    assert _complete(bash_script, tmp_path, "tracediag", "completion", "") == sorted(SHELLS)
    # the value of an option is no positional: after `--format json`, paths again
    assert _complete(bash_script, tmp_path, "tracediag", "report", "--format", "json", "t") == [
        "traces"
    ]


def test_zsh_and_fish_scripts_are_shaped_for_their_shells():
    zsh = script("zsh", build_parser())
    assert zsh.startswith("#compdef tracediag\n")
    # a spec per flag: '--flag[help]:value:ACTION', its help free of ':' and brackets
    assert re.search(r"'--fail-on\[[^]\[:]+\]:value:\(error warning info\)'", zsh)
    assert "'--config[tracediag.toml or pyproject.toml to read]:value:_files'" in zsh
    assert "compdef _tracediag tracediag" in zsh
    fish = script("fish", build_parser())
    assert (
        "complete -c tracediag -n '__fish_seen_subcommand_from check' -l fail-on -x -a 'error warning info'"
        in fish
    )
    assert "-s o -l output -r -F" in fish


# ---- NO_COLOR and the terminal's width --------------------------------------------------------


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _run(monkeypatch, tmp_path, *argv: str, terminal: bool = True) -> str:
    """stdout of ``main(argv)`` written to a terminal (or, ``terminal=False``, to a pipe)."""
    from tracediag.cli.main import main

    monkeypatch.chdir(tmp_path)
    stdout = _Terminal() if terminal else io.StringIO()
    monkeypatch.setattr(sys, "stdout", stdout)
    assert main(list(argv)) == 0
    return stdout.getvalue()


def test_colour_on_a_terminal_unless_no_color(monkeypatch, tmp_path, probes):
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert "\x1b[" in _run(monkeypatch, tmp_path, "report", "a", "-q")
    monkeypatch.setenv("NO_COLOR", "1")
    assert "\x1b[" not in _run(monkeypatch, tmp_path, "report", "a", "-q")


def test_tui_honours_no_color(monkeypatch):
    from tracediag.tui.app import make_app

    monkeypatch.setenv("NO_COLOR", "1")
    assert make_app(["a"]).no_color
    monkeypatch.delenv("NO_COLOR")
    assert not make_app(["a"]).no_color


@pytest.mark.parametrize(("columns", "width"), [(30, 60), (60, 60), (72, 72)])
def test_text_report_fits_a_narrow_terminal(monkeypatch, tmp_path, probes, columns, width):
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", str(columns))
    out = _run(monkeypatch, tmp_path, "report", "a", "-q")
    lines = out.splitlines()
    assert max(map(len, lines)) <= width  # never narrower than 60 columns
    assert any("COL990" in line for line in lines)
    header = next(line for line in lines if line.strip().startswith("rank "))
    assert "step time" in header and "idle" in header  # the breakdown columns stay
    assert ("hardware" in header) is False  # ... the hardware column gives way


def test_wide_terminal_and_pipes_stay_at_100_columns(monkeypatch, tmp_path, probes):
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "40")
    piped = _run(monkeypatch, tmp_path, "report", "a", "-q", terminal=False)
    monkeypatch.setenv("COLUMNS", "200")
    assert _run(monkeypatch, tmp_path, "report", "a", "-q") == piped
    assert max(map(len, piped.splitlines())) <= 100
    assert any(len(line) > 72 for line in piped.splitlines())


def test_rules_table_fits_the_terminal(monkeypatch, tmp_path):
    monkeypatch.setenv("COLUMNS", "60")
    out = _run(monkeypatch, tmp_path, "rules")
    assert max(map(len, out.splitlines())) <= 60
    assert "DMA101" in out
