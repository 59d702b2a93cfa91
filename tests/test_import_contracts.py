"""The import contracts of pyproject.toml ([tool.importlinter]) hold: one-way layers, no
textual below the front ends, a generator that imports only what it writes with, no cycles.

import-linter builds its graph from the files under the root package's folder, and parsers/
and rules/ reach ``tracediag.parsers``/``tracediag.rules`` only through the install's
package-dir mapping; so the check runs on a copy of the tree laid out as it is installed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_SKIP = shutil.ignore_patterns("__pycache__", "*.pyc")


@pytest.fixture(scope="module")
def installed_layout(tmp_path_factory) -> Path:
    """A folder holding ``tracediag/`` with parsers/ and rules/ at their installed places."""
    top = tmp_path_factory.mktemp("layout")
    shutil.copytree(ROOT / "tracediag", top / "tracediag", ignore=_SKIP)
    shutil.copytree(ROOT / "parsers", top / "tracediag" / "parsers", ignore=_SKIP)
    shutil.copytree(ROOT / "rules", top / "tracediag" / "rules", ignore=_SKIP)
    return top


def _lint_imports(layout: Path, config: Path) -> subprocess.CompletedProcess:
    pytest.importorskip("importlinter")
    env = {**os.environ, "PYTHONPATH": str(layout)}
    code = "from importlinter.cli import lint_imports_command; lint_imports_command()"
    return subprocess.run(
        [sys.executable, "-c", code, str(config), "--no-cache"],
        cwd=layout,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_import_contracts_hold(installed_layout):
    run = _lint_imports(installed_layout, ROOT / "pyproject.toml")
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert "0 broken" in run.stdout


def test_the_layers_contract_catches_an_upward_import(installed_layout, tmp_path):
    """The check can fail: a reader importing the engine breaks the layers contract."""
    layout = tmp_path / "bad"
    shutil.copytree(installed_layout, layout)
    reader = layout / "tracediag" / "parsers" / "kineto.py"
    reader.write_text(reader.read_text() + "\nfrom tracediag.engine import diagnose  # noqa\n")
    run = _lint_imports(layout, ROOT / "pyproject.toml")
    assert run.returncode != 0
    assert "tracediag.parsers.kineto -> tracediag.engine.diagnose" in run.stdout


def test_the_architecture_page_names_real_files_and_every_layer():
    """docs/architecture.md stays true: every file it names exists, and every subpackage of
    tracediag/ is in its table of layers."""
    import re

    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    named = set(
        re.findall(r"`((?:tracediag|parsers|rules|tests|docs)/[\w/.<>-]+\.(?:py|md))`", text)
    )
    missing = sorted(p for p in named if "<" not in p and not (ROOT / p).exists())
    assert named and not missing, f"docs/architecture.md names missing files: {missing}"
    layers = sorted(d.name for d in (ROOT / "tracediag").iterdir() if (d / "__init__.py").exists())
    absent = [d for d in layers if f"`tracediag/{d}/`" not in text]
    assert not absent, f"docs/architecture.md lacks the layers {absent}"
