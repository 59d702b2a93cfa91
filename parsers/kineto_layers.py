"""The model layer of each Kineto slice, from the ranges PyTorch writes around model code.

Two kinds of CPU-thread ranges name model structure: ``user_annotation`` ranges, written by
``torch.profiler.record_function("layer_3")`` (also ``## forward ##``, ``encoder.layers.3``), and,
with module tracking, ``python_function`` ranges named ``nn.Module: <Name>``. A CPU slice's layer
is the innermost annotation enclosing its start, ``ProfilerStep#N`` excepted (a step, not a
layer); without one, the innermost module range (its ``<Name>``). GPU work takes the layer of its
launch call, or of its launching op where only ``External id`` ties the two. Everything else has
no layer.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracediag.parsers.chrome_nesting import SliceNesting
from tracediag.parsers.kineto import FAMILIES, GPU_WORK, PROFILER_STEP, Rows

MODULE_RANGE = re.compile(r"^nn\.Module:\s*(\S.*?)\s*$")


def layers(rows: Rows, launcher: np.ndarray, op_row: np.ndarray) -> pd.Categorical:
    """The ``layer`` column: per slice, the name of the range naming its layer (see module doc).

    ``launcher`` is each slice's launch call (-1), ``op_row`` its launching op (-1), as
    :func:`kineto.launch_edges` and :func:`kineto.launching_ops` give them.
    """
    n = len(rows.family)
    source = np.full(n, -1, dtype=np.int64)  # row of the range naming each slice's layer
    cpu = np.flatnonzero(~rows.on_gpu)
    annotations = rows.where("annotation", gpu=False)
    annotations = annotations[~rows.matches(PROFILER_STEP, annotations)]
    modules = rows.where("python", gpu=False)
    modules = modules[rows.matches(MODULE_RANGE, modules)]
    for ranges in (annotations, modules):  # annotations first; modules fill what is left
        open_rows = cpu[source[cpu] < 0]
        if not len(ranges) or not len(open_rows):
            continue
        nesting = SliceNesting(rows.thread[ranges], rows.ts[ranges], rows.end[ranges])
        inner = nesting.innermost(rows.thread[open_rows], rows.ts[open_rows])
        source[open_rows] = np.where(inner >= 0, ranges[np.maximum(inner, 0)], -1)
        # A range names its own layer, not a shorter one starting at the same time.
        is_open = np.zeros(n, dtype=bool)
        is_open[open_rows] = True
        own = ranges[is_open[ranges]]
        source[own] = own
    gpu = rows.where(*GPU_WORK, gpu=True)
    from_op = gpu[(launcher[gpu] < 0) & (op_row[gpu] >= 0)]
    source[from_op] = source[op_row[from_op]]
    launched = gpu[launcher[gpu] >= 0]
    source[launched] = source[launcher[launched]]
    return _labels(rows, source)


def _labels(rows: Rows, source: np.ndarray) -> pd.Categorical:
    """Categorical of the layer names of the source ranges (missing where ``source`` is -1): an
    annotation's name, a module range's ``<Name>``."""
    n_names = len(rows.name_categories)
    has = np.flatnonzero(source >= 0)  # the work is on the rows with a layer only
    src = source[has]
    is_module = rows.family[src] == FAMILIES.index("python")
    key = rows.name_codes[src] + is_module * n_names
    used = np.flatnonzero(np.bincount(key, minlength=2 * n_names))  # sorted, distinct
    # A loop over distinct range names, not events.
    label = [
        MODULE_RANGE.match(t).group(1) if k >= n_names else t
        for k, t in ((k, str(rows.name_categories[k % n_names])) for k in used)
    ]
    label_codes, categories = pd.factorize(np.array(label, dtype=object))
    remap = np.full(2 * n_names, -1, dtype=np.int64)
    remap[used] = label_codes
    codes = np.full(len(source), -1, dtype=np.int64)
    codes[has] = remap[key]
    return pd.Categorical.from_codes(codes, categories=pd.Index(categories, dtype=object))
