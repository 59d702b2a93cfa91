"""The benchmark cases: which job the generator writes for each, and where.

Sizes come from the generator's ``scale`` (model depth, 4 layers per unit). Per rank and scale
unit the generator writes about 3,970 device events (per layer about 56 instructions and 936 DMA
descriptors: the Parquet ``Instruction_*`` and ``DmaPacket`` rows) and about 1,480 Chrome events
(370 per layer). "1M instructions per rank" is read as 1M device events per rank (instructions
and DMA descriptors, the rows the reader turns into events): 1M instruction rows alone would
mean about 17M DMA rows per rank, a job no 24 GB machine diagnoses.
"""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

#: Bump when the layout of generated files changes, so stale cases are regenerated.
_LAYOUT = 1
#: Real public traces (see its README), beside the project's checkout; absent: skipped.
REAL_TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"


@dataclass(frozen=True)
class Case:
    """One generated job: ``fmt`` is ``parquet``, ``chrome`` (one uncompressed file per rank) or
    ``perfetto`` (Neuron device traces, one ``.pftrace`` per rank, and the system profile's).

    ``writer``: ``generator`` (tracediag's own, ``scale`` in its units) or ``cleanroom``, the
    Neuron device writer made from the reference alone (``tests/cleanroom``), for Parquet only:
    ``scale`` is then instructions per rank and ``scenario`` is ignored (a clean job)."""

    name: str
    fmt: str
    ranks: int
    scale: float
    scenario: str
    about: str
    writer: str = "generator"

    def root(self, out: Path) -> Path:
        """Where the case's files live under the benchmark directory ``out``."""
        return out / self.name

    def inputs(self, out: Path) -> list[Path]:
        """The paths given to ``tracediag report``."""
        return [self.root(out) / self.fmt]

    def files(self, out: Path) -> list[Path]:
        """Every data file of the case (the floor reads these)."""
        pattern = {"parquet": "*.parquet", "perfetto": "*.pftrace"}.get(self.fmt, "*.json")
        return sorted(self.root(out).joinpath(self.fmt).rglob(pattern))


CASES = {
    c.name: c
    for c in (
        Case(
            "chrome-1M",
            "chrome",
            1,
            675,
            "slow_dma",
            "Kineto Chrome JSON, one rank, ~1M events (scale 675 = 2,700 layers)",
        ),
        Case(
            "parquet-4x1M",
            "parquet",
            4,
            250,
            "mixed",
            "Neuron Parquet, 4 ranks x ~1M device events (scale 250 = 1,000 layers)",
        ),
        Case(
            "parquet-64x100k",
            "parquet",
            64,
            25,
            "mixed",
            "Neuron Parquet, 64 ranks x ~100k device events (scale 25 = 100 layers)",
        ),
        Case(
            "cleanroom-4x1M",
            "parquet",
            4,
            1_000_000,
            "clean",
            "Neuron Parquet by the clean-room writer, 4 ranks x 1M instructions (16 DMA rings a"
            " queue; issue 16's 10 s target)",
            "cleanroom",
        ),
        Case(
            "cleanroom-64x100k",
            "parquet",
            64,
            100_000,
            "clean",
            "Neuron Parquet by the clean-room writer, 64 ranks x 100k instructions",
            "cleanroom",
        ),
        Case(
            "perfetto-2x100k",
            "perfetto",
            2,
            200,
            "straggler",
            "Neuron device Perfetto, 2 ranks x ~99k packets (scale 200 = 800 layers)",
        ),
        Case(
            "perfetto-2x400k",
            "perfetto",
            2,
            800,
            "straggler",
            "Neuron device Perfetto, 2 ranks x ~397k packets (scale 800; 76 MB each: compiled walk)",
        ),
    )
}


@dataclass(frozen=True)
class RealTrace:
    """A real Kineto trace (one gzipped file of :data:`REAL_TRACES`), benchmarked as it is."""

    path: Path

    fmt = "chrome"

    @property
    def name(self) -> str:
        return self.path.name.removesuffix(".gz").removesuffix(".json")

    @property
    def about(self) -> str:
        return f"real trace {self.path.name}"

    def root(self, out: Path) -> Path:
        """Where the stage files of this trace go."""
        return out / "real" / self.name

    def inputs(self, out: Path) -> list[Path]:
        return [self.path]

    def files(self, out: Path) -> list[Path]:
        return [self.path]


def real_traces() -> list[RealTrace]:
    """The real Kineto traces present (none when the folder is absent)."""
    return [RealTrace(p) for p in sorted(REAL_TRACES.glob("kineto_*.json.gz"))]


def ensure(case: Case | RealTrace, out: Path, say) -> None:
    """Generate ``case`` under ``out`` unless an identical earlier run left it there."""
    if isinstance(case, RealTrace):
        case.root(out).mkdir(parents=True, exist_ok=True)
        return
    root = case.root(out)
    stamp = root / "case.json"
    want = {**asdict(case), "layout": _LAYOUT}
    if stamp.is_file() and json.loads(stamp.read_text()) == want:
        return
    shutil.rmtree(root, ignore_errors=True)
    say(f"generating {case.name}: {case.about}")
    # In a child process: Linux carries a process's peak RSS across fork and exec, so every
    # stage started by a benchmark process that generated a big case in itself would report
    # that peak as its own.
    subprocess.run([sys.executable, __file__, json.dumps(asdict(case)), str(root)], check=True)
    stamp.write_text(json.dumps(want, indent=2) + "\n")


def _generate(case: Case, root: Path) -> None:
    if case.writer == "cleanroom":
        _write_cleanroom(case, root)
        return
    from tracediag.generator import generate

    generate(case.scenario, root, formats=(case.fmt,), ranks=case.ranks, scale=case.scale)
    if case.fmt == "chrome":  # the targets are relative to the uncompressed file
        for gz in sorted((root / "chrome").glob("*.json.gz")):
            gz.with_suffix("").write_bytes(gzip.decompress(gz.read_bytes()))
            gz.unlink()


def _write_cleanroom(case: Case, root: Path) -> None:
    """The clean-room writer's job under ``root/parquet`` (an Explorer data path), its truth
    beside it."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's tests/
    from tests.cleanroom.neuron_device_writer import write_job

    out = root / case.fmt
    write_job(out, ranks=case.ranks, scale=str(int(case.scale)), formats=(case.fmt,))
    (out / "truth.json").rename(root / "truth.json")


if __name__ == "__main__":  # ensure()'s generating process: CASE_JSON ROOT
    _generate(Case(**json.loads(sys.argv[1])), Path(sys.argv[2]))
