"""Which profiles of a folder make one job, and the rank of each, from the profiles' names.

``neuron-explorer view --data-path D`` writes every profile it processes to
``D/profiles/global/<display-name>@latest/``: a data path holds the profiles of one job beside
unrelated ones (a kernel profiled on its own, another run), and a run that compiled several
models has one profile per model and rank. The choice made here, by name only:

- a profile's *job* is its display name without ``@latest`` and without what differs between
  the ranks of one job (``rank_<k>``, ``vnc_<k>``, ``nc_<k>``, ``pid_<p>``, ``session_<n>``,
  an instance id ``i-0ab...``; remaining digits count as one); the job with the most profiles
  is read, profiles of other jobs are skipped with a note (ties keep every profile: nothing
  tells which is the job); only Explorer's ``<name>@latest`` folders are sorted so, a folder of
  the user's own naming is read whole;
- inside that job, profiles that state another compiled model (``model_<id>``) than the one
  most profiles state are skipped with a note: a model is not a rank;
- the rank: ``rank_<k>`` in the name, else ``vnc_<k>`` (the logical NeuronCore a collective
  job's rank runs on), else the order of the processes (``pid``) and of their cores (``nc_<k>``,
  process-local), else Metadata ``worker_gid``, else the folder's order (the caller's part).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tracediag.parsers.neuron_common import name_tokens, natural_key

#: Parts of a display name that differ between the ranks of one job.
_PER_RANK = re.compile(
    r"(?:^|(?<=[^a-z0-9]))(?:rank|vnc|nc|pid|session|instid)[_-]?\d+|i-[0-9a-f]{8,}", re.I
)
_DIGITS = re.compile(r"\d+")
_SEPARATORS = re.compile(r"[_\-.]+")


def data_path_profiles_dir(path: Path) -> Path | None:
    """``path/profiles/global`` when ``path`` is an Explorer data path, else None."""
    inner = path / "profiles" / "global"
    return inner if inner.is_dir() else None


def display_name(path: Path) -> str:
    """A profile directory's display name (``llama_rank0@latest`` -> ``llama_rank0``)."""
    return path.name.split("@", 1)[0]


def job_key(name: str) -> str:
    """What the profiles of one job share in their names (see the module docstring)."""
    text = _PER_RANK.sub("", name.lower())
    text = _DIGITS.sub("#", re.sub(r"model[_-]?\d+", "", text))
    return _SEPARATORS.sub("_", text).strip("_")


@dataclass
class Selection:
    """The profiles to read, the rank each states (None: unknown), and what was left out."""

    profiles: list[Path]
    ranks: list[tuple[int | None, str | None]]
    skipped: list[str] = field(default_factory=list)  # one note per skipped group


def select_job(profiles: list[Path]) -> Selection:
    """The profiles of the folder's job, their ranks from their names, and notes on the rest."""
    names = [display_name(p) for p in profiles]
    skipped: list[str] = []
    keys = [job_key(n) for n in names]
    sizes = Counter(keys)
    best = max(sizes.values(), default=0)
    leaders = [k for k, n in sizes.items() if n == best]
    # Only Explorer's own folders (``<name>@latest``) are sorted into jobs: a folder the user
    # made (``node2/``, ``nodeX/``) holds what the user put there.
    explorer = all("@" in p.name for p in profiles)
    if explorer and len(leaders) == 1 and best > 1:
        keep = [k == leaders[0] for k in keys]
        others = sorted({n for n, k in zip(names, keep, strict=True) if not k}, key=natural_key)
        if others:
            skipped.append(
                f"skipped {len(others)} profile(s) of another job: {', '.join(others)} "
                f"(the job read is the {best} profiles named like {names[keep.index(True)]}; "
                "pass a profile's folder alone to analyse it)"
            )
        profiles = [p for p, k in zip(profiles, keep, strict=True) if k]
        names = [n for n, k in zip(names, keep, strict=True) if k]
    tokens = [name_tokens(n) for n in names]
    models = Counter(t["model"] for t in tokens if "model" in t)
    if len(models) > 1:
        model = max(models, key=lambda m: (models[m], -m))
        keep = [t.get("model", model) == model for t in tokens]
        others = sorted({n for n, k in zip(names, keep, strict=True) if not k}, key=natural_key)
        skipped.append(
            f"skipped {len(others)} profile(s) of other compiled models of the run "
            f"({', '.join(others)}): a model is not a rank; read are model_{model}'s profiles, "
            "pass another model's profiles alone to analyse it"
        )
        profiles = [p for p, k in zip(profiles, keep, strict=True) if k]
        tokens = [t for t, k in zip(tokens, keep, strict=True) if k]
    return Selection(profiles, _ranks(tokens), skipped)


def _ranks(tokens: list[dict[str, int]]) -> list[tuple[int | None, str | None]]:
    """Each profile's rank and where it came from: the first key every profile states with
    distinct values (``rank``, ``vnc``), else the order of (pid, nc); else unknown."""
    n = len(tokens)
    for key, source in (("rank", "filename"), ("vnc", "vnc in name")):
        values = [t.get(key) for t in tokens]
        if all(v is not None for v in values) and len(set(values)) == n:
            return [(v, source) for v in values]
    # Rank-stated names mixed with others: keep what is stated, let the caller number the rest.
    if any("rank" in t for t in tokens):
        return [(t.get("rank"), "filename" if "rank" in t else None) for t in tokens]
    if all("pid" in t or "nc" in t for t in tokens):
        order = [(t.get("pid", -1), t.get("nc", -1)) for t in tokens]
        if len(set(order)) == n:
            source = "process order" if any("pid" in t for t in tokens) else "nc in name"
            rank_of = {o: i for i, o in enumerate(sorted(order))}
            return [(rank_of[o], source) for o in order]
    return [(None, None)] * n
