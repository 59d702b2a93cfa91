"""The parallel layout of a job: data-, tensor-, pipeline- and expert-parallel groups per rank.

Inferred from the collectives table (``group``: Neuron ``CcOp.replica_group``, Kineto ``Process
Group Ranks``), Kineto process-group descriptions (``distributedInfo.pg_config``) and the
Send/Recv pairs:

- Send/Recv pairs link pipeline stages; each chain of links is one pipeline, ordered by the
  direction of its first transfer (forward activations flow from stage 0).
- Other groups form *families*: groups of one size partitioning the ranks they cover. A family
  whose groups span stages is the model-parallel group (gradient norm, clipping): no dimension.
  Within a stage: a process-group description naming tensor/data/expert parallelism decides;
  else AllToAll groups are expert-parallel; of two families the one of consecutive ranks is
  tensor-parallel (Megatron's order), the other data-parallel; a single family is data-parallel
  unless it runs more than two collectives per layer (per-layer TP traffic), which is noted.

When the trace declares a larger job than the ranks given (Kineto's ``world_size`` 128 with two
sampled ranks, or, in any format, groups listing members whose profiles are not given: a Neuron
``replica_group`` of 32 with 2 ranks read), groups known only from their participants are
incomplete: they are not used, no pipeline is read from the Send/Recv seen, and the notes say
so, rather than reading the two ranks as a pair of stages or a group of two.

Anything the inference cannot settle is written to ``notes`` (never guessed silently); an
explicit layout (``--layout dp=4,tp=8,pp=4`` or ``layout`` in the config) overrides it and
numbers ranks as Megatron does: tensor-parallel fastest, then data-parallel, then stage.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from tracediag.model import schema as S
from tracediag.model.collective_ops import POINT_TO_POINT_OPS, one_sided_sources

DIMS = ("dp", "tp", "pp", "ep")
P2P_OPS = POINT_TO_POINT_OPS  # Send/Recv, CollectivePermute (model/collective_ops.py)
_DESCRIPTIONS = {
    "tp": re.compile(r"tensor|\btp\b|_tp|tp_", re.I),
    "dp": re.compile(r"data|\bdp\b|_dp|dp_|fsdp|shard", re.I),
    "ep": re.compile(r"expert|\bep\b|_ep|ep_|moe", re.I),
    "pp": re.compile(r"pipe|\bpp\b|_pp|pp_", re.I),
}


@dataclass(frozen=True)
class Layout:
    """Sizes and per-rank coordinates (``coords``: index rank, columns dp, tp, pp, ep)."""

    dp: int = 1
    tp: int = 1
    pp: int = 1
    ep: int = 1
    source: str = "inferred"
    coords: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=list(DIMS)))
    notes: tuple[str, ...] = ()

    def stages(self) -> dict[int, list[int]]:
        """Pipeline stage -> its ranks (sorted)."""
        if not len(self.coords):
            return {}
        return {int(s): sorted(g.index.tolist()) for s, g in self.coords.groupby("pp")}

    def to_dict(self) -> dict:
        """The JSON report's ``layout`` object."""
        ranks = {str(int(r)): {d: int(row[d]) for d in DIMS} for r, row in self.coords.iterrows()}
        return {
            "dp": self.dp,
            "tp": self.tp,
            "pp": self.pp,
            "ep": self.ep,
            "source": self.source,
            "ranks": ranks,
            "notes": list(self.notes),
        }

    def summary(self) -> str:
        """One line for text reports: ``dp=2 tp=1 pp=4 ep=1 (inferred)``."""
        sizes = " ".join(f"{d}={getattr(self, d)}" for d in DIMS)
        return f"{sizes} ({self.source}{'; ' + '; '.join(self.notes) if self.notes else ''})"


def parse_layout(text: str | dict) -> dict[str, int]:
    """``"dp=4,tp=8,pp=4"`` (or a table of the same) -> sizes; ValueError on anything else."""
    items = (
        text.items()
        if isinstance(text, dict)
        else (
            part.split("=", 1) if "=" in part else (part, "")
            for part in str(text).replace(" ", "").split(",")
            if part
        )
    )
    sizes = {}
    for key, value in items:
        key = str(key).strip().lower()
        if key not in DIMS:
            raise ValueError(f"layout: unknown dimension {key!r} (use {', '.join(DIMS)})")
        try:
            sizes[key] = int(value)
        except (TypeError, ValueError):
            raise ValueError(f"layout: {key} needs a positive integer, got {value!r}") from None
        if sizes[key] < 1:
            raise ValueError(f"layout: {key} needs a positive integer, got {value!r}")
    if not sizes:
        raise ValueError("layout: give sizes such as dp=4,tp=8,pp=4")
    return sizes


def explicit_layout(ranks: list[int], sizes: dict[str, int]) -> Layout:
    """The layout ``sizes`` over ``ranks`` in Megatron's numbering (tp, then dp, then pp)."""
    dp, tp, pp, ep = (sizes.get(d, 1) for d in DIMS)
    notes = []
    world = max(ranks) + 1 if ranks else 0
    if dp * tp * pp != world:
        notes.append(f"dp*tp*pp = {dp * tp * pp} but the trace has ranks up to {world - 1}")
    r = np.asarray(ranks, dtype=np.int64)
    d = (r // tp) % dp
    coords = pd.DataFrame(
        {"dp": d, "tp": r % tp, "pp": r // (tp * dp), "ep": d % ep}, index=r
    ).astype(np.int64)
    return Layout(dp, tp, pp, ep, "explicit", coords, tuple(notes))


_MEMBER_LIST = re.compile(r"-?\d+(?:,-?\d+)*")


def group_members(coll: pd.DataFrame) -> pd.Series:
    """Per collective row, its group as a sorted tuple (participants when the format has none)."""
    codes, uniques = pd.factorize(coll[S.GROUP].astype(str).to_numpy())
    # Not a member list (e.g. the raw replica groups of a rank in none of them): unknown.
    parsed = [
        tuple(sorted(int(x) for x in g.split(","))) if _MEMBER_LIST.fullmatch(g) else None
        for g in uniques
    ]
    out = np.array([*parsed, None], dtype=object)[codes]
    missing = np.flatnonzero(np.array([*(p is None for p in parsed), True])[codes])
    if len(missing):
        keys = coll[S.COLL_KEY].to_numpy()[missing]
        out[missing] = _participants(coll, keys).reindex(keys).to_numpy()
    return pd.Series(out, index=coll.index)


def _participants(coll: pd.DataFrame, keys: np.ndarray) -> pd.Series:
    """The sorted distinct ranks of each of ``keys``' collectives, by key: one sort of the
    (key, rank) pairs, not a pandas call per key (thousands on a one-rank Kineto trace)."""
    pairs = coll.loc[coll[S.COLL_KEY].isin(keys), [S.COLL_KEY, S.RANK]].to_numpy(np.int64)
    if not len(pairs):
        return pd.Series([], dtype=object)
    pairs = np.unique(pairs, axis=0)  # sorted by key, then rank
    starts = np.flatnonzero(np.r_[True, pairs[1:, 0] != pairs[:-1, 0]])
    members = [tuple(r.tolist()) for r in np.split(pairs[:, 1], starts[1:])]
    return pd.Series(members, index=pairs[starts, 0], dtype=object)


def _lists_members(coll: pd.DataFrame) -> np.ndarray:
    """Per collective row: the format lists its group's members (not read from participants)."""
    codes, uniques = pd.factorize(coll[S.GROUP].astype(str).to_numpy())
    listed = np.array([bool(_MEMBER_LIST.fullmatch(g)) for g in uniques] + [False])
    return listed[codes]


def declared_ranks(trace: S.Trace) -> tuple[int, str]:
    """(how many ranks the job has, what says so) as the trace declares it: the world size of
    the ranks' metadata (Kineto ``distributedInfo.world_size``) or, in any format, the members
    the collectives' groups list (Neuron ``replica_group``, XPlane replica groups, Kineto
    ``Process Group Ranks``): the ranks TRC502 reports missing. (0, "") when nothing does."""
    sizes = [
        int(m.info["world_size"])
        for m in trace.meta.values()
        if str(m.info.get("world_size", "")).isdigit()
    ]
    world = max(sizes, default=0)
    coll = trace.collectives
    members: set[int] = set()
    if len(coll):
        listed = _lists_members(coll)
        for g in pd.unique(coll[S.GROUP].astype(str).to_numpy()[listed]):  # distinct groups
            members.update(int(x) for x in g.split(","))
    named = len(members | set(trace.ranks))
    if world >= named and world:
        return world, f"world size {world}"
    if named > len(trace.ranks):
        return named, f"the collectives' groups name {named} ranks"
    return world, f"world size {world}" if world else ""


def _pipelines(p2p: pd.DataFrame, notes: list[str]) -> dict[int, int]:
    """Rank -> stage, from the Send/Recv links (sender of a link's first transfer is upstream)."""
    if not len(p2p):
        return {}
    first = p2p.sort_values(S.START, kind="stable").groupby("members").head(2)
    downstream: dict[int, int] = {}
    for members, rows in first.groupby("members", sort=False):
        if len(members) != 2:
            continue
        senders = rows.loc[rows["sends"], S.RANK].tolist()
        a, b = members if not senders or senders[0] == members[0] else members[::-1]
        if not senders:
            notes.append(f"Send/Recv between ranks {a} and {b} has no Send side: lower rank first")
        downstream[a] = b
    stage: dict[int, int] = {}
    heads = set(downstream) - set(downstream.values())
    for head in sorted(heads):
        rank, s = head, 0
        while rank is not None and rank not in stage:
            stage[rank], rank, s = s, downstream.get(rank), s + 1
    if set(downstream) - set(stage):
        notes.append("Send/Recv links form a cycle: pipeline stages not inferred")
        return {}
    return stage


def _families(groups: pd.DataFrame) -> list[pd.DataFrame]:
    """Groups of one size and stride that do not overlap each other, largest first."""
    out = []
    stride = groups["members"].map(lambda g: g[1] - g[0] if len(g) > 1 else 0)
    for _shape, fam in groups.groupby([groups["size"], stride], sort=False):
        ranks = [r for g in fam["members"] for r in g]
        if len(ranks) == len(set(ranks)):
            out.append(fam)
    return sorted(out, key=lambda f: -int(f["size"].iat[0]))


def _described(trace: S.Trace) -> dict[tuple, str]:
    """Kineto process groups: member tuple -> the dimension its description names."""
    out = {}
    for meta in trace.meta.values():
        for pg in meta.info.get("pg_config", []) or []:
            if not isinstance(pg, dict):
                continue
            desc = f"{pg.get('pg_desc', '')} {pg.get('pg_name', '')}"
            for dim, pattern in _DESCRIPTIONS.items():
                if pattern.search(desc):
                    out[tuple(sorted(int(r) for r in pg.get("ranks", [])))] = dim
                    break
    return out


def _layer_count(trace: S.Trace) -> int:
    ev = trace.events
    if S.LAYER not in ev:
        return 0
    col = ev[S.LAYER]
    if isinstance(col.dtype, pd.CategoricalDtype) and (
        pd.api.types.infer_dtype(col.cat.categories, skipna=False) == "string"
    ):
        # The distinct names are the categories some row uses: no text per event.
        used = np.bincount(col.cat.codes.to_numpy() + 1, minlength=len(col.cat.categories) + 1)
        names = pd.Series(np.asarray(col.cat.categories, dtype=object)[used[1:] > 0])
    else:
        names = pd.Series(col.dropna().astype(str).unique())
    return int(names.str.match(r"(layer|block|layers)[._]?\d+").sum())


_LAYER_INDEX = re.compile(r"(?:layer|block|layers)[._]?(\d+)")
_REDUCTIONS = {"allreduce", "all_reduce", "reducescatter", "reduce_scatter"}


def _reduces_in_forward(trace: S.Trace, fam: pd.DataFrame) -> bool:
    """The family's reductions follow layers in rising order on its ranks, three or more in a
    row (layer k, k+1, k+2): a forward pass, where only tensor parallelism reduces. A
    data-parallel gradient reduction runs in the backward pass, layers falling; it rises only
    once, from one step to the next."""
    coll = trace.collectives
    ev = trace.events
    if S.LAYER not in ev or not len(coll):
        return False
    ops = coll[S.COLL_OP].astype(str).str.lower().to_numpy()
    mine = group_members(coll).isin(set(fam["members"])).to_numpy()
    rows = coll[mine & np.isin(ops, list(_REDUCTIONS))]
    index = _layer_indexes(ev[S.LAYER])
    layered = (ev[S.KIND] == "compute").to_numpy() & ~np.isnan(index)
    runs = []
    for rank, own in rows.groupby(S.RANK):
        c = np.flatnonzero(layered & (ev[S.RANK] == rank).to_numpy())
        c = c[np.argsort(ev[S.TS].to_numpy()[c], kind="stable")]
        at = np.searchsorted(ev[S.TS].to_numpy()[c], np.sort(own[S.ARRIVAL].to_numpy()), "right")
        rise = np.diff(index[c[at[at > 0] - 1]]) > 0
        # The longest run of consecutive rises.
        breaks = np.flatnonzero(np.r_[True, ~rise, True])
        runs.append(int(np.diff(breaks).max()) - 1 if len(rise) else 0)
    return bool(runs) and float(np.median(runs)) >= 2


def _layer_indexes(col: pd.Series) -> np.ndarray:
    """Per row: the layer number its layer name states (``layers.3`` -> 3.0), NaN where none.
    A categorical of names is read by category (the few names, then their codes)."""

    def of(names: pd.Series) -> np.ndarray:
        found = names.astype(str).str.extract(_LAYER_INDEX, expand=False).astype("Float64")
        return found.to_numpy(dtype=np.float64, na_value=np.nan)

    if isinstance(col.dtype, pd.CategoricalDtype) and (
        pd.api.types.infer_dtype(col.cat.categories, skipna=False) == "string"
    ):
        per_name = of(pd.Series(np.asarray(col.cat.categories, dtype=object)))
        return np.append(per_name, np.nan)[col.cat.codes.to_numpy()]  # code -1: the NaN
    return of(col)


def _classify(trace, fams, stage, notes) -> dict[str, pd.DataFrame]:
    """Dimension -> the family of groups that forms it."""
    described = _described(trace)
    found: dict[str, pd.DataFrame] = {}
    rest = []
    for fam in fams:
        spans = [len({stage.get(r, 0) for r in g}) > 1 for g in fam["members"]]
        if any(spans):
            continue  # model-parallel (all stages): gradient norm and the like
        dims = {described.get(g) for g in fam["members"]} - {None}
        if len(dims) == 1:
            found.setdefault(dims.pop(), fam)
        elif fam["alltoall"].any():
            found.setdefault("ep", fam)
        else:
            rest.append(fam)
    rest = [f for f in rest if f["size"].iat[0] > 1]
    if "tp" not in found and len(rest) >= 2:
        contiguous = [f for f in rest if all(g[-1] - g[0] == len(g) - 1 for g in f["members"])]
        tp = contiguous[0] if contiguous else min(rest, key=lambda f: int(f["size"].iat[0]))
        if not contiguous:
            notes.append("no family of consecutive ranks: the smaller one is read as tp")
        found["tp"] = tp
        rest = [f for f in rest if f is not tp]
    if rest and "dp" not in found:
        fam = rest[0]
        layers = _layer_count(trace)
        per_rank = float(fam["instances"].mean())  # every member takes part in each
        if "tp" not in found and layers and per_rank > 2 * layers:
            found["tp"] = fam
            notes.append(
                f"one group family of size {int(fam['size'].iat[0])} with {per_rank:.0f} "
                f"collectives per rank over {layers} layers: read as tensor parallel"
            )
        elif "tp" not in found and _reduces_in_forward(trace, fam):
            found["tp"] = fam
            notes.append(
                f"one group family of size {int(fam['size'].iat[0])} reducing between layers in "
                "forward order: read as tensor parallel"
            )
        else:
            found["dp"] = fam
        rest = rest[1:]
    if rest:
        notes.append(f"{len(rest)} further group families not assigned to a dimension")
    return found


def infer_layout(trace: S.Trace) -> Layout:
    """The layout inferred from the trace's collectives (see the module docstring)."""
    ranks = trace.ranks
    coll = trace.collectives
    notes: list[str] = []
    coords = pd.DataFrame(0, index=pd.Index(ranks, dtype=np.int64), columns=list(DIMS))
    if not len(coll) or not ranks:
        return Layout(coords=coords)
    rows = pd.DataFrame(
        {
            S.RANK: coll[S.RANK].to_numpy(),
            S.START: coll[S.START].to_numpy(),
            "members": group_members(coll).to_numpy(),
            "op": coll[S.COLL_OP].astype(str).str.lower().str.replace("-", "_").to_numpy(),
            S.COLL_KEY: coll[S.COLL_KEY].to_numpy(),
        }
    )
    declared, said = declared_ranks(trace)
    incomplete = declared > len(ranks)
    if incomplete:
        # A group the format does not list is read from its instances' participants: with ranks
        # of the job missing, those are only the ranks given, not the group (2 sampled ranks of
        # a 128-rank all-to-all would read as a pair). Such groups say nothing about the layout.
        listed = _lists_members(coll)
        given = f"{len(ranks)} of the job's {declared} ranks given ({said})"
        if not listed.any():
            given += ": its groups are incomplete (the trace lists no members), layout not inferred"
        elif not listed.all():
            given += ": groups the trace does not list are incomplete and not used"
        notes.append(given)
        rows = rows[listed]
    else:
        # An op shown with an empty group (Neuron's "Replica group: []" on every rank) while
        # others list theirs has unknown members, not "every rank that ran it".
        empty = (coll[S.GROUP].astype(str) == "[]").to_numpy()
        if empty.any() and _lists_members(coll).any():
            notes.append(f"{int(empty.sum())} collective rows show an empty group: not used")
            rows = rows[~empty]
    is_p2p = rows["op"].isin(P2P_OPS).to_numpy()
    # Kineto names a Send/Recv by the whole pipeline group: the pair is its two participants.
    p2p = rows[is_p2p]
    listed_groups = p2p["members"].tolist()  # before pairs replace whole-pipeline groups
    size = p2p.groupby(S.COLL_KEY)[S.RANK].transform("size").to_numpy()
    pair_lo = p2p.groupby(S.COLL_KEY)[S.RANK].transform("min").to_numpy()
    pair_hi = p2p.groupby(S.COLL_KEY)[S.RANK].transform("max").to_numpy()
    pairs = pd.Series(list(zip(pair_lo.tolist(), pair_hi.tolist(), strict=True)), index=p2p.index)
    p2p = p2p.assign(members=p2p["members"].where(size != 2, pairs))
    group = coll[S.GROUP].to_numpy()[p2p.index.to_numpy()]  # rows is positional over coll
    source = one_sided_sources(p2p["op"].to_numpy(), group, p2p[S.RANK].to_numpy())
    p2p = p2p.assign(sends=(p2p["op"] == "send").to_numpy() | (source == 1))
    unstaged = False  # a pipeline whose stages cannot be told
    # A Send/Recv whose trace does not say its peer (Kineto without record_shapes) is an
    # instance of its own rank with no group: the links, so the stages, are unknown.
    # With some pairs known, the stages come from those (the lone ones are noted).
    lone = (group == "") & (p2p["members"].map(len) == 1).to_numpy()
    if lone.any():
        unstaged = bool(lone.all())
        notes.append(
            f"{'pipeline stages not inferred: ' if unstaged else ''}{int(lone.sum())} Send/Recv "
            "without their peer rank (Kineto records it with record_shapes only)"
        )
        p2p = p2p[~lone]
    if incomplete and len(p2p):
        # A pipeline with members not given cannot be staged: stage 0 or the sending side of a
        # pair may be among the missing ranks, and a chain of the pairs given starts at the
        # wrong stage. Unless every Send/Recv group is whole, none is used (not guessed).
        given_ranks = set(ranks)
        codes, groups = pd.factorize(pd.Series(listed_groups, dtype=object))
        whole = np.array([set(g) <= given_ranks for g in groups] + [False])[codes]  # distinct
        if not whole.all():
            notes.append("pipeline stages not inferred: Send/Recv groups with ranks not given")
            p2p, unstaged = p2p.iloc[:0], True
    stage = _pipelines(p2p, notes)
    grouped = rows[~is_p2p].groupby("members", sort=False)
    groups = pd.DataFrame(
        {
            "members": list(grouped.groups),
            "instances": grouped[S.COLL_KEY].nunique().to_numpy(),
            "alltoall": grouped["op"].agg(lambda o: o.str.contains("alltoall").any()).to_numpy(),
        }
    )
    groups["size"] = groups["members"].map(len)
    if unstaged:
        # Without the stages a group may span them (model-parallel, no dimension) or not: the
        # 4-rank AllReduce of a 4-stage pipeline is not a data-parallel group of 4.
        if len(groups):
            notes.append("groups not assigned to a dimension: they may span the unknown stages")
        found = {}
    else:
        found = _classify(trace, _families(groups), stage, notes)
    sizes = {"pp": max(stage.values(), default=0) + 1}
    coords["pp"] = pd.Series(stage, dtype=np.int64).reindex(coords.index).fillna(0).astype(np.int64)
    for dim in ("tp", "dp", "ep"):
        fam = found.get(dim)
        sizes[dim] = int(fam["size"].iat[0]) if fam is not None else 1
        if fam is None:
            continue
        position = {r: i for g in fam["members"] for i, r in enumerate(g)}
        coords[dim] = pd.Series(position, dtype=np.int64).reindex(coords.index).fillna(0)
    coords = coords.astype(np.int64)
    world = len(ranks)
    if incomplete:
        # The sizes of the groups seen (listed ones) stand; the rest of the job is not guessed.
        return Layout(
            sizes["dp"], sizes["tp"], sizes["pp"], sizes["ep"], "inferred", coords, tuple(notes)
        )
    if sizes["dp"] * sizes["tp"] * sizes["pp"] != world and "dp" not in found and not unstaged:
        rest = world // (sizes["tp"] * sizes["pp"])
        if rest > 1 and rest * sizes["tp"] * sizes["pp"] == world:
            sizes["dp"] = rest
            notes.append(f"dp={rest} from the rank count (no data-parallel collective seen)")
            key = coords[["pp", "tp"]].astype(str).agg(":".join, axis=1)
            coords["dp"] = key.groupby(key).cumcount().astype(np.int64)
    if sizes["dp"] * sizes["tp"] * sizes["pp"] != world:
        notes.append(
            f"dp*tp*pp = {sizes['dp'] * sizes['tp'] * sizes['pp']} does not match {world} ranks"
        )
    return Layout(
        sizes["dp"], sizes["tp"], sizes["pp"], sizes["ep"], "inferred", coords, tuple(notes)
    )


def resolve_layout(trace: S.Trace, explicit: dict[str, int] | None) -> Layout:
    """The explicit layout when given (with a note where the trace disagrees), else inferred."""
    if not explicit:
        return infer_layout(trace)
    layout = explicit_layout(trace.ranks, explicit)
    inferred = infer_layout(trace)
    differ = [d for d in DIMS if d in explicit and getattr(inferred, d) != explicit[d]]
    if differ and len(trace.collectives):
        said = ", ".join(f"{d}={getattr(inferred, d)}" for d in differ)
        layout = Layout(
            layout.dp,
            layout.tp,
            layout.pp,
            layout.ep,
            layout.source,
            layout.coords,
            (*layout.notes, f"the trace's collectives suggest {said}"),
        )
    return layout
