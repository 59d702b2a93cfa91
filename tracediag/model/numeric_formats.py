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
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracediag.model import schema as S

#: Canonical names, roughly fastest first on tensor cores / the PE array. ``fp8`` is FP8 of an
#: unknown encoding (a rate alone says 8 bits); ``fp4`` FP4 (E2M1) of unknown scaling.
#: ``mxfp8``/``mxfp4`` are the OCP microscaling formats (a scale per 32 elements), ``nvfp4``
#: NVIDIA's FP4 with an E4M3 scale per 16.
DTYPES = (
    "nvfp4",
    "mxfp4",
    "fp4",
    "mxfp8",
    "fp8_e4m3",
    "fp8_e5m2",
    "fp8",
    "bf16",
    "fp16",
    "tf32",
    "fp32",
    "fp64",
    "int8",
)
#: Formats of 8 bits or fewer: a rate ratio that says "8-bit class" never overrides these names.
LOW_PRECISION = ("nvfp4", "mxfp4", "fp4", "mxfp8", "fp8_e4m3", "fp8_e5m2", "fp8")
#: Formats a model "normally" trains its matmuls in, and the slow ones NUM701 looks for.
FAST = (*LOW_PRECISION, "bf16", "fp16")
SLOW = ("tf32", "fp32")
#: Bits of each format's elements, the order in which a mixed-operand matmul takes the wider
#: operand's rate (an FP8 x FP4 MMA runs at the FP8 rate).
WIDTH = {d: w for w, names in ((4, LOW_PRECISION[:3]), (8, LOW_PRECISION[3:])) for d in names}
WIDTH |= {"bf16": 16, "fp16": 16, "tf32": 19, "fp32": 32, "fp64": 64, "int8": 8}

# Spellings seen in Neuron operands/chains, CcOp dtypes, PyTorch, XLA, NKI and Triton ->
# canonical name, tried in this order (MX before the plain element types they contain). NKI's
# ``float8_e4m3fn_x4`` and ``float4_e2m1fn_x4`` are the packed operands of ``nc_matmul_mx``.
_SPELLINGS = {
    "nvfp4": r"nvfp4|nvf4|nv_?float4\w*",
    "mxfp4": r"mxfp4|mxf4|f(?:p|loat)4_?e2m1\w*_x4",
    "fp4": r"f(?:p|loat)4(?:_?e2m1\w*)?|e2m1\w*",
    "mxfp8": r"mxfp8\w*|mxf8|f(?:p|loat)8_?e[45]m[23]\w*_x4",
    "fp8_e4m3": r"f(?:p|loat)?8_?e4(?:m3\w*|nv|b15)?|e4m3\w*",
    "fp8_e5m2": r"f(?:p|loat)?8_?e5(?:m2\w*)?|e5m2\w*",
    "fp8": r"c?f(?:p|loat)?8|float8\w*",
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
    ("nvfp4", r"nvfp4|mxf4nvf4|nvf4"),
    ("mxfp4", r"mxfp4|mxf4"),
    ("mxfp8", r"mxfp8|mxf8"),
    ("fp8", r"e4m3\w*e5m2|e5m2\w*e4m3"),  # both encodings: an FP8 matmul of mixed operands
    ("fp8_e4m3", r"e4m3|fp8e4"),
    ("fp8_e5m2", r"e5m2|fp8e5"),
    ("fp8", r"f8f8|_fp8|fp8_|float8|_f8_"),
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
# CUTLASS block-scaled kernels (``cutlass3x_sm100_bstensorop_..._ue8m0xe4m3_ue8m0xe4m3_...``):
# each of A and B is ``<scale type>x<element type>``; a UE8M0 scale is an MX format, a UE4M3 one
# over E2M1 is NVFP4. Triton kernels of triton_kernels (``_matmul_ogs_NNT_bf16xbf16xmxfp4_...``,
# ``_p_matmul_NNT_fp8e4nvxnvfp4xnvfp4_...``) name output x A x B. Both take the wider operand.
_BLOCK_SCALED = re.compile(r"(ue8m0|ue4m3)x([a-z0-9]+?)_(ue8m0|ue4m3)x([a-z0-9]+?)_")
_BLOCK_ELEMENT = {"e4m3": "fp8_e4m3", "e5m2": "fp8_e5m2", "f8": "fp8", "e2m1": "fp4", "f4": "fp4"}
_TRITON_TOKEN = r"mxfp4|mxfp8|nvfp4|fp8e4nv|fp8e4b15|fp8e5|bf16|fp16|fp32|f32|f16"
_TRITON = re.compile(
    rf"_matmul(?:_ogs)?_[a-z]{{3}}_(?:{_TRITON_TOKEN})x({_TRITON_TOKEN})x({_TRITON_TOKEN})(?:_|$)"
)
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


def _map_categories(values, mapper, cache: dict | None = None) -> pd.Categorical:
    """Apply ``mapper`` (categories as str Series -> canonical names or None) to categories only.
    ``cache``: the codes of category lists seen before, by the list (see :data:`_OPERAND_CODES`)."""
    cat = _categorical(values)
    texts = np.asarray(cat.categories.astype(str), dtype=object)
    key = tuple(texts.tolist()) if cache is not None else None
    lookup = cache.get(key) if cache is not None else None
    if lookup is None:
        mapped = mapper(pd.Series(texts))
        # Map each category to its DTYPES code, then index by row (no string hashed per row).
        code_of = {d: i for i, d in enumerate(DTYPES)}
        lookup = np.array(
            [code_of.get(m, -1) if isinstance(m, str) else -1 for m in mapped.tolist()] + [-1],
            dtype=np.int8,
        )
        if cache is not None:
            if len(cache) >= _CACHED_LISTS:  # (one clear: safe beside another thread's use)
                cache.clear()
            cache[key] = lookup
    return pd.Categorical.from_codes(lookup[cat.codes], categories=DTYPES)


#: The dtype codes of the operand texts of the last programs read, by their list of distinct
#: texts: the ranks of a job run one program, so after its first rank a reader (or a worker
#: reading many ranks) finds its operands' dtypes here instead of matching every text again
#: (64 ranks x 100k instructions: 23 ms a rank, 1.5 CPU s in all).
_OPERAND_CODES: dict[tuple, np.ndarray] = {}
_CACHED_LISTS = 8


def normalise(values) -> pd.Categorical:
    """Dtype spellings (``bfloat16``, ``BFloat16``, ``float32``, ``fp8_e4m3``...) -> ``DTYPES``
    names; unknown spellings become missing."""

    def mapper(cats: pd.Series) -> pd.Series:
        out = pd.Series(None, index=cats.index, dtype=object)
        stripped = cats.str.strip()  # once, not once per spelling
        for name, pattern in _EXACT.items():
            hit = out.isna() & stripped.str.match(pattern)
            out[hit] = name
        return out

    return _map_categories(values, mapper)


def from_operands(operands) -> pd.Categorical:
    """The dtype a Neuron instruction's operands (or instruction chain) name: ``src=fp32@...``,
    ``dtype=bfloat16``; missing where they name none."""

    def mapper(cats: pd.Series) -> pd.Series:
        found = cats.str.extract(_OPERAND_DTYPE, expand=False)
        return pd.Series(normalise(found.fillna("")), index=cats.index, dtype=object)

    return _map_categories(operands, mapper, _OPERAND_CODES)


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
        for read in (_block_scaled_dtype, _triton_dtype):
            found = read(low)
            out[out.isna()] = found[out.isna()]
            grammar |= found.notna()
        for name, pattern in _KERNEL_PATTERNS:
            out[out.isna() & ~grammar & low.str.contains(pattern)] = name
        return out

    cat = _categorical(names)
    cats = np.asarray(cat.categories.astype(str), dtype=object)
    # A name's dtype never changes: names classified before (the report asks twice, NUM701
    # and the precision table) are looked up; only new ones go through the patterns.
    new = [c for c in cats.tolist() if c not in _KERNEL_CODES]
    if len(_KERNEL_CODES) + len(new) > _KERNEL_CODES_MAX:  # bounded: start again, these names
        _KERNEL_CODES.clear()
        new = cats.tolist()
    if new:
        codes = _map_categories(pd.Categorical(new), mapper).codes.tolist()
        _KERNEL_CODES.update(zip(new, codes, strict=True))
    lookup = np.array([_KERNEL_CODES[c] for c in cats.tolist()] + [-1], dtype=np.int8)
    return pd.Categorical.from_codes(lookup[cat.codes], categories=DTYPES)


#: Kernel name -> DTYPES code (-1: the name says nothing), filled by :func:`from_kernel_names`.
_KERNEL_CODES: dict[str, int] = {}
_KERNEL_CODES_MAX = 200_000  # distinct names kept before the memo starts again


def _tensile_dtype(low: pd.Series) -> pd.Series:
    """Dtype of Tensile/hipBLASLt kernels (lower-case names) from their types token; else None."""
    token = low.str.extract(_TENSILE, expand=False)
    out = pd.Series(None, index=low.index, dtype=object)
    out[token.notna() & low.str.contains("_xf32")] = "tf32"
    for name, prefix in _TENSILE_TYPE:
        out[out.isna() & token.str.match(prefix).fillna(False).astype(bool)] = name
    return out


def _wider(a: pd.Series, b: pd.Series) -> pd.Series:
    """Per row: the wider of two canonical names (the rate a mixed-operand MMA runs at); the
    known one where only one is; None where neither."""
    wa = a.map(WIDTH).astype(float)
    wb = b.map(WIDTH).astype(float)
    out = a.where(wa.fillna(-1) >= wb.fillna(-1), b)
    return out.where(out.notna(), None).astype(object)


def _block_scaled_dtype(low: pd.Series) -> pd.Series:
    """Dtype of CUTLASS block-scaled GEMMs from their A and B ``<scale>x<element>`` tokens."""
    parts = low.str.extract(_BLOCK_SCALED)
    if not parts.notna().to_numpy().any():  # no such kernel: skip the per-operand steps
        return pd.Series(None, index=low.index, dtype=object)

    def operand(scale: pd.Series, element: pd.Series) -> pd.Series:
        base = element.map(_BLOCK_ELEMENT)
        mx = (scale == "ue8m0") & base.notna()
        out = base.where(~mx, base.map({"fp4": "mxfp4"}).fillna("mxfp8"))
        return out.where(~((scale == "ue4m3") & (base == "fp4")), "nvfp4")

    return _wider(operand(parts[0], parts[1]), operand(parts[2], parts[3]))


def _triton_dtype(low: pd.Series) -> pd.Series:
    """Dtype of triton_kernels matmuls from their ``<out>x<A>x<B>`` token."""
    parts = low.str.extract(_TRITON)
    if not parts.notna().to_numpy().any():  # no such kernel: skip the two normalise calls
        return pd.Series(None, index=low.index, dtype=object)
    a = pd.Series(normalise(parts[0].fillna("")), index=low.index, dtype=object)
    b = pd.Series(normalise(parts[1].fillna("")), index=low.index, dtype=object)
    return _wider(a.where(a.notna(), None), b.where(b.notna(), None))


def _ck_dtype(cats: pd.Series) -> pd.Series:
    """Dtype of Composable Kernel kernels from the first code of their data-type run; else None."""
    run = cats.str.extract(_CK_RUN, expand=False).fillna("")
    first = run.str.extract(r"^(DF16_|DB8_|[tfda])", expand=False)
    return first.map(_CK_TYPE).astype(object).where(first.notna(), None)


def rate_or_name(rate: pd.Categorical, named: pd.Categorical) -> pd.Categorical:
    """Per Neuron instruction: the dtype its text names, unless the rate (``adjusted_flops``
    against ``raw_flops``, :func:`from_flops_ratio`) contradicts it: an FP32 rate always wins
    (the time depends on the rate), an 8-bit-or-faster rate wins over a 16/32-bit name but
    never over a low-precision one (``mxfp8`` is more than the rate can say); the rate alone
    where the text names nothing."""
    low = np.isin(named.codes, [DTYPES.index(d) for d in LOW_PRECISION])
    fp32_rate = rate.codes == DTYPES.index("fp32")
    fp8_rate = (rate.codes == DTYPES.index("fp8")) & ~low
    codes = np.where(fp32_rate | fp8_rate | (named.codes < 0), rate.codes, named.codes)
    return pd.Categorical.from_codes(codes, categories=DTYPES)


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
    # The names as a Categorical of sorted categories, not a string per row: grouped in the
    # same (rank, name) order, then the few result rows get their text column back.
    named = np.append(np.asarray(dtypes.categories.astype(str), dtype=object), "unknown")
    sorted_names, name_code = np.unique(named, return_inverse=True)
    frame = pd.DataFrame(
        {
            "rank": ev[S.RANK].to_numpy()[mask],
            "dtype": pd.Categorical.from_codes(
                name_code[dtypes.codes][mask], categories=pd.Index(sorted_names, dtype="str")
            ),
            "time_ns": ev[S.DUR].to_numpy()[mask],
            "flops": np.nan_to_num(ev[S.FLOPS].to_numpy(dtype=np.float64)[mask])
            if S.FLOPS in ev
            else np.zeros(int(mask.sum())),
        }
    )
    table = (
        frame.groupby(["rank", "dtype"], sort=True, observed=True)
        .agg(events=("time_ns", "size"), time_ns=("time_ns", "sum"), flops=("flops", "sum"))
        .reset_index()
    )
    return table.assign(dtype=table["dtype"].astype("str"))


@dataclass(frozen=True)
class MatmulWork:
    """A trace's matmuls (:func:`matmul_events`), every event's dtype (:func:`event_dtypes`)
    and the matmuls' work per (rank, dtype) (:func:`tensor_work_by_dtype`); the dtypes and the
    table are None without matmuls. What NUM701 and the report's ``precision`` both read."""

    mask: np.ndarray
    dtypes: pd.Categorical | None
    table: pd.DataFrame | None


def matmul_work(trace: S.Trace) -> MatmulWork:
    """The trace's :class:`MatmulWork`."""
    mask = matmul_events(trace)
    if not mask.any():
        return MatmulWork(mask, None, None)
    dtypes = event_dtypes(trace)
    return MatmulWork(mask, dtypes, tensor_work_by_dtype(trace, mask, dtypes))


def precision_records(trace: S.Trace, work: MatmulWork | None = None) -> list[dict]:
    """The JSON report's ``precision``: per rank and format of its matmuls (tensor-engine
    instructions, GPU matmul kernels), their count, summed time (ns) and FLOPs (0 where the
    trace states none), rank then format order; ``unknown`` where no source names the format.
    ``work``: the trace's :func:`matmul_work`, when already made."""
    table = (work or matmul_work(trace)).table
    if table is None:
        return []
    return [
        {
            "rank": int(r.rank),
            "dtype": str(r.dtype),
            "events": int(r.events),
            "time_ns": int(r.time_ns),
            "flops": float(r.flops),
        }
        for r in table.itertuples(index=False)  # one row per (rank, format): a few
    ]
