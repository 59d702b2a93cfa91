"""Check that a speed change leaves every report byte-identical.

    python benchmarks/compare_reports.py snapshot /tmp/base          # copy of the tree as it is
    python benchmarks/compare_reports.py snapshot /tmp/base --at-head parsers/chrome_columns.py
    python benchmarks/compare_reports.py run /tmp/base /tmp/before   # its reports
    python benchmarks/compare_reports.py run . /tmp/after
    python benchmarks/compare_reports.py diff /tmp/before /tmp/after  # exit 1 on a difference

``snapshot`` copies the working tree (sources only, no ``.git``) so that two runs compare one
moment's code, whatever others edit meanwhile; ``--at-head FILE...`` puts those files back as
the last commit has them (read with ``git show``, nothing in the checkout changes): the "before"
of a change. ``run`` writes ``tracediag report INPUT --format json --no-cache`` of every real
trace in ``../shared/traces`` and every ``sample_traces`` input, run from that tree, one JSON
file each (stderr and exit status beside it). ``diff`` compares two such folders file by file.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHARED_TRACES = REPO.parent / "shared" / "traces"
_SKIP = shutil.ignore_patterns(".git", "bench_out", "__pycache__", "*.egg-info", "site")


def inputs() -> list[Path]:
    """Every real trace and every sample-trace input (a folder per job)."""
    real = sorted(p for p in SHARED_TRACES.glob("*") if p.name != "README.md")
    samples = []
    for job in sorted(p for p in (REPO / "sample_traces").iterdir() if p.is_dir()):
        formats = sorted(p for p in job.iterdir() if p.is_dir())  # chrome/, json/: one job
        samples += formats or [job]
    return real + samples


def snapshot(dest: Path, at_head: list[str]) -> None:
    """A copy of the tree; ``at_head`` files as committed. The copy's ``tracediag`` gets links
    to ``parsers`` and ``rules`` so it imports without the editable install's mapping."""
    shutil.copytree(REPO, dest, ignore=_SKIP, symlinks=True)
    for rel in at_head:
        text = subprocess.run(
            ["git", "show", f"HEAD:{rel}"], cwd=REPO, capture_output=True, check=True
        ).stdout
        (dest / rel).write_bytes(text)
    for pkg in ("parsers", "rules"):
        (dest / "tracediag" / pkg).symlink_to(dest / pkg)


def run(tree: Path, out: Path) -> None:
    """The JSON report of every input, made by the code of ``tree``."""
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    for path in inputs():
        name = path.name if path.parent == SHARED_TRACES else f"{path.parent.name}_{path.name}"
        cmd = [sys.executable, "-m", "tracediag", "report", str(path), "--format", "json"]
        cmd += ["--no-cache", "-q", "-o", str(out / f"{name}.json")]
        proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True)
        (out / f"{name}.stderr").write_bytes(proc.stderr + f"exit {proc.returncode}\n".encode())
        print(f"{name}: exit {proc.returncode}", flush=True)


def diff(before: Path, after: Path) -> int:
    """0 when every file of ``before`` is in ``after`` with the same bytes; else 1."""
    names = sorted({p.name for p in before.iterdir()} | {p.name for p in after.iterdir()})
    differ = [
        n
        for n in names
        if not (before / n).exists()
        or not (after / n).exists()
        or not filecmp.cmp(before / n, after / n, shallow=False)
    ]
    for n in differ:
        print(f"differs: {n}")
    print(f"{len(names) - len(differ)} of {len(names)} files identical")
    return 1 if differ else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    s = sub.add_parser("snapshot")
    s.add_argument("dest", type=Path)
    s.add_argument("--at-head", nargs="*", default=[], metavar="FILE")
    r = sub.add_parser("run")
    r.add_argument("tree", type=Path)
    r.add_argument("out", type=Path)
    d = sub.add_parser("diff")
    d.add_argument("before", type=Path)
    d.add_argument("after", type=Path)
    args = ap.parse_args()
    if args.command == "snapshot":
        snapshot(args.dest, args.at_head)
        return 0
    if args.command == "run":
        run(args.tree.resolve(), args.out)
        return 0
    return diff(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())
