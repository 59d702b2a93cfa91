"""The report invariants of ``tests/report_invariants.py``, checked on every benchmark case.

    python benchmarks/check_invariants.py                       # real traces and generated cases
    python benchmarks/check_invariants.py --suite real          # the real traces of ../shared/traces
    python benchmarks/check_invariants.py --suite generated --skip-big
    python benchmarks/check_invariants.py --case chrome-1M --case alexnet
    python benchmarks/check_invariants.py --case custom --fmt chrome --ranks 2 --scale 2

The test suite checks every diagnosis it makes (``tests/conftest.py``); the benchmarks diagnose
jobs no test does: the generated cases of ``cases.py`` (millions of events) and the real traces
of ``../shared/traces`` that ``bench.py --suite real`` runs. Each case is loaded and diagnosed in
this process, as the library's users do (``tracediag.load(paths, cache=False)`` then
``tracediag.diagnose(job)``), and :func:`tests.report_invariants.violations` lists what its
report breaks: a saving above its critical path, its impact (where that bounds it) or what its
own change removes; a bandwidth above the peak it is compared with; an engine its ranks lack.

One line per case: its name, the findings, the violations (0 expected) and the seconds of load
and diagnosis; each violation is printed under it. Exit 1 when any case has a violation or
could not be diagnosed. Generated files are kept in ``--out`` and reused, as ``bench.py`` does.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path[:0] = [str(HERE), str(REPO)]  # cases.py, and tests/ (a package of the checkout)
from cases import CASES, Case, RealTrace, ensure, real_traces  # noqa: E402

#: Generated cases above this many bytes of input are skipped with ``--skip-big``.
BIG_BYTES = 50 * 2**20
#: Bytes per rank and scale unit the generator writes (measured at scale 4, 2 ranks): the size
#: of a case not generated yet, so that ``--skip-big`` skips it without generating it.
BYTES_PER_RANK_SCALE = {"chrome": 280_000, "parquet": 107_000, "perfetto": 96_000}


def estimated_bytes(case: Case, out: Path) -> int:
    """The case's input size: its files' when generated, else the generator's rate times size."""
    if (case.root(out) / "case.json").is_file():
        return sum(f.stat().st_size for f in case.files(out))
    return int(case.ranks * case.scale * BYTES_PER_RANK_SCALE[case.fmt])


def check(case: Case | RealTrace, out: Path) -> tuple[int, list[str], float]:
    """Load and diagnose ``case``: its number of findings, its violations and the seconds."""
    import tracediag
    from tests.report_invariants import violations

    ensure(case, out, lambda m: print(m, file=sys.stderr, flush=True))
    t = time.perf_counter()
    diagnosis = tracediag.diagnose(tracediag.load(case.inputs(out), cache=False))
    seconds = time.perf_counter() - t
    return len(diagnosis.findings), violations(diagnosis), seconds


def select(args: argparse.Namespace) -> list[Case | RealTrace]:
    """The cases of ``--suite`` and ``--case`` (a generated case's name, ``custom``, or part of
    a real trace's name), less the big generated ones under ``--skip-big``."""
    real = real_traces()
    chosen: list[Case | RealTrace] = []
    if args.suite in ("real", "all"):
        chosen += real
    if args.suite in ("generated", "all"):
        chosen += CASES.values()
    for name in args.case or []:
        if name == "custom":
            about = f"custom: {args.fmt}, {args.ranks} ranks, scale {args.scale:g}"
            chosen.append(Case("custom", args.fmt, args.ranks, args.scale, args.scenario, about))
            continue
        found = [CASES[name]] if name in CASES else [t for t in real if name in t.name]
        if not found:
            known = ", ".join([*CASES, *(t.name for t in real), "custom"])
            raise SystemExit(f"no case {name!r}; known: {known}")
        chosen += [c for c in found if c not in chosen]
    if args.skip_big:
        kept = []
        for c in chosen:
            if isinstance(c, Case) and (size := estimated_bytes(c, args.out)) > BIG_BYTES:
                print(f"skipped {c.name}: ~{size / 2**20:.0f} MiB (--skip-big)", file=sys.stderr)
            else:
                kept.append(c)
        chosen = kept
    return chosen


def main(argv: list[str] | None = None) -> int:
    """Check every selected case; 1 when any has a violation or fails, else 0."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", choices=("real", "generated", "all"), help="default: all")
    ap.add_argument(
        "--case",
        action="append",
        metavar="NAME",
        help="a generated case, 'custom', or part of a real trace's name (repeatable)",
    )
    ap.add_argument("--skip-big", action="store_true", help="skip generated cases over 50 MiB")
    ap.add_argument("--out", type=Path, default=REPO / "bench_out", help="generated files")
    custom = ap.add_argument_group("custom case (--case custom)")
    custom.add_argument("--fmt", default="chrome", choices=tuple(BYTES_PER_RANK_SCALE))
    custom.add_argument("--ranks", type=int, default=2)
    custom.add_argument("--scale", type=float, default=2.0)
    custom.add_argument("--scenario", default="mixed")
    args = ap.parse_args(argv)
    if args.suite is None and not args.case:
        args.suite = "all"
    cases = select(args)
    if not cases:
        print("no cases (../shared/traces absent and no generated case chosen): nothing to run")
        return 0
    print(f"{'case':<39} {'findings':>9}{'violations':>11}{'seconds':>9}", flush=True)
    bad = 0
    for case in cases:
        try:
            findings, found, seconds = check(case, args.out)
        except Exception:  # the other cases are still checked
            bad += 1
            print(f"{case.name:<39} {'-':>9}{'-':>11}{'-':>9}  failed:", flush=True)
            print("    " + traceback.format_exc().strip().replace("\n", "\n    "), flush=True)
            continue
        bad += bool(found)
        print(f"{case.name:<39} {findings:>9}{len(found):>11}{seconds:>9.2f}", flush=True)
        for line in found:
            print(f"    {line}", flush=True)
    print(f"{len(cases)} cases, {bad} with violations or failures")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
