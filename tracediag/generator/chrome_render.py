"""Column-wise rendering of Chrome trace events into JSON text (one line per event).

Times come in as integer ns and go out as µs with at most three decimals, as Kineto writes them.
Events are rendered from DataFrame columns, never one dict each.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def lines(frame: pd.DataFrame) -> pd.Series:
    """One JSON object per row; floats (µs times) with at most 3 decimals, i.e. ns precision."""
    text = frame.reset_index(drop=True).to_json(orient="records", lines=True, double_precision=3)
    return pd.Series(text.splitlines())


def complete(cat: str, name, pid, tid, ts, dur, args: pd.DataFrame) -> pd.Series:
    """Complete (``ph: X``) events; ``ts``/``dur`` in ns, ``args`` one row per event."""
    head = pd.DataFrame(
        {
            "ph": "X",
            "cat": cat,
            "name": name,
            "pid": pid,
            "tid": tid,
            "ts": np.asarray(ts) / 1000,
            "dur": np.asarray(dur) / 1000,
        }
    )
    return lines(head).str[:-1] + ',"args":' + lines(args) + "}"


def flows(phase: str, corr, pid, tid, ts) -> pd.Series:
    """Kineto ``ac2g`` flow points (``s`` start, ``f`` finish bound to the enclosing slice)."""
    frame = pd.DataFrame(
        {
            "ph": phase,
            "id": corr,
            "pid": pid,
            "tid": tid,
            "ts": np.asarray(ts) / 1000,
            "cat": "ac2g",
            "name": "ac2g",
        }
    )
    if phase == "f":
        frame["bp"] = "e"  # binds to the enclosing slice
    return lines(frame)
