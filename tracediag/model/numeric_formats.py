"""Numeric formats of events: normalised names, and where a trace says which one ran.

Sources, in order of trust:

- a format's own dtype text (Neuron instruction operands ``src=fp32@...``, ``dtype=bfloat16`` of
  an instruction chain), normalised by :func:`normalise`;
- Neuron ``adjusted_flops`` against ``raw_flops``: adjusted FLOPs are BF16-equivalent, so a
  ratio near 1 is a 16-bit matmul, near 4 an FP32 one (the NeuronCore's bf16/fp32 peak ratio),
  near 1/2 an FP8 one (:func:`from_flops_ratio`);
- GPU kernel names (``sm90_xmma_gemm_bf16bf16_...``, ``ampere_sgemm_128x64_nn``,
  ``cutlass_80_tensorop_s1688gemm_...``, Tensile ``Cijk_..._BBS_...``, Composable Kernel
  ``_ZN2ck...GridwiseGemm...ttft...``), classified by :func:`from_kernel_names`.

Every function works on a Categorical's few categories, never on one Python string per event.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracediag.model import schema as S

#: Canonical names, fastest first on tensor cores / the PE array.
DTYPES = ("fp8", "bf16", "fp16", "tf32", "fp32", "fp64", "int8")
#: Formats a model "normally" trains its matmuls in, and the slow ones NUM701 looks for.
FAST = ("fp8", "bf16", "fp16")
SLOW = ("tf32", "fp32")

# Spellings seen in Neuron operands/chains, CcOp dtypes, PyTorch and XLA -> canonical name.
_SPELLINGS = {
    "fp8": r"f(?:p|loat)?8(?:_?e[45]m[23]\w*)?|e4m3\w*|e5m2\w*|float8\w*",
    "bf16": r"bf(?:loat)?16",
    "fp16": r"f(?:p|loat)?16|half",
    "tf32": r"tf32",
    "fp32": r"f(?:p|loat)?32|single|float",
    "fp64": r"f(?:p|loat)?64|double",
    "int8": r"u?int8|s8|u8",
}
_EXACT = {k: re.compile(rf"^(?:{v})$", re.I) for k, v in _SPELLINGS.items()}

# GPU kernel names: the first rule that matches wins (explicit dtype tokens before the shapes of
# the MMA instructions, which only imply a type). Lower-case patterns. Tokens are bounded by
# characters that cannot continue them, never bare fragments such as ``_sb_``: a mangled name
# (``..._SA_SB_SB_...``) is full of those. Tensile and Composable Kernel names are read by their
# own grammar first (:func:`_tensile_dtype`, :func:`_ck_dtype`).
_KERNEL_RULES = (
    ("fp8", r"e4m3|e5m2|f8f8|_fp8|fp8_|float8|_f8_"),
    ("bf16", r"bf16|bfloat16"),
    ("fp16", r"fp16|f16f16|_f16_|c10::half|__half|h16816gemm|h1688gemm|h884gemm|hgemm"),
    ("tf32", r"tf32|tensorop_s1688gemm|_xf32"),
    ("fp32", r"sgemm|gcgemm|f32f32|fp32|float32|gemm\w*<float|\bfloat\b"),
    ("fp64", r"dgemm|fp64|<double"),
)
_KERNEL_PATTERNS = [(d, re.compile(p)) for d, p in _KERNEL_RULES]

# Tensile / hipBLASLt: ``Cijk_<A>_<B>_<types>_...``; the types token starts with the A/B data type
# (``BBS``: bf16 in, fp32 compute; ``SB``: fp32 with beta; ``HHS``, ``DB``, ``F8SS``, ``I8II``).
_TENSILE = re.compile(r"^cijk_a[a-z]+_b[a-z]+_([a-z0-9]+)_")
_TENSILE_NAME = re.compile(r"cijk_a[a-z]+_b[a-z]+_[a-z0-9]+_")
_TENSILE_TYPE = (
    ("fp8", r"f8|b8"),
    ("int8", r"i8|4xi8"),
    ("bf16", r"b"),
    ("fp16", r"h"),
    ("fp32", r"s|c"),
    ("fp64", r"d|z"),
)
# Composable Kernel (``_ZN2ck...``): the Itanium-mangled template arguments of the gridwise GEMM
# name its data types as a run of builtin codes (``ttft``: A, B bf16 = ushort, acc float, C bf16;
# ``DF16_`` _Float16, ``f`` float, ``d`` double, ``a`` int8, ``DB8_`` f8). The first is A's.
_CK = re.compile(r"^_ZN2ck")
_CK_RUN = re.compile(r"(?:GridwiseGemm\w*?I(?:Li\d+E)*|S\d*_)((?:DF16_|DB8_|[tfda]){3,})[NLSEI]")
_CK_TYPE = {"t": "bf16", "DF16_": "fp16", "f": "fp32", "d": "fp64", "a": "int8", "DB8_": "fp8"}

#: Kernels that run matrix multiplies (cuBLAS/cuDNN/CUTLASS/Tensile/Triton names).
MATMUL_KERNEL = (
    r"(?<!fb)gemm|xmma|matmul|cutlass|^cijk_|wgmma|fprop|dgrad|wgrad"
    r"|triton\w*_(?:b?mm|addmm)(?:_|\d|$)"
)

_MATMUL_HELPER = r"offsets?kernel"

_OPERAND_DTYPE = r"(?:src\d*=|dtype=)([A-Za-z][A-Za-z0-9_]*)(?:@|\s|$)"


def _categorical(values) -> pd.Categorical:
    if isinstance(values, pd.Series):
        values = values.array
    if isinstance(values, pd.Categorical):
        return values
    return pd.Categorical(values)


def _map_categories(values, mapper) -> pd.Categorical:
    """Apply ``mapper`` (categories as str Series -> canonical names or None) to categories only."""
    cat = _categorical(values)
    cats = pd.Series(np.asarray(cat.categories.astype(str), dtype=object))
    mapped = mapper(cats)
    # Map each category to its DTYPES code, then index by row (no string hashed per row).
    code_of = {d: i for i, d in enumerate(DTYPES)}
    lookup = np.array(
        [code_of.get(m, -1) if isinstance(m, str) else -1 for m in mapped.tolist()] + [-1],
        dtype=np.int8,
    )
    return pd.Categorical.from_codes(lookup[cat.codes], categories=DTYPES)


def normalise(values) -> pd.Categorical:
    """Dtype spellings (``bfloat16``, ``BFloat16``, ``float32``, ``fp8_e4m3``...) -> ``DTYPES``
    names; unknown spellings become missing."""

    def mapper(cats: pd.Series) -> pd.Series:
        out = pd.Series(None, index=cats.index, dtype=object)
        for name, pattern in _EXACT.items():
            hit = out.isna() & cats.str.strip().str.match(pattern)
            out[hit] = name
        return out

    return _map_categories(values, mapper)


def from_operands(operands) -> pd.Categorical:
    """The dtype a Neuron instruction's operands (or instruction chain) name: ``src=fp32@...``,
    ``dtype=bfloat16``; missing where they name none."""

    def mapper(cats: pd.Series) -> pd.Series:
        found = cats.str.extract(_OPERAND_DTYPE, expand=False)
        return pd.Series(normalise(found.fillna("")), index=cats.index, dtype=object)

    return _map_categories(operands, mapper)


def from_flops_ratio(raw: np.ndarray, adjusted: np.ndarray) -> pd.Categorical:
    """Dtype implied by BF16-equivalent ``adjusted`` FLOPs against ``raw`` FLOPs per instruction:
    about 1 -> bf16 (the 16-bit rate), >= 2.5 -> fp32, <= 0.75 -> fp8; else missing."""
    raw = np.asarray(raw, dtype=np.float64)
    adjusted = np.asarray(adjusted, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(raw > 0, adjusted / raw, np.nan)
    codes = np.full(len(ratio), -1, dtype=np.int8)
    codes[np.abs(ratio - 1.0) <= 0.1] = DTYPES.index("bf16")
    codes[ratio >= 2.5] = DTYPES.index("fp32")
    codes[ratio <= 0.75] = DTYPES.index("fp8")
    return pd.Categorical.from_codes(codes, categories=DTYPES)


def from_kernel_names(names) -> pd.Categorical:
    """Dtype of GPU kernels from their names (CUTLASS, cuBLAS, cuDNN xmma, Tensile); missing
    where the name says nothing."""

    def mapper(cats: pd.Series) -> pd.Series:
        low = cats.str.lower()
        out = _tensile_dtype(low)
        ck = cats.str.contains(_CK)
        out[ck] = _ck_dtype(cats[ck])
        grammar = low.str.match(_TENSILE_NAME) | ck  # read by their grammar, or not at all
        for name, pattern in _KERNEL_PATTERNS:
            out[out.isna() & ~grammar & low.str.contains(pattern)] = name
        return out

    return _map_categories(names, mapper)


def _tensile_dtype(low: pd.Series) -> pd.Series:
    """Dtype of Tensile/hipBLASLt kernels (lower-case names) from their types token; else None."""
    token = low.str.extract(_TENSILE, expand=False)
    out = pd.Series(None, index=low.index, dtype=object)
    out[token.notna() & low.str.contains("_xf32")] = "tf32"
    for name, prefix in _TENSILE_TYPE:
        out[out.isna() & token.str.match(prefix).fillna(False).astype(bool)] = name
    return out


def _ck_dtype(cats: pd.Series) -> pd.Series:
    """Dtype of Composable Kernel kernels from the first code of their data-type run; else None."""
    run = cats.str.extract(_CK_RUN, expand=False).fillna("")
    first = run.str.extract(r"^(DF16_|DB8_|[tfda])", expand=False)
    return first.map(_CK_TYPE).astype(object).where(first.notna(), None)


def names(values: pd.Categorical, missing: str = "unknown") -> np.ndarray:
    """Per row: the dtype name as an object array, ``missing`` where unknown."""
    cats = np.append(np.asarray(values.categories.astype(str), dtype=object), missing)
    return cats[values.codes]


def fill(primary: pd.Categorical, fallback: pd.Categorical) -> pd.Categorical:
    """``primary`` with its missing rows taken from ``fallback`` (both over ``DTYPES``)."""
    codes = np.where(primary.codes >= 0, primary.codes, fallback.codes)
    return pd.Categorical.from_codes(codes, categories=DTYPES)


def is_matmul_kernel(names) -> np.ndarray:
    """Per row: the name is a GPU matmul/convolution kernel."""
    cat = _categorical(names)
    cats = pd.Series(np.asarray(cat.categories.astype(str), dtype=object))
    low = cats.str.lower()
    # cuDNN's split-K/offset helpers (``cask_cudnn::computeWgradBOffsetsKernel``) only index.
    hit = low.str.contains(MATMUL_KERNEL) & ~low.str.contains(_MATMUL_HELPER)
    hit = np.append(hit.to_numpy(dtype=bool), False)
    return hit[cat.codes]


def event_engines(trace: S.Trace) -> np.ndarray:
    """Per event: its track's normalised engine (``tensor``, ``gpu``, ``dma``...)."""
    engines = trace.tracks[S.ENGINE].astype(str).to_numpy()
    return engines[trace.events[S.TRACK].to_numpy()] if len(engines) else np.array([], object)


def _on_engine(trace: S.Trace, engine: str) -> np.ndarray:
    """Per event: its track's engine is ``engine`` (tested per track, indexed per event)."""
    engines = trace.tracks[S.ENGINE].astype(str).to_numpy()
    if not len(engines):
        return np.zeros(len(trace.events), dtype=bool)
    return (engines == engine)[trace.events[S.TRACK].to_numpy()]


def matmul_events(trace: S.Trace) -> np.ndarray:
    """Per event: a matmul on the tensor engine (every Neuron tensor-engine instruction) or a
    GPU matmul kernel."""
    ev = trace.events
    compute = (ev[S.KIND] == "compute").to_numpy(dtype=bool)
    out = compute & _on_engine(trace, "tensor")
    gpu = compute & _on_engine(trace, "gpu")
    if gpu.any():  # the names of GPU compute only: not a pattern search of every host op's name
        out[gpu] |= is_matmul_kernel(_used(ev[S.NAME], gpu))
    return out


def event_dtypes(trace: S.Trace) -> pd.Categorical:
    """Per event: the ``dtype`` column where a reader filled it, else (GPU kernels) the dtype
    their names imply."""
    ev = trace.events
    known = (
        normalise(ev[S.DTYPE])
        if S.DTYPE in ev
        else pd.Categorical.from_codes(np.full(len(ev), -1, np.int8), categories=DTYPES)
    )
    unknown_gpu = (known.codes < 0) & _on_engine(trace, "gpu")
    codes = known.codes.copy()
    if unknown_gpu.any():  # only the names of these events are searched for a dtype
        codes[unknown_gpu] = from_kernel_names(_used(ev[S.NAME], unknown_gpu)).codes
    return pd.Categorical.from_codes(codes, categories=DTYPES)


def _used(values: pd.Series, mask: np.ndarray) -> pd.Categorical:
    """The rows of ``values`` in ``mask`` as a categorical of the categories they use."""
    return _categorical(values)[mask].remove_unused_categories()


def tensor_work_by_dtype(trace: S.Trace, mask: np.ndarray, dtypes: pd.Categorical) -> pd.DataFrame:
    """Per (rank, dtype) of the events in ``mask``: events, time (ns) and FLOPs (NaN-free sum)."""
    ev = trace.events
    frame = pd.DataFrame(
        {
            "rank": ev[S.RANK].to_numpy()[mask],
            "dtype": names(dtypes)[mask],
            "time_ns": ev[S.DUR].to_numpy()[mask],
            "flops": np.nan_to_num(ev[S.FLOPS].to_numpy(dtype=np.float64)[mask])
            if S.FLOPS in ev
            else np.zeros(int(mask.sum())),
        }
    )
    return (
        frame.groupby(["rank", "dtype"], sort=True)
        .agg(events=("time_ns", "size"), time_ns=("time_ns", "sum"), flops=("flops", "sum"))
        .reset_index()
    )
