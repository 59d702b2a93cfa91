"""Keeping the cache of parsed traces within a size: least recently used entries go first.

A cache entry of a multi-GB trace takes hundreds of megabytes; without a bound the cache would
grow with every trace ever opened. Once per read that parsed anything (when its job's entry is
written) the cache directory is measured and, while it holds more than
``$TRACEDIAG_CACHE_MAX_GB`` (default :data:`DEFAULT_MAX_GB`), the entries used longest ago are
removed (the one just written never). An entry counts as used
when it is written or read back (:func:`mark_used` sets its manifest's modification time).
Temporary directories that crashed writers left behind are removed once an hour old, and
entries of an earlier format (a legacy manifest, such as the pickled ``manifest.pkl``, instead of
the current one) at once: they are never read again.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from pathlib import Path

DEFAULT_MAX_GB = 20.0
_ORPHAN_AGE_S = 3600


def max_bytes() -> int:
    """The cache's size limit in bytes (``$TRACEDIAG_CACHE_MAX_GB``; unset or unreadable: the
    default; 0 or less: no limit)."""
    text = os.environ.get("TRACEDIAG_CACHE_MAX_GB", "")
    try:
        gb = float(text) if text.strip() else DEFAULT_MAX_GB
    except ValueError:
        gb = DEFAULT_MAX_GB
    return int(gb * (1 << 30)) if gb > 0 else 0


def mark_used(manifest: Path) -> None:
    """Record that the entry of ``manifest`` was just used (for least-recently-used pruning)."""
    with contextlib.suppress(OSError):
        os.utime(manifest)


def prune(root: Path, keep: str, manifest_name: str, legacy: tuple[str, ...] = ()) -> int:
    """Remove the least recently used entries of the cache at ``root`` (never ``keep``) until it
    is within :func:`max_bytes`, old orphaned temporary directories, and entries that hold one
    of the ``legacy`` manifests but not ``manifest_name``; the bytes freed."""
    limit = max_bytes()
    entries, freed, now = [], 0, time.time()
    try:
        children = list(os.scandir(root))
    except OSError:
        return 0
    for child in children:
        if not child.is_dir(follow_symlinks=False):
            continue
        size = _size(child.path)
        if child.name.startswith("."):  # a writer's temporary directory
            if now - _mtime(Path(child.path)) > _ORPHAN_AGE_S:
                shutil.rmtree(child.path, ignore_errors=True)
                freed += size
            continue
        if legacy and _is_legacy(Path(child.path), manifest_name, legacy):
            shutil.rmtree(child.path, ignore_errors=True)
            freed += size
            continue
        entries.append((_mtime(Path(child.path) / manifest_name), child.name, size))
    total = sum(size for _, _, size in entries)
    if not limit or total <= limit:
        return freed
    for _, name, size in sorted(entries):  # oldest use first
        if total <= limit:
            break
        if name == keep:
            continue
        shutil.rmtree(root / name, ignore_errors=True)
        total -= size
        freed += size
    return freed


def _size(path: str) -> int:
    total = 0
    for dirpath, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0  # no manifest: a damaged entry, the first to go


def _is_legacy(entry: Path, manifest_name: str, legacy: tuple[str, ...]) -> bool:
    try:
        names = set(os.listdir(entry))
    except OSError:
        return False
    return manifest_name not in names and any(name in names for name in legacy)
