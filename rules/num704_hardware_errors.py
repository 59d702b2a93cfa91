"""NUM704: errors the hardware reported during the profile (numerical errors among them)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracediag.engine.rule import Rule
from tracediag.model import schema as S
from tracediag.model.findings import Severity

if TYPE_CHECKING:
    import pandas as pd

#: Where the Neuron readers put the ``Error`` table, grouped by kind (parsers/neuron_errors.py).
ERRORS_INFO_KEY = "device_errors"
#: Event names of numerical errors some exports carry as events.
NUMERICAL_EVENT = r"numerical_err"
_COLUMNS = [
    "rank",
    "type",
    "description",
    "count",
    "first_ts_ns",
    "last_ts_ns",
    "metadata",
    "offset",
]


class HardwareErrors(Rule):
    code = "NUM704"
    name = "hardware-errors"
    title = "The hardware reported errors"
    severity = Severity.ERROR
    options = {"info_descriptions": ["Debug"]}  # descriptions reported as info, not errors
    doc = {
        "what it finds": "Rows of the Neuron `Error` table (`type`, `description` such as "
        "`DMA2D OOB` or a numerical error, `metadata`) and events named `numerical_err`, one "
        "finding per kind of error with its ranks, count and the time of the first and last "
        "occurrence.",
        "why it matters": "A step that raised a hardware error did not compute what it was "
        "meant to: NaN/Inf from an overflow, an out-of-bounds access, a semaphore overflow. Its "
        "timings are not worth tuning until the error is gone, and a numerical error in "
        "training silently corrupts the weights.",
        "how to fix": "For numerical errors: look for overflow in FP16/FP8 (loss scaling, "
        "a wider accumulation dtype, clamping before exp/log), uninitialised inputs, division "
        "by zero in normalisation. For out-of-bounds errors: check index tensors (embedding "
        "ids, gather indices) and the NKI kernel's access patterns.",
        "example": "`NUM704 error ranks 0-3: the hardware reported 'numerical error: NaN "
        "output' 12 times between 10.26 s and 10.27 s (first on the tensor engine).`",
    }

    def check(self, ctx, opts):
        import pandas as pd

        trace = ctx.trace
        rows = [
            {**e, "rank": r, "offset": trace.meta[r].clock_offset_ns}
            for r in trace.ranks
            for e in trace.meta[r].info.get(ERRORS_INFO_KEY, [])
        ]  # a handful: the readers group the table's rows by kind
        frames = [pd.DataFrame(rows, columns=_COLUMNS), _numerical_events(trace)]
        frames = [f for f in frames if len(f)]
        if not frames:
            return
        kinds = pd.concat(frames, ignore_index=True)
        kinds["first"] = kinds["first_ts_ns"].astype("float64") + kinds["offset"]
        kinds["last"] = kinds["last_ts_ns"].astype("float64") + kinds["offset"]
        info = set(opts["info_descriptions"])
        for (kind, description), g in kinds.groupby(["type", "description"], sort=True):
            ranks = tuple(sorted(int(r) for r in g["rank"].unique()))
            count = int(g["count"].sum())
            what = ": ".join(t for t in (str(kind), str(description)) if t)
            known = g["first"].notna()
            start = int(g.loc[known, "first"].min()) if known.any() else 0
            end = int(g.loc[known, "last"].max()) if known.any() else 0
            yield ctx.finding(
                self,
                severity=Severity.INFO if description in info else self.severity,
                title="The hardware reported a numerical error"
                if _is_numerical(what)
                else self.title,
                message=(
                    f"The hardware reported '{what}' {count} time{'s' if count > 1 else ''} on "
                    f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"
                    + (f" (metadata: {g['metadata'].iloc[0]})" if g["metadata"].iloc[0] else "")
                    + ". The step's results are suspect until it is fixed."
                ),
                ranks=ranks,
                start_ns=start,
                end_ns=end,
                suggestion="Find the instruction that raised it (the window) and fix its "
                "inputs or dtype before tuning performance.",
                evidence={
                    "count": count,
                    "by_rank": {
                        str(int(r)): int(c) for r, c in g.groupby("rank")["count"].sum().items()
                    },
                },
            )


def _is_numerical(text: str) -> bool:
    low = text.lower()
    return "numer" in low or "nan" in low.split() or "inf" in low.split()


def _numerical_events(trace: S.Trace) -> pd.DataFrame:
    """Events named ``numerical_err`` (any exporter), as error kinds per rank and name."""
    import numpy as np
    import pandas as pd

    ev = trace.events
    names = ev[S.NAME]
    hit_cats = pd.Series(names.cat.categories.astype(str)).str.contains(
        NUMERICAL_EVENT, case=False, regex=True
    )
    if not hit_cats.any():
        return pd.DataFrame(columns=_COLUMNS)
    hit = np.append(hit_cats.to_numpy(dtype=bool), False)[names.cat.codes.to_numpy()]
    sub = pd.DataFrame(
        {
            "rank": ev[S.RANK].to_numpy()[hit],
            "description": S.strings(names)[hit],
            "ts": ev[S.TS].to_numpy()[hit],  # already aligned
        }
    )
    out = (
        sub.groupby(["rank", "description"])
        .agg(count=("ts", "size"), first_ts_ns=("ts", "min"), last_ts_ns=("ts", "max"))
        .reset_index()
    )
    return out.assign(type="numerical error event", metadata="", offset=0)[_COLUMNS]
