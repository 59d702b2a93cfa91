"""End-to-end benchmark: events/s, wall time and peak RSS per stage.

    python benchmarks/bench.py [--ranks 4] [--scale 50] [--format parquet|json|chrome]

Generates a job with the synthetic generator (scale multiplies its layers), then times each
stage of a diagnosis on it: read, align, graph, critical path, rules, and one replay. Peak RSS is
the process's high-water mark after the stage (it only grows). Not part of the unit tests.
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


class Stages:
    def __init__(self, n_events: int = 0) -> None:
        self.n = n_events
        self.rows: list[tuple[str, float, float]] = []

    def run(self, name, fn, *args, **kw):
        t = time.perf_counter()
        out = fn(*args, **kw)
        self.rows.append((name, time.perf_counter() - t, _rss_mib()))
        return out

    def print(self) -> None:
        print(f"{'stage':<16}{'wall s':>10}{'events/s':>14}{'peak RSS MiB':>15}")
        for name, sec, rss in self.rows:
            rate = f"{self.n / sec:,.0f}" if sec > 0 and self.n else "-"
            print(f"{name:<16}{sec:>10.3f}{rate:>14}{rss:>15.0f}")
        total = sum(s for _, s, _ in self.rows)
        print(f"{'total':<16}{total:>10.3f}{self.n / total:>14,.0f}{self.rows[-1][2]:>15.0f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--scale", type=float, default=50.0)
    ap.add_argument("--format", default="parquet", choices=("parquet", "json", "chrome"))
    ap.add_argument("--scenario", default="mixed")
    args = ap.parse_args(argv)

    from tracediag.align import align_clocks
    from tracediag.analysis import analyse
    from tracediag.engine import diagnose
    from tracediag.generator import generate
    from tracediag.load import load
    from tracediag.matching import split_mismatched
    from tracediag.replay import WhatIf, replay

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / args.scenario
        t = time.perf_counter()
        generate(args.scenario, out, ranks=args.ranks, scale=args.scale, formats=(args.format,))
        size = sum(f.stat().st_size for f in (out / args.format).rglob("*") if f.is_file())
        print(
            f"generated {args.scenario} x{args.scale:g}, {args.ranks} ranks, {args.format}: "
            f"{size / 2**20:.1f} MiB on disk in {time.perf_counter() - t:.1f} s"
        )
        st = Stages()
        trace = st.run("read", load, [out / args.format], align=False)
        st.n = len(trace.events)
        st.run("align", lambda: (align_clocks(trace), split_mismatched(trace)))
        analysis = st.run("graph+path", analyse, trace)
        g = analysis.graph
        st.run("replay", replay, g, WhatIf.durations(g.order[:1], g.dur[g.order[:1]]))
        st.run("diagnose", diagnose, trace)
    print(
        f"{st.n:,} events, {len(trace.edges):,} recorded edges, {len(g):,} graph nodes, "
        f"{len(g.pred_src):,} graph edges"
    )
    st.print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
