"""Which collectives are tensor-parallel: those over one TP group of the layout.

COL203 reports their exposed transfers; COL202 (exposed communication of any group) leaves them
to it, so one exposed collective is priced by one finding, not by two.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

    from tracediag.analysis.parallel_layout import Layout


def tp_collective_mask(coll: pd.DataFrame, layout: Layout):
    """Per collective row (numpy bool): its group is one tensor-parallel group of ``layout``
    (all of one dp and pp coordinate, ``layout.tp`` members)."""
    import numpy as np
    import pandas as pd

    from tracediag.analysis.parallel_layout import group_members

    if layout.tp < 2 or not len(coll):
        return np.zeros(len(coll), dtype=bool)
    coords = layout.coords
    codes, groups = pd.factorize(group_members(coll).astype(str))
    is_tp = np.zeros(len(groups) + 1, dtype=bool)  # the trailing entry: no group
    for i, text in enumerate(groups):  # the few distinct groups
        ranks = [int(x) for x in text.strip("()").split(",") if x.strip()]
        sub = coords.reindex(ranks)
        is_tp[i] = (
            len(ranks) == layout.tp
            and not sub.isna().any().any()
            and sub["dp"].nunique() == 1
            and sub["pp"].nunique() == 1
        )
    return is_tp[codes]


def tp_collective_rows(ctx) -> pd.DataFrame:
    """The collective rows of the analysed trace that are tensor-parallel (see the module)."""
    coll = ctx.trace.collectives
    return coll[tp_collective_mask(coll, ctx.layout)]
