"""The user source line of each Kineto slice, from the Python frames ``with_stack=True`` records.

With ``torch.profiler.profile(with_stack=True)`` the trace holds one ``python_function`` range
per Python call on the CPU thread, named ``<file>(<line>): <function>``, e.g.
``transformers/models/qwen2/modeling_qwen2.py(221): forward``; the ranges nest like the call
stack. (No real trace in ``../shared/traces`` carries a ``Source``/``stack`` arg on its ops: the
frames are the only source of lines. Inductor's ``kernel_file`` names generated code, not a line.)

A CPU slice's source line is the innermost *user* frame enclosing its start; GPU work takes its
launch call's line, else its launching op's (``External id``), as the layer does. A frame is
*not* user code when it is

- not a file (``<built-in ...>``, ``<frozen os>``, ``<string>``) or a module range
  (``nn.Module: Linear_0``, which has no line);
- inside PyTorch or its compilers (:data:`FRAMEWORK`: where every op is made, so it would name
  ``torch/nn/modules/linear.py`` for every matmul);
- in Python's standard library (``threading.py``, ``multiprocessing/spawn.py``: the first path
  component is one of ``sys.stdlib_module_names``).

Kineto writes a file relative to its ``sys.path`` entry, so a third-party model library
(``transformers/...``, ``torchvision/models/resnet.py``) reads like the user's own package: it is
kept, being the code that says which layer issues the op (a path that still holds
``site-packages/`` is judged by the package after it). The line is the one Kineto writes: the
function's first line (the frame is recorded at its entry), not the call site.

The line is written ``<file>:<line> (<function>)``, so that ``short_line`` gives
``modeling_qwen2.py:221 (forward)``. Slices without a user frame, and every slice of a trace
without ``python_function`` ranges, have none (the column is then left out).
"""

from __future__ import annotations

import re
import sys

import numpy as np
import pandas as pd

from tracediag.model import schema as S
from tracediag.parsers.chrome_nesting import SliceNesting
from tracediag.parsers.kineto import FAMILIES, GPU_WORK, Rows

#: ``<file>(<line>): <function>``, as PyTorch's Python tracer names a frame.
FRAME = re.compile(r"^(?P<file>[^<].*?)\((?P<line>\d+)\): (?P<function>.+)$")
#: Top-level packages of PyTorch and its compilers: never the user's line.
FRAMEWORK = frozenset({"torch", "functorch", "torchgen", "triton", "torch_xla"})
#: What an installed package's path holds before the package (cut off before judging it).
_INSTALLED = re.compile(r"^.*/(?:site-packages|dist-packages)/")
_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ())) - {"__main__"}


def user_label(frame_name: str) -> str:
    """The source line a frame name gives (``file:line (function)``), "" for no user frame."""
    m = FRAME.match(frame_name)
    if not m:
        return ""
    path = m.group("file")
    package = _INSTALLED.sub("", path).lstrip("/").split("/", 1)[0]
    package = package[:-3] if package.endswith(".py") else package
    if package in FRAMEWORK or package in _STDLIB:
        return ""
    return f"{path}:{m.group('line')} ({m.group('function')})"


def source_lines(rows: Rows, launcher: np.ndarray, op_row: np.ndarray) -> pd.Categorical | None:
    """The ``source_location`` column (see the module docstring); None when the trace has no
    user frame at all. ``launcher`` and ``op_row`` as :func:`kineto.launch_edges` and
    :func:`kineto.launching_ops` give them."""
    frames = rows.where("python", gpu=False)
    if not len(frames):
        return None
    # Judged once per distinct frame name, not per frame.
    label = np.array([user_label(str(n)) for n in rows.name_categories], dtype=object)
    frames = frames[label[rows.name_codes[frames]] != ""]
    if not len(frames):
        return None
    n = len(rows.family)
    source = np.full(n, -1, dtype=np.int64)  # row of each slice's user frame
    # The user frames of one thread nest (a subset of a call stack still nests), so the
    # innermost user frame enclosing a point is the innermost enclosing frame that is user code.
    cpu = np.flatnonzero(~rows.on_gpu & (rows.family != FAMILIES.index("python")))
    nesting = SliceNesting(rows.thread[frames], rows.ts[frames], rows.end[frames])
    inner = nesting.innermost(rows.thread[cpu], rows.ts[cpu])
    source[cpu] = np.where(inner >= 0, frames[np.maximum(inner, 0)], -1)
    _backward_from_forward(rows, cpu, source)
    gpu = rows.where(*GPU_WORK, gpu=True)
    from_op = gpu[(launcher[gpu] < 0) & (op_row[gpu] >= 0)]
    source[from_op] = source[op_row[from_op]]
    launched = gpu[launcher[gpu] >= 0]
    source[launched] = source[launcher[launched]]
    return _labels(rows, source, label)


def _backward_from_forward(rows: Rows, cpu: np.ndarray, source: np.ndarray) -> None:
    """Give backward ops without a user frame their forward op's frame, in place (``source``:
    frame row per slice, -1 for none), and the slices they enclose theirs.

    Autograd runs backward ops on its own thread, where no user frame encloses them. PyTorch
    gives a backward op (``args["Fwd thread id"]`` > 0) the ``Sequence number`` of the forward
    op that made its autograd node: the forward op of that number in the same process (the
    first by time with a user frame; the ops it calls share the number and the frame) names the
    line. An op a user frame encloses (a custom ``autograd.Function.backward``) keeps its own.
    """
    seq = rows.args.number("Sequence number", cpu)
    fwd_thread = rows.args.number("Fwd thread id", cpu)
    numbered = np.isfinite(seq) & (seq >= 0)
    if not numbered.any():
        return
    backward = numbered & (np.nan_to_num(fwd_thread) > 0)
    forward = numbered & ~backward & (source[cpu] >= 0)
    if not backward.any() or not forward.any():
        return
    # One key per (process, sequence number); the first forward op by time wins.
    key = rows.pid_codes[cpu].astype(np.int64) * (1 << 40) + np.where(numbered, seq, 0).astype(
        np.int64
    )
    fwd = np.flatnonzero(forward)
    fwd = fwd[np.lexsort((rows.ts[cpu[fwd]], key[fwd]))]
    keys, first = np.unique(key[fwd], return_index=True)
    frame_of_key = source[cpu[fwd[first]]]
    bwd = np.flatnonzero(backward & (source[cpu] < 0))
    at = np.minimum(np.searchsorted(keys, key[bwd]), len(keys) - 1)
    found = keys[at] == key[bwd]
    source[cpu[bwd[found]]] = frame_of_key[at[found]]
    # The slices a backward op encloses (its aten ops, their launch calls) take its line.
    ops = cpu[backward & (source[cpu] >= 0)]
    rest = cpu[source[cpu] < 0]
    if not len(ops) or not len(rest):
        return
    nesting = SliceNesting(rows.thread[ops], rows.ts[ops], rows.end[ops])
    inner = nesting.innermost(rows.thread[rest], rows.ts[rest])
    source[rest[inner >= 0]] = source[ops[inner[inner >= 0]]]


def _labels(rows: Rows, source: np.ndarray, label: np.ndarray) -> pd.Categorical:
    """Categorical of the frames' labels (missing where ``source`` is -1), from name codes."""
    has = source >= 0
    name = np.where(has, rows.name_codes[np.maximum(source, 0)], -1)
    used = np.unique(name[has])
    codes, categories = pd.factorize(label[used])
    remap = np.full(len(label) + 1, -1, dtype=np.int64)  # last: for -1
    remap[used] = codes
    return pd.Categorical.from_codes(remap[name], categories=pd.Index(categories, dtype=object))


def add_source_lines(events: pd.DataFrame, rows: Rows, launcher, op_row) -> None:
    """Set ``events``' ``source_location`` column (in place) when the trace has user frames."""
    column = source_lines(rows, launcher, op_row)
    if column is not None:
        events[S.SOURCE] = column
