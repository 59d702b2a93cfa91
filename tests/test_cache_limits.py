"""The cache keeps within its size limit, removing the least recently used entries first."""

from __future__ import annotations

import os
import time
from pathlib import Path

from tracediag.loading import cache, cache_limits
from tracediag.loading.loader import load

SAMPLES = Path(__file__).parent.parent / "sample_traces"
CHROME = SAMPLES / "chrome_host_gaps" / "chrome"


def fake_entry(root: Path, name: str, size: int, used: float) -> None:
    entry = root / name
    entry.mkdir(parents=True)
    (entry / "0-events.arrow").write_bytes(b"x" * size)
    manifest = entry / cache.MANIFEST
    manifest.write_bytes(b"m")
    os.utime(manifest, (used, used))


def test_limit_from_the_environment(monkeypatch):
    monkeypatch.delenv("TRACEDIAG_CACHE_MAX_GB", raising=False)
    assert cache_limits.max_bytes() == 20 << 30
    monkeypatch.setenv("TRACEDIAG_CACHE_MAX_GB", "0.5")
    assert cache_limits.max_bytes() == 512 << 20
    monkeypatch.setenv("TRACEDIAG_CACHE_MAX_GB", "0")
    assert cache_limits.max_bytes() == 0  # no limit
    monkeypatch.setenv("TRACEDIAG_CACHE_MAX_GB", "lots")
    assert cache_limits.max_bytes() == 20 << 30


def test_least_recently_used_entries_go_first(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEDIAG_CACHE_MAX_GB", str(2500 / (1 << 30)))  # 2,500 bytes
    now = time.time()
    for i, name in enumerate(["old", "older", "new", "newest"]):
        fake_entry(tmp_path, name, 1000, now - [50, 60, 20, 10][i])
    freed = cache_limits.prune(tmp_path, keep="newest", manifest_name=cache.MANIFEST)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new", "newest"]
    assert freed == 2 * 1001


def test_the_entry_just_written_stays_even_alone_over_the_limit(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEDIAG_CACHE_MAX_GB", str(100 / (1 << 30)))
    fake_entry(tmp_path, "big", 5000, time.time() - 100)
    fake_entry(tmp_path, "other", 10, time.time())
    cache_limits.prune(tmp_path, keep="big", manifest_name=cache.MANIFEST)
    assert [p.name for p in tmp_path.iterdir()] == ["big"]


def test_orphaned_temporary_directories_are_removed_when_old(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEDIAG_CACHE_MAX_GB", "1")
    for name, age in ((".k1-abc", 7200), (".k2-def", 10)):
        (tmp_path / name).mkdir()
        os.utime(tmp_path / name, (time.time() - age, time.time() - age))
    cache_limits.prune(tmp_path, keep="x", manifest_name=cache.MANIFEST)
    assert [p.name for p in tmp_path.iterdir()] == [".k2-def"]


def test_reading_marks_use_and_storing_prunes(tmp_path, monkeypatch):
    """Through the real cache: the entry a reopen reads is marked used; the next store evicts
    the entry used longest ago, which is not it."""
    monkeypatch.setenv("TRACEDIAG_CACHE_DIR", str(tmp_path))
    load([CHROME], cache=True, jobs=1)
    written = {p.name for p in tmp_path.iterdir()}
    hour_ago = time.time() - 3600
    for name in written:
        os.utime(tmp_path / name / cache.MANIFEST, (hour_ago, hour_ago))
    fake_entry(tmp_path, "stale", 10_000, hour_ago - 3600)
    load([CHROME], cache=True, jobs=1)  # a reopen: reads the job's entry
    used = [n for n in written if os.stat(tmp_path / n / cache.MANIFEST).st_mtime > hour_ago]
    assert len(used) == 1
    total = sum(cache_limits._size(str(p)) for p in tmp_path.iterdir())
    monkeypatch.setenv("TRACEDIAG_CACHE_MAX_GB", str((total - 5000) / (1 << 30)))
    assert cache._store("fresh", [], None, prune=True)  # as store_trace does
    assert {p.name for p in tmp_path.iterdir()} == written | {"fresh"}


def test_no_limit_keeps_everything(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEDIAG_CACHE_MAX_GB", "0")
    for i in range(5):
        fake_entry(tmp_path, f"e{i}", 10_000, time.time() - i)
    assert cache_limits.prune(tmp_path, keep="e0", manifest_name=cache.MANIFEST) == 0
    assert len(list(tmp_path.iterdir())) == 5


def legacy_entry(root: Path, name: str) -> None:
    """An entry of cache format 1: a pickled manifest beside its Arrow files."""
    entry = root / name
    entry.mkdir()
    (entry / "manifest.pkl").write_bytes(b"\x80\x05N.")  # pickle of None: 4 bytes
    (entry / "0-events.arrow").write_bytes(b"x" * 100)


def test_entries_of_the_pickled_format_are_removed_whatever_the_limit(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEDIAG_CACHE_MAX_GB", "0")  # no limit: only the format removes it
    legacy_entry(tmp_path, "0123abcd")
    fake_entry(tmp_path, "current", 10, time.time() - 7200)
    (tmp_path / ".k-abc").mkdir()  # a writer at work: not an entry yet
    (tmp_path / ".k-abc" / "manifest.pkl").write_bytes(b"x")
    freed = cache_limits.prune(
        tmp_path, keep="x", manifest_name=cache.MANIFEST, legacy=cache.LEGACY_MANIFESTS
    )
    assert freed == 104
    assert sorted(p.name for p in tmp_path.iterdir()) == [".k-abc", "current"]


def test_storing_a_job_removes_pickled_entries(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEDIAG_CACHE_MAX_GB", "0")
    legacy_entry(tmp_path, "0123abcd")
    assert cache.store_parts("part", [], tmp_path)  # a unit's entry: no pruning
    assert (tmp_path / "0123abcd").exists()
    assert cache._store("job", [], tmp_path, prune=True)  # as store_trace does
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job", "part"]
