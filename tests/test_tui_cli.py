"""``tracediag PATH...`` and ``tracediag tui PATH...`` reach the TUI; typos stay CLI errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tracediag.cli import main as cli

ROOT = Path(__file__).resolve().parents[1]
STRAGGLER = str(ROOT / "sample_traces" / "neuron_parquet_straggler" / "parquet")


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([STRAGGLER], ["tui", STRAGGLER]),
        (["missing/trace.json"], ["tui", "missing/trace.json"]),  # the app says it is missing
        (["tui", STRAGGLER], ["tui", STRAGGLER]),
        (["report", STRAGGLER], ["report", STRAGGLER]),
        (["reprot", STRAGGLER], ["reprot", STRAGGLER]),  # a typo: argparse names the commands
        (["lint"], ["lint"]),  # a bare unknown word is no path
        (["runs"], ["runs"]),
        (["--version"], ["--version"]),
        ([], []),
    ],
)
def test_first_argument_that_is_no_command_opens_the_tui(argv, expected):
    assert cli._tui_by_default(cli.build_parser(), argv) == expected


def test_tui_options_resolve_the_config_before_the_app(monkeypatch, capsys):
    seen = {}

    class FakeApp:
        error_line = "tracediag: error: x: no such file or directory"
        return_code = 0

        def run(self):
            seen["ran"] = True

    def fake_make_app(paths, *, config, align, reading):
        seen.update(paths=paths, select=config.select, align=align, reading=reading)
        return FakeApp()

    monkeypatch.setattr("tracediag.tui.app.make_app", fake_make_app)
    monkeypatch.setattr("tracediag.cli.tui_cmd.not_a_terminal", lambda: None)  # as if on one
    code = cli.main([STRAGGLER, "--select", "col2", "--no-align", "--no-cache", "--jobs", "2"])
    assert code == 2  # the load error's exit code, as the other commands give it
    reading = {"cache": False, "jobs": 2, "scheduler": None}
    assert seen == {
        "paths": [STRAGGLER],
        "select": ["COL2"],
        "align": False,
        "reading": reading,
        "ran": True,
    }
    assert capsys.readouterr().err == FakeApp.error_line + "\n"


def test_the_cli_loads_no_textual_until_the_tui_runs():
    code = (
        "import sys, tracediag.cli.main;"
        "bad=[m for m in sys.modules if m.split('.')[0] in ('textual','rich')];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_tui_usage_errors_are_one_line(capsys):
    assert cli.main(["tui", STRAGGLER, "--select", "NOPE9"]) == 2
    assert capsys.readouterr().err.startswith("tracediag: error: --select: NOPE9 matches no rule")


def test_tui_takes_the_layout_like_report(tmp_path, monkeypatch):
    """``tui --layout`` sets the layout as ``report --layout`` does (an incomplete set of ranks
    cannot be inferred right: the user says it)."""
    from tracediag.cli.common import resolve_config
    from tracediag.cli.main import build_parser

    monkeypatch.chdir(tmp_path)  # no configuration file found upward
    args = build_parser().parse_args(["tui", "x", "--layout", "dp=2,tp=4"])
    assert (
        resolve_config(args).layout
        == build_parser().parse_args(["report", "x", "--layout", "dp=2,tp=4"]).layout
    )
    assert resolve_config(args).layout["tp"] == 4
