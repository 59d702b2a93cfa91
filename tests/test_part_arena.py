"""Rank parts whose numeric columns an arena gathered as they arrived (model/part_arena.py):
the job assembled from them is the job assembled from the parts as read, its numeric columns
are the arena's buffers (no copy), and what does not fit is concatenated as before."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tracediag.loading.loader import discover
from tracediag.loading.read_units import split_units
from tracediag.model import schema as S
from tracediag.model.assembly import RankPart, assemble
from tracediag.model.part_arena import PartArena, joined_view

SAMPLES = Path(__file__).parent.parent / "sample_traces"


@pytest.fixture(scope="module")
def parts():
    """The two ranks of the straggler sample, as the Parquet reader gives them."""
    found, _ = discover([SAMPLES / "neuron_parquet_straggler" / "parquet"])
    units = split_units(found)
    assert len(units) == 2
    return [p for u in units for p in u.reader.read(u.path)]


def _adopted(parts: list[RankPart], arena: PartArena) -> list[RankPart]:
    out = copy.deepcopy(parts)
    for part in out:
        arena.adopt(part)
    return out


def test_a_job_from_adopted_parts_is_the_job_and_copies_no_numeric_column(parts):
    plain = assemble(copy.deepcopy(parts))
    adopted = _adopted(parts, PartArena(len(parts)))
    for before, after in zip(parts, adopted, strict=True):
        pd.testing.assert_frame_equal(before.events, after.events)
    job = assemble(adopted)
    pd.testing.assert_frame_equal(job.events, plain.events)
    pd.testing.assert_frame_equal(job.edges, plain.edges)
    pd.testing.assert_frame_equal(job.collectives, plain.collectives)
    # The job's timestamps are the arena's buffer, in which both parts' lie one after another.
    ts = job.events[S.TS].to_numpy()
    assert all(np.shares_memory(ts, p.events[S.TS].to_numpy()) for p in adopted)


def test_a_part_bigger_than_the_first_foretold_keeps_its_arrays(parts):
    small, big = copy.deepcopy(parts[0]), copy.deepcopy(parts[1])
    # Room for 1.25 x the first part's rows per part: a part 4x the first's does not fit.
    small.events = small.events.iloc[: len(big.events) // 4].reset_index(drop=True)
    small.edges = small.edges[(small.edges[S.SRC] < len(small.events))]
    small.edges = small.edges[small.edges[S.DST] < len(small.events)]
    small.collectives = small.collectives[small.collectives[S.EVENT] < len(small.events)]
    arena = PartArena(2)
    arena.adopt(small)
    own = big.events[S.TS].to_numpy()
    arena.adopt(big)
    assert np.shares_memory(big.events[S.TS].to_numpy(), own)  # not moved
    views = [small.events[S.TS].to_numpy(), big.events[S.TS].to_numpy()]
    assert joined_view(views) is None
    plain = assemble(copy.deepcopy([small, big]))
    pd.testing.assert_frame_equal(assemble([small, big]).events, plain.events)


def test_only_an_arenas_buffers_are_joined():
    mine = np.arange(10, dtype=np.int64)
    assert joined_view([mine[:4], mine[4:]]) is None  # one after another, but a reader's array
    arena = PartArena(2)
    first = RankPart(S.RankMeta(rank=0), pd.DataFrame({S.TS: np.arange(3), S.DUR: [1.0] * 3}))
    second = RankPart(S.RankMeta(rank=1), pd.DataFrame({S.TS: np.arange(3, 5), S.DUR: [2.0] * 2}))
    arena.adopt(first)
    arena.adopt(second)
    joined = joined_view([first.events[S.TS].to_numpy(), second.events[S.TS].to_numpy()])
    assert joined.tolist() == [0, 1, 2, 3, 4]
    assert joined_view([second.events[S.TS].to_numpy(), first.events[S.TS].to_numpy()]) is None
    assert first.events[S.DUR].tolist() == [1.0] * 3  # floats too, values kept
