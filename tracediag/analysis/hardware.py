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
    #: Where the peaks come from: "built-in table", "profile Metadata" or "config".
    source: str = "built-in table"

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
    from tracediag.parsers import BY_FORMAT  # the readers load only when a trace is analysed

    default = getattr(BY_FORMAT.get(fmt), "DEFAULT_HARDWARE", None)  # the reader's own
    return (default, PROFILES[default]) if default else None


def _hz(value: float) -> float:
    """A clock frequency as Hz: Neuron Metadata writes GHz (2.8); MHz and Hz are accepted."""
    return value * 1e9 if value < 1e3 else value * 1e6 if value < 1e6 else value


def _number(info: dict, key: str) -> float:
    try:
        value = float(info.get(key))
    except (TypeError, ValueError):
        return float("nan")
    return value if value > 0 else float("nan")


def from_metadata(info: dict, base: Hardware | None) -> Hardware | None:
    """The peaks a Neuron profile's ``Metadata`` states, over ``base`` (the built-in profile,
    for what Metadata does not hold: link and DMA-queue bandwidth, the other dtypes' rates):
    the tensor engine's BF16 peak = rows x cols x 2 FLOP x clock (x physical cores with LNC=2),
    HBM bandwidth = ``dma_ddr_bandwidth``. None when Metadata states neither."""
    rows, cols = _number(info, "tensor_engine_num_rows"), _number(info, "tensor_engine_num_cols")
    clock = _number(info, "tensor_engine_clock_freq")
    cores = _number(info, "num_physical_cores")
    te = rows * cols * 2 * _hz(clock) * (cores if cores == cores else 1.0)
    ddr = _number(info, "dma_ddr_bandwidth")
    if not (te == te or ddr == ddr):
        return None
    base = base or Hardware("custom")
    flops = dict(base.flops)
    if te == te:
        # The table's rate of each dtype against BF16 carries over to the stated peak.
        bf16 = base.flops.get("bf16")
        flops = {k: v * te / bf16 for k, v in flops.items()} if bf16 else {}
        flops["bf16"] = flops.get("bf16", te)
    name = (
        f"{base.name} (peaks from profile Metadata)"
        if base.name != "custom"
        else ("peaks from profile Metadata")
    )
    return replace(
        base, name=name, flops=flops, hbm_bw=ddr if ddr == ddr else base.hbm_bw,
        source="profile Metadata",
    )  # fmt: skip


def resolve(
    hardware_text: str, fmt: str, overrides: dict | None = None, info: dict | None = None
) -> Hardware | None:
    """Detect the profile and apply config overrides (``profile``, ``peak_flops_bf16``, ``hbm_bw``...).

    ``info`` (a rank's ``meta.info``): a Neuron profile's Metadata constants, which replace the
    built-in table's peaks (:func:`from_metadata`); the table is the fallback. A configured
    ``profile`` takes the table's figures as they are. ``Hardware.source`` says which was used."""
    overrides = dict(overrides or {})
    if info and "profile" not in overrides:
        found = detect(hardware_text, fmt)
        stated = from_metadata(info, found[1] if found else None)
        if stated is not None:
            return _apply(stated, overrides)
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
    return _apply(hw or Hardware("custom"), overrides)


def _apply(hw: Hardware, overrides: dict) -> Hardware:
    """``hw`` with the config's settings (``peak_flops_<dtype>``, ``hbm_bw``...) applied."""
    if not overrides:
        return hw
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
    return replace(hw, flops=flops, source="config", **fields)


def credible_peak(peak: float | None, *observed: float) -> float:
    """``peak`` when no ``observed`` bandwidth exceeds it, else NaN.

    A built-in or configured figure below what the trace itself achieved cannot be this
    device's peak (the table is wrong for it, or the figure is for another path, such as PCIe
    against on-device copies): a rule then compares with nothing rather than report a
    bandwidth above its peak. NaN observations are ignored; no peak gives NaN."""
    if peak is None or not peak > 0:
        return float("nan")
    seen = [float(x) for x in observed if x is not None and x == x]
    return float(peak) if all(x <= peak * (1 + 1e-9) for x in seen) else float("nan")


def resolve_ranks(trace, overrides: dict | None = None) -> dict[int, Hardware | None]:
    """Per rank of ``trace``: its peaks (:func:`resolve` with the rank's Metadata constants),
    as the analysis and ``tracediag bounds`` both use them."""
    return {r: resolve(m.hardware, m.format, overrides, m.info) for r, m in trace.meta.items()}
