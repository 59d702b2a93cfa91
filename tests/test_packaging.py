"""The wheel's package list matches the folders, and the core never loads the TUI toolkit."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_subpackage_is_listed_in_pyproject():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(cfg["packages"])
    mapping = cfg["package-dir"]
    found = set()
    for top, name in (
        ("tracediag", "tracediag"),
        ("parsers", "tracediag.parsers"),
        ("rules", "tracediag.rules"),
    ):
        for init in (ROOT / top).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / top).parts
            found.add(".".join((name, *rel)))
    assert found == listed
    assert mapping == {"tracediag.parsers": "parsers", "tracediag.rules": "rules"}


def test_rules_folder_is_flat():
    assert not [p for p in (ROOT / "rules").iterdir() if p.is_dir() and p.name != "__pycache__"]


def test_engine_does_not_import_textual_or_rich():
    code = (
        "import sys, tracediag.engine, tracediag.load, tracediag.rule;"
        "tracediag.rule.all_rules();"
        "bad=[m for m in sys.modules if m.split('.')[0] in ('textual','rich')];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
