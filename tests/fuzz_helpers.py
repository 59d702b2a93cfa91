"""The contract every fuzzed input must meet, checked by running the real CLI in-process.

For any input, ``tracediag report`` either exits 0/1 with a report in which every repaired or
dropped row is counted (the ranks' ``repairs`` surface as TRC501 findings), or exits 2 with
exactly one stderr line ``tracediag: error: <file>: <problem>`` naming the input, raised as a
:class:`TraceInputError` (a spy on ``main``'s error printer sees the exception it handles). Never
a traceback (an exception escaping ``main``: the console script would print it as an "internal
error"), never a hang (each case runs under a wall-clock alarm).

``TRACEDIAG_FUZZ_EXAMPLES`` raises the number of examples of the property tests for long sweeps.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import random
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
from hypothesis import HealthCheck, settings

from tracediag.cli import main as cli_main
from tracediag.model.errors import TraceInputError

#: Seconds one case may take (reading, assembling, diagnosing, rendering; the first case also
#: imports the rules) before it counts as a hang. Generous: the suite shares busy CPUs.
CASE_SECONDS = 30


def fuzz_settings(examples: int):
    """Deterministic hypothesis settings; ``TRACEDIAG_FUZZ_EXAMPLES`` overrides ``examples``."""
    return settings(
        max_examples=int(os.environ.get("TRACEDIAG_FUZZ_EXAMPLES", examples)),
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


def sweep(examples: int) -> int:
    """Cases of a plain mutation loop: ``examples``, or ``TRACEDIAG_FUZZ_EXAMPLES`` when set."""
    return int(os.environ.get("TRACEDIAG_FUZZ_EXAMPLES", examples))


class CaseTimeout(Exception):
    """A case ran past :data:`CASE_SECONDS`: the CLI hangs on this input."""


@contextlib.contextmanager
def time_limit(seconds: float):
    """Raise :class:`CaseTimeout` in the main thread when the block runs longer than ``seconds``."""

    def expire(_signum, _frame):
        raise CaseTimeout(f"no result after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@dataclass
class Outcome:
    """What one CLI run gave: exit code, stdout, stderr and the JSON report (exit 0/1)."""

    code: int
    out: str
    err: str
    report: dict | None = None
    error_type: type | None = None  # the exception behind the error line (exit 2)

    def repairs(self) -> dict[str, int]:
        """Rows repaired or dropped, by reason, summed over ranks (as the report lists them)."""
        total: dict[str, int] = {}
        for rank in (self.report or {}).get("ranks", []):
            for reason, n in rank.get("repairs", {}).items():
                total[reason] = total.get(reason, 0) + n
        return total

    def repaired(self, *words: str) -> int:
        """Rows counted under reasons that contain every one of ``words``."""
        return sum(n for r, n in self.repairs().items() if all(w in r for w in words))


def run_report(paths: list[Path], workdir: Path, what: str = "") -> Outcome:
    """``tracediag report --format json PATH...`` in-process in ``workdir`` (no config file
    found), checked against the contract; ``what`` describes the input for failure messages."""
    out, err = io.StringIO(), io.StringIO()
    argv = ["report", "-q", "--format", "json", *(str(p) for p in paths)]
    cwd, cache = os.getcwd(), os.environ.get("TRACEDIAG_CACHE_DIR")
    failed_with: list[type] = []
    fail = cli_main._fail

    def spy(message: str) -> None:  # main calls it inside its except clause
        failed_with.append(type(sys.exc_info()[1]))
        fail(message)

    cli_main._fail = spy
    os.chdir(workdir)
    os.environ["TRACEDIAG_CACHE_DIR"] = str(workdir / ".tracediag-cache")  # not the user's
    try:
        with (
            time_limit(CASE_SECONDS),
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
        ):
            code = cli_main.main(argv)
    except CaseTimeout as exc:
        raise AssertionError(f"hang on {what or paths}: {exc}") from None
    except Exception as exc:
        raise AssertionError(f"traceback on {what or paths}: {type(exc).__name__}: {exc}") from exc
    finally:
        cli_main._fail = fail
        os.chdir(cwd)
        if cache is None:
            os.environ.pop("TRACEDIAG_CACHE_DIR", None)
        else:
            os.environ["TRACEDIAG_CACHE_DIR"] = cache
    outcome = Outcome(code, out.getvalue(), err.getvalue(), None, *failed_with[-1:])
    check_contract(outcome, paths, what)
    return outcome


def check_contract(outcome: Outcome, paths: list[Path], what: str = "") -> None:
    """Exit 0/1 with a JSON report whose repairs all show as TRC501 findings, or exit 2 with one
    error line that names an input and is not the internal-error line."""
    where = what or ", ".join(map(str, paths))
    if outcome.code in (0, 1):
        outcome.report = json.loads(outcome.out)
        _check_repairs_reported(outcome.report, where)
        return
    assert outcome.code == 2, f"exit {outcome.code} on {where}: {outcome.err!r}"
    lines = outcome.err.splitlines()
    assert len(lines) == 1, f"{len(lines)} stderr lines on {where}: {outcome.err!r}"
    line = lines[0]
    assert line.startswith("tracediag: error: "), f"unexpected error line on {where}: {line!r}"
    assert "internal error" not in line, f"internal error on {where}: {line!r}"
    assert outcome.error_type is TraceInputError, (
        f"{outcome.error_type} (not TraceInputError) behind the error on {where}: {line!r}"
    )
    named = line.removeprefix("tracediag: error: ")
    # The file named is an input or lies inside one (a table file of a profile directory).
    assert any(named.startswith(f"{p}") for p in paths), (
        f"error names no input on {where}: {line!r}"
    )
    assert ": " in named and named.split(": ", 1)[1].strip(), (
        f"no problem stated on {where}: {line!r}"
    )


def _check_repairs_reported(report: dict, where: str) -> None:
    """Every rank with repairs is in the job's TRC501 finding with exactly those counts."""
    trc = {
        int(r): repairs
        for f in report["findings"]
        if f["code"] == "TRC501"
        for r, repairs in f["evidence"]["by_rank"].items()
    }
    for rank in report["ranks"]:
        if rank["repairs"]:
            got = trc.get(rank["rank"])
            assert got == rank["repairs"], (
                f"rank {rank['rank']} repairs {rank['repairs']} not reported by TRC501 "
                f"({got}) on {where}"
            )


def fresh_dir(parent: Path) -> Path:
    """A new empty numbered directory under ``parent`` (one per hypothesis example)."""
    n = sum(1 for _ in parent.iterdir()) if parent.exists() else 0
    while (parent / f"case{n}").exists():
        n += 1
    (parent / f"case{n}").mkdir(parents=True)
    return parent / f"case{n}"


# ---- byte-level mutations ---------------------------------------------------------------------


def truncated(data: bytes, rng: random.Random) -> bytes:
    """``data`` cut at a random offset (at least one byte kept)."""
    return data[: rng.randrange(1, max(len(data), 2))]


def flipped(data: bytes, rng: random.Random, flips: int = 4) -> bytes:
    """``data`` with ``flips`` random bytes replaced by random values."""
    out = bytearray(data)
    for _ in range(flips):
        out[rng.randrange(len(out))] = rng.randrange(256)
    return bytes(out)


def spliced(data: bytes, rng: random.Random) -> bytes:
    """``data`` with a random slice repeated or deleted (framing and lengths go wrong)."""
    a = rng.randrange(len(data))
    b = min(len(data), a + rng.randrange(1, 64))
    if rng.random() < 0.5:
        return data[:a] + data[b:]
    return data[:b] + data[a:b] + data[b:]


def mutate_bytes(data: bytes, rng: random.Random) -> tuple[str, bytes]:
    """One random byte-level mutation and its name."""
    kind = rng.choice(("truncate", "flip", "splice"))
    if kind == "truncate":
        return kind, truncated(data, rng)
    if kind == "flip":
        return kind, flipped(data, rng, rng.randrange(1, 9))
    return kind, spliced(data, rng)


# ---- column-level damage of Arrow tables (Parquet profiles) -------------------------------------

#: Kinds of damage :func:`damage_table` does to one column (or to the rows, for ``dup``,
#: ``empty``, ``shuffle``, ``overlap`` and ``negdur``).
TABLE_DAMAGE = (
    "drop", "strings", "bools", "binary", "list", "floats", "nan", "inf", "huge_unsigned",
    "most_negative", "beyond_2_62", "zero", "nulls", "dup", "empty", "shuffle", "overlap", "negdur",
)  # fmt: skip


def damage_table(
    table: pa.Table, rng: random.Random, kind: str, column: str | None = None
) -> pa.Table:
    """``table`` with one kind of :data:`TABLE_DAMAGE` done to ``column`` (random if None)."""
    names = table.schema.names
    column = column if column in names else rng.choice(names)
    i, n = names.index(column), table.num_rows
    rows = sorted(rng.sample(range(n), k=max(1, n // 3))) if n else []

    def put(values, type_=None):
        return table.set_column(i, column, pa.array(values, type_))

    if kind == "drop":
        return table.remove_column(i)
    if kind == "strings":
        return put([rng.choice(["x", "", "12", "NaN", "\u00e9", None]) for _ in range(n)])
    if kind == "bools":
        return put([rng.random() < 0.5 for _ in range(n)])
    if kind == "binary":
        return put([bytes([rng.randrange(256)] * 3) for _ in range(n)], pa.binary())
    if kind == "list":
        return put([[1, 2]] * n, pa.list_(pa.int64()))
    if kind == "floats":
        return put([rng.uniform(-1e6, 1e12) for _ in range(n)])
    if kind in ("nan", "inf"):
        values = [
            float(v) if isinstance(v, int | float) else 0.0 for v in table[column].to_pylist()
        ]
        for r in rows:
            values[r] = math.nan if kind == "nan" else rng.choice([math.inf, -math.inf])
        return put(values, pa.float64())
    if kind == "huge_unsigned":
        return put([2**64 - 1 - rng.randrange(1000) for _ in range(n)], pa.uint64())
    if kind == "most_negative":
        return put([-(2**63) + rng.randrange(1000) for _ in range(n)], pa.int64())
    if kind == "beyond_2_62":
        return put([2**62 + rng.randrange(10**9) for _ in range(n)], pa.int64())
    if kind == "zero":
        return put([0] * n, pa.int64())
    if kind == "nulls":
        values = table[column].to_pylist()
        for r in rows:
            values[r] = None
        return put(values, table.schema.field(column).type)
    if kind == "dup":
        return pa.concat_tables([table, table.take(rows)])
    if kind == "empty":
        return table.slice(0, 0)
    if kind == "shuffle":
        order = list(range(n))
        rng.shuffle(order)
        return table.take(order)
    if kind == "overlap":  # each picked row starts 1 ns after the row before it
        return _edit_rows(
            table, "start_ts", rows, lambda v, prev: None if prev is None else prev + 1
        )
    if kind == "negdur":
        table = _edit_rows(table, "duration_ns", rows, lambda v, _: -3 * abs(v or 1))
        return _edit_rows(table, "end_ts", rows, lambda v, _: 0)
    raise ValueError(f"unknown damage {kind!r}")


def _edit_rows(table: pa.Table, column: str, rows: list[int], edit) -> pa.Table:
    if column not in table.schema.names:
        return table
    values = table[column].to_pylist()
    for r in rows:
        if r and values[r] is not None:
            values[r] = edit(values[r], values[r - 1])
    i = table.schema.names.index(column)
    return table.set_column(i, column, pa.array(values, table.schema.field(column).type))
