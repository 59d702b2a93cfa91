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
from dataclasses import asdict, dataclass
from pathlib import Path

#: Bump when the layout of generated files changes, so stale cases are regenerated.
_LAYOUT = 1


@dataclass(frozen=True)
class Case:
    """One generated job: ``fmt`` is ``parquet`` or ``chrome`` (one uncompressed file per rank)."""

    name: str
    fmt: str
    ranks: int
    scale: float
    scenario: str
    about: str

    def root(self, out: Path) -> Path:
        """Where the case's files live under the benchmark directory ``out``."""
        return out / self.name

    def inputs(self, out: Path) -> list[Path]:
        """The paths given to ``tracediag report``."""
        return [self.root(out) / self.fmt]

    def files(self, out: Path) -> list[Path]:
        """Every data file of the case (the floor reads these)."""
        pattern = "*.parquet" if self.fmt == "parquet" else "*.json"
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
    )
}


def ensure(case: Case, out: Path, say) -> None:
    """Generate ``case`` under ``out`` unless an identical earlier run left it there."""
    from tracediag.generator import generate

    root = case.root(out)
    stamp = root / "case.json"
    want = {**asdict(case), "layout": _LAYOUT}
    if stamp.is_file() and json.loads(stamp.read_text()) == want:
        return
    shutil.rmtree(root, ignore_errors=True)
    say(f"generating {case.name}: {case.about}")
    generate(case.scenario, root, formats=(case.fmt,), ranks=case.ranks, scale=case.scale)
    if case.fmt == "chrome":  # the targets are relative to the uncompressed file
        for gz in sorted((root / "chrome").glob("*.json.gz")):
            gz.with_suffix("").write_bytes(gzip.decompress(gz.read_bytes()))
            gz.unlink()
    stamp.write_text(json.dumps(want, indent=2) + "\n")
