"""Built-in hardware peaks of the common instance types and GPUs, overridable by config.

Figures are per rank (one NeuronCore, or one GPU), from the vendors' public specifications
(dense, no sparsity). They are used only for gaps to the peak, reported separately from what-ifs,
which restore a cause to what its peers in the same trace achieve, never to the peak.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace


@dataclass(frozen=True)
class Hardware:
    """Peaks of one rank: FLOP/s per dtype, HBM, collective link and DMA queue bandwidth (B/s)."""

    name: str
    flops: dict[str, float] = field(default_factory=dict)  # dtype -> FLOP/s
    hbm_bw: float = 0.0
    link_bw: float = 0.0  # collective bandwidth per rank (bus bandwidth units)
    dma_queue_bw: float = 0.0  # one DMA queue

    def rate_ratio(self, slow: str, fast: str) -> float | None:
        """Peak of ``slow`` over peak of ``fast`` (0.25 for fp32 against bf16 on trn1); None
        when either peak is unknown."""
        a, b = self.flops.get(slow), self.flops.get(fast)
        return a / b if a and b else None

    @property
    def peak_flops(self) -> float:
        """The BF16 peak (the usual MFU denominator), else the highest listed."""
        return self.flops.get("bf16", max(self.flops.values(), default=0.0))


_T = 1e12
_G = 1e9
PROFILES: dict[str, Hardware] = {
    # NeuronCore-v2: trn1/inf2 devices hold 2 cores; 190 TFLOP/s BF16 and 820 GB/s HBM per device.
    # FP16 runs at the BF16 rate, FP32 at a quarter of it (AWS Neuron docs, "Trainium
    # architecture": 190 TFLOP/s FP16/BF16, 47.5 TFLOP/s FP32 per device).
    "trn1": Hardware(
        "trn1 (NeuronCore-v2)",
        {"bf16": 95 * _T, "fp16": 95 * _T, "fp8": 95 * _T, "fp32": 23.75 * _T},
        hbm_bw=410 * _G,
        link_bw=96 * _G,
        dma_queue_bw=27 * _G,
    ),
    "inf2": Hardware(
        "inf2 (NeuronCore-v2)",
        {"bf16": 95 * _T, "fp16": 95 * _T, "fp8": 95 * _T, "fp32": 23.75 * _T},
        hbm_bw=410 * _G,
        link_bw=96 * _G,
        dma_queue_bw=27 * _G,
    ),
    # NeuronCore-v3: a trn2 device holds 8 cores; 667 TFLOP/s BF16, 1.3 PFLOP/s FP8, 2.9 TB/s HBM
    # (AWS Neuron docs, "Trainium2 architecture"); FP32 at about a quarter of the BF16 rate.
    "trn2": Hardware(
        "trn2 (NeuronCore-v3)",
        {"bf16": 83.4 * _T, "fp16": 83.4 * _T, "fp8": 166.8 * _T, "fp32": 22.9 * _T},
        hbm_bw=362 * _G,
        link_bw=128 * _G,
        dma_queue_bw=30 * _G,
    ),
    # NVIDIA A100 datasheet (dense): FP32 is the CUDA-core rate, TF32/BF16 the tensor cores'.
    "a100": Hardware(
        "NVIDIA A100 SXM",
        {"bf16": 312 * _T, "fp16": 312 * _T, "tf32": 156 * _T, "fp32": 19.5 * _T},
        hbm_bw=2039 * _G,
        link_bw=300 * _G,
        dma_queue_bw=25 * _G,
    ),
    # NVIDIA H100/H200 datasheets (SXM, dense): TF32 494.7, BF16 989, FP8 1979, FP32 67 TFLOP/s.
    "h100": Hardware(
        "NVIDIA H100 SXM",
        {"bf16": 989 * _T, "fp16": 989 * _T, "fp8": 1979 * _T, "tf32": 494.7 * _T, "fp32": 67 * _T},
        hbm_bw=3350 * _G,
        link_bw=450 * _G,
        dma_queue_bw=55 * _G,
    ),
    "h200": Hardware(
        "NVIDIA H200 SXM",
        {"bf16": 989 * _T, "fp16": 989 * _T, "fp8": 1979 * _T, "tf32": 494.7 * _T, "fp32": 67 * _T},
        hbm_bw=4800 * _G,
        link_bw=450 * _G,
        dma_queue_bw=55 * _G,
    ),
    # AMD Instinct MI300X datasheet (dense): TF32 653.7, FP32 matrix 163.4 TFLOP/s.
    "mi300x": Hardware(
        "AMD Instinct MI300X",
        {
            "bf16": 1307 * _T,
            "fp16": 1307 * _T,
            "fp8": 2615 * _T,
            "tf32": 653.7 * _T,
            "fp32": 163.4 * _T,
        },
        hbm_bw=5300 * _G,
        link_bw=448 * _G,
        dma_queue_bw=55 * _G,
    ),
}

_PATTERNS = [
    (r"\btrn2", "trn2"),
    (r"\btrn1", "trn1"),
    (r"\binf2", "inf2"),
    (r"a100", "a100"),
    (r"h200", "h200"),
    (r"h100", "h100"),
    (r"mi300", "mi300x"),
]


def detect(hardware_text: str, fmt: str = "") -> tuple[str, Hardware] | None:
    """The built-in profile named by an instance type or GPU name; None when unknown."""
    text = hardware_text.lower()
    for pattern, key in _PATTERNS:
        if re.search(pattern, text):
            return key, PROFILES[key]
    if fmt.startswith("neuron"):
        return "trn1", PROFILES["trn1"]  # the documented default target of Neuron profiles
    return None


def resolve(hardware_text: str, fmt: str, overrides: dict | None = None) -> Hardware | None:
    """Detect the profile and apply config overrides (``profile``, ``peak_flops_bf16``, ``hbm_bw``...)."""
    overrides = dict(overrides or {})
    key = overrides.pop("profile", None)
    if key is not None:
        if key not in PROFILES:
            raise ValueError(
                f"unknown hardware profile {key!r} (choose from {', '.join(PROFILES)})"
            )
        hw = PROFILES[key]
    else:
        found = detect(hardware_text, fmt)
        hw = found[1] if found else None
    if hw is None and not overrides:
        return None
    hw = hw or Hardware("custom")
    flops = dict(hw.flops)
    for k in list(overrides):
        if k.startswith("peak_flops_"):
            flops[k.removeprefix("peak_flops_")] = float(overrides.pop(k))
    fields = {
        k: float(v) for k, v in overrides.items() if k in ("hbm_bw", "link_bw", "dma_queue_bw")
    }
    unknown = set(overrides) - set(fields)
    if unknown:
        raise ValueError(f"unknown hardware settings {sorted(unknown)}")
    return replace(hw, flops=flops, **fields)
