"""Probes on the readers for cache tests: which paths were parsed, not read from the cache."""

from __future__ import annotations

from pathlib import Path

from tracediag.loading.loader import discover


def record_parsing(monkeypatch, job) -> list[Path]:
    """The readers of ``job``, recording the paths they are asked to parse."""
    calls: list[Path] = []
    for reader in {reader for _, reader in discover([job])[0]}:
        real = reader.read

        def counting(path, real=real):
            calls.append(Path(path))
            return real(path)

        monkeypatch.setattr(reader, "read", counting)
    return calls
