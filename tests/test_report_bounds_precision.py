"""The JSON report's ``bounds`` and ``precision`` sections and their text/Markdown tables, on the
generator's fp32_matmul job: the precision rows against the Parquet ``Instruction`` tables read
with pandas alone (MATMUL rows by their ``adjusted_flops`` / ``raw_flops`` rate)."""

from __future__ import annotations

import pandas as pd
import pytest

from tracediag.engine.diagnose import diagnose
from tracediag.generator import generate
from tracediag.loading.loader import load
from tracediag.model.units import fmt_ns
from tracediag.report.markdown import render_markdown
from tracediag.report.text import render_text


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    out = tmp_path_factory.mktemp("fp32rep")
    generate("fp32_matmul", out, formats=("parquet",), ranks=2, seed=7)
    d = diagnose(load([out / "parquet"]))
    return out / "parquet", d, d.to_dict()


def test_json_bounds_are_the_bounds_table(job):
    _, d, report = job
    table = d.bounds_df
    assert [b["rank"] for b in report["bounds"]] == list(table.index)
    for b in report["bounds"]:
        row = table.loc[b["rank"]]
        assert b["bounds_ns"]["compute_bound"] == round(row["compute_bound_ns"])
        assert b["gaps_ns"]["te_idle"] == round(row["te_idle_ns"])
        assert (b["bottleneck"], b["binding"]) == ("tensor", "compute")


def test_precision_rows_match_the_instruction_tables(job):
    root, _, report = job
    got = {(p["rank"], p["dtype"]): (p["events"], p["time_ns"]) for p in report["precision"]}
    assert {d for _, d in got} == {"bf16", "fp32"}
    for rank in (0, 1):
        files = sorted((root / f"rank_{rank}").glob("Instruction*.parquet"))
        inst = pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)
        mm = inst[(inst["engine"].str.lower() == "tensor") & (inst["opcode"] == "MATMUL")]
        fp32 = mm["adjusted_flops"] >= 2.5 * mm["raw_flops"]  # FP32 costs 4x at the BF16 rate
        for dtype, rows in (("fp32", mm[fp32]), ("bf16", mm[~fp32])):
            assert got[(rank, dtype)][0] == len(rows)
            assert got[(rank, dtype)][1] == pytest.approx(
                float(rows["duration_ns"].sum()), rel=1e-6
            )


def test_text_and_markdown_show_both_tables(job):
    _, _, report = job
    text, md = render_text(report), render_markdown(report)
    fp32 = next(p for p in report["precision"] if p["rank"] == 0 and p["dtype"] == "fp32")
    te = fmt_ns(report["bounds"][0]["bounds_ns"]["compute_bound"])
    assert "Bounds per rank" in text and "### Bounds per rank" in md
    assert "tensor (compute)" in text and te in text and te in md
    assert "Matmuls by numeric format" in text and "### Matmuls by numeric format" in md
    assert fmt_ns(fp32["time_ns"]) in text and f"| 0 | fp32 | {fp32['events']} |" in md
    old = {k: v for k, v in report.items() if k not in ("bounds", "precision")}
    assert "Bounds per rank" not in render_text(old)  # a report saved before them
