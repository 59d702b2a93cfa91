"""benchmarks/check_invariants.py: the report invariants on a real trace and a generated case."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import tracediag
from tests.chrome_helpers import shared

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "check_invariants.py"
#: One case's line: name, findings, violations, seconds.
LINE = re.compile(r"^(?P<name>\S+)\s+(?P<findings>\d+)\s+(?P<violations>\d+)\s+(?P<s>\d+\.\d\d)$")


def _run(*args: str) -> tuple[int, list[str]]:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300
    )
    return proc.returncode, proc.stdout.splitlines()


def _case_lines(lines: list[str]) -> dict[str, re.Match]:
    assert lines[0].split() == ["case", "findings", "violations", "seconds"], lines
    rows = {m["name"]: m for line in lines[1:] if (m := LINE.match(line))}
    assert lines[-1] == f"{len(rows)} cases, 0 with violations or failures", lines
    assert len(lines) == len(rows) + 2, lines  # no violation or failure printed under a row
    return rows


def test_real_trace_has_no_violation():
    path = shared("kineto_amd_mi250_minitoy.json.gz")
    code, lines = _run("--case", "amd_mi250_minitoy")
    assert code == 0, lines
    rows = _case_lines(lines)
    assert list(rows) == ["kineto_amd_mi250_minitoy"]
    row = rows["kineto_amd_mi250_minitoy"]
    assert row["violations"] == "0"
    # The count printed is the diagnosis's, made here independently.
    assert (
        int(row["findings"])
        == len(tracediag.diagnose(tracediag.load(path, cache=False)).findings)
        > 0
    )


def test_generated_case_has_no_violation(tmp_path):
    args = ("--case", "custom", "--fmt", "chrome", "--ranks", "2", "--scale", "1")
    code, lines = _run(*args, "--out", str(tmp_path))
    assert code == 0, lines
    rows = _case_lines(lines)
    assert list(rows) == ["custom"]
    assert rows["custom"]["violations"] == "0"
    assert int(rows["custom"]["findings"]) > 0  # the mixed scenario has problems to find
    assert sorted(p.name for p in (tmp_path / "custom" / "chrome").iterdir()) == [
        "rank_0.json",
        "rank_1.json",
    ]


def test_unknown_case_is_refused():
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--case", "no-such-case"], capture_output=True, text=True
    )
    assert proc.returncode != 0
    assert "no case 'no-such-case'" in proc.stderr
