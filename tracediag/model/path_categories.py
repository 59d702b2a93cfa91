"""The categories of critical-path time, in report order (what each means: see
:mod:`tracediag.graph.critical_path`). A module of its own so that the metric catalog, and
through it the command line's start, need not import the path's numpy/pandas code."""

from __future__ import annotations

CATEGORIES = (
    "compute",
    "dma_transfer",
    "dma_wait",
    "collective_transfer",
    "collective_skew",
    "host",
    "gap",
)
