"""History (``check --record DB``, SQLite with migrations) and ``tracediag trend``."""

from __future__ import annotations

import copy
import re
import sqlite3

import numpy as np
import orjson
import pytest

from tests import gate_runs
from tracediag.ci import history
from tracediag.ci.history import connect, load_history, record
from tracediag.ci.statistics import change_point
from tracediag.ci.trend import change_points, trend
from tracediag.model.errors import UsageError

# the shared fixtures (see tests/gate_runs.py)
cli = gate_runs.cli
reports = gate_runs.reports
truths = gate_runs.truths
run_dirs = gate_runs.run_dirs


def _with_step(report: dict, step_ns: float) -> dict:
    """The report with its step time set to ``step_ns``, the extra time counted as compute."""
    r = copy.deepcopy(report)
    cp = r["critical_path"]
    cp["by_category_ns"]["compute"] += int(step_ns) - cp["length_ns"]
    cp["length_ns"] = int(step_ns)
    return r


def test_change_point_finds_a_shift_and_not_noise():
    rng = np.random.default_rng(3)
    noise = rng.normal(0, 5e3, 20)
    shifted = 6.68e6 + noise + np.r_[np.zeros(12), np.full(8, 2e5)]  # +3% from point 12
    found = change_point(shifted)
    assert found["index"] == 12 and found["p_value"] < 0.01
    assert found["after_mean"] - found["before_mean"] == pytest.approx(2e5, rel=0.05)
    assert change_points(6.68e6 + noise, 0.01) == []
    two = 6.68e6 + noise + np.r_[np.zeros(7), np.full(7, 2e5), np.full(6, -1e5)]
    assert [c["index"] for c in change_points(two, 0.01)] == [7, 14]
    assert change_point(np.ones(5)) is None  # too short to split in two runs of 3


def test_record_and_trend_flag_an_injected_step_time_shift(reports, tmp_path, monkeypatch):
    db = tmp_path / "h.db"
    base = reports("clean0")
    rng = np.random.default_rng(0)
    steps = 6.68e6 + rng.normal(0, 4e3, 16) + np.r_[np.zeros(10), np.full(6, 6.7e5)]  # +10%
    monkeypatch.setenv("GITHUB_SHA", "abc123")
    ids = [record(db, _with_step(base, s), label=f"build {i}") for i, s in enumerate(steps)]
    assert ids == list(range(1, 17))
    runs, table = load_history(db)
    assert runs["label"].tolist()[:2] == ["build 0", "build 1"]
    assert set(runs["commit_sha"]) == {"abc123"}
    assert table["step-time-ns"].to_numpy() == pytest.approx(np.floor(steps), abs=1)
    result = trend(runs, table, ["step-time-ns", "dma-transfer-ns"])
    step, dma = result["metrics"]
    [cp] = step["change_points"]
    assert cp["run_id"] == 11 and cp["regression"] and cp["p_value"] < 0.01
    assert cp["change_pct"] == pytest.approx(10.0, abs=0.3)
    assert dma["change_points"] == []  # constant
    last = trend(*load_history(db, last=8), ["step-time-ns"])
    assert last["runs"] == 8 and last["metrics"][0]["run_ids"] == list(range(9, 17))


def test_check_record_then_trend_command(cli, run_dirs, reports, tmp_path):
    db = tmp_path / "hist.db"
    code, _, err = cli("check", run_dirs["clean0"], "--record", db, "--label", "ci-1")
    assert code == 0 and err.splitlines()[-1] == f"tracediag: recorded run 1 in {db}"
    con = sqlite3.connect(db)
    assert con.execute("SELECT label, gate_passed FROM runs").fetchall() == [("ci-1", 1)]
    codes = [r[0] for r in con.execute("SELECT code FROM findings ORDER BY rowid")]
    assert codes == [f["code"] for f in reports("clean0")["findings"]]
    con.close()
    rng = np.random.default_rng(1)
    for s in 6.68e6 + rng.normal(0, 3e3, 8):
        record(db, _with_step(reports("clean0"), s))
    for s in 7.72e6 + rng.normal(0, 3e3, 6):
        record(db, _with_step(reports("clean0"), s))
    code, out, _ = cli("trend", db, "--metric", "step-time-ns")
    assert code == 0
    assert out.splitlines()[0] == (
        "15 runs; change points at p < 0.01 "
        "(largest Welch t over splits, against simulated Gaussian noise)"
    )
    assert re.search(
        r"change at run 10: 6.68\d ms -> 7.72 ms \(\+15.\d%\), regression, p = 0.00\d\n", out
    )
    code, out, err = cli("trend", f"sqlite:///{db}", "--format", "json", "--fail-on-change")
    assert code == 1
    assert (
        err == "tracediag: regression in step-time-ns, compute-ns\n"
    )  # the injected time is compute
    data = orjson.loads(out)
    assert data["metrics"][0]["metric"] == "step-time-ns"
    assert data["metrics"][0]["change_points"][0]["run_id"] == 10
    code, out, _ = cli("trend", db, "--format", "markdown", "--metric", "step-time-ns")
    assert "| step-time-ns | " in out and "change at run 10" in out


def test_trend_flags_four_straggler_runs_after_four_clean_ones(cli, run_dirs, truths, tmp_path):
    # 4 reruns of a clean build, then 4 of a build with a straggler rank (+21% step time): a
    # permutation test cannot go below p = 2 / C(8, 4) = 0.029 with 8 runs, this test can
    db = tmp_path / "h.db"
    names = ["clean0", "clean1", "clean2", "clean3"] + ["straggler"] * 4
    for i, name in enumerate(names, start=1):
        code, _, _ = cli("check", run_dirs[name], "--record", db, "--label", f"ci-{i}", "-q")
        assert code in (0, 1)  # the straggler's findings may fail the gate; it is recorded
    code, out, _ = cli("trend", db, "--metric", "step-time-ns", "--format", "json")
    assert code == 0
    [cp] = orjson.loads(out)["metrics"][0]["change_points"]
    clean = np.mean([truths(n)["step_time_ns"] for n in names[:4]])
    slow = truths("straggler")["step_time_ns"]
    assert (cp["run_id"], cp["label"], cp["regression"]) == (5, "ci-5", True)
    assert cp["p_value"] == 0.001  # the smallest the test gives: no simulated noise comes close
    assert cp["before_mean"] == pytest.approx(clean, abs=1)
    assert cp["after_mean"] == pytest.approx(slow, abs=1)
    assert cp["change_pct"] == pytest.approx(100 * (slow - clean) / clean, abs=0.01)
    code, out, err = cli("trend", db, "--fail-on-change")
    assert code == 1 and err.startswith("tracediag: regression in step-time-ns")
    step_line = next(line for line in out.splitlines() if "change at" in line)
    assert re.search(
        r"change at ci-5 \(run 5\): 6.70\d ms -> 8.128 ms \(\+21.\d%\), regression", out
    )
    assert step_line.endswith("p = 0.001")
    # 5 runs cannot hold 3 on each side of a change: it says so instead of a flat trend
    code, out, _ = cli("trend", db, "--last", "5", "--metric", "step-time-ns")
    assert code == 0 and "change at" not in out
    assert out.splitlines()[1] == "too few runs for p < 0.01: a change point needs at least 6 runs"
    code, out, _ = cli("trend", db, "--last", "5", "--format", "json")
    data = orjson.loads(out)
    assert data["runs_needed"] == 6 and not any(m["reachable"] for m in data["metrics"])
    md = cli("trend", db, "--last", "5", "--format", "markdown")[1]
    assert "**too few runs for p < 0.01: a change point needs at least 6 runs.**" in md
    out = cli("trend", db, "--alpha", "0.0005")[1]
    assert "p < 0.0005 is unreachable: the test's smallest p-value is 0.001" in out


def test_migrations_create_upgrade_and_refuse(tmp_path, monkeypatch):
    db = tmp_path / "h.db"
    con = connect(db)
    assert con.execute("PRAGMA user_version").fetchone()[0] == len(history.MIGRATIONS) == 1
    con.execute("INSERT INTO runs (recorded_at, tool_version, inputs) VALUES ('t', '0.1.0', '[]')")
    con.commit()
    con.close()
    # a later release adds a step: opening the old database applies it and keeps the data
    monkeypatch.setattr(
        history, "MIGRATIONS", [*history.MIGRATIONS, "ALTER TABLE runs ADD COLUMN note TEXT;"]
    )
    con = connect(db)
    assert con.execute("PRAGMA user_version").fetchone()[0] == 2
    assert con.execute("SELECT recorded_at, note FROM runs").fetchall() == [("t", None)]
    con.close()
    # a failing step leaves the database at the last good version
    monkeypatch.setattr(history, "MIGRATIONS", [*history.MIGRATIONS, "CREATE TABLE runs (x);"])
    with pytest.raises(UsageError, match="not a tracediag history database"):
        connect(db)
    assert sqlite3.connect(db).execute("PRAGMA user_version").fetchone()[0] == 2
    monkeypatch.setattr(history, "MIGRATIONS", history.MIGRATIONS[:1])
    with pytest.raises(UsageError, match="version 2 is newer than this tracediag knows"):
        connect(db)


def test_history_errors(cli, tmp_path):
    assert cli("trend", "none.db")[2] == (
        "tracediag: error: none.db: no history database (write one with 'check --record none.db')\n"
    )
    (tmp_path / "x.db").write_text("not sqlite at all, just text " * 10)
    code, _, err = cli("trend", "x.db")
    assert code == 2 and err.startswith("tracediag: error: x.db: not a tracediag history database")
    code, _, err = cli("trend", "postgres://host/db")
    assert code == 2 and "only SQLite history is supported" in err
    assert "--metric: no metric step-time" in cli("trend", "x.db", "--metric", "step-time")[2]
    assert (
        cli("trend", "x.db", "--alpha", "2")[2]
        == "tracediag: error: --alpha must be between 0 and 1\n"
    )
