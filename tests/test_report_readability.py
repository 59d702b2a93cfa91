"""What a user reads is true, consistent and readable (issue 20, items 3, 4 and 10): the total
saving is one joint replay, zero-saving noise stays out of the text report, and the command
line's messages name what they mean."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tests.trace_factory import RankSpec, build
from tracediag.cli.main import main
from tracediag.engine.config import Config
from tracediag.engine.diagnose import diagnose
from tracediag.graph.changes import WhatIf, joint
from tracediag.loading.loader import load
from tracediag.model.units import fmt_ns

ROOT = Path(__file__).resolve().parents[1]
FRAGMENTED = ROOT / "sample_traces" / "neuron_json_fragmented_dma" / "json"


def _run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


# ---- 3. the total saving is one replay of every change, not a sum -------------------------------


def test_joint_keeps_the_larger_cut_of_a_node_two_changes_set():
    a = WhatIf.durations([3, 5], [100, 40]) + WhatIf.gaps([1], [7])
    b = WhatIf.durations([5, 9], [10, 60])
    both = joint([a, b])
    assert dict(zip(both.dur_nodes.tolist(), both.dur_values.tolist(), strict=True)) == {
        3: 100,
        5: 10,
        9: 60,
    }
    assert (both.gap_nodes.tolist(), both.gap_values.tolist()) == ([1], [7])


def test_total_saving_counts_the_dma_stall_once(capsys):
    d = diagnose(load([FRAGMENTED]))
    dma = [f for f in d.findings if f.code in ("DMA101", "DMA102") and f.saving_ns]
    # DMA101 and DMA102 name the same stall on qSyncIO0 (layer_2): each saves 497.5 µs alone.
    assert [(f.code, f.saving_ns) for f in dma] == [("DMA101", 497528), ("DMA102", 497528)]
    # Fixed together they save it once, not twice.
    assert d.analysis.joint_saving(dma) == 497528
    summary = d.to_dict()["summary"]
    # The old sum, kept for old tools, counts the stall twice.
    added = sum(f.saving_ns for f in d.findings)
    assert summary["total_saving_ns_upper_bound"] == added >= 2 * 497528
    # The joint replay is of the findings at warning or above: here the two DMA findings (COL202's
    # exposed AllReduce, on another stretch of the path, is info and not totalled).
    headline = d.at_or_above("warning")
    assert sorted(f.code for f in headline) == ["DMA101", "DMA102"]
    joint_ns = summary["total_saving_ns_joint"]
    assert joint_ns == 497528 and summary["joint_findings"] == 2
    assert summary["joint_sum_ns"] == 2 * 497528
    code, out, _ = _run(capsys, "report", FRAGMENTED, "-q")
    assert code == 0
    tail = " ".join(out.split("\n\n")[-1].split())
    assert tail == (
        f"Fixing the 2 findings at warning or above together: {fmt_ns(joint_ns)} shorter (by one "
        f"replay of all their changes; their savings, each measured alone, add up to "
        f"{fmt_ns(2 * 497528)})."
    )
    assert "Upper bound" not in out
    code, md, _ = _run(capsys, "report", FRAGMENTED, "-q", "--format", "markdown")
    assert (
        f"| Fixing the 2 findings at warning or above together | {fmt_ns(joint_ns)} shorter "
        "(by one replay" in md
    )


def test_a_rule_without_a_recorded_change_leaves_the_joint_unknown(capsys):
    d = diagnose(load([FRAGMENTED]))
    d.analysis.changes.clear()  # as a third-party rule that passes no change= would leave it
    d.__dict__.pop("joint_saving_ns", None)
    assert d.to_dict()["summary"]["total_saving_ns_joint"] is None
    from tracediag.report.text import render_text

    added = fmt_ns(sum(f.saving_ns for f in d.findings))
    assert f"Sum of the savings: {added} (savings overlap" in render_text(d.to_dict())


# ---- 4. noise: zero savings, once per rank --------------------------------------------------------


def test_text_report_leaves_out_info_findings_without_a_saving(capsys):
    code, out, _ = _run(capsys, "report", FRAGMENTED, "-q")
    numbered = [line.split()[1] for line in out.splitlines() if line[:5].strip().endswith(".")]
    # (the trace family's findings, which say how far the report can be trusted, stay listed)
    assert numbered[:3] == ["DMA101", "DMA102", "COL202"] and "CMP301" not in numbered
    assert "saving 0 ns" not in out
    assert (
        "Not shown: 2 info findings whose fix saves under 0.1% of the path by replay "
        "(CMP301 rank 1, DMA101 rank 0)" in " ".join(out.split())
    )
    _, js, _ = _run(capsys, "report", FRAGMENTED, "-q", "--format", "json")
    assert [f["code"] for f in json.loads(js)["findings"]][3:5] == ["CMP301", "DMA101"]


def test_dma101_at_the_queues_pace_says_why_it_saves_nothing():
    d = diagnose(load([FRAGMENTED]))
    (f,) = [f for f in d.findings if f.code == "DMA101" and f.saving_ns == 0]
    assert f.ranks == (0,) and f.layer == "layer_0"
    assert "already run at the queue's typical bandwidth and queueing" in f.message
    assert "restoring them saves nothing" in f.message
    assert "would be 0 ns shorter" not in f.message
    assert "prefetching them so they overlap compute" in f.message


def test_trc501_is_one_finding_for_the_job():
    a, b, c = RankSpec(0), RankSpec(1), RankSpec(2)
    for r in (a, b, c):
        r.add("ADD", "vector", "compute", 0, 100)
    trace = build(a, b, c)
    trace.meta[0].count("events: dropped, no valid timestamp or duration", 3)
    trace.meta[2].count("events: dropped, no valid timestamp or duration", 5)
    trace.meta[2].count("durations: negative, clamped to 0", 1)
    (f,) = [f for f in diagnose(trace, Config(select=["TRC501"])).findings]
    assert f.ranks == (0, 2) and f.evidence["dropped"] == 8
    assert f.evidence["by_rank"] == {
        "0": {"events: dropped, no valid timestamp or duration": 3},
        "2": {
            "events: dropped, no valid timestamp or duration": 5,
            "durations: negative, clamped to 0": 1,
        },
    }
    assert f.message.startswith("Ranks 0,2 (most on rank 2): 9 rows repaired or dropped")


# ---- 10. messages ---------------------------------------------------------------------------------


def test_col202_counts_one_transfer_in_the_singular():
    d = diagnose(load([FRAGMENTED]))
    (f,) = [f for f in d.findings if f.code == "COL202"]
    assert "1 AllReduce transfer runs on the critical path with no compute beside it" in f.message


def test_skipped_directories_of_traces_are_not_called_unreadable_files(tmp_path, capsys):
    job = tmp_path / "gen"
    (job / "chrome").mkdir(parents=True)
    chrome = next((ROOT / "sample_traces" / "chrome_straggler" / "chrome").iterdir())
    (job / "chrome" / chrome.name).write_bytes(chrome.read_bytes())
    json_dir = job / "json"
    json_dir.mkdir()
    for f in FRAGMENTED.iterdir():
        (json_dir / f.name).write_bytes(f.read_bytes())
    (job / "notes.txt").write_text("not a trace")
    (job / "rank_0.json.gz").write_bytes((FRAGMENTED / "rank_0.json.gz").read_bytes())
    code, _, err = _run(capsys, "report", job)
    assert code == 0
    assert (
        "tracediag: not read: 2 directories of traces (chrome/, json/), read only when named: a "
        "job is one directory; 1 file no reader accepts (notes.txt)" in err
    )
    assert "files no reader accepts: " not in err


def test_a_directory_of_unrelated_files_lists_them(tmp_path, capsys):
    for name in ("a.txt", "b.csv", "c.log", "d.md", "e.ini", "f.cfg", "g.yaml"):
        (tmp_path / name).write_text("x")
    code, out, err = _run(capsys, "report", tmp_path)
    assert (code, out) == (2, "")
    assert err == (
        f"tracediag: error: {tmp_path}: directory holds no trace this tool can read; not read: "
        "7 files no reader accepts (a.txt, b.csv, c.log, d.md, e.ini and 2 more)\n"
    )


def test_a_mistyped_flag_points_to_the_subcommands_help(capsys):
    code, _, err = _run(capsys, "report", FRAGMENTED, "--formt", "json")
    assert code == 2
    assert err == (
        "tracediag: error: unrecognized arguments: --formt json; did you mean '--format'? "
        "(see 'tracediag report --help')\n"
    )


def test_rule_with_a_family_lists_the_family(capsys):
    code, out, err = _run(capsys, "rule", "DMA")
    assert (code, out) == (2, "")
    assert err == (
        "tracediag: error: DMA names 5 rules, not one: DMA101 (dma-wait-on-critical-path), "
        "DMA102 (small-dma-transfers), DMA103 (low-dma-bandwidth), DMA104 "
        "(dma-transfer-efficiency), DMA105 (redundant-dma-transfers); 'tracediag rule DMA101' "
        "prints one, 'tracediag rules --family dma' lists them\n"
    )
    assert _run(capsys, "rule", "collective")[2].startswith(
        "tracediag: error: collective names 3 rules, not one: COL201"
    )
    assert _run(capsys, "rule", "dma101")[1].startswith("# DMA101 dma-wait-on-critical-path")


def test_rules_uses_a_wide_terminal(capsys, monkeypatch):
    from tracediag.cli import rules_cmd

    monkeypatch.setattr(rules_cmd.sys.stdout, "isatty", lambda: True, raising=False)
    monkeypatch.setenv("COLUMNS", "160")
    _, out, _ = _run(capsys, "rules")
    assert (
        "NUM701  fp32-matmuls               precision   warning   Matmuls run at FP32 where the model runs a 16/8-bit format\n"
        in out
    )
    monkeypatch.setenv("COLUMNS", "80")
    _, out, _ = _run(capsys, "rules")
    assert max(map(len, out.splitlines())) == 80 and "…" in out


def test_ci_texts_carry_no_event_ids():
    from tracediag.report.ci_common import finding_figures

    d = diagnose(load([FRAGMENTED]))
    report = d.to_dict()
    f = next(x for x in report["findings"] if x["code"] == "DMA101")
    assert np.asarray(f["evidence"]["events"]).size  # the JSON report keeps them for tools
    text = finding_figures(f, report)
    assert "events" not in text and "coll_key" not in text and "_ns" not in text
    assert "\n  transfers: 1153\n" in text
