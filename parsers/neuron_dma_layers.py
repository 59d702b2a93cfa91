"""The layer a Neuron DMA transfer belongs to, from the name of the tensor it moves.

DMA tables carry no layer; their ``variable`` names the tensor (``layers.2.mlp.weight``,
``layer_0.weight``, ``spill.layers.1.attn.act``) while instructions carry the compiler's layer
labels (``layer_2``, ``model/NeuronLlamaDecoderLayer[2]/mlp``). A transfer takes the label of
the rank's instructions that names the same layer number, preferring, when several do, the one
sharing most words with the tensor's name (``mlp`` against ``self_attn``); none when still
ambiguous or when the tensor names no layer (``input0``). The consumer of a transfer is never
used: a prefetch loads the next layers' tensors while the current layer computes.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

#: The layer number in a tensor's or a label's name: ``layers.2``, ``layer_0``, ``Layer[3]``,
#: ``blocks.1``, GPT-2's ``h.5``.
_LAYER_NUMBER = re.compile(r"(?:layers?|blocks?)[._\[\-]?(\d+)|(?:^|[^a-z])h[._](\d+)")
_WORD = re.compile(r"[a-z]{3,}")
#: Words every layer's names share: they tell no layer from another.
_GENERIC = frozenset({"layer", "layers", "block", "blocks", "model", "weight", "bias", "spill"})


def _number(name: str) -> int | None:
    match = _LAYER_NUMBER.search(name.lower())
    if not match:
        return None
    return int(match.group(1) or match.group(2))


def _words(name: str) -> set[str]:
    return set(_WORD.findall(name.lower())) - _GENERIC


def _label_for(tensor: str, by_number: dict[int, list[str]]) -> str | None:
    number = _number(tensor)
    candidates = by_number.get(number, []) if number is not None else []
    if len(candidates) <= 1:
        return candidates[0] if candidates else None
    words = _words(tensor)
    score = [len(words & _words(c)) for c in candidates]
    best = max(score)
    winners = [c for c, s in zip(candidates, score, strict=True) if s == best]
    return winners[0] if len(winners) == 1 else None


def layers_from_tensors(tensors: pd.Categorical, layers: pd.Categorical) -> pd.Categorical:
    """Per DMA row (``tensors``: the tensor names), the instruction layer label (of the
    distinct ``layers`` of the rank) its tensor belongs to; missing where none is certain.

    Works on the distinct names only: its cost does not grow with the number of rows."""
    by_number: dict[int, list[str]] = {}
    for label in layers.categories[np.unique(layers.codes[layers.codes >= 0])]:
        number = _number(str(label))
        if number is not None:
            by_number.setdefault(number, []).append(str(label))
    picked = [_label_for(str(t), by_number) for t in tensors.categories]
    names = sorted({p for p in picked if p is not None})
    index = {name: i for i, name in enumerate(names)}
    code_of = np.array([index[p] if p is not None else -1 for p in picked] + [-1], dtype=np.int64)
    return pd.Categorical.from_codes(code_of[tensors.codes], pd.Index(names, dtype="str"))
