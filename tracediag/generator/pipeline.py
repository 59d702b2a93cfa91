"""The program of a dp x tp x pp training step: every stage's 1F1B schedule in one node list.

Each stage runs its slice of the layers for ``m`` micro-batches in the 1F1B order (``p - s - 1``
warm-up forwards, then one forward and one backward in turn, then the cool-down backwards).
Stages exchange activations (forward) and gradients (backward) by a Send on one stage paired
with a Recv on the next: both start together once both have arrived (triggered). With ``tp > 1``
every matmul's output is all-reduced over the tensor-parallel group, per token tile so that the
next tile's matmul hides it (``exposed_tp``: the forward AllReduce waits for the whole layer and
the layer's post-processing waits for it). With ``dp > 1`` each layer's weight gradient is
all-reduced over the data-parallel group after its last backward. The optimizer follows.

The nodes of all stages are emitted in one order that respects every stage's program order and
every dependency (a merge of the stages' 1F1B sequences); a Send/Recv pair is emitted as two
consecutive nodes. The scheduler (:mod:`parallel_sim`) runs them for every lane at once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tracediag.generator import hardware as hw
from tracediag.generator.builder import ProgramBuilder
from tracediag.generator.faults import layer_name
from tracediag.generator.parallel_layout import ParallelLayout
from tracediag.generator.program import CC, INSTR, Program, WorkloadShape
from tracediag.generator.workload import loss

#: How a node synchronises with other ranks: nothing, its TP group, its DP group, its Send/Recv
#: partner, or the model-parallel group (every stage's TP group: the gradient norm's AllReduce).
NO_SYNC, TP_SYNC, DP_SYNC, P2P_SYNC, MP_SYNC = 0, 1, 2, 3, 4


@dataclass(frozen=True)
class ParallelProgram:
    """The merged program of every stage, with what each node synchronises with."""

    program: Program
    layout: ParallelLayout
    micro_batches: int
    stage: np.ndarray  # int16 (N): stage running the node
    sync: np.ndarray  # int8 (N): NO_SYNC, TP_SYNC, DP_SYNC, P2P_SYNC
    p2p_stream: np.ndarray  # int16 (N): 2 * link + direction of a Send/Recv, else -1

    @property
    def layers_per_stage(self) -> int:
        """Layers each stage holds."""
        return self.program.shape.layers // self.layout.pp


def one_f_one_b(stage: int, stages: int, micro_batches: int) -> list[tuple[str, int]]:
    """The 1F1B order of one stage: ``("F", j)`` and ``("B", j)`` items."""
    warm = min(stages - stage - 1, micro_batches)
    order = [("F", j) for j in range(warm)]
    for j in range(micro_batches - warm):
        order += [("F", warm + j), ("B", j)]
    order += [("B", j) for j in range(micro_batches - warm, micro_batches)]
    return order


class _Builder(ProgramBuilder):
    """A ProgramBuilder that also records each node's stage and synchronisation."""

    def __init__(self, shape: WorkloadShape):
        super().__init__(shape, [])
        self.stage_now = 0
        self.sync_now = NO_SYNC
        self.stream_now = -1
        self.stages: list[int] = []
        self.syncs: list[int] = []
        self.streams: list[int] = []

    def node(self, kind: int, resource: str, deps: list[int], lat: int = 0, **cols) -> int:
        index = super().node(kind, resource, deps, lat, **cols)
        self.stages.append(self.stage_now)
        self.syncs.append(self.sync_now if kind == CC else NO_SYNC)
        self.streams.append(self.stream_now if kind == CC else -1)
        return index

    def trigger(self, layer: str, phase: str, deps: list[int], what: str) -> int:
        """The gpsimd instruction that triggers a collective."""
        operands = f"$S[15]>=1 $S[15]++@complete ctype={what} dtype=bfloat16 stream_id=0"
        return self.node(
            INSTR,
            "gpsimd",
            deps,
            opcode="PSEUDO_TRIGGER_COLLECTIVE",
            hlo_name=self.hlo(f"{what.lower()}-start"),
            layer=layer,
            phase=phase,
            operands=operands,
            work_ns=hw.TRIGGER_NS,
        )

    def cc(self, opcode: str, sync: int, layer: str, phase: str, trigger: int, elements: int):
        """A collective node (its only dependency is its trigger)."""
        self.sync_now = sync
        index = self.node(
            CC,
            hw.CC_STREAM,
            [trigger],
            opcode=opcode,
            hlo_name=self.hlo(opcode.lower()),
            layer=layer,
            phase=phase,
            elements=elements,
            nbytes=elements * 2,
        )
        self.sync_now = NO_SYNC
        return index

    def group_collective(self, opcode, sync, layer, phase, deps, elements) -> int:
        """Trigger and collective over the TP or DP group."""
        return self.cc(
            opcode, sync, layer, phase, self.trigger(layer, phase, deps, opcode), elements
        )


@dataclass
class _State:
    """What the merge has emitted so far and the data the stages pass on."""

    weights: dict  # global layer -> its parameter load
    outputs: dict  # (stage, "F"|"B", j) -> tiles leaving the stage
    saved: dict  # (layer, j) -> the tiles that entered the layer in forward
    wgrad: dict  # layer -> last weight-gradient MATMUL (accumulates over micro-batches)
    triggers: dict  # (dir, link, j) -> {"send"|"recv": (trigger node, layer name)}
    received: dict  # (dir, link, j) -> the Recv node


def build_parallel_program(
    shape: WorkloadShape, layout: ParallelLayout, micro_batches: int, exposed_tp: bool = False
) -> ParallelProgram:
    """Merge every stage's 1F1B sequence into one program (see the module docstring)."""
    if shape.layers % layout.pp:
        raise ValueError(f"{shape.layers} layers do not split into {layout.pp} stages")
    b = _Builder(shape)
    st = _State({}, {}, {}, {}, {}, {})
    per_stage = shape.layers // layout.pp
    items = [_items(s, layout.pp, micro_batches) for s in range(layout.pp)]
    for s in range(layout.pp):
        b.stage_now = s
        for i in range(per_stage):
            layer = s * per_stage + i
            st.weights[layer] = b.dma(
                "sync",
                hw.WEIGHT_QUEUE,
                "weight",
                "fwd",
                layer,
                256 * 1024,
                f"{layer_name(layer)}.norm",
                "read",
                [],
            )
    pos = [0] * layout.pp
    while any(pos[s] < len(items[s]) for s in range(layout.pp)):
        moved = False
        for s in range(layout.pp):
            while pos[s] < len(items[s]) and _emit(b, st, layout, s, items[s][pos[s]], exposed_tp):
                pos[s] += 1
                moved = True
        if not moved:  # pragma: no cover - 1F1B with non-blocking posts cannot deadlock
            raise RuntimeError("pipeline schedule deadlocked")
    _finish(b, st, layout)
    program = b.finish()
    return ParallelProgram(
        program=program,
        layout=layout,
        micro_batches=micro_batches,
        stage=np.array(b.stages, dtype=np.int16),
        sync=np.array(b.syncs, dtype=np.int8),
        p2p_stream=np.array(b.streams, dtype=np.int16),
    )


def _items(stage: int, stages: int, micro_batches: int) -> list[tuple]:
    """A stage's sequence: receive posts, forward/backward work and send posts."""
    out: list[tuple] = []
    for work, j in one_f_one_b(stage, stages, micro_batches):
        if work == "F":
            out += [("recv", "f", j)] if stage > 0 else []
            out += [("F", j)] + ([("send", "f", j)] if stage < stages - 1 else [])
        else:
            out += [("recv", "b", j)] if stage < stages - 1 else []
            out += [("B", j)] + ([("send", "b", j)] if stage > 0 else [])
    return out


def _link(stage: int, role: str, direction: str) -> int:
    """The link (lower stage of the pair) a stage's send or recv in ``direction`` uses."""
    towards_next = (role == "send") == (direction == "f")
    return stage if towards_next else stage - 1


def _emit(b: _Builder, st: _State, layout: ParallelLayout, s: int, item: tuple, exposed: bool):
    """Emit one item of stage ``s``; False when it must wait for another stage."""
    b.stage_now = s
    per_stage = b.shape.layers // layout.pp
    layers = range(s * per_stage, (s + 1) * per_stage)
    if item[0] in ("send", "recv"):
        role, direction, j = item
        key = (direction, _link(s, role, direction), j)
        tag = f"{layer_name(layers[-1] if (role == 'send') == (direction == 'f') else layers[0])}"
        deps = list(st.outputs[(s, direction.upper(), j)]) if role == "send" else []
        phase = "fwd" if direction == "f" else "bwd"
        trig = b.trigger(tag, phase, deps, role.upper())
        st.triggers.setdefault(key, {})[role] = (trig, tag)
        if len(st.triggers[key]) == 2:
            _pair(b, st, layout, key, phase)
        return True
    work, j = item
    if work == "F":
        if s > 0 and ("f", s - 1, j) not in st.received:
            return False
        tiles = [st.received[("f", s - 1, j)]] * b.shape.tiles if s > 0 else [-1] * b.shape.tiles
        for layer in layers:
            st.saved[(layer, j)] = tiles
            tiles = _forward(b, st, layout, layer, tiles, exposed)
        st.outputs[(s, "F", j)] = tiles
        return True
    if s < layout.pp - 1 and ("b", s, j) not in st.received:
        return False
    if s < layout.pp - 1:
        grads = [st.received[("b", s, j)]] * b.shape.tiles
    else:
        grads = loss(b, st.outputs[(s, "F", j)])
    for layer in reversed(layers):
        grads = _backward(b, st, layout, layer, j, grads)
    st.outputs[(s, "B", j)] = grads
    return True


def _pair(b: _Builder, st: _State, layout: ParallelLayout, key: tuple, phase: str) -> None:
    """The Send (sender's stage) and Recv (receiver's stage) nodes of one transfer."""
    direction, link, j = key
    sender, receiver = (link, link + 1) if direction == "f" else (link + 1, link)
    elements = b.shape.tokens * b.shape.hidden
    b.stream_now = 2 * link + (0 if direction == "f" else 1)
    for stage, role in ((sender, "send"), (receiver, "recv")):
        b.stage_now = stage
        trig, tag = st.triggers[key][role]
        node = b.cc(role.capitalize(), P2P_SYNC, tag, phase, trig, elements)
    b.stream_now = -1
    st.received[key] = node


def _forward(b: _Builder, st: _State, layout: ParallelLayout, layer: int, inputs, exposed: bool):
    s, name = b.shape, layer_name(layer)
    rows = s.tokens // s.tiles
    tp = layout.tp > 1
    mms = []
    outputs = []
    for tile in range(s.tiles):
        deps = [st.weights[layer]] + ([inputs[tile]] if inputs[tile] >= 0 else [])
        mms.append(b.matmul(name, "fwd", deps, rows, s.hidden, s.hidden, True))
    if tp and exposed:
        whole = b.group_collective(
            "AllReduce", TP_SYNC, name, "fwd", [mms[-1]], rows * s.tiles * s.hidden
        )
        reduced = [whole] * s.tiles
    elif tp:
        reduced = [
            b.group_collective("AllReduce", TP_SYNC, name, "fwd", [mm], rows * s.hidden)
            for mm in mms
        ]
    else:
        reduced = mms
    n = s.tile_elements
    for tile in range(s.tiles):
        add = b.elementwise("vector", "TENSOR_TENSOR", "add", name, "fwd", [reduced[tile]], n, 1.5)
        outputs.append(b.elementwise("scalar", "ACTIVATE", "gelu", name, "fwd", [add], n))
    return outputs


def _backward(b: _Builder, st: _State, layout: ParallelLayout, layer: int, j: int, grads):
    s, name = b.shape, layer_name(layer)
    rows = s.tokens // s.tiles
    saved = st.saved[(layer, j)]
    outputs = []
    for tile in range(s.tiles):
        dgrad = b.matmul(
            name, "bwd", [st.weights[layer], grads[tile]], rows, s.hidden, s.hidden, True
        )
        first = [grads[tile]] + ([saved[tile]] if saved[tile] >= 0 else [])
        prev = [st.wgrad[layer]] if layer in st.wgrad else []
        st.wgrad[layer] = b.matmul(name, "bwd", first + prev, rows, s.hidden, s.hidden, True)
        if layout.tp > 1:
            dgrad = b.group_collective("AllReduce", TP_SYNC, name, "bwd", [dgrad], rows * s.hidden)
        post = b.elementwise(
            "vector", "TENSOR_TENSOR", "multiply", name, "bwd", [dgrad], s.tile_elements
        )
        outputs.append(
            b.elementwise(
                "scalar", "ACTIVATE", "gelu-backward", name, "bwd", [post], s.tile_elements
            )
        )
    return outputs


def _finish(b: _Builder, st: _State, layout: ParallelLayout) -> None:
    """Per stage: gradient AllReduce over the DP group (dp > 1) after each layer's last
    backward; the gradient norm, all-reduced over the model-parallel group (every stage of the
    rank's TP group, as gradient clipping does); then the optimizer."""
    params = b.shape.hidden * b.shape.hidden // layout.tp
    per_stage = b.shape.layers // layout.pp
    norms = []
    for s in range(layout.pp):
        b.stage_now = s
        ready = []
        for layer in reversed(range(s * per_stage, (s + 1) * per_stage)):
            name = layer_name(layer)
            cast = b.elementwise(
                "vector", "TENSOR_SCALAR", "convert", name, "bwd", [st.wgrad[layer]], params
            )
            if layout.dp > 1:
                cast = b.group_collective("AllReduce", DP_SYNC, name, "bwd", [cast], params)
            ready.append(cast)
        norm = b.elementwise(
            "vector", "TENSOR_REDUCE", "reduce", "optimizer", "opt", ready, params * per_stage // 8
        )
        norms.append(
            b.trigger("optimizer", "opt", [norm], "ALL_REDUCE")
            if layout.tp * layout.pp > 1
            else norm
        )
    if layout.tp * layout.pp > 1:
        for s in range(layout.pp):  # consecutive: the scheduler synchronises them as one
            b.stage_now = s
            norms[s] = b.cc("AllReduce", MP_SYNC, "optimizer", "opt", norms[s], 1024)
    for s in range(layout.pp):
        b.stage_now = s
        for _ in range(per_stage):
            b.elementwise("vector", "TENSOR_TENSOR", "adam", "optimizer", "opt", [norms[s]], params)
