"""The step's program: forward over the layers, loss, backward in reverse, optimizer.

Per layer: a sync-engine trigger starts the weight DMA on qSyncIO0 (double-buffered: the next
layer's weights load while this layer computes); per token tile, MATMULs on the tensor engine
read the weights and the previous layer's tile, vector instructions post-process, and a scalar
ACTIVATE produces the tile the next layer reads. Forward saves each layer's activation on
qVectorIO0 (but the last, still in SBUF); backward reloads it (one layer ahead) for the
weight-gradient MATMULs, casts the weight gradient and triggers its AllReduce from gpsimd.
The optimizer waits for every AllReduce.
"""

from __future__ import annotations

from tracediag.generator import hardware as hw
from tracediag.generator.builder import ProgramBuilder
from tracediag.generator.faults import Fault, layer_name
from tracediag.generator.program import Program, WorkloadShape


def build_program(shape: WorkloadShape, faults: list[Fault]) -> Program:
    """Build the step's program; a fragmented_dma fault changes how its DMA is split."""
    b = ProgramBuilder(shape, faults)
    uses = [("fwd", i) for i in range(shape.layers)]
    uses += [("bwd", i) for i in reversed(range(shape.layers))]
    weights: list[int] = []  # last transfer of each weight load, in use order
    weight_readers: list[int] = []  # last MATMUL reading each weight load
    saved: dict[int, int] = {}  # layer -> its activation save DMA
    reloads: list[int] = []  # activation reload DMAs, in backward order
    reload_readers: list[int] = []  # last MATMUL reading each reload

    def load_weights(use: int) -> None:
        phase, layer = uses[use]
        # Double buffering: this load overwrites the buffer of the load before last.
        deps = [weight_readers[use - 2]] if use >= 2 else []
        nbytes = shape.weight_bytes
        weights.append(
            b.dma(
                "sync",
                hw.WEIGHT_QUEUE,
                "weight",
                phase,
                layer,
                nbytes,
                f"{layer_name(layer)}.weight",
                "read",
                deps,
            )
        )

    def reload_activation(j: int) -> None:
        layer = shape.layers - 1 - j
        deps = [saved[layer]] + ([reload_readers[j - 2]] if j >= 2 else [])
        nbytes = shape.tile_elements * shape.tiles * 2
        reloads.append(
            b.dma(
                "vector",
                hw.ACTIVATION_QUEUE,
                "act_load",
                "bwd",
                layer,
                nbytes,
                f"{layer_name(layer)}.activation",
                "read",
                deps,
            )
        )

    load_weights(0)
    tiles = [-1] * shape.tiles
    for use, (phase, layer) in enumerate(uses):
        if use + 1 < len(uses):
            load_weights(use + 1)
        if phase == "fwd":
            tiles, reader = forward_layer(b, layer, weights[use], tiles)
            weight_readers.append(reader)
            if layer < shape.layers - 1:
                nbytes = shape.tile_elements * shape.tiles * 2
                saved[layer] = b.dma(
                    "vector",
                    hw.ACTIVATION_QUEUE,
                    "act_save",
                    "fwd",
                    layer,
                    nbytes,
                    f"{layer_name(layer)}.activation",
                    "write",
                    [tiles[-1]],
                )
            else:
                # The last layer's activation is still in SBUF when backward starts.
                reloads.append(tiles[-1])
                tiles = loss(b, tiles)
            continue
        j = use - shape.layers
        if j + 1 < shape.layers:
            reload_activation(j + 1)
        tiles, weight_reader, act_reader = backward_layer(b, layer, weights[use], reloads[j], tiles)
        weight_readers.append(weight_reader)
        reload_readers.append(act_reader)
    optimizer(b)
    return b.finish()


def forward_layer(b: ProgramBuilder, layer: int, weight: int, inputs: list[int]):
    """Per tile: MATMULs, bias+residual, norm statistics, normalize (vector), GELU (scalar).

    Returns (the tiles' ACTIVATE nodes, the last MATMUL reading the weights).
    """
    s, name = b.shape, layer_name(layer)
    rows, k = s.tokens // s.tiles, s.hidden // s.k_splits
    outputs = []
    matmul = -1
    for tile in range(s.tiles):
        for split in range(s.k_splits):
            if split == 0:
                deps = [weight] + ([inputs[tile]] if inputs[tile] >= 0 else [])
            else:
                deps = [matmul]
            matmul = b.matmul(name, "fwd", deps, rows, k, s.hidden, split == s.k_splits - 1)
        n = s.tile_elements
        add = b.elementwise("vector", "TENSOR_TENSOR", "add", name, "fwd", [matmul], n, 1.5)
        stats = b.elementwise("vector", "TENSOR_REDUCE", "reduce", name, "fwd", [add], n)
        norm = b.elementwise("vector", "TENSOR_SCALAR", "multiply", name, "fwd", [stats], n)
        outputs.append(b.elementwise("scalar", "ACTIVATE", "gelu", name, "fwd", [norm], n))
    return outputs, matmul


def loss(b: ProgramBuilder, logits: list[int]) -> list[int]:
    """Per tile: log-sum-exp statistics (vector) and exp (scalar): the first gradient tiles."""
    n = b.shape.tile_elements
    grads = []
    for tile in logits:
        lse = b.elementwise("vector", "TENSOR_REDUCE", "reduce", "loss", "loss", [tile], n)
        grads.append(b.elementwise("scalar", "ACTIVATE", "exponential", "loss", "loss", [lse], n))
    return grads


def backward_layer(b: ProgramBuilder, layer: int, weight: int, activation: int, grads: list[int]):
    """Per tile: input-gradient and weight-gradient MATMULs, GELU backward; then the AllReduce.

    Returns (the new gradient tiles, the last weight reader, the last activation reader).
    """
    s, name = b.shape, layer_name(layer)
    rows, k = s.tokens // s.tiles, s.hidden // s.k_splits
    outputs = []
    wgrad = -1
    for tile in range(s.tiles):
        dgrad = -1
        for split in range(s.k_splits):
            deps = [weight, grads[tile]] if split == 0 else [dgrad]
            dgrad = b.matmul(name, "bwd", deps, rows, k, s.hidden, split == s.k_splits - 1)
        for split in range(s.k_splits):
            # Weight-gradient MATMULs accumulate across tiles into one PSUM result.
            first = [activation, grads[tile]] + ([wgrad] if wgrad >= 0 else [])
            deps = first if split == 0 else [wgrad]
            wgrad = b.matmul(name, "bwd", deps, rows, k, s.hidden, split == s.k_splits - 1)
        n = s.tile_elements
        post = b.elementwise("vector", "TENSOR_TENSOR", "multiply", name, "bwd", [dgrad], n)
        outputs.append(b.elementwise("scalar", "ACTIVATE", "gelu-backward", name, "bwd", [post], n))
    params = s.hidden * s.hidden
    cast = b.elementwise("vector", "TENSOR_SCALAR", "convert", name, "bwd", [wgrad], params)
    b.collective(name, "bwd", [cast], params)
    return outputs, dgrad, wgrad


def optimizer(b: ProgramBuilder) -> None:
    """Global gradient norm over every AllReduce's result, then one Adam update per layer."""
    s = b.shape
    reduces = [i for i, opcode in enumerate(b.opcodes) if opcode == "AllReduce"]
    params = s.hidden * s.hidden
    norm = b.elementwise(
        "vector", "TENSOR_REDUCE", "reduce", "optimizer", "opt", reduces, params * s.layers // 8
    )
    scale = b.elementwise("scalar", "ACTIVATE", "rsqrt", "optimizer", "opt", [norm], 128)
    for _ in range(s.layers):
        b.elementwise("vector", "TENSOR_TENSOR", "adam", "optimizer", "opt", [scale], params)
