"""The trace cache holds data only: nothing in it runs, a malformed or foreign entry is a miss.

A cache directory may be shared or restored from another job's artifacts, so these tests plant
what an attacker or a damaged disk would leave there: a pickle that creates a file when
unpickled, manifests of the wrong types, tables that refer outside themselves, files other
users may write, entries of another user, symlinks. Each must leave no trace of having run and
give the same result as reading without the cache.
"""

from __future__ import annotations

import ast
import os
import pickle
import stat
from pathlib import Path

import numpy as np
import orjson
import pandas as pd
import pytest

import tracediag.loading
import tracediag.parsers
from tests.reading_probes import record_parsing
from tracediag.cli.main import main
from tracediag.engine.diagnose import diagnose
from tracediag.generator import generate
from tracediag.loading import cache, cache_frames
from tracediag.loading.loader import discover, load

SAMPLES = Path(__file__).parent.parent / "sample_traces"
CHROME = SAMPLES / "chrome_host_gaps" / "chrome"
PARQUET = SAMPLES / "neuron_parquet_straggler" / "parquet"


class _CreatesFile:
    """Unpickling this opens (so creates) ``path``: what a planted manifest would do."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (str(self.path), "w"))


def planted_pickle(marker: Path) -> bytes:
    return pickle.dumps({"format": 1, "class": "Trace", "items": [_CreatesFile(marker)]})


def entries(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if not p.name.startswith("."))


def report_json(trace) -> bytes:
    return orjson.dumps(diagnose(trace).to_dict(), option=orjson.OPT_SERIALIZE_NUMPY)


@pytest.fixture
def root() -> Path:
    return cache.cache_root()


# ---- nothing in the cache runs ----------------------------------------------------------------


def test_the_planted_pickle_would_run_if_unpickled(tmp_path):
    """The payload the next test plants is live: unpickling it does create its file."""
    marker = tmp_path / "ran"
    pickle.loads(planted_pickle(marker))
    assert marker.exists()


@pytest.mark.parametrize("name", ["manifest.pkl", "manifest.json"])
def test_a_planted_pickle_manifest_runs_nothing_and_is_a_miss(name, root, tmp_path, monkeypatch):
    reference = report_json(load([CHROME], cache=False))
    load([CHROME])
    stored = entries(root)
    marker = tmp_path / "ran"
    for entry in stored:  # every entry: the job's and each file's
        (entry / "manifest.json").unlink()
        (entry / name).write_bytes(planted_pickle(marker))
    calls = record_parsing(monkeypatch, CHROME)
    assert report_json(load([CHROME])) == reference
    assert not marker.exists()
    assert len(calls) == 2  # both rank files parsed again: every entry was a miss
    assert entries(root) == stored  # rewritten under the same keys, as data
    for entry in stored:
        assert sorted(p.name for p in entry.iterdir() if p.name.startswith("manifest")) == [
            "manifest.json"
        ]
    assert not marker.exists()


# ---- malformed entries are misses ---------------------------------------------------------------


def stored_part_entry(root: Path) -> tuple[list, dict]:
    """A real unit entry under key "k": the reader's parts and the entry's manifest."""
    path, reader = discover([CHROME])[0][0]
    parts = reader.read(path)
    assert cache.store_parts("k", parts, root)
    return parts, orjson.loads((root / "k" / cache.MANIFEST).read_bytes())


def events_spec(m: dict) -> dict:
    return m["items"][0]["frames"]["events"]


def first_of_kind(m: dict, kind: str) -> dict:
    return next(c for c in events_spec(m)["columns"] if c["kind"] == kind)


MUTATIONS = {
    "rank as text": lambda m: m["items"][0]["objects"]["meta"].update(rank="0"),
    "rank as bool": lambda m: m["items"][0]["objects"]["meta"].update(rank=True),
    "sources not str": lambda m: m["items"][0]["objects"]["meta"].update(sources=[1]),
    "repairs not counts": lambda m: m["items"][0]["objects"]["meta"].update(repairs=["x"]),
    "unknown tag": lambda m: m["items"][0]["objects"]["meta"].update(
        info={"$eval": "__import__('os').system('touch ran')"}
    ),
    "extra meta field": lambda m: m["items"][0]["objects"]["meta"].update(extra=1),
    "missing frame": lambda m: m["items"][0]["frames"].pop("edges"),
    "old format": lambda m: m.update(format=1),
    "other class": lambda m: m.update(**{"class": "Trace"}),
    "rows as text": lambda m: events_spec(m).update(rows=str(events_spec(m)["rows"])),
    "rows off by one": lambda m: events_spec(m).update(rows=events_spec(m)["rows"] + 1),
    "unknown dtype": lambda m: first_of_kind(m, "num").update(dtype="object"),
    "other numeric dtype": lambda m: first_of_kind(m, "num").update(
        dtype="float32" if first_of_kind(m, "num")["dtype"] != "float32" else "int8"
    ),
    "unknown column kind": lambda m: events_spec(m)["columns"][0].update(kind="pickled"),
    "a column too few": lambda m: events_spec(m)["columns"].pop(),
    "repeated categories": lambda m: first_of_kind(m, "cat")["categories"].update(
        values=["x", "x"]
    ),
    "too few categories": lambda m: first_of_kind(m, "cat")["categories"].update(values=[]),
    "labels not str": lambda m: events_spec(m)["labels"].update(
        values=list(range(len(events_spec(m)["labels"]["values"])))
    ),
    "empty manifest": lambda m: m.clear(),
}


@pytest.mark.parametrize("mutate", MUTATIONS.values(), ids=MUTATIONS.keys())
def test_a_manifest_of_wrong_types_is_a_miss(mutate, root, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where the "unknown tag" payload would write, were it run
    _, manifest = stored_part_entry(root)
    mutate(manifest)
    (root / "k" / cache.MANIFEST).write_bytes(orjson.dumps(manifest))
    assert cache.load_parts("k", root) is None
    assert not (root / "k").exists()  # removed, to be rewritten
    assert not (tmp_path / "ran").exists()


def test_the_unmutated_entry_loads(root):
    """The entry the mutations start from is good: each miss above is the mutation's doing."""
    parts, _ = stored_part_entry(root)
    back = cache.load_parts("k", root)
    assert back is not None and back[0].meta == parts[0].meta
    pd.testing.assert_frame_equal(back[0].events, parts[0].events, check_exact=True)


def replace_frame(root: Path, key: str, name: str, frame: pd.DataFrame) -> None:
    """Rewrite one frame of an entry (file and spec) as a well-formed but different table."""
    entry = root / key
    (entry / f"0-{name}.arrow").unlink()
    manifest = orjson.loads((entry / cache.MANIFEST).read_bytes())
    manifest["items"][0]["frames"][name] = cache_frames.write_frame(
        frame, str(entry / f"0-{name}.arrow")
    )
    (entry / cache.MANIFEST).write_bytes(orjson.dumps(manifest))


def test_tables_that_refer_outside_themselves_are_a_miss(root, monkeypatch):
    """Well-formed Arrow and JSON whose tables break the trace's invariants: dangling edges,
    unknown tracks, ranks without meta, a canonical column of another dtype."""
    trace = load([PARQUET], cache=False, align=False)
    reference = report_json(load([PARQUET], cache=False))
    n = len(trace.events)
    bad = {
        "edges": trace.edges.assign(src=trace.edges["src"] + n),
        "tracks": trace.tracks.iloc[:1],
        "collectives": trace.collectives.assign(event=np.int64(-1)),
    }
    ranks = trace.events.assign(rank=trace.events["rank"] + np.int32(100))
    kinds = trace.events.assign(dur_ns=trace.events["dur_ns"].astype("float64"))
    for name, frame in [*bad.items(), ("events", ranks), ("events", kinds)]:
        assert cache.store_trace("t", trace, root)
        replace_frame(root, "t", name, frame)
        assert cache.load_trace("t", root) is None, name
        assert not (root / "t").exists()
    # And through load(): the job's entry damaged so, the report is the uncached one.
    load([PARQUET])
    job = max(entries(root), key=lambda e: (e / "0-tracks.arrow").exists())
    replace_frame(root, job.name, "edges", bad["edges"])
    assert report_json(load([PARQUET])) == reference


def test_arrow_files_of_another_entry_are_a_miss(root):
    """A unit's events file swapped with the job's (other columns, other rows): the file no
    longer matches the manifest's spec, in either entry."""
    load([CHROME])
    job = next(e for e in entries(root) if (e / "0-tracks.arrow").exists())
    unit = next(e for e in entries(root) if e != job)
    a, b = unit / "0-events.arrow", job / "0-events.arrow"
    data = a.read_bytes()
    a.write_bytes(b.read_bytes())
    b.write_bytes(data)
    assert cache.load_parts(unit.name, root) is None
    assert cache.load_trace(job.name, root) is None
    assert entries(root) == [e for e in entries(root) if e not in (job, unit)]


def test_a_symlink_in_an_entry_is_a_miss(root, tmp_path):
    stored_part_entry(root)
    manifest = root / "k" / cache.MANIFEST
    elsewhere = tmp_path / "manifest.json"
    elsewhere.write_bytes(manifest.read_bytes())
    manifest.unlink()
    manifest.symlink_to(elsewhere)
    assert cache.load_parts("k", root) is None
    assert elsewhere.exists()  # the link is not followed, even to remove


# ---- entries others may have written ----------------------------------------------------------


def test_an_entry_others_may_write_is_ignored_with_one_note(root, monkeypatch):
    reference = report_json(load([CHROME], cache=False))
    load([CHROME])
    job = next(e for e in entries(root) if (e / "0-tracks.arrow").exists())
    (job / "0-events.arrow").chmod(0o666)
    notes: list[str] = []
    calls = record_parsing(monkeypatch, CHROME)
    assert report_json(load([CHROME], progress=notes.append)) == reference
    ignored = [n for n in notes if n.startswith("cache: ")]
    assert len(ignored) == 1
    assert str(job) in ignored[0] and "other users may write 0-events.arrow" in ignored[0]
    assert calls == []  # the units' entries were fine: only the job was reassembled
    # Ours, so removed and written again: private this time.
    assert stat.S_IMODE((job / "0-events.arrow").stat().st_mode) == 0o600
    notes.clear()
    load([CHROME], progress=notes.append)
    assert not [n for n in notes if n.startswith("cache: ")]


def test_the_note_reaches_the_command_line_progress_lines(root, capsys):
    assert main(["report", str(CHROME), "-q"]) == 0
    for entry in entries(root):
        entry.chmod(0o777)
    capsys.readouterr()
    assert main(["report", str(CHROME), "--format", "json"]) == 0
    err = capsys.readouterr().err.splitlines()
    ignored = [line for line in err if line.startswith("tracediag: cache: ignoring ")]
    # One note per entry ignored: the job's, then each rank file's.
    assert sorted(line.split()[3].rstrip(":") for line in ignored) == [
        str(e) for e in entries(root)
    ]
    assert all("other users may write the entry directory (drwxrwxrwx)" in n for n in ignored)
    for entry in entries(root):
        entry.chmod(0o777)
    assert main(["report", str(CHROME), "-q"]) == 0
    assert capsys.readouterr().err == ""  # -q: no progress lines, so no notes


def test_entries_of_another_user_are_ignored_and_left_alone(root, monkeypatch):
    reference = report_json(load([CHROME], cache=False))
    load([CHROME])
    before = {e: sorted((p.name, p.stat().st_mtime_ns) for p in e.iterdir()) for e in entries(root)}
    me = os.geteuid()
    monkeypatch.setattr(os, "geteuid", lambda: me + 1)  # as if another user had written them
    notes: list[str] = []
    calls = record_parsing(monkeypatch, CHROME)
    assert report_json(load([CHROME], progress=notes.append)) == reference
    assert len(calls) == 2  # nothing of theirs was used
    ignored = [n for n in notes if n.startswith("cache: ")]
    assert len(ignored) == 3  # the job's entry and each rank file's, one note each
    assert all(f"belongs to user {me}, not to you ({me + 1})" in n for n in ignored)
    after = {e: sorted((p.name, p.stat().st_mtime_ns) for p in e.iterdir()) for e in entries(root)}
    assert after == before  # neither removed nor replaced


def test_the_cache_is_created_private_whatever_the_umask(tmp_path, monkeypatch):
    root = tmp_path / "new" / "cache"
    monkeypatch.setenv("TRACEDIAG_CACHE_DIR", str(root))
    old = os.umask(0)
    try:
        load([CHROME])
    finally:
        os.umask(old)
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    for entry in entries(root):
        assert stat.S_IMODE(entry.stat().st_mode) == 0o700
        assert {stat.S_IMODE(p.stat().st_mode) for p in entry.iterdir()} == {0o600}
    assert len(entries(root)) == 3 and load([CHROME]) is not None


# ---- hits give the same reports -------------------------------------------------------------


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("generated")
    generate("mixed", out / "mixed", ranks=2, seed=3, formats=("parquet", "json", "perfetto"))
    generate("host_gaps", out / "host_gaps", ranks=2, seed=3, formats=("chrome", "system"))
    return out


JOBS = sorted(p for p in SAMPLES.glob("*/*") if p.is_dir())
GENERATED = ["mixed/parquet", "mixed/json", "mixed/perfetto", "host_gaps/chrome"]


def cli_reports(job: Path, tmp_path: Path, capsys) -> list[bytes]:
    """The JSON and text reports of ``job``: without the cache, filling it, hitting it."""
    out = []
    for i, flags in enumerate((["--no-cache"], [], [])):
        for fmt in ("json", "text"):
            target = tmp_path / f"{i}.{fmt}"
            assert main(["report", str(job), "-q", "--format", fmt, "-o", str(target), *flags]) == 0
            out.append(target.read_bytes())
    capsys.readouterr()
    return out


@pytest.mark.parametrize("job", JOBS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_cache_hits_give_byte_identical_reports_on_the_samples(job, tmp_path, capsys, monkeypatch):
    calls = record_parsing(monkeypatch, job)
    json0, text0, json1, text1, json2, text2 = cli_reports(job, tmp_path, capsys)
    assert json0 == json1 == json2 and text0 == text1 == text2
    assert len(calls) > 0  # the --no-cache run parses ...
    first = len(calls)
    assert main(["report", str(job), "-q", "-o", str(tmp_path / "again.txt")]) == 0
    assert len(calls) == first  # ... a reopen does not


@pytest.mark.parametrize("name", GENERATED)
def test_cache_hits_give_byte_identical_reports_on_generated_jobs(
    name, generated, tmp_path, capsys
):
    json0, text0, json1, text1, json2, text2 = cli_reports(generated / name, tmp_path, capsys)
    assert json0 == json1 == json2 and text0 == text1 == text2
    assert len(json0) > 1000 and b"findings" in json0


# ---- no code-running calls on the read paths ------------------------------------------------

#: Modules whose use on a read path could run code a file names.
BANNED_MODULES = {
    "pickle",
    "_pickle",
    "cPickle",
    "cloudpickle",
    "dill",
    "joblib",
    "marshal",
    "shelve",
    "copyreg",
    "pickletools",
    "importlib",
    "runpy",
    "imp",
}
BANNED_CALLS = {"eval", "exec", "compile", "__import__"}
BANNED_ATTRIBUTES = {"import_module", "read_pickle", "to_pickle", "unsafe_load", "full_load"}


def code_running_calls(source: str) -> list[str]:
    """Each import of a banned module, call of eval/exec/compile/__import__, banned attribute
    call, and ``allow_pickle=True`` in ``source``, as "line: what"."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        found += [f"{node.lineno}: import {n}" for n in names if n.split(".")[0] in BANNED_MODULES]
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in BANNED_CALLS:
                found.append(f"{node.lineno}: {func.id}()")
            if isinstance(func, ast.Attribute) and func.attr in BANNED_ATTRIBUTES:
                found.append(f"{node.lineno}: .{func.attr}()")
            for kw in node.keywords:
                if kw.arg == "allow_pickle" and not (
                    isinstance(kw.value, ast.Constant) and kw.value.value is False
                ):
                    found.append(f"{node.lineno}: allow_pickle")
    return found


def test_the_scan_finds_each_kind_of_call():
    snippet = "\n".join(
        [
            "import pickle",
            "from importlib import import_module",
            "import marshal as m",
            "x = eval(s)",
            "exec(code)",
            "mod = __import__(name)",
            "importlib.import_module(name)",
            "df = pd.read_pickle(path)",
            "a = np.load(path, allow_pickle=True)",
            "yaml.unsafe_load(text)",
            "re.compile('x')  # a method, not the builtin: fine",
            "# pickle.loads(data) in a comment: fine",
        ]
    )
    assert [f.split(": ")[0] for f in code_running_calls(snippet)] == [str(i) for i in range(1, 11)]


def test_nothing_that_reads_traces_or_the_cache_can_run_code_it_reads():
    """Readers (parsers/), loading (the cache among it) and the file layer: no pickle, marshal,
    eval, exec or import by name, so no trace or cache file can name code to run."""
    packages = [
        Path(tracediag.parsers.__file__).parent,
        Path(tracediag.loading.__file__).parent,
        Path(tracediag.loading.__file__).parent.parent / "io",
    ]
    files = sorted(f for package in packages for f in package.rglob("*.py"))
    assert len(files) > 30
    offences = {
        str(f): hits for f in files if (hits := code_running_calls(f.read_text(encoding="utf-8")))
    }
    assert offences == {}
