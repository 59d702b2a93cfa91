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
