"""Shared test configuration."""

import sys

import pytest

import tracediag.engine.diagnose as diagnose_module
from tests.report_invariants import violations


@pytest.fixture(autouse=True)
def _cache_in_tmp(tmp_path_factory, monkeypatch):
    """Every test gets its own empty trace cache, never the user's (~/.cache/tracediag)."""
    monkeypatch.setenv("TRACEDIAG_CACHE_DIR", str(tmp_path_factory.mktemp("tracediag-cache")))


@pytest.fixture(autouse=True)
def _report_invariants(monkeypatch):
    """Every Diagnosis a test makes is checked against tests/report_invariants.py; the test that
    made one breaking a property fails (at teardown, with every violation listed), whatever the
    test itself asserts. Checked after the test, not inside diagnose(), so that no front end's
    error handling can swallow it."""
    original = diagnose_module.diagnose
    found: list[str] = []

    def checked(*args, **kwargs):
        diagnosis = original(*args, **kwargs)
        found.extend(violations(diagnosis))
        return diagnosis

    checked.__wrapped__ = original
    # Modules that imported the function by name hold their own reference, under any name
    # (tracediag.api.job's ``engine_diagnose``): replace those too.
    for name, module in list(sys.modules.items()):
        if not name.startswith(("tracediag", "tests")):
            continue
        for attr, value in list(vars(module).items()):
            if value is original:
                monkeypatch.setattr(module, attr, checked)
    yield
    if found:
        pytest.fail("report invariants broken:\n  " + "\n  ".join(dict.fromkeys(found)))
