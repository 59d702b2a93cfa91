"""The columnar cache of reader output: exact round trip, keys, damage, location, --no-cache."""

from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path

import numpy as np
import orjson
import pandas as pd
import pytest

from tests.reading_probes import record_parsing
from tracediag.cli.main import main
from tracediag.engine.diagnose import diagnose
from tracediag.loading import cache, cache_frames
from tracediag.loading.loader import discover, load
from tracediag.model.assembly import RankPart
from tracediag.model.errors import TraceInputError
from tracediag.model.schema import RankMeta

SAMPLES = Path(__file__).parent.parent / "sample_traces"
CHROME = SAMPLES / "chrome_host_gaps" / "chrome"
NEURON_JSON = SAMPLES / "neuron_json_fragmented_dma" / "json"
PARQUET = SAMPLES / "neuron_parquet_straggler" / "parquet"


def assert_same_frame(a: pd.DataFrame, b: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(a, b, check_exact=True, check_index_type=True)
    assert list(a.dtypes) == list(b.dtypes)
    for j in range(a.shape[1]):  # by position: labels may repeat
        x, y = a.iloc[:, j], b.iloc[:, j]
        if isinstance(x.dtype, pd.CategoricalDtype):
            assert x.cat.categories.dtype == y.cat.categories.dtype, x.name
            assert x.cat.categories.equals(y.cat.categories), x.name


def assert_same_parts(a: list[RankPart], b: list[RankPart]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.meta == y.meta
        for name in ("events", "edges", "collectives"):
            assert_same_frame(getattr(x, name), getattr(y, name))


def assert_same_trace(a, b) -> None:
    for name in ("events", "tracks", "edges", "collectives"):
        assert_same_frame(getattr(a, name), getattr(b, name))
    assert a.meta == b.meta and a.inputs == b.inputs and a.skipped == b.skipped


def entries(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if not p.name.startswith("."))


@pytest.fixture
def root() -> Path:
    return cache.cache_root()


# ---- round trip ---------------------------------------------------------------------------


@pytest.mark.parametrize("job", [CHROME, NEURON_JSON, PARQUET], ids=lambda p: p.parent.name)
def test_reader_output_round_trips_exactly(job, root):
    for path, reader in discover([job])[0]:
        parts = reader.read(path)
        assert cache.store_parts("k", parts, root)
        assert_same_parts(parts, cache.load_parts("k", root))
        shutil.rmtree(root / "k")


def odd_frame() -> pd.DataFrame:
    """A frame of every column kind the cache stores, repeated labels and a non-default index."""
    events = pd.DataFrame(
        {
            "cat": pd.Categorical(["b", None, "a"], categories=["b", "a"], ordered=True),
            "num": np.array([1, 2, 3], dtype="int8"),
            "flag": [True, False, True],
            "half": np.array([0.5, np.nan, -np.inf], dtype="float16"),
            "strs": np.array(["x", "", "z"], dtype=object),
            "mixed": np.array(["x", None, 3], dtype=object),
            "text": pd.array(["p", None, "q"], dtype="str"),
            "pytext": pd.array(["p", None, "q"], dtype=pd.StringDtype("python")),
            "maybe": pd.array([1, None, 3], dtype="Int64"),
            "intcat": pd.Categorical([7, 7, None], categories=[7, 9]),
        },
        index=[10, 11, 12],
    )
    events.columns = [*events.columns[:-1], "cat"]  # a repeated label
    return events


def round_trip_frame(df: pd.DataFrame, tmp_path: Path) -> pd.DataFrame:
    path = tmp_path / "f.arrow"
    spec = cache_frames.write_frame(df, str(path))
    fd = os.open(path, os.O_RDONLY)
    try:
        return cache_frames.read_frame(fd, orjson.loads(orjson.dumps(spec)))
    finally:
        os.close(fd)
        path.unlink()


def test_unusual_columns_round_trip(tmp_path):
    odd = odd_frame()
    back = round_trip_frame(odd, tmp_path)
    assert_same_frame(odd, back)
    assert back.iloc[:, 5].tolist() == ["x", None, 3]
    assert back.index.tolist() == [10, 11, 12]
    for df in (
        pd.DataFrame(index=pd.RangeIndex(4)),  # rows, no columns
        odd.iloc[:0],  # columns (categories kept), no rows
        pd.DataFrame({0: [1.5], ("a", 1): ["s"]}, index=pd.RangeIndex(5, 6, name="row")),
    ):
        assert_same_frame(df, round_trip_frame(df, tmp_path))


def test_unusual_metadata_round_trips(root):
    info = {"ids": (1, 2), 7: np.int64(5), "nan": float("nan"), "deep": [{"x": (None, True)}]}
    meta = RankMeta(
        rank=3, sources=["x"], info=info, repairs={"r": 2}, summary={"f": np.float32(2)}
    )
    events = pd.DataFrame({"ts_ns": np.array([5, 9]), "dur_ns": np.array([1, 0]), "u": [1.0, 2.0]})
    parts = [RankPart(meta=meta, events=events)]
    assert cache.store_parts("odd", parts, root)
    back = cache.load_parts("odd", root)
    assert_same_frame(events, back[0].events)
    got = back[0].meta
    assert (got.rank, got.sources, got.repairs) == (3, ["x"], {"r": 2})
    assert got.info["ids"] == (1, 2) and type(got.info[7]) is np.int64 and got.info[7] == 5
    assert np.isnan(got.info["nan"]) and got.info["deep"] == [{"x": (None, True)}]
    assert type(got.summary["f"]) is np.float32


def test_what_cannot_be_stored_exactly_is_not_stored(root):
    events = pd.DataFrame({"ts_ns": [1], "dur_ns": [1], "when": pd.to_datetime(["2024-01-01"])})
    meta = RankMeta(rank=0, info={"t": pd.Timestamp(0)})
    assert not cache.store_parts("dt", [RankPart(meta=RankMeta(rank=0), events=events)], root)
    assert not cache.store_parts("ts", [RankPart(meta=meta, events=events.iloc[:, :2])], root)
    assert not root.exists() or not list(root.iterdir())  # nothing half written


def test_loaded_arrays_are_writable(root):
    path, reader = discover([CHROME])[0][0]
    cache.store_parts("w", reader.read(path), root)
    events = cache.load_parts("w", root)[0].events
    events.loc[0, "ts_ns"] = 5  # not a read-only view of the memory map
    assert events["ts_ns"].iat[0] == 5


# ---- through load() -----------------------------------------------------------------------


@pytest.mark.parametrize("job", [CHROME, PARQUET], ids=lambda p: p.parent.name)
def test_cached_load_gives_the_same_trace_and_diagnosis(job, root, monkeypatch):
    fresh = load([job], cache=False)
    assert not root.exists() or not entries(root)
    first = load([job])
    # One entry per rank file (per rank directory for Parquet) and one of the assembled job.
    assert len(entries(root)) == 3
    calls = record_parsing(monkeypatch, job)
    cached = load([job])
    assert calls == []
    assert_same_trace(fresh, first)
    assert_same_trace(fresh, cached)
    as_json = [
        orjson.dumps(diagnose(t).to_dict(), option=orjson.OPT_SERIALIZE_NUMPY)
        for t in (fresh, cached)
    ]
    assert as_json[0] == as_json[1]


def test_a_changed_file_rereads_only_itself(tmp_path, root, monkeypatch):
    job = tmp_path / "chrome"
    shutil.copytree(CHROME, job)
    reference = load([job], cache=False)
    load([job])
    # The same JSON compressed again: other bytes, the same events.
    rank_1 = job / "rank_1.json.gz"
    rank_1.write_bytes(gzip.compress(gzip.decompress(rank_1.read_bytes()), compresslevel=1))
    calls = record_parsing(monkeypatch, job)
    assert_same_trace(reference, load([job]))
    assert calls == [rank_1]
    assert len(entries(root)) == 5  # 2 + 1 entries before, the new rank_1 and the new job


def test_damaged_entries_are_ignored_and_rewritten(root):
    reference = load([CHROME], cache=False)
    load([CHROME])
    stored = entries(root)
    (stored[0] / "0-events.arrow").write_bytes(b"ARROW1 truncated")
    (stored[1] / "manifest.json").write_bytes(b'{"format": 2, "class": "RankPart", "items": [')
    for name in ("0-events.arrow", "0-tracks.arrow"):
        if (stored[2] / name).exists():
            (stored[2] / name).write_bytes(b"")
    assert_same_trace(reference, load([CHROME]))
    assert_same_trace(reference, load([CHROME]))
    assert entries(root) == stored  # rewritten under the same keys
    assert all((entry / "manifest.json").stat().st_size > 100 for entry in stored)


def test_an_unwritable_cache_only_costs_the_cache(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("TRACEDIAG_CACHE_DIR", str(blocker / "cache"))
    assert_same_trace(load([CHROME], cache=False), load([CHROME]))


# ---- keys -----------------------------------------------------------------------------------


def test_the_key_follows_the_bytes_not_the_timestamp(tmp_path):
    f = tmp_path / "rank_0.json"
    f.write_bytes(b'{"traceEvents": [1]}')
    before = cache.content_hash(f)
    stat = f.stat()
    f.write_bytes(b'{"traceEvents": [2]}')  # same size, same mtime
    os.utime(f, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert cache.content_hash(f) != before
    key = cache.cache_key(f, "chrome-json", before)
    assert key != cache.cache_key(f, "neuron-json", before)
    assert key != cache.cache_key(tmp_path / "rank_1.json", "chrome-json", before)
    assert len(key) == 40


def test_a_directory_hash_covers_every_file_and_name(tmp_path):
    d = tmp_path / "rank_0"
    (d / "sub").mkdir(parents=True)
    (d / "Instruction.parquet").write_bytes(b"abc")
    (d / "sub" / "Flow.parquet").write_bytes(b"def")
    base = cache.content_hash(d)
    (d / "sub" / "Flow.parquet").write_bytes(b"deg")
    assert cache.content_hash(d) != base
    (d / "sub" / "Flow.parquet").write_bytes(b"def")
    assert cache.content_hash(d) == base
    (d / "sub" / "Flow.parquet").rename(d / "sub" / "CcOp.parquet")
    assert cache.content_hash(d) != base


def test_the_cache_directory_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("TRACEDIAG_CACHE_DIR", str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_root() == tmp_path / "explicit"
    monkeypatch.delenv("TRACEDIAG_CACHE_DIR")
    assert cache.cache_root() == tmp_path / "xdg" / "tracediag"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache.cache_root() == tmp_path / "home" / ".cache" / "tracediag"


# ---- command line ---------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["report", "check", "export", "baseline"])
def test_no_cache_flag_reaches_the_loader(command, monkeypatch, tmp_path, capsys):
    seen = {}

    def fake_load(paths, **kw):
        seen.update(kw)
        raise TraceInputError(paths[0], "stop here")

    monkeypatch.setattr("tracediag.loading.loader.load", fake_load)
    argv = [command, str(CHROME), "--no-cache", "--jobs", "3", "-o", str(tmp_path / "o.json")]
    assert main(argv) == 2
    assert (seen["cache"], seen["jobs"], seen["scheduler"]) == (False, 3, None)
    capsys.readouterr()


def test_report_fills_the_cache_unless_told_not_to(root, capsys):
    assert main(["report", str(CHROME), "--no-cache", "-q"]) == 0
    assert not root.exists() or not entries(root)
    assert main(["report", str(CHROME), "-q"]) == 0
    assert len(entries(root)) == 3
    capsys.readouterr()
