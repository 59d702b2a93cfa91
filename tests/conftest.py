"""Shared test configuration."""

import pytest


@pytest.fixture(autouse=True)
def _cache_in_tmp(tmp_path_factory, monkeypatch):
    """Every test gets its own empty trace cache, never the user's (~/.cache/tracediag)."""
    monkeypatch.setenv("TRACEDIAG_CACHE_DIR", str(tmp_path_factory.mktemp("tracediag-cache")))
