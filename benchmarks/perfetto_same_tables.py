"""Perfetto reader: the same tables before and after a change of the decoder.

    python benchmarks/perfetto_same_tables.py --save BEFORE_DIR FILE_OR_DIR...   # old code
    python benchmarks/perfetto_same_tables.py --compare BEFORE_DIR FILE_OR_DIR...  # new code

For every Perfetto file given (directories: their ``*.pftrace`` and ``*.perfetto-trace``, walked)
it keeps two readings: the decoder's columns (``perfetto_decode.decode``: events, annotations,
flows, tracks, clocks, counts, packets) and the reader's per-rank tables
(``tracediag.parsers.perfetto.read``); a file the reader refuses keeps its error's type and
text. ``--save`` pickles them per file (by content hash); ``--compare`` reads each file again
and reports every difference: exact, dtypes and column order included. Exit 1 on any.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import pickle
import sys
from pathlib import Path

import numpy as np
import pandas as pd

SUFFIXES = (".pftrace", ".perfetto-trace")


def _files(args: list[str]) -> list[Path]:
    out: list[Path] = []
    for a in args:
        p = Path(a)
        if p.is_dir():
            out += sorted(f for f in p.rglob("*") if f.is_file() and f.name.endswith(SUFFIXES))
        else:
            out.append(p)
    return out


def _reading(path: Path) -> dict:
    from tracediag.parsers import perfetto, perfetto_collectives, perfetto_events
    from tracediag.parsers.perfetto_decode import decode
    from tracediag.parsers.perfetto_system import SYSTEM_WANTED

    wanted = perfetto_events.WANTED | perfetto_collectives.WANTED | SYSTEM_WANTED
    out: dict = {}
    try:
        out["decoded"] = dataclasses.asdict(decode(path, wanted))
    except Exception as exc:  # a refused file: its error is what must stay the same
        out["decoded"] = ("error", type(exc).__name__, str(exc))
    try:
        out["parts"] = [dataclasses.asdict(p) for p in perfetto.read(path)]
    except Exception as exc:
        out["parts"] = ("error", type(exc).__name__, str(exc))
    return out


def _diff(a, b, where: str, out: list[str]) -> None:
    """Append to ``out`` every difference between ``a`` and ``b`` (exact)."""
    if type(a) is not type(b):
        out.append(f"{where}: type {type(a).__name__} != {type(b).__name__}")
    elif isinstance(a, pd.DataFrame):
        try:
            pd.testing.assert_frame_equal(a, b, check_exact=True, check_categorical=True)
            for col in a.columns:  # object columns: str vs bytes, int vs float, None vs NaN
                if a[col].dtype == object:
                    ta = [type(v).__name__ for v in a[col]]
                    tb = [type(v).__name__ for v in b[col]]
                    if ta != tb:
                        out.append(f"{where}.{col}: element types differ")
        except AssertionError as exc:
            out.append(f"{where}: {' '.join(str(exc).split())[:300]}")
    elif isinstance(a, np.ndarray):
        if a.dtype != b.dtype or a.shape != b.shape or not np.array_equal(a, b, equal_nan=True):
            out.append(f"{where}: arrays differ")
    elif isinstance(a, dict):
        if list(a) != list(b):
            out.append(f"{where}: keys {list(a)} != {list(b)}")
        for k in a:
            if k == "sources":  # the input's path: a copy of a file reads the same
                continue
            if k in b:
                _diff(a[k], b[k], f"{where}.{k}", out)
    elif isinstance(a, list | tuple):
        if len(a) != len(b):
            out.append(f"{where}: length {len(a)} != {len(b)}")
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            _diff(x, y, f"{where}[{i}]", out)
    elif isinstance(a, float) and np.isnan(a) and np.isnan(b):
        return
    elif a != b:
        out.append(f"{where}: {a!r} != {b!r}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--save", type=Path, help="write the readings into this directory")
    mode.add_argument("--compare", type=Path, help="compare with the readings saved here")
    ap.add_argument("inputs", nargs="+", help="Perfetto files or directories")
    args = ap.parse_args()
    files = _files(args.inputs)
    bad = 0
    for path in files:
        key = hashlib.sha1(path.read_bytes()).hexdigest()[:16]
        now = _reading(path)
        if args.save:
            args.save.mkdir(parents=True, exist_ok=True)
            (args.save / f"{key}.pkl").write_bytes(pickle.dumps(now))
            continue
        saved = args.compare / f"{key}.pkl"
        if not saved.exists():
            print(f"{path}: no saved reading")
            bad += 1
            continue
        diffs: list[str] = []
        _diff(pickle.loads(saved.read_bytes()), now, "", diffs)
        if diffs:
            bad += 1
            print(f"{path}: {len(diffs)} differences")
            for d in diffs[:10]:
                print(f"  {d}")
    verb = "saved" if args.save else "compared"
    print(f"{len(files)} files {verb}" + ("" if args.save else f", {bad} differ"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
