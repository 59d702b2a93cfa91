"""``tracediag --version`` and ``--help`` print without importing the numeric stack (pandas,
numpy, pyarrow: ~0.5 s of a command's start)."""

from __future__ import annotations

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
