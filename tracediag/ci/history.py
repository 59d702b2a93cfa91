"""Run history in an embedded SQLite database: ``check --record DB`` appends, ``trend`` reads.

The database is a path or a URL (``sqlite:///relative.db``, ``sqlite:////absolute.db``, or a
``file:`` URI). Its layout is versioned with ``PRAGMA user_version`` and brought up to date by
:data:`MIGRATIONS` on every open, each step in one transaction; a database written by a newer
tracediag is refused rather than guessed at.
"""

from __future__ import annotations

import os
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pandas as pd

from tracediag import __version__
from tracediag.ci.metrics import report_metrics
from tracediag.model.errors import UsageError
from tracediag.model.fingerprints import fingerprints

#: Migration N (1-based) takes a database from user_version N-1 to N. Append, never edit.
MIGRATIONS: list[str] = [
    """
    CREATE TABLE runs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        recorded_at TEXT NOT NULL,
        label TEXT NOT NULL DEFAULT '',
        commit_sha TEXT NOT NULL DEFAULT '',
        tool_version TEXT NOT NULL,
        inputs TEXT NOT NULL,
        gate_passed INTEGER
    );
    CREATE TABLE metrics (
        run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        name TEXT NOT NULL,
        value REAL NOT NULL,
        PRIMARY KEY (run_id, name)
    );
    CREATE INDEX metrics_by_name ON metrics(name, run_id);
    CREATE TABLE findings (
        run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        fingerprint TEXT NOT NULL,
        code TEXT NOT NULL,
        severity TEXT NOT NULL,
        saving_ns INTEGER NOT NULL
    );
    """,
]

#: Environment variables CI systems set to the commit being built (GitHub, GitLab, Jenkins).
COMMIT_VARIABLES = ("GITHUB_SHA", "CI_COMMIT_SHA", "GIT_COMMIT")


def _target(db: str) -> tuple[str, bool]:
    """(what sqlite3.connect takes, whether it is a URI) for a path or URL."""
    if db.startswith("sqlite:///"):
        return db[len("sqlite:///") :], False
    if db.startswith("file:"):
        return db, True
    if "://" in db:
        raise UsageError(f"{db}: only SQLite history is supported (a path or sqlite:/// URL)")
    return db, False


def connect(db: str | Path, *, create: bool = True) -> sqlite3.Connection:
    """Open the history database, creating it (``create``) and migrating it to the latest layout."""
    target, uri = _target(str(db))
    if not create and not uri and not Path(target).is_file():
        raise UsageError(f"{db}: no history database (write one with 'check --record {db}')")
    try:
        con = sqlite3.connect(target, uri=uri)
        con.execute("PRAGMA foreign_keys = ON")
        migrate(con)
    except sqlite3.DatabaseError as exc:
        raise UsageError(f"{db}: not a tracediag history database ({exc})") from None
    return con


def migrate(con: sqlite3.Connection) -> int:
    """Apply the migrations the database lacks; returns its version afterwards."""
    version = con.execute("PRAGMA user_version").fetchone()[0]
    if version > len(MIGRATIONS):
        raise UsageError(
            f"history database version {version} is newer than this tracediag knows "
            f"({len(MIGRATIONS)}); upgrade tracediag"
        )
    for number in range(version + 1, len(MIGRATIONS) + 1):
        with con:  # one transaction per step: a failed step leaves the previous version
            con.executescript(
                f"BEGIN; {MIGRATIONS[number - 1]} PRAGMA user_version = {number}; COMMIT;"
            )
    return len(MIGRATIONS)


def record(
    db: str | Path,
    report: dict,
    *,
    label: str = "",
    gate_passed: bool | None = None,
    now: datetime | None = None,
) -> int:
    """Append one run (its metrics and findings) to the history; returns the run's id."""
    commit = next((os.environ[v] for v in COMMIT_VARIABLES if os.environ.get(v)), "")
    con = connect(db)
    try:
        with con:
            cur = con.execute(
                "INSERT INTO runs (recorded_at, label, commit_sha, tool_version, inputs, gate_passed)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (
                    (now or datetime.now(UTC)).isoformat(timespec="seconds"),
                    label,
                    commit,
                    __version__,
                    orjson.dumps([i["path"] for i in report.get("inputs", [])]).decode(),
                    None if gate_passed is None else int(gate_passed),
                ),
            )
            run_id = int(cur.lastrowid)
            con.executemany(
                "INSERT INTO metrics (run_id, name, value) VALUES (?, ?, ?)",
                [(run_id, k, float(v)) for k, v in report_metrics(report).items()],
            )
            con.executemany(
                "INSERT INTO findings (run_id, fingerprint, code, severity, saving_ns)"
                " VALUES (?, ?, ?, ?, ?)",
                [
                    (run_id, fp, f["code"], f["severity"], int(f["saving_ns"]))
                    for fp, f in zip(
                        fingerprints(report["findings"]), report["findings"], strict=True
                    )
                ],
            )
    finally:
        con.close()
    return run_id


def load_history(db: str | Path, last: int | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(runs, metrics): the runs in order (id, recorded_at, label, commit_sha, gate_passed) and
    a table of metric values, one row per run (index ``id``), one column per metric."""
    con = connect(db, create=False)
    try:
        runs = pd.read_sql_query(
            "SELECT id, recorded_at, label, commit_sha, gate_passed FROM runs ORDER BY id", con
        )
        values = pd.read_sql_query("SELECT run_id, name, value FROM metrics", con)
    finally:
        con.close()
    if last:
        runs = runs.tail(last)
    table = values.pivot(index="run_id", columns="name", values="value")
    table = table.reindex(runs["id"].to_numpy())
    table.index.name = "id"
    return runs.reset_index(drop=True), table
