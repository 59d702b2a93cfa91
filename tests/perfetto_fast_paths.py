"""The Perfetto decoder read twice: with its columnar fast path, and with every packet forced
through the protobuf loop (the reference the fast path must equal)."""

from __future__ import annotations

import pandas as pd

from tracediag.parsers import perfetto_decode, perfetto_fast


def decode_fast_and_reference(monkeypatch, path, wanted):
    """(fast, reference, shares): the decoding as it runs, the decoding with every packet on
    the slow path, and per ``shapes`` call of the fast run (packets, packets sent slow)."""
    shapes = perfetto_fast.shapes
    shares: list[tuple[int, int]] = []

    def spy(*args):
        got = shapes(*args)
        shares.append((len(got.slow), int(got.slow.sum())))
        return got

    def all_slow(*args):
        got = shapes(*args)
        got.slow[:] = True
        return got

    monkeypatch.setattr(perfetto_fast, "shapes", spy)
    fast = perfetto_decode.decode(path, wanted)
    monkeypatch.setattr(perfetto_fast, "shapes", all_slow)
    reference = perfetto_decode.decode(path, wanted)
    monkeypatch.setattr(perfetto_fast, "shapes", shapes)
    return fast, reference, shares


def assert_same_decoding(got, reference) -> None:
    """Every table, the counts and the packet total equal."""
    for table in ("events", "annotations", "flows", "tracks"):
        pd.testing.assert_frame_equal(getattr(got, table), getattr(reference, table))
    assert got.counts == reference.counts and got.packets == reference.packets
