# %% [markdown]
# # tracediag from Python: a first diagnosis in a notebook
#
# Run it as a script (`python docs/examples/notebook.py [TRACE_PATH ...]`) or open it as a
# notebook: the `# %%` cells are Jupytext's percent format, which VS Code and JupyterLab (with
# jupytext) open as cells. Without a path it generates the `straggler` sample: two ranks of a
# simulated training step where rank 1's tensor and vector work on two layers is 1.5x slower.

# %%
import sys
import tempfile
from pathlib import Path

import tracediag

paths = sys.argv[1:]
if not paths:
    from tracediag.generator import generate

    out = Path(tempfile.mkdtemp(prefix="tracediag-example-"))
    generate("straggler", out, formats=("parquet",), ranks=2, seed=0)
    paths = [str(out / "parquet")]

# %% [markdown]
# ## Load: one aligned job, its tables as pandas DataFrames

# %%
job = tracediag.load(paths)
print(job)
print(job.ranks_info[["format", "hardware", "clock_offset_ns", "events"]])
print(job.events.groupby(["rank", "kind"], observed=True)["dur_ns"].sum().unstack())

# %% [markdown]
# ## Diagnose: findings, as objects and as a table

# %%
diagnosis = tracediag.diagnose(job)
print(diagnosis)
print(diagnosis.findings_df[["code", "severity", "ranks", "layer", "saving_ns", "saving_pct"]])
top = diagnosis.findings[0]
print(f"\n{top.code} {top.title}\n{top.message}")

# %% [markdown]
# ## The critical path: where the step's time goes

# %%
print(diagnosis.path_by_category)
print(diagnosis.path_by_rank)
path = diagnosis.critical_path
print(path.groupby(["rank", "engine"], observed=True)["dur_ns"].sum().nlargest(5))

# %% [markdown]
# ## Your own what-if questions
#
# The rules' savings come from replaying the dependency graph with the cause removed; the
# same replay answers questions of your own.

# %%
late_rank = top.ranks[0] if top.ranks else job.ranks[0]
busiest_engine = (
    path[path["category"] == "compute"].groupby("engine", observed=True)["dur_ns"].sum()
)
for change in (
    tracediag.Scale(rank=late_rank, factor=0.9),
    tracediag.Scale(engine=str(busiest_engine.idxmax()), factor=0.5),
    tracediag.RemoveWait(rank=late_rank),
    [tracediag.Scale(rank=late_rank, factor=0.9), tracediag.RemoveWait(rank=late_rank)],
):
    result = tracediag.what_if(diagnosis, change)
    print(f"{change!r}: {result.saving_ns} ns shorter ({result.saving_pct}%)")

# %% [markdown]
# ## The JSON report, and the TUI
#
# `to_json()` is what `tracediag report --format json` writes; `to_dict()` the same as a
# dictionary. `job.tui()` opens the terminal UI on this job (from a terminal, not a notebook).

# %%
report = diagnosis.to_dict()
print(report["summary"])
print(f"JSON report: {len(diagnosis.to_json())} characters")
