"""Built-in hardware peaks of the common instance types and GPUs, overridable by config.

Figures are per rank (one NeuronCore, or one GPU), from the vendors' public specifications
(dense, no sparsity). They are used only for gaps to the peak, reported separately from what-ifs,
which restore a cause to what its peers in the same trace achieve, never to the peak.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace

#: Formats whose peak, when a profile lists none of its own, is that of a wider family: the
#: two FP8 encodings run at one FP8 rate on every listed device. MX and NVFP4 formats have no
#: fallback: a device either lists their rate or cannot run them natively.
RATE_FAMILY = {"fp8_e4m3": "fp8", "fp8_e5m2": "fp8"}


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

    def rate(self, dtype: str) -> float | None:
        """The peak FLOP/s of ``dtype`` (its family's where only that is listed); None when
        this hardware states no rate for it."""
        value = self.flops.get(dtype) or self.flops.get(RATE_FAMILY.get(dtype, ""))
        return value or None

    def rate_ratio(self, slow: str, fast: str) -> float | None:
        """Peak of ``slow`` over peak of ``fast`` (0.25 for fp32 against bf16 on trn1); None
        when either peak is unknown."""
        a, b = self.rate(slow), self.rate(fast)
        return a / b if a and b else None

    @property
    def peak_flops(self) -> float:
        """The BF16 peak (the usual MFU denominator), else the highest listed."""
        return self.flops.get(self.peak_dtype, 0.0)

    @property
    def peak_dtype(self) -> str:
        """The format :attr:`peak_flops` is the rate of: ``bf16``, else the fastest listed (a
        V100 has no BF16: its peak is the FP16 tensor-core rate); ``""`` without rates."""
        if "bf16" in self.flops or not self.flops:
            return "bf16" if self.flops else ""
        return max(self.flops, key=self.flops.get)

    @property
    def peak_label(self) -> str:
        """``"BF16 peak"``, ``"FP16 peak"``: :attr:`peak_flops` named by its format."""
        return f"{self.peak_dtype.upper()} peak" if self.peak_dtype else "peak"


_T = 1e12
_G = 1e9


def _per(device: dict[str, float], cores: int) -> dict[str, float]:
    """A device's peaks (TFLOP/s) as FLOP/s of one of its ``cores`` NeuronCores."""
    return {k: v * _T / cores for k, v in device.items()}


# Trainium2 (NeuronCore-v3), AWS Neuron docs "Trainium2 Architecture"
# (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/about-neuron/arch/neuron-hardware/
# trainium2.html): 8 cores per device deliver 1,299 FP8, 667 BF16/FP16/TF32 and 181 FP32 dense
# TFLOPS; 96 GiB HBM at 2.9 TB/s. A rank is one logical core: one physical core with LNC=1,
# two with LNC=2 (the same page: LNC combines the compute and memory of physical cores).
_TRN2 = {"fp8": 1299.0, "bf16": 667.0, "fp16": 667.0, "tf32": 667.0, "fp32": 181.0}
# Trainium3 (NeuronCore-v4), AWS Neuron docs "Trainium3 Architecture"
# (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/about-neuron/arch/neuron-hardware/
# trainium3.html): 8 cores deliver 2,517 MXFP8/MXFP4, 671 BF16/FP16/TF32 and 183 FP32 dense
# TFLOPS; 144 GiB at 4.9 TB/s; NeuronLink-v4 2.56 TB/s per device. Plain (unscaled) FP8 has no
# figure there, so none is listed.
_TRN3 = {"mxfp8": 2517.0, "mxfp4": 2517.0, "bf16": 671.0, "fp16": 671.0, "tf32": 671.0}
_TRN3 |= {"fp32": 183.0}


def _neuron(name: str, device: dict, lnc: int, hbm: float, link: float, queue: float):
    """One logical NeuronCore of ``lnc`` physical cores of an 8-core device."""
    return Hardware(
        f"{name} LNC={lnc}" if lnc > 1 else name,
        _per(device, 8 // lnc),
        hbm_bw=hbm * lnc / 8,
        link_bw=link * lnc / 8,
        dma_queue_bw=queue,
    )


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
    # Link and DMA-queue figures of trn2/trn3 are not on the vendor pages above: the link is
    # 1.024 TB/s per device (128 GB/s a core, the previous table's figure, unverified) on trn2,
    # 2.56 TB/s on trn3 (the page); one DMA queue 30 GB/s on both (unverified).
    "trn2": _neuron("trn2 (NeuronCore-v3)", _TRN2, 1, 2900 * _G, 1024 * _G, 30 * _G),
    "trn2-lnc2": _neuron("trn2 (NeuronCore-v3)", _TRN2, 2, 2900 * _G, 1024 * _G, 30 * _G),
    "trn3": _neuron("trn3 (NeuronCore-v4)", _TRN3, 1, 4900 * _G, 2560 * _G, 30 * _G),
    "trn3-lnc2": _neuron("trn3 (NeuronCore-v4)", _TRN3, 2, 4900 * _G, 2560 * _G, 30 * _G),
    # NVIDIA Tesla V100 datasheet (V100 SXM2, 16 and 32 GB alike): tensor (FP16) 125, FP32
    # 15.7, FP64 7.8 TFLOPS; HBM2 900 GB/s; NVLink 300 GB/s. Volta has no BF16 or TF32. Its
    # host link is PCIe 3.0 x16, ~16 GB/s. The PCIe card (14 FP32, 112 tensor) is not this one.
    "v100-sxm2": Hardware(
        "NVIDIA V100 SXM2",
        {"fp16": 125 * _T, "fp32": 15.7 * _T, "fp64": 7.8 * _T},
        hbm_bw=900 * _G,
        link_bw=300 * _G,
        dma_queue_bw=16 * _G,
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
    # NVIDIA "Blackwell Architecture Technical Brief" (https://resources.nvidia.com/
    # en-us-blackwell-architecture), HGX B200 at 1,000 W, dense (half the sparse figures):
    # FP4 9, FP8/FP6 4.5, BF16/FP16 2.25, TF32 1.1 PFLOPS, FP32 80, FP64 40 TFLOPS; HBM3e 8 TB/s;
    # NVLink 5 1.8 TB/s per GPU (both directions; 900 GB/s each way, as h100's 450). MXFP8 runs
    # at the FP8 rate and MXFP4/NVFP4 at the FP4 rate (the brief's block-scaled formats).
    "b200": Hardware(
        "NVIDIA B200",
        {
            "nvfp4": 9000 * _T,
            "mxfp4": 9000 * _T,
            "mxfp8": 4500 * _T,
            "fp8": 4500 * _T,
            "bf16": 2250 * _T,
            "fp16": 2250 * _T,
            "tf32": 1100 * _T,
            "fp32": 80 * _T,
            "fp64": 40 * _T,
        },
        hbm_bw=8000 * _G,
        link_bw=900 * _G,
        dma_queue_bw=55 * _G,  # copy engine, as h100's (not a vendor figure)
    ),
    # The same brief, GB200 (Grace Blackwell, 1,200 W per GPU), dense: FP4 10, FP8 5, BF16 2.5,
    # TF32 1.25 PFLOPS, FP32 90, FP64 45 TFLOPS; 8 TB/s; NVLink 5 as B200 (NVIDIA "GB200 NVL72",
    # https://www.nvidia.com/en-us/data-center/gb200-nvl72/: 1,440 PFLOPS sparse FP4 for 72 GPUs).
    "gb200": Hardware(
        "NVIDIA GB200",
        {
            "nvfp4": 10000 * _T,
            "mxfp4": 10000 * _T,
            "mxfp8": 5000 * _T,
            "fp8": 5000 * _T,
            "bf16": 2500 * _T,
            "fp16": 2500 * _T,
            "tf32": 1250 * _T,
            "fp32": 90 * _T,
            "fp64": 45 * _T,
        },
        hbm_bw=8000 * _G,
        link_bw=900 * _G,
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
    # AMD "Instinct MI325X" product page / datasheet (https://www.amd.com/en/products/
    # accelerators/instinct/mi300/mi325x.html), dense: FP16/BF16 1,307.4, FP8 2,614.9, TF32 653.7,
    # FP32 and FP64 matrix 163.4 TFLOPS; 256 GB HBM3E at 6 TB/s; Infinity Fabric as MI300X's.
    "mi325x": Hardware(
        "AMD Instinct MI325X",
        {
            "bf16": 1307.4 * _T,
            "fp16": 1307.4 * _T,
            "fp8": 2614.9 * _T,
            "tf32": 653.7 * _T,
            "fp32": 163.4 * _T,
            "fp64": 163.4 * _T,
        },
        hbm_bw=6000 * _G,
        link_bw=448 * _G,
        dma_queue_bw=55 * _G,
    ),
    # AMD "Instinct MI355X" product page (https://www.amd.com/en/products/accelerators/instinct/
    # mi350/mi355x.html) and "AMD CDNA 4 Architecture" white paper, dense: MXFP4/MXFP6 10,066.4,
    # FP8/MXFP8 5,033.2, FP16/BF16 2,516.6, FP32 matrix 157.3, FP64 78.6 TFLOPS; 288 GB HBM3E at
    # 8 TB/s; 7 Infinity Fabric links of 153.6 GB/s (half each way, as mi300x's). No TF32 rate is
    # listed for CDNA 4, and no NVFP4 (an NVIDIA format).
    "mi355x": Hardware(
        "AMD Instinct MI355X",
        {
            "mxfp4": 10066.4 * _T,
            "mxfp8": 5033.2 * _T,
            "fp8": 5033.2 * _T,
            "bf16": 2516.6 * _T,
            "fp16": 2516.6 * _T,
            "fp32": 157.3 * _T,
            "fp64": 78.6 * _T,
        },
        hbm_bw=8000 * _G,
        link_bw=537.6 * _G,
        dma_queue_bw=55 * _G,
    ),
}

_PATTERNS = [
    (r"\btrn3", "trn3"),
    (r"\btrn2", "trn2"),
    (r"\btrn1", "trn1"),
    (r"\binf2", "inf2"),
    (r"v100[- ]?sxm2", "v100-sxm2"),  # "Tesla V100-SXM2-32GB" (Kineto deviceProperties)
    (r"a100", "a100"),
    (r"h200", "h200"),
    (r"h100", "h100"),
    (r"gb200", "gb200"),
    (r"\bb200", "b200"),
    (r"mi355", "mi355x"),
    (r"mi325", "mi325x"),
    (r"mi300", "mi300x"),
]
#: Neuron profiles whose built-in figures depend on the logical-core size (LNC=2 variants).
_LNC2 = {"trn2": "trn2-lnc2", "trn3": "trn3-lnc2"}


def detect(
    hardware_text: str, fmt: str = "", info: dict | None = None
) -> tuple[str, Hardware] | None:
    """The built-in profile named by an instance type or GPU name; None when unknown. A
    Neuron rank whose Metadata (``info``) says its logical core is two physical cores gets the
    profile's LNC=2 variant."""
    text = hardware_text.lower()
    found = None
    for pattern, key in _PATTERNS:
        if re.search(pattern, text):
            found = key
            break
    if found is None:
        from tracediag.parsers import BY_FORMAT  # the readers load only when a trace is analysed

        found = getattr(BY_FORMAT.get(fmt), "DEFAULT_HARDWARE", None)  # the reader's own
    if found is None:
        return None
    if found in _LNC2 and physical_cores(info or {}) == 2:
        found = _LNC2[found]
    return found, PROFILES[found]


def _hz(value: float) -> float:
    """A clock frequency as Hz: Neuron Metadata writes GHz (2.8); MHz and Hz are accepted."""
    return value * 1e9 if value < 1e3 else value * 1e6 if value < 1e6 else value


def _number(info: dict, key: str) -> float:
    try:
        value = float(info.get(key))
    except (TypeError, ValueError):
        return float("nan")
    return value if math.isfinite(value) and value > 0 else float("nan")


def physical_cores(info: dict) -> int:
    """Physical NeuronCores behind one rank (one logical core): Metadata
    ``num_physical_cores`` (or NeffHeader ``pcore_count_per_lnc``), else 1."""
    for key in ("num_physical_cores", "pcore_count_per_lnc"):
        n = _number(info, key)
        if n == n:
            return int(n)
    return 1


def metadata_te_peak(info: dict) -> float:
    """The tensor-engine BF16-rate peak (FLOP/s) of one rank that Metadata states: rows x
    columns x 2 FLOP x clock x physical cores, NaN when Metadata lacks a constant.

    The constants describe one PE array, and every physical core has its own: a logical core of
    LNC=2 runs two arrays as one rank (its tensor instructions come from both), so its peak is
    twice one core's. AWS's single-core formula is the LNC=1 case. The one function behind
    :func:`from_metadata` and the bounds (``tracediag.analysis.bounds.te_peak``)."""
    rows, cols = _number(info, "tensor_engine_num_rows"), _number(info, "tensor_engine_num_cols")
    clock = _number(info, "tensor_engine_clock_freq")
    return rows * cols * 2.0 * _hz(clock) * physical_cores(info)


def metadata_dma_peak(info: dict) -> float:
    """The DMA peak (B/s) of one rank that Metadata states: ``dma_ddr_bandwidth`` (one core's
    16 DMA engines) x physical cores, as :func:`metadata_te_peak` (each physical core has its
    own DMA engines); NaN when absent."""
    return _number(info, "dma_ddr_bandwidth") * physical_cores(info)


def from_metadata(info: dict, base: Hardware | None) -> Hardware | None:
    """The peaks a Neuron profile's ``Metadata`` states, over ``base`` (the built-in profile,
    for what Metadata does not hold: link and DMA-queue bandwidth, the other dtypes' rates):
    the tensor engine's BF16 peak (:func:`metadata_te_peak`) and the HBM bandwidth the DMA
    reaches (:func:`metadata_dma_peak`). None when Metadata states neither."""
    te, ddr = metadata_te_peak(info), metadata_dma_peak(info)
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
        found = detect(hardware_text, fmt, info)
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
        found = detect(hardware_text, fmt, info)
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
