"""One collective instance per replica group, with the op's groups taken across ranks.

Neuron names a collective's replica groups whole (``[[0, 1], [2, 3]]``) on every rank that runs
it, and matches it across ranks by that text, its stream and its op id. Each group runs its own
instance, though: {0, 1} does not wait for {2, 3}. A rank's row can also show the groups empty
(``Replica group: []``, as the UI can); every rank runs the same program, so the op's groups are
those the other ranks' rows of it state. Readers key such rows ``<groups>|<stream>|<op id>``,
with ``~`` before groups they inferred (from the rank's other ops on the stream) rather than
read. At assembly, per op (``<stream>|<op id>``):

- a row showing ``[]``, or inferred groups, takes the groups the op's other rows state (the most
  common), else the inferred ones the rows agree on most;
- where those groups were stated and are several, each row's key and group become its own
  group's (the sub-list holding its rank), unless a rank of the op is in none of them. Inferred groups are not split on: a stream can carry
  ops of several groups (a ZeRO gradient reduce-scatter beside the tensor-parallel ops), so an
  inferred group may be wrong, and one instance of every rank is then the safer reading.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracediag.model import schema as S

#: The reader's column marking rows whose replica groups were inferred, not read.
GROUPS_INFERRED = "replica_group_inferred"
#: The key prefix of groups a reader inferred.
INFERRED_MARK = "~"
_INNER = re.compile(r"\[([\d,\s]*)\]")


def split_by_replica_group(coll: pd.DataFrame) -> pd.DataFrame:
    """``coll`` with Neuron replica-group keys resolved across ranks (see the module)."""
    key = coll[S.MATCH_KEY].astype(str)
    # Every assembly comes here (Kineto's keys too): one cheap test before the string work.
    if not key.str.startswith(("[", INFERRED_MARK)).any():
        return coll
    parts = key.str.split("|", n=1)
    flat, rest = parts.str[0], parts.str[1]
    inferred = flat.str.startswith(INFERRED_MARK).to_numpy()
    bare = flat.str.lstrip(INFERRED_MARK)
    listed = bare.str.startswith("[[").to_numpy() & rest.notna().to_numpy()
    empty = (bare == "[]").to_numpy() & rest.notna().to_numpy()
    if not (listed | empty).any():
        return coll
    stated = listed & ~inferred
    chosen_stated = _most_common(bare[stated], rest[stated])
    chosen_inferred = _most_common(bare[listed & inferred], rest[listed & inferred])
    take = (empty | (listed & inferred)) & rest.isin(chosen_stated.index).to_numpy()
    new_flat = bare.where(~take, rest.map(chosen_stated))
    # Rows still on inferred groups (or empty ones), with no stated groups: the agreed guess.
    guess = (empty | (listed & inferred)) & ~take & rest.isin(chosen_inferred.index).to_numpy()
    new_flat = new_flat.where(~guess, rest.map(chosen_inferred))
    from_stated = stated | take
    members = _own_groups(new_flat.to_numpy(dtype=object), coll[S.RANK].to_numpy(), from_stated)
    # A rank outside every group of the op (rank numbers that are not the groups'): the groups
    # say nothing of who ran with whom, so the op stays one instance.
    outside = (
        pd.Series((members == "") & (listed | empty), index=coll.index)
        .groupby(rest.to_numpy(), dropna=False)
        .transform("any")
    )
    members[outside.to_numpy(dtype=bool)] = ""
    touched = take | guess | (members != "")
    if not touched.any():
        return coll
    coll = coll.copy()
    marked = np.where(from_stated | ~(inferred | guess), "", INFERRED_MARK)
    new_key = (
        marked.astype(object) + new_flat.to_numpy(dtype=object) + "|" + rest.to_numpy(dtype=object)
    )
    new_key = np.where(members != "", new_key + "|" + members, new_key)
    coll[S.MATCH_KEY] = np.where(touched, new_key, key.to_numpy(dtype=object))
    group = coll[S.GROUP].to_numpy(dtype=object).copy()
    group[members != ""] = members[members != ""]
    coll[S.GROUP] = group
    return coll


def _most_common(values: pd.Series, by: pd.Series) -> pd.Series:
    """Per value of ``by``: the most common of ``values`` (ties: the first in sort order)."""
    if not len(values):
        return pd.Series(dtype=object)
    counts = pd.DataFrame({"by": by.to_numpy(), "v": values.to_numpy()}).value_counts()
    counts = counts.reset_index().sort_values(["by", "count", "v"], ascending=[True, False, True])
    return counts.drop_duplicates("by").set_index("by")["v"]


def _own_groups(flats: np.ndarray, ranks: np.ndarray, use: np.ndarray) -> np.ndarray:
    """Per row where ``use``: the sub-list of its groups text holding its rank ("0,1"), when the
    text lists two or more groups; "" elsewhere."""
    out = np.full(len(flats), "", dtype=object)
    rows = np.flatnonzero(use)
    if not len(rows):
        return out
    codes, uniques = pd.factorize(pd.Series(flats[rows], dtype=object))
    lists = []
    for text in uniques:  # a handful of distinct group texts
        groups = [sorted(int(x) for x in b.replace(",", " ").split()) for b in _INNER.findall(text)]
        lists.append(
            {r: ",".join(map(str, g)) for g in groups for r in g} if len(groups) > 1 else {}
        )
    table = pd.DataFrame(
        [(c, r, m) for c, d in enumerate(lists) for r, m in d.items()], columns=["c", "r", "m"]
    )
    if not len(table):
        return out
    found = pd.DataFrame({"c": codes, "r": ranks[rows]}).merge(table, on=["c", "r"], how="left")
    out[rows] = found["m"].fillna("").to_numpy(dtype=object)
    return out
