"""Precision faults and what the device tables say of them.

fp32_matmul: some layer's matmuls run in FP32. The fault slows the MATMULs of its layers by the NeuronCore's BF16/FP32 peak ratio (the
scheduler does the rest, see :mod:`faults`); here the tables learn the dtype: the operands name
``src=fp32@...`` and ``adjusted_flops`` (BF16-equivalent) is ``raw_flops`` x that ratio, as the
Neuron profiler reports an FP32 matmul.

numerical_error: some layer's forward matmuls produce NaN; the profile's ``Error`` table gets one
row per such instruction, at its end. Nothing else changes.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracediag.generator import hardware as hw
from tracediag.generator.faults import Fault, node_mask
from tracediag.generator.simulate import DeviceRun

#: How much longer an FP32 matmul takes than a BF16 one (95 / 23.75 TFLOP/s on trn1).
FP32_SLOWDOWN = hw.TENSOR_PEAK_FLOPS_PER_NS / hw.TENSOR_PEAK_FP32_FLOPS_PER_NS
NUMERICAL_ERROR_TYPE_ID = 7  # assumed: the reference lists no ErrorType values


def fp32_matmul_fault(layer: int, ranks: tuple[int, ...] | None = None) -> Fault:
    """Layer ``layer``'s tensor-engine MATMULs (forward and backward) run in FP32."""
    return Fault("fp32_matmul", ranks, (layer,), engines=("tensor",), factor=FP32_SLOWDOWN)


def fp32_nodes(run: DeviceRun, rank: int) -> np.ndarray:
    """Boolean mask of the program nodes that run in FP32 on ``rank``."""
    mask = np.zeros(len(run.program), dtype=bool)
    for fault in run.faults:
        if fault.kind == "fp32_matmul" and fault.rank_mask(run.ranks)[rank]:
            mask |= node_mask(fault, run.program)
    return mask


def instruction_dtype_fields(
    run: DeviceRun, rank: int, rows: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(operands, adjusted_flops) of the instruction nodes ``rows`` on ``rank``."""
    operands = run.program.operands[rows]
    adjusted = run.program.flops[rows].astype(np.int64)
    fp32 = fp32_nodes(run, rank)[rows]
    if fp32.any():
        operands = operands.copy()
        as_fp32 = pd.Series(operands[fp32], dtype=object).str.replace("src=bf16@", "src=fp32@")
        operands[fp32] = as_fp32.to_numpy(dtype=object)
        adjusted = adjusted.copy()
        adjusted[fp32] = np.rint(adjusted[fp32] * FP32_SLOWDOWN).astype(np.int64)
    return operands, adjusted


def error_rows(run: DeviceRun, rank: int, end: np.ndarray) -> pd.DataFrame | None:
    """The ``Error`` table of ``rank``: a numerical error at the end of every node a
    ``numerical_error`` fault hits (``end``: node end times on the rank's clock); None without
    such a fault. The type and id are our choice: the schema leaves ErrorType's values open."""
    hit = np.zeros(len(run.program), dtype=bool)
    for fault in run.faults:
        if fault.kind == "numerical_error" and fault.rank_mask(run.ranks)[rank]:
            hit |= node_mask(fault, run.program)
    if not hit.any():
        return None
    rows = np.flatnonzero(hit)
    return pd.DataFrame(
        {
            "description": "numerical_err",
            "error_type_id": np.full(len(rows), NUMERICAL_ERROR_TYPE_ID, dtype=np.int32),
            "metadata": "NaN in PSUM output",
            "pcore_idx": 0,
            "timestamp": np.sort(end[rows]),
            "type": "NUMERICAL",
        }
    )
