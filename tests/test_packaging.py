"""The wheel's package list matches the folders, and the core never loads the TUI toolkit."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from tracediag import __version__

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
        "import sys, tracediag.engine.diagnose, tracediag.loading.loader, tracediag.engine.rule;"
        "tracediag.engine.rule.all_rules();"
        "bad=[m for m in sys.modules if m.split('.')[0] in ('textual','rich')];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


# ---- the wheel --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel, built offline from a copy of the sources (the build writes build/ and
    *.egg-info beside them, which must not touch the working tree)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for name in ("tracediag", "parsers", "rules"):
        shutil.copytree(
            ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
        )
    out = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
         "-q", "-w", str(tmp / "dist"), str(src)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    (built,) = (tmp / "dist").glob("tracediag-*.whl")
    return built


def _installed_name(path: Path) -> str:
    """Where a source file lands in the wheel: parsers/ and rules/ install inside tracediag."""
    rel = path.relative_to(ROOT).as_posix()
    for top in ("parsers", "rules"):
        if rel.startswith(f"{top}/"):
            return f"tracediag/{rel}"
    return rel


def test_wheel_holds_every_module_and_nothing_else(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    sources = {
        _installed_name(p)
        for top in ("tracediag", "parsers", "rules")
        for p in (ROOT / top).rglob("*.py")
        if "__pycache__" not in p.parts
    }
    assert sources - names == set()  # no module left out (a forgotten subpackage would be)
    assert {
        "tracediag/parsers/protos/perfetto_trace_pb2.py",
        "tracediag/parsers/protos/xplane_pb2.py",
    } <= names
    assert "tracediag/rules/dma101_dma_wait_on_critical_path.py" in names
    if (ROOT / "tracediag" / "py.typed").is_file():
        assert "tracediag/py.typed" in names
    code = {n for n in names if not n.startswith("tracediag-")}
    assert {n.split("/")[0] for n in code} == {"tracediag"}  # no tests/, sample_traces/, ...
    assert not [n for n in names if "/tests/" in n or "sample_traces" in n or "__pycache__" in n]


def test_wheel_metadata_and_entry_point(wheel):
    archive = zipfile.ZipFile(wheel)
    info = f"tracediag-{__version__}.dist-info"
    assert wheel.name == f"tracediag-{__version__}-py3-none-any.whl"
    entry_points = archive.read(f"{info}/entry_points.txt").decode()
    assert "[console_scripts]\ntracediag = tracediag.cli.main:entry" in entry_points
    metadata = archive.read(f"{info}/METADATA").decode()
    assert f"\nVersion: {__version__}\n" in metadata
    assert "\nRequires-Python: >=3.11\n" in metadata


def test_wheel_installs_and_runs(wheel, tmp_path):
    target = tmp_path / "site"
    out = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q",
         "--target", str(target), str(wheel)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    # The installed copy, not the editable one of the working tree, must answer.
    code = (
        "import tracediag, tracediag.engine.rule, tracediag.parsers;"
        "print(tracediag.__file__);"
        "print(len(tracediag.engine.rule.all_rules()), len(tracediag.parsers.READERS))"
    )
    env = {**os.environ, "PYTHONPATH": str(target)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env
    )
    assert out.returncode == 0, out.stderr
    where, counts = out.stdout.splitlines()
    assert Path(where).is_relative_to(target)
    rules, readers = map(int, counts.split())
    assert rules >= 12 and readers >= 6
    out = subprocess.run(
        [sys.executable, "-m", "tracediag", "--version"],
        capture_output=True, text=True, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert out.stdout == f"tracediag {__version__}\n"
