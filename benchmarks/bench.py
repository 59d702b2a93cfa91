"""Benchmarks: events/s, wall time and peak RSS per stage, against the bare-decoding floor.

    python benchmarks/bench.py --suite all                  # every case below (minutes)
    python benchmarks/bench.py --case chrome-1M --repeat 3  # one case, best of 3
    python benchmarks/bench.py --case custom --fmt parquet --ranks 4 --scale 50
    python benchmarks/bench.py --suite all --json figures.json  # then: --markdown figures.json
    python benchmarks/bench.py --case chrome-1M --paired 10   # floor, report, floor, ...: ratios
    python benchmarks/bench.py --suite real --paired 3        # the real traces (table below)
    python benchmarks/bench.py --suite real --case chrome-1M  # ... and a generated case with them
    python benchmarks/bench.py --suite real --trace mi300 --baseline /tmp/before  # vs a snapshot

Cases (see ``cases.py`` for the generator options behind the sizes): ``chrome-1M`` (a Kineto
Chrome JSON of ~1M events, uncompressed), ``parquet-4x1M`` (Neuron Parquet, 4 ranks x ~1M device
events), ``parquet-64x100k`` (64 ranks x ~100k), ``perfetto-2x100k`` (Neuron device Perfetto traces, 2
ranks x ~99k packets; ``--case perfetto-2x100k --stages floor,decode`` gives packets/s of the
decoder against the floor, protobuf's parse of each file's bytes as one ``Trace``; ``perfetto-2x400k``:
the same at 76 MB per rank, files the compiled walk reads), ``cleanroom-4x1M`` and
``cleanroom-64x100k`` (Neuron Parquet written by the clean-room writer of ``tests/cleanroom``,
made from the reference alone: 4 ranks x 1M and 64 x 100k instructions, 16 DMA rings a queue;
the jobs issue 16 sets its Neuron targets on). Generated files are kept in ``--out``
(default ``bench_out/``, git-ignored) and reused while the case is unchanged.

Every stage runs in a fresh process, so its peak RSS (``wait4``'s ``ru_maxrss`` of the child) is
not masked by an earlier stage; a stage's prerequisites run untimed in the same process (the
graph stage reads first), so its peak includes theirs. Stages: ``floor`` (bare
``orjson.loads`` of the Chrome files, or ``pyarrow.parquet.read_table`` of every Parquet table),
``read`` (tracediag's readers and assembly, serially, as ``--jobs 1``; later stages read the same
way, untimed), ``graph+path`` (graph build and critical path),
``replay`` (one what-if), ``diagnose`` (graph, path and every rule) and ``report`` (the
``tracediag report --no-cache`` command end to end, interpreter start included; its default
``--jobs``, so a multi-rank Parquet job is read by a process pool, a big Chrome file decoded by
one, and its peak is the largest process's). Optional: ``report-cached`` (the same command reopening the trace from a cache that
an untimed first run filled) and, for Perfetto, ``decode`` (the reader's packet decoding alone:
its figures count packets, as the Perfetto floor's do). The Chrome floor pauses cyclic GC as the reader does (with it on,
``orjson.loads`` of 1M events takes several times longer). Each stage shows wall and CPU
seconds and both as multiples of the floor's: on a shared machine CPU time is the steadier
figure (for ``report`` it includes the reader pool's processes). ``--repeat N`` keeps each
stage's best wall time, best CPU time and lowest peak. Not part of the unit tests.

``--suite real`` runs the real public traces of ``../shared/traces`` (``kineto_*.json.gz``;
none there: nothing to run) instead of generated cases: per trace, ``--paired N`` (default 3)
alternations of the floor (``orjson.loads`` of the decompressed text, read untimed) and
``report``, their median ratio (of wall and of CPU seconds) and the report's peak RSS; one ``read`` stage for the event
count and the documents the piecewise Chrome reader gave up on (``fallbacks``: each decoded a
second time, whole; any is printed, so that none hides); and, where HolisticTraceAnalysis is
installed in a venv of its own (``--hta-python``, default ``../htavenv/bin/python``; see
``hta_critical_path.py`` for how to make it), HTA's load of the same file (``hta_load.py``). ``--case`` with it adds generated cases to the same
run and table, measured the same way after the real traces (HTA on the real traces only).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cases import CASES, Case, RealTrace, ensure, real_traces  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
HTA_PYTHON = REPO.parent / "htavenv" / "bin" / "python"
STAGES = ("floor", "read", "graph+path", "replay", "diagnose", "report")
OPTIONAL_STAGES = ("report-cached", "decode")
SUITES = {
    "all": tuple(CASES),
    "chrome": ("chrome-1M",),
    "parquet": ("parquet-4x1M", "parquet-64x100k"),
    "perfetto": ("perfetto-2x100k", "perfetto-2x400k"),
    "real": (),  # the real traces present (see run_real)
}


@dataclass
class Result:
    """Best-of-N figures of one stage."""

    stage: str
    wall: float = float("inf")
    cpu: float = float("inf")
    peak_mib: float = float("inf")
    events: int = 0
    extra: dict = field(default_factory=dict)

    def add(self, wall: float, cpu: float, peak_mib: float, out: dict) -> None:
        self.wall, self.cpu = min(self.wall, wall), min(self.cpu, cpu)
        self.peak_mib = min(self.peak_mib, peak_mib)
        self.events = out.get("events", self.events)
        self.extra = {k: v for k, v in out.items() if k not in ("wall", "cpu", "events")}


def _run_child(cmd: list[str], cwd: Path = REPO) -> tuple[float, float, float, str]:
    """Run ``cmd`` in ``cwd`` (``python -m tracediag`` there runs that tree's code); its wall
    time, CPU time and peak RSS (MiB, from ``wait4``) and stdout."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, cwd=cwd)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t
        proc.returncode = code = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if code:
            raise StageFailed(f"{' '.join(cmd[:5])}... exit {code}:\n{err.read().decode()[-1500:]}")
        cpu = usage.ru_utime + usage.ru_stime
        return wall, cpu, usage.ru_maxrss / 1024, out.read().decode()


class StageFailed(Exception):
    """A stage's process exited with an error (its stderr's tail is the message)."""


def _stage_cmd(case: Case, stage: str, out: Path) -> list[str]:
    inputs = [str(p) for p in case.inputs(out)]
    if stage.startswith("report"):
        cache = () if stage == "report-cached" else ("--no-cache",)
        return [
            sys.executable,
            "-m",
            "tracediag",
            "report",
            *inputs,
            "-q",
            "-o",
            os.devnull,
            *cache,
        ]
    if stage == "floor":
        stage = {"chrome": "floor-orjson", "perfetto": "floor-protobuf"}.get(
            case.fmt, "floor-parquet"
        )
    spec = {"stage": stage, "inputs": inputs, "files": [str(f) for f in case.files(out)]}
    spec_file = case.root(out) / "stage.json"  # a file: 64 ranks' paths overflow argv
    spec_file.write_text(json.dumps(spec))
    return [sys.executable, str(Path(__file__).with_name("stages.py")), str(spec_file)]


def _measure(case: Case, stage: str, out: Path, repeat: int) -> Result:
    result = Result(stage)
    if stage == "report-cached":  # a private cache, filled by one untimed run
        os.environ["TRACEDIAG_CACHE_DIR"] = str(case.root(out) / "cache")
        _run_child(_stage_cmd(case, stage, out))
    for _ in range(repeat):
        wall, cpu, peak, stdout = _run_child(_stage_cmd(case, stage, out))
        got = {} if stage.startswith("report") else json.loads(stdout.strip().splitlines()[-1])
        result.add(got.get("wall", wall), got.get("cpu", cpu), peak, got)
    return result


def run_case(case: Case, stages: tuple[str, ...], out: Path, repeat: int) -> dict:
    """Generate (if needed) and benchmark one case; prints its table and returns its figures."""
    ensure(case, out, lambda m: print(m, file=sys.stderr, flush=True))
    files = case.files(out)
    size = sum(f.stat().st_size for f in files)
    results: dict[str, Result] = {}
    for stage in stages:
        print(f"  {case.name}: {stage}", file=sys.stderr, flush=True)
        try:
            results[stage] = _measure(case, stage, out, repeat)
        except StageFailed as exc:
            print(f"  {case.name}: {stage} failed: {exc}", file=sys.stderr, flush=True)
    events = next((r.events for s, r in results.items() if s == "read"), 0)
    for r in results.values():  # the report command prints no count: it read what read read
        r.events = r.events or events
    _print_table(case, size, results)
    return {
        "case": case.name,
        "about": case.about,
        "bytes": size,
        "stages": {
            s: {"wall": r.wall, "cpu": r.cpu, "peak_mib": r.peak_mib, "events": r.events, **r.extra}
            for s, r in results.items()
        },
    }


def run_paired(case: Case, out: Path, pairs: int) -> None:
    """Alternate the floor and ``report``, ``pairs`` times, and print each pair's wall-time
    ratio and their median: on a shared machine whose speed drifts, a pair measured minutes
    apart in a best-of-N table can compare a fast moment with a slow one."""
    ensure(case, out, lambda m: print(m, file=sys.stderr, flush=True))
    ratios = []
    for i in range(pairs):
        floor_wall = _measure(case, "floor", out, 1).wall
        report_wall = _measure(case, "report", out, 1).wall
        ratios.append(report_wall / floor_wall)
        print(
            f"{case.name} pair {i + 1}: floor {floor_wall:.2f} s, report {report_wall:.2f} s, "
            f"ratio {ratios[-1]:.2f}",
            flush=True,
        )
    print(
        f"{case.name}: report / floor over {pairs} pairs: median {statistics.median(ratios):.2f}, "
        f"range {min(ratios):.2f}-{max(ratios):.2f}"
    )


def _hta_load(python: Path, trace: RealTrace) -> dict | None:
    """HTA's load time of the trace (``wall`` and ``cpu`` seconds), None where it failed."""
    cmd = [str(python), str(Path(__file__).with_name("hta_load.py")), str(trace.path)]
    try:
        *_, stdout = _run_child(cmd)
    except StageFailed as exc:
        print(f"  {trace.name}: HTA failed: {str(exc).splitlines()[-1]}", file=sys.stderr)
        return None
    return json.loads(stdout.strip().splitlines()[-1])


def run_real(
    out: Path,
    pairs: int,
    hta_python: Path | None,
    only: list[str] | None = None,
    baseline: Path | None = None,
    generated: tuple[Case, ...] = (),
) -> list[dict]:
    """The real traces' table (see the module docstring); returns its rows. ``only``: the
    traces whose name holds one of these; ``baseline``: a tree (``compare_reports.py
    snapshot``) whose ``report`` is timed in each pair too, after this tree's; ``generated``:
    generated cases measured the same way after the real traces, in the same run and table
    (HTA is timed on the real traces only)."""
    traces = [t for t in real_traces() if not only or any(o in t.name for o in only)]
    traces += generated
    if not traces:
        print("no real traces (../shared/traces absent): nothing to run")
        return []
    rows = []
    for trace in traces:
        ensure(trace, out, print)
        print(f"  {trace.name}", file=sys.stderr, flush=True)
        floors, reports, ratios, peaks, base_ratios = [], [], [], [], []
        cpu_ratios, floor_cpus, report_cpus, base_cpu_ratios, base_cpus = [], [], [], [], []
        try:
            read = _measure(trace, "read", out, 1)
            for _ in range(pairs):
                floor = _measure(trace, "floor", out, 1)
                report = _measure(trace, "report", out, 1)
                if baseline is not None:
                    wall, cpu, *_ = _run_child(_stage_cmd(trace, "report", out), cwd=baseline)
                    base_ratios.append(wall / floor.wall)
                    base_cpu_ratios.append(cpu / max(floor.cpu, 1e-6))
                    base_cpus.append(cpu)
                floors.append(floor.wall)
                reports.append(report.wall)
                ratios.append(report.wall / floor.wall)
                # CPU seconds: steadier than wall time when others share the cores.
                floor_cpus.append(floor.cpu)
                report_cpus.append(report.cpu)
                cpu_ratios.append(report.cpu / max(floor.cpu, 1e-6))
                peaks.append(report.peak_mib)
        except StageFailed as exc:  # the other traces are still measured
            print(f"  {trace.name} failed: {exc}", file=sys.stderr, flush=True)
            continue
        hta = _hta_load(hta_python, trace) if hta_python and isinstance(trace, RealTrace) else None
        rows.append(
            {
                "trace": trace.name,
                "kind": "real" if isinstance(trace, RealTrace) else "generated",
                "bytes": floor.extra.get("bytes", 0),
                "events": read.events,
                "floor_s": statistics.median(floors),
                "report_s": statistics.median(reports),
                "ratio": statistics.median(ratios),
                "ratio_range": [min(ratios), max(ratios)],
                "floor_cpu_s": statistics.median(floor_cpus),
                "report_cpu_s": statistics.median(report_cpus),
                "cpu_ratio": statistics.median(cpu_ratios),
                "report_peak_mib": min(peaks),
                "hta_load_s": hta and hta["wall"],
                "hta_load_cpu_s": hta and hta["cpu"],
                "fallbacks": sum(read.extra.get("chrome_fallbacks", {}).values()),
                **(
                    {
                        "baseline_ratio": statistics.median(base_ratios),
                        "baseline_cpu_ratio": statistics.median(base_cpu_ratios),
                        "baseline_report_cpu_s": statistics.median(base_cpus),
                    }
                    if base_ratios
                    else {}
                ),
            }
        )
    _print_real(rows, pairs)
    return rows


def _print_real(rows: list[dict], pairs: int) -> None:
    print(
        f"\nreal traces: medians of {pairs} floor/report pairs (report: the whole command, "
        "interpreter start and imports included; HTA: TraceAnalysis() in process, import untimed)"
    )
    print(
        f"{'trace':<40}{'MiB':>6}{'events':>9}{'floor s':>8}{'report s':>9}{'ratio':>9}"
        f"{'cpu s':>7}{'cpu ratio':>10}{'peak MiB':>9}{'HTA s':>7}{'HTA cpu':>8}{'fallbacks':>10}"
    )
    for r in rows:
        hta = "-" if r["hta_load_s"] is None else f"{r['hta_load_s']:.2f}"
        hta_cpu = "-" if r["hta_load_cpu_s"] is None else f"{r['hta_load_cpu_s']:.2f}"
        print(
            f"{r['trace'][:39]:<40}{r['bytes'] / 2**20:>6.1f}{r['events']:>9,}{r['floor_s']:>8.3f}"
            f"{r['report_s']:>9.2f}{r['ratio']:>9,.1f}{r['report_cpu_s']:>7.2f}"
            f"{r['cpu_ratio']:>10,.1f}{r['report_peak_mib']:>9,.0f}{hta:>7}{hta_cpu:>8}"
            f"{r['fallbacks']:>10}"
        )
    for r in rows:
        if "baseline_ratio" in r:
            print(
                f"{r['trace'][:39]:<40}baseline tree's report / floor: median "
                f"{r['baseline_ratio']:.2f} (this tree {r['ratio']:.2f}); CPU: "
                f"{r['baseline_cpu_ratio']:.2f} (this tree {r['cpu_ratio']:.2f})"
            )
    if any(r["fallbacks"] for r in rows):
        names = ", ".join(r["trace"] for r in rows if r["fallbacks"])
        print(f"piecewise Chrome reader fell back to a whole-document decoding on: {names}")


def _print_table(case: Case, size: int, results: dict[str, Result]) -> None:
    floor = results.get("floor")
    print(f"\n{case.name}: {case.about}; {size / 2**20:,.0f} MiB of {case.fmt} files")
    print(
        f"{'stage':<13}{'events':>10}{'wall s':>8}{'cpu s':>8}{'events/s':>11}{'peak MiB':>10}"
        f"{'x floor':>8}{'(cpu)':>7}"
    )
    for r in results.values():
        rate = f"{r.events / r.wall:,.0f}" if r.wall > 0 and r.events else "-"
        ratio = cpu_ratio = ""
        if floor and r.stage != "floor":
            ratio, cpu_ratio = f"{r.wall / floor.wall:.2f}", f"{r.cpu / floor.cpu:.2f}"
        print(
            f"{r.stage:<13}{r.events:>10,}{r.wall:>8.2f}{r.cpu:>8.2f}{rate:>11}"
            f"{r.peak_mib:>10,.0f}{ratio:>8}{cpu_ratio:>7}"
        )
    fallbacks = results["read"].extra.get("chrome_fallbacks") if "read" in results else None
    if fallbacks:  # each such document was decoded twice: the figures above include it
        print(f"piecewise Chrome reader fell back to a whole-document decoding: {fallbacks}")
    report = results.get("report")
    if report and case.fmt == "chrome":
        print(
            f"report peak RSS / uncompressed size: {report.peak_mib * 2**20 / size:.2f} (target 3)"
        )


def markdown(figures: list[dict]) -> str:
    """The figures of :func:`run_case` as a Markdown table (one row per case and stage)."""
    rows = [
        "| case | stage | events | wall s | CPU s | events / CPU s | peak RSS MiB "
        "| floor wall / CPU s | ratio wall / CPU |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|",
    ]

    def pair(a: float, b: float | None, digits: int) -> str:
        return f"{a:.{digits}f} / " + ("-" if b is None else f"{b:.{digits}f}")

    for case in figures:
        stages = case["stages"]
        floor = stages.get("floor")
        for name, st in stages.items():
            cpu = st.get("cpu")  # absent from figures of older runs
            rate = f"{st['events'] / cpu:,.0f}" if cpu and st["events"] else ""
            floor_text = ratio = ""
            if floor and name != "floor":
                floor_text = pair(floor["wall"], floor.get("cpu"), 1)
                cpu_ratio = cpu / floor["cpu"] if cpu and floor.get("cpu") else None
                ratio = pair(st["wall"] / floor["wall"], cpu_ratio, 2)
            rows.append(
                f"| {case['case']} | {name} | {st['events']:,} | {st['wall']:.2f} | "
                f"{'-' if cpu is None else f'{cpu:.2f}'} | {rate} | {st['peak_mib']:,.0f} | "
                f"{floor_text} | {ratio} |"
            )
    return "\n".join(rows)


def _custom(args: argparse.Namespace) -> Case:
    about = f"custom: {args.fmt}, {args.ranks} ranks, scale {args.scale:g}, {args.scenario}"
    return Case("custom", args.fmt, args.ranks, args.scale, args.scenario, about)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", choices=SUITES, help="a set of cases (all, chrome, parquet)")
    ap.add_argument(
        "--case",
        action="append",
        choices=(*CASES, "custom"),
        help="a case (repeatable); with --suite real, measured in the real traces' pairs and table",
    )
    ap.add_argument("--stages", default=",".join(STAGES), help="comma-separated subset of stages")
    ap.add_argument("--repeat", type=int, default=1, help="runs per stage; the best is kept")
    ap.add_argument(
        "--paired",
        type=int,
        metavar="N",
        help="instead of the table: alternate floor and report N times, print the ratios",
    )
    ap.add_argument("--out", type=Path, default=REPO / "bench_out", help="generated files")
    ap.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    ap.add_argument(
        "--markdown",
        nargs="*",
        type=Path,
        metavar="JSON",
        help="print the README table of earlier --json files (run nothing)",
    )
    ap.add_argument(
        "--hta-python",
        type=Path,
        default=HTA_PYTHON if HTA_PYTHON.exists() else None,
        help="--suite real: the Python of a venv with HolisticTraceAnalysis, for its load "
        "time (default: ../htavenv/bin/python when present)",
    )
    ap.add_argument(
        "--trace",
        action="append",
        metavar="PART",
        help="--suite real: only the traces whose name holds PART (repeatable)",
    )
    ap.add_argument(
        "--baseline",
        type=Path,
        metavar="TREE",
        help="--suite real: also time TREE's report in each pair (a snapshot from "
        "compare_reports.py: before/after a change in one run)",
    )
    custom = ap.add_argument_group("custom case (--case custom)")
    custom.add_argument("--fmt", default="parquet", choices=("parquet", "chrome"))
    custom.add_argument("--ranks", type=int, default=4)
    custom.add_argument("--scale", type=float, default=50.0)
    custom.add_argument("--scenario", default="mixed")
    args = ap.parse_args(argv)
    if args.markdown is not None:
        print(markdown([c for f in args.markdown for c in json.loads(f.read_text())]))
        return 0
    if args.suite == "real":
        generated = tuple(CASES[n] for n in args.case or [] if n != "custom")
        rows = run_real(
            args.out, args.paired or 3, args.hta_python, args.trace, args.baseline, generated
        )
        if args.json:
            args.json.write_text(json.dumps(rows, indent=2) + "\n")
        return 0
    names = list(SUITES[args.suite]) if args.suite else []
    names += [n for n in args.case or [] if n not in names]
    if not names:
        ap.error("give --suite or --case")
    stages = tuple(s for s in args.stages.split(",") if s)
    if unknown := set(stages) - set(STAGES + OPTIONAL_STAGES):
        known = ", ".join(STAGES + OPTIONAL_STAGES)
        ap.error(f"unknown stages {sorted(unknown)}; known: {known}")
    if args.paired:
        for n in names:
            run_paired(_custom(args) if n == "custom" else CASES[n], args.out, args.paired)
        return 0
    print(f"{os.cpu_count()} CPUs; best of {args.repeat}")
    figures = [
        run_case(_custom(args) if n == "custom" else CASES[n], stages, args.out, args.repeat)
        for n in names
    ]
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
