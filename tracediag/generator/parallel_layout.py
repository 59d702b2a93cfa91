"""The dp x tp x pp layout of a parallel job and the parallel scenarios that use one.

Ranks are numbered as Megatron numbers them: tensor-parallel fastest, then data-parallel, then
pipeline stage: ``rank = stage * dp * tp + d * tp + t``. The simulation works on *lanes*
(``d * tp + t``): the ranks of one lane form one pipeline, the ranks of one stage run the same
stage program.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Parallel scenario -> description (registered with the others in scenarios.py).
PARALLEL_SCENARIOS = {
    "pipeline_clean": "pipeline parallel (1F1B, 4 stages, 8 micro-batches), balanced stages",
    "pipeline_slow_stage": "pipeline parallel: stage 2's compute is 1.4x slower than the others'",
    "tp_clean": "tensor parallel (tp=2) x data parallel: per-tile TP AllReduces hidden by compute",
    "tp_exposed": "tensor parallel: every layer's forward TP AllReduce waits for the whole layer",
}
SLOW_STAGE = 2
SLOW_STAGE_FACTOR = 1.4


@dataclass(frozen=True)
class ParallelLayout:
    """Sizes of the data-, tensor- and pipeline-parallel dimensions."""

    dp: int = 1
    tp: int = 1
    pp: int = 1

    @property
    def world(self) -> int:
        """Number of ranks."""
        return self.dp * self.tp * self.pp

    @property
    def lanes(self) -> int:
        """Ranks per stage (one pipeline per lane)."""
        return self.dp * self.tp

    def rank(self, stage: int, lane: int) -> int:
        """The rank running ``lane`` of ``stage``."""
        return stage * self.lanes + lane

    def coords(self, rank: int) -> dict[str, int]:
        """``{"dp", "tp", "pp"}`` coordinates of ``rank``."""
        stage, lane = divmod(rank, self.lanes)
        return {"dp": lane // self.tp, "tp": lane % self.tp, "pp": stage}

    def tp_group(self, stage: int, lane: int) -> list[int]:
        """The ranks of ``lane``'s tensor-parallel group in ``stage``."""
        first = lane - lane % self.tp
        return [self.rank(stage, first + t) for t in range(self.tp)]

    def dp_group(self, stage: int, lane: int) -> list[int]:
        """The ranks of ``lane``'s data-parallel group in ``stage``."""
        t = lane % self.tp
        return [self.rank(stage, d * self.tp + t) for d in range(self.dp)]

    def to_dict(self) -> dict:
        """Sizes and every rank's coordinates, as truth.json and the JSON report write them."""
        return {
            "dp": self.dp,
            "tp": self.tp,
            "pp": self.pp,
            "ep": 1,
            "ranks": {str(r): {**self.coords(r), "ep": 0} for r in range(self.world)},
        }


def scenario_layout(scenario: str, ranks: int) -> ParallelLayout:
    """The layout a parallel scenario runs on ``ranks`` ranks (ValueError if they do not fit)."""
    if scenario.startswith("pipeline"):
        pp, tp = 4, 1
    else:
        pp, tp = 1, 2
    if ranks % (pp * tp):
        raise ValueError(f"{scenario}: needs a multiple of {pp * tp} ranks, got {ranks}")
    return ParallelLayout(dp=ranks // (pp * tp), tp=tp, pp=pp)
