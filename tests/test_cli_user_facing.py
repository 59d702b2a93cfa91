"""What the command line shows must be true (issue 20): the TUI refuses without a terminal, a
broken pyproject.toml is an error rather than silently skipped, ``export`` writes the format its
output name says, and the listing options (``rules --format json``, ``rule --all``,
``--statistics``, ``--show-settings``) say what they claim."""

from __future__ import annotations

import gzip
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import orjson
import pytest

from tests import gate_runs
from tracediag.engine.config import KNOWN_KEYS
from tracediag.model.units import fmt_ns
from tracediag.parsers import perfetto

cli = gate_runs.cli  # cli(*argv) -> (exit code, stdout, stderr) in an empty directory
run_dirs = gate_runs.run_dirs
probes = gate_runs.probes

ROOT = Path(__file__).resolve().parents[1]
HOST_GAPS = ROOT / "sample_traces" / "chrome_host_gaps" / "chrome"
STRAGGLER = ROOT / "sample_traces" / "neuron_parquet_straggler" / "parquet"


def _error(err: str) -> str:
    assert err.startswith("tracediag: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    return err.strip()


@pytest.fixture
def no_load(monkeypatch):
    """Fail the test if anything reads a trace."""

    def refuse(*_a, **_k):
        raise AssertionError("a trace was read")

    monkeypatch.setattr("tracediag.loading.loader.load", refuse)


# ---- 1. the TUI needs a terminal --------------------------------------------------------------


@pytest.mark.parametrize("argv", [["/nonexistent"], ["tui", str(STRAGGLER)]])
def test_tui_without_a_terminal_fails_at_once_naming_report_and_check(argv, tmp_path):
    # Before: the app started anyway, wrote escape codes into the file and never exited.
    out = subprocess.run(
        [sys.executable, "-m", "tracediag", *argv],
        stdin=subprocess.DEVNULL,
        capture_output=True,  # stdout and stderr are pipes: no terminal anywhere
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert (out.returncode, out.stdout) == (2, "")
    err = _error(out.stderr)
    assert "needs a terminal (stdin is not one)" in err
    assert "'tracediag report PATH...'" in err and "'tracediag check PATH...'" in err


# ---- 6. a broken pyproject.toml is an error -------------------------------------------------


def test_broken_pyproject_found_upward_is_an_error_naming_the_toml_problem(cli, probes, tmp_path):
    py = tmp_path / "pyproject.toml"
    py.write_text('[tool.tracediag]\nignore = ["COL"\nfail-on = "info"\n')
    code, out, err = cli("check", "a")
    # Before: skipped, so COL990 (warning) was no longer ignored and the gate's verdict changed.
    assert (code, out) == (2, "")
    line = _error(err)
    assert line.startswith(f"tracediag: error: {py}: invalid TOML: ")
    assert "(at line 3, column 1)" in line  # tomllib's own position of the problem


def test_broken_pyproject_given_with_config_is_an_error(cli, probes, tmp_path):
    bad = tmp_path / "conf" / "pyproject.toml"
    bad.parent.mkdir()
    bad.write_bytes(b"[tool.tracediag]\nselect = \xff\n")
    code, _, err = cli("report", "a", "--config", bad)
    assert code == 2
    assert (
        _error(err) == f"tracediag: error: {bad}: invalid TOML: not UTF-8 (byte 26)"
    )  # 17 + 9 bytes before it


def test_pyproject_without_a_tracediag_table_is_passed_over(cli, probes, tmp_path, monkeypatch):
    (tmp_path / "tracediag.toml").write_text('ignore = ["COL990"]\n')
    sub = tmp_path / "project"
    sub.mkdir()
    (sub / "pyproject.toml").write_text('[project]\nname = "x"\n')
    monkeypatch.chdir(sub)
    code, out, _ = cli("report", "a", "--format", "json", "-q")
    assert code == 0
    assert [f["code"] for f in orjson.loads(out)["findings"]] == ["DMA990"]


def test_broken_pyproject_beyond_the_config_found_is_not_read(cli, probes, tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text("[tool.tracediag\n")  # never reached
    sub = tmp_path / "project"
    sub.mkdir()
    (sub / "tracediag.toml").write_text('ignore = ["DMA990"]\n')
    monkeypatch.chdir(sub)
    code, out, _ = cli("report", "a", "--format", "json", "-q")
    assert code == 0
    assert [f["code"] for f in orjson.loads(out)["findings"]] == ["COL990"]


# ---- 7. export: the format the name says -------------------------------------------------------


def test_export_format_follows_the_output_name(cli, tmp_path):
    for name in ("job.json", "x.trace.json.gz", "job.pftrace", "job.perfetto-trace", "job.pb"):
        code, _, err = cli("export", HOST_GAPS, "-o", name, "-q")
        assert (code, err) == (0, ""), name
    # Before: all five were protobuf.
    doc = orjson.loads((tmp_path / "job.json").read_bytes())
    packed = (tmp_path / "x.trace.json.gz").read_bytes()
    assert packed[:2] == b"\x1f\x8b"
    assert orjson.loads(gzip.decompress(packed)) == doc
    ranks = {e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "process_name"}
    assert ranks == {"rank 0", "rank 1", "tracediag findings"}
    for name in ("job.pftrace", "job.perfetto-trace", "job.pb"):
        assert perfetto.sniff(tmp_path / name), name
        assert (tmp_path / name).read_bytes()[:1] != b"{"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["-o", "job.txt"],
            "job.txt: cannot tell the export format from the name: end it in '.json' or "
            "'.json.gz' (chrome) or '.pftrace', '.perfetto-trace' or '.pb' (perfetto), or give "
            "--format",
        ),
        (
            ["-o", "job.pftrace", "--format", "chrome"],
            "job.pftrace: the name says perfetto but --format is chrome: rename it or drop "
            "--format",
        ),
        (
            ["-o", "job.json", "--format", "perfetto"],
            "job.json: the name says chrome but --format is perfetto: rename it or drop --format",
        ),
        (
            ["-o", "job.bin.gz", "--format", "perfetto"],
            "job.bin.gz: the perfetto export is not compressed: drop '.gz'",
        ),
    ],
)
def test_export_name_and_format_that_cannot_be_honoured(cli, no_load, tmp_path, argv, message):
    code, _, err = cli("export", "traces", *argv)
    assert code == 2
    assert _error(err) == f"tracediag: error: {message}"
    assert list(tmp_path.iterdir()) == []  # refused before reading anything or writing a file


def test_export_with_format_and_a_neutral_name(cli, tmp_path):
    assert cli("export", HOST_GAPS, "-o", "job.bin", "--format", "perfetto", "-q")[0] == 0
    assert perfetto.sniff(tmp_path / "job.bin")


@pytest.mark.parametrize("name", ["x.trace.json.gz", "x.pftrace"])
def test_our_own_export_reads_back_with_the_same_ranks_and_findings(cli, tmp_path, name):
    code, out, _ = cli("report", STRAGGLER, "--format", "json", "-q")
    original = orjson.loads(out)
    assert cli("export", STRAGGLER, "-o", name, "-q")[0] == 0
    code, out, _ = cli("report", name, "--format", "json", "-q")
    again = orjson.loads(out)
    assert code == 0
    assert [r["rank"] for r in again["ranks"]] == [r["rank"] for r in original["ranks"]] == [0, 1]
    codes = sorted(f["code"] for f in original["findings"])
    assert codes == ["COL201", "COL202", "DMA101"]
    assert sorted(f["code"] for f in again["findings"]) == codes


GLOO = ROOT / "tests" / "data" / "real_gloo" / "straggler_sleep"


def _digest(report: dict) -> dict:
    """What a read-back must keep: ranks, their hardware and clock status, the path's length,
    and each finding's code, ranks and saving."""
    return {
        "ranks": [(r["rank"], r["hardware"], r["clock"]) for r in report["ranks"]],
        "path": report["critical_path"]["length_ns"],
        "steps": [r["step_time_ns"] for r in report["ranks"]],
        "findings": sorted((f["code"], tuple(f["ranks"])) for f in report["findings"]),
        "savings": sorted(
            (f["code"], tuple(f["ranks"]), f["saving_ns"]) for f in report["findings"]
        ),
    }


@pytest.mark.parametrize("name", ["x.trace.json.gz", "x.pftrace"])
@pytest.mark.parametrize("job", ["chrome_straggler", "generated_neuron", "real_gloo"])
def test_a_read_back_gives_the_same_job_on_every_kind_of_input(cli, run_dirs, job, name):
    # Before: Chrome read back as one rank (Kineto categories, no collectives), Perfetto lost the
    # collectives' ids (rank 1 unaligned), the hardware and the dependencies' kinds, and took the
    # critical path's arrows for dependencies.
    path = {
        "chrome_straggler": ROOT / "sample_traces" / "chrome_straggler" / "chrome",
        "generated_neuron": run_dirs["straggler"],
        "real_gloo": GLOO,
    }[job]
    code, out, _ = cli("report", path, "--format", "json", "-q")
    original = _digest(orjson.loads(out))
    assert cli("export", path, "-o", name, "-q")[0] == 0
    code, out, _ = cli("report", name, "--format", "json", "-q")
    assert code in (0, 1)
    again = _digest(orjson.loads(out))
    assert again["ranks"] == original["ranks"]
    assert again["findings"] == original["findings"]
    assert again["path"] == pytest.approx(original["path"], rel=0.01)
    assert again["steps"] == pytest.approx(original["steps"], rel=0.01)
    for (code_a, ranks_a, a), (code_b, ranks_b, b) in zip(
        again["savings"], original["savings"], strict=True
    ):
        assert (code_a, ranks_a) == (code_b, ranks_b)
        assert a == pytest.approx(b, rel=0.01, abs=1000), code_a
    if job == "real_gloo":  # the rank the capture delayed (its truth.json) is still named
        delayed = orjson.loads((GLOO / "truth.json").read_bytes())["delayed_rank"]
        assert ("COL201", (delayed,)) in again["findings"]


# ---- 10. check --format html, words instead of internal names, plurals -------------------------


def test_check_writes_the_html_report_with_its_gate(cli, tmp_path):
    # Before: "--format html" was refused by check (report only).
    code, out, _ = cli("check", STRAGGLER, "--format", "html", "-o", "c.html", "-q")
    page = (tmp_path / "c.html").read_text()
    assert (code, out) == (1, "")  # COL201 (error) fails the gate; the page is written anyway
    gate = page[page.index("<h2>Gate</h2>") :]
    assert gate.startswith('<h2>Gate</h2><p class="fail">check failed: 1 finding at or above '
                           "error</p><ul><li>")  # fmt: skip
    assert (
        "COL201 Straggler rank: others wait for it at collectives [rank 1] (fails the gate" in gate
    )
    # the same pictures as report's page (they need the diagnosis, not only the report)
    assert cli("report", STRAGGLER, "--format", "html", "-o", "r.html", "-q")[0] == 0
    report_page = (tmp_path / "r.html").read_text()
    for chart in ("collective arrival skew", "worst window timeline", "per-rank heatmap"):
        assert page.count(f'aria-label="{chart}"') == report_page.count(f'aria-label="{chart}"')
        assert f'aria-label="{chart}"' in page
    # everything from the first picture to the findings is report's page; the gate comes after
    body = page.split("<h2>Critical path by category</h2>")[1].split("<h2>Gate</h2>")[0]
    report_body = report_page.split("<h2>Critical path by category</h2>")[1]
    assert body.rstrip("\n") == report_body.split("</body>")[0].rstrip("\n")


def test_ci_messages_name_evidence_in_words_and_keep_ids_in_properties(cli, tmp_path):
    # Before: SARIF/JUnit message text held the evidence as JSON of field names and ids
    # ({"worst":[{"coll_key":2,"arrival_ns":4008...}], "mean_late_ns": ...}).
    assert (
        cli("check", STRAGGLER, "--format", "sarif", "-o", "s.sarif", "--exit-zero", "-q")[0] == 0
    )
    results = orjson.loads((tmp_path / "s.sarif").read_text())["runs"][0]["results"]
    col201 = next(r for r in results if r["ruleId"] == "COL201")
    text = col201["message"]["text"]
    assert "\n  mean lateness: 1.084 ms\n" in text
    assert "\n  worst 1, late by: 1.455 ms\n" in text
    assert "\n  worst 1, arrived at: 6.742 ms into the critical path\n" in text
    for internal in ("coll_key", "_ns", "arrival_ns", "{", "[0]"):
        assert internal not in text, internal
    assert [w["coll_key"] for w in col201["properties"]["evidence"]["worst"]] == [2, 3, 1, 0]
    dma = next(r for r in results if r["ruleId"] == "DMA101")
    assert "events" not in dma["message"]["text"]
    assert len(dma["properties"]["evidence"]["events"]) > 0  # the ids, for tools
    assert cli("check", STRAGGLER, "--format", "junit", "-o", "j.xml", "--exit-zero", "-q")[0] == 0
    junit = (tmp_path / "j.xml").read_text()
    assert "coll_key" not in junit and "mean_late_ns" not in junit
    assert "worst 1, late by: 1.455 ms" in junit


def test_severity_counts_are_plural_where_they_are_not_one(cli):
    # Before: "3 findings (1 error, 0 warning, 2 info)".
    code, out, _ = cli("report", STRAGGLER, "-q")
    assert out.splitlines()[0].endswith("3 findings (1 error, 0 warnings, 2 info)")
    code, out, _ = cli("report", STRAGGLER, "--format", "markdown", "-q")
    assert "| Findings | 3 (1 error, 0 warnings, 2 info) |" in out


# ---- 11. rules --format json, rule --all, --statistics, --show-settings -----------------------


def test_rules_as_json(cli):
    code, out, _ = cli("rules", "--format", "json")
    rules = orjson.loads(out)
    assert code == 0
    assert {"code": "DMA101", "name": "dma-wait-on-critical-path", "family": "dma",
            "severity": "warning",
            "title": "Engine stalled on the critical path waiting for a DMA"} in rules  # fmt: skip
    text = cli("rules")[1].splitlines()[1:]
    assert [r["code"] for r in rules] == [line.split()[0] for line in text]
    assert all(list(r) == ["code", "name", "family", "severity", "title"] for r in rules)
    dma = orjson.loads(cli("rules", "--family", "dma", "--format", "json")[1])
    assert [r["code"] for r in dma] == [r["code"] for r in rules if r["code"].startswith("DMA")]


def test_rule_all_prints_every_document_in_code_order(cli):
    code, out, _ = cli("rule", "--all")
    codes = [r["code"] for r in orjson.loads(cli("rules", "--format", "json")[1])]
    assert code == 0
    docs = [cli("rule", c)[1].rstrip("\n") for c in sorted(codes)]
    assert out == "\n\n".join(docs) + "\n"
    assert [line.split()[1] for line in out.splitlines() if line.startswith("# ")] == sorted(codes)


@pytest.mark.parametrize("argv", [["rule"], ["rule", "DMA101", "--all"]])
def test_rule_needs_a_code_or_all(cli, argv):
    code, _, err = cli(*argv)
    assert code == 2
    assert _error(err) == (
        "tracediag: error: rule needs a CODE or --all, not both (see 'tracediag rule --help')"
    )


def test_statistics_count_the_findings_of_each_code(cli):
    code, out, _ = cli("report", HOST_GAPS, "--format", "json", "-q")
    truth = Counter(f["code"] for f in orjson.loads(out)["findings"])
    assert truth == {"CMP301": 2, "HST401": 2, "COL202": 1}
    code, out, _ = cli("report", HOST_GAPS, "--statistics", "-q")
    assert code == 0
    assert out.splitlines() == [
        "2  CMP301  info     compute-underutilization  Tensor engine (or GPU) idle on the "
        "critical path",
        "2  HST401  warning  host-bound-gaps           Device idle on the critical path waiting "
        "for the host",
        "1  COL202  info     exposed-communication     Collective transfer on the critical path "
        "not overlapp…",  # cut at 100 columns
    ]
    rows = orjson.loads(cli("report", HOST_GAPS, "--statistics", "--format", "json", "-q")[1])
    assert {r["code"]: r["count"] for r in rows} == truth
    # check keeps its verdict: two warnings fail --fail-on warning with or without it
    assert cli("check", HOST_GAPS, "--fail-on", "warning", "--statistics", "-q")[0] == 1
    assert cli("check", HOST_GAPS, "--fail-on", "warning", "-q")[0] == 1


def test_statistics_and_settings_only_as_text_or_json(cli, no_load):
    code, _, err = cli("check", "a", "--statistics", "--format", "sarif")
    assert code == 2
    assert _error(err) == "tracediag: error: --statistics writes text or json, not --format sarif"
    code, _, err = cli("report")
    assert code == 2
    assert _error(err) == (
        "tracediag: error: the following arguments are required: PATH "
        "(see 'tracediag report --help')"
    )


def test_show_settings_names_where_each_value_came_from(cli, no_load, tmp_path):
    conf = tmp_path / "tracediag.toml"
    conf.write_text(
        'ignore = ["DMA"]\nfail-on = "warning"\n[budgets]\nmax-step-time-ms = 12\n'
        '[severity]\nCOL202 = "error"\n'
    )
    argv = ("check", "--show-settings", "--ignore", "CMP", "--no-align", "--jobs", "2")
    code, out, _ = cli(*argv, "--format", "json")  # no PATH needed, no trace read
    doc = orjson.loads(out)
    assert code == 0
    assert doc["config_file"] == str(conf)
    s = doc["settings"]
    assert set(s) == KNOWN_KEYS | {"cache", "jobs", "scheduler"}
    assert s["ignore"] == {"value": ["DMA", "CMP"], "source": f"{conf}, --ignore"}
    assert s["select"] == {"value": ["ALL"], "source": "default"}
    assert s["fail-on"] == {"value": "warning", "source": str(conf)}
    assert s["align"] == {"value": False, "source": "--no-align"}
    assert s["budgets"] == {"value": {"max-step-time-ms": 12.0}, "source": str(conf)}
    assert s["severity"] == {"value": {"COL202": "error"}, "source": str(conf)}
    assert s["jobs"] == {"value": 2, "source": "--jobs"}
    assert s["layout"] == {"value": None, "source": "default"}
    flagged = orjson.loads(cli("check", "--show-settings", "--fail-on", "info", "--select",
                               "COL", "--format", "json")[1])["settings"]  # fmt: skip
    assert flagged["fail-on"] == {"value": "info", "source": "--fail-on"}
    assert flagged["ignore"] == {"value": [], "source": "--select"}  # --select drops the file's
    code, out, _ = cli(*argv)
    lines = out.splitlines()
    assert code == 0 and lines[0] == f"# config file: {conf}"
    ignore = next(line for line in lines if line.startswith("ignore = "))
    assert ignore.split("  # ") == ['ignore = ["DMA", "CMP"]'.ljust(ignore.index("  # ")),
                                    f"{conf}, --ignore"]  # fmt: skip


def test_show_settings_without_a_config_file(cli, no_load):
    code, out, _ = cli("report", "x", "--show-settings")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "# config file: none found (defaults)"
    assert any(line.startswith("layout = none (inferred from the collectives)") for line in lines)
    assert all(line.endswith("# default") for line in lines[1:] if not line.startswith("#"))


# ---- review 20: totals, diff and baseline lines on the real 4-rank gloo jobs -----------------

GLOO_JOBS = ROOT / "tests" / "data" / "real_gloo"


def _gloo_truth(name: str) -> dict:
    return orjson.loads((GLOO_JOBS / name / "truth.json").read_bytes())


def test_saving_budget_is_the_reports_joint_total_not_the_sum_of_overlapping_savings(cli, tmp_path):
    """straggler_compute: COL201 (error) and COL202 (info) name the same AllReduce waits on
    rank 1. The report totals them by one replay of the findings at warning or above; the
    budget must gate that figure, not their sum."""
    code, out, _ = cli("report", GLOO_JOBS / "straggler_compute", "--format", "json", "-q")
    assert code == 0
    report = orjson.loads(out)
    savings = {f["code"]: f["saving_ns"] for f in report["findings"]}
    assert set(savings) == {"COL201", "COL202"} and savings["COL202"] > 0
    joint = report["summary"]["total_saving_ns_joint"]
    assert joint == savings["COL201"]  # the one finding at warning or above
    limit_ms = (joint + savings["COL202"] / 2) / 1e6  # above the joint total, below the sum
    (tmp_path / "tracediag.toml").write_text(f"[budgets]\nmax-saving-upper-bound-ms = {limit_ms}\n")
    code, out, _ = cli("check", GLOO_JOBS / "straggler_compute", "--exit-zero", "-q")
    assert code == 0
    (line,) = [x for x in out.splitlines() if "max-saving-upper-bound-ms" in x]
    assert line.strip().startswith("ok ")
    assert f"is {fmt_ns(joint)}" in line and "fixed together (one replay)" in line
    text_total = [x for x in out.splitlines() if x.startswith("Fixing the finding")]
    assert text_total == [
        f"Fixing the finding at warning or above: {fmt_ns(joint)} shorter (by replay)."
    ]


def test_diff_of_host_only_traces_names_no_rank_by_step_time(cli):
    """Without a per-rank device breakdown every rank's step grows when rank 1 straggles, and
    rank 3 (the fastest in the clean run) grew most: naming it contradicts COL201 and the truth."""
    assert _gloo_truth("straggler_compute")["delayed_rank"] == 1
    code, out, _ = cli(
        "diff", GLOO_JOBS / "clean", GLOO_JOBS / "straggler_compute", "--format", "json", "-q"
    )
    assert code == 0
    data = orjson.loads(out)
    assert data["slower_rank"] is None
    assert data["notes"][0].startswith("no rank is named slower: the ranks have no compute/memory")
    # rank 1's COL201 (info in the clean run, error here) is one straggler: changed, not added;
    # the all-reduces every rank exposes are the job's in both runs (a smaller share here)
    changed = [(f["code"], f["ranks"], f["a_severity"]) for f in data["findings"]["changed"]]
    assert sorted(changed) == [("COL201", [1], "info"), ("COL202", [0, 1, 2, 3], "warning")]
    assert data["findings"]["added"] == []
    text = cli("diff", GLOO_JOBS / "clean", GLOO_JOBS / "straggler_compute", "-q")[1]
    assert "own work (grew most)" not in text and "\nnote: no rank is named slower" in text


def test_diff_shows_a_finding_whose_severity_changed(cli):
    """straggler_sleep: rank 2 sleeps before each forward (truth.json). Its COL201 is info in
    the clean run and error here: one fingerprint, so it was in neither 'added' nor 'removed'."""
    rank = _gloo_truth("straggler_sleep")["delayed_rank"]
    code, out, _ = cli(
        "diff", GLOO_JOBS / "clean", GLOO_JOBS / "straggler_sleep", "--format", "json", "-q"
    )
    assert code == 0
    found = orjson.loads(out)["findings"]
    (changed,) = [f for f in found["changed"] if f["code"] == "COL201"]
    assert changed["ranks"] == [rank]
    assert (changed["a_severity"], changed["severity"]) == ("info", "error")
    assert changed["saving_ns"] > 10 * changed["a_saving_ns"] > 0
    assert "COL201" not in [f["code"] for f in found["added"]]
    text = cli("diff", GLOO_JOBS / "clean", GLOO_JOBS / "straggler_sleep", "-q")[1]
    row = re.search(rf"\n  changed +COL201 +info -> error +{rank} .*", text)
    assert row and f"{fmt_ns(changed['a_saving_ns'])} -> {fmt_ns(changed['saving_ns'])}" in row[0]
    assert "(2 at another severity)" in text


def test_baseline_gate_lines_name_the_rank_of_new_and_fixed_findings(cli, tmp_path):
    """A baseline holding straggler_sleep (COL201 on rank 2) against straggler_compute (COL201
    on rank 1): one COL201 is new and one fixed; the lines must say which rank is which."""
    code, _, _ = cli("baseline", GLOO_JOBS / "straggler_sleep", "-o", "base.json", "-q")
    assert code == 0
    code, out, _ = cli("check", GLOO_JOBS / "straggler_compute", "--baseline", "base.json", "-q")
    assert code == 1
    sleep, compute = (
        _gloo_truth(n)["delayed_rank"] for n in ("straggler_sleep", "straggler_compute")
    )
    gate = out[out.index("\nGate: ") :]
    assert (
        f"x new COL201 Straggler rank: others wait for it at collectives [rank {compute}]" in gate
    )
    assert (
        f"- fixed since the baseline: COL201 Straggler rank: others wait for it at collectives [rank {sleep}]"
        in gate
    )


# ---- review 20 (R20b): help, config codes and host-only bounds ---------------------------------


def test_export_help_says_o_is_the_trace_written_not_the_report(cli):
    code, out, _ = cli("export", "--help")
    assert code == 0
    help_text = " ".join(out.split())
    assert "-o FILE, --output FILE the trace to write (required); its name picks the format" in (
        help_text
    )
    assert "write the report" not in help_text
    assert "write the report to FILE, not stdout" in (ROOT / "docs" / "cli.md").read_text()
    assert "the trace to write (required)" in (ROOT / "docs" / "cli.md").read_text()


@pytest.mark.parametrize(
    ("name", "table", "want"),
    [
        ("pyproject.toml", '[tool.tracediag]\nignore = ["XYZ1"]\n', "ignore: XYZ1 matches no rule"),
        (
            "pyproject.toml",
            '[tool.tracediag]\nignore = ["COL", "DAM"]\n',
            "ignore: DAM matches no rule (did you mean DMA?)",
        ),
        (
            "tracediag.toml",
            'extend-select = ["COL99O"]\n',
            "extend-select: COL99O matches no rule (did you mean COL990?)",
        ),
    ],
)
def test_a_mistyped_code_in_the_config_is_an_error_like_on_the_command_line(
    cli, probes, no_load, tmp_path, name, table, want
):
    """Before: ``ignore = ["XYZ1"]`` in [tool.tracediag] passed silently (nothing ignored)
    while ``--ignore XYZ1`` was an error. Now both are one line, exit 2, before any read."""
    (tmp_path / name).write_text(table)
    code, out, err = cli("report", "a", "-q")
    assert (code, out) == (2, "")
    assert _error(err) == f"tracediag: error: {tmp_path / name}: {want}"
    # the same typo on the command line: the same message but for where it came from
    (tmp_path / name).unlink()
    flag = "--" + want.split(":")[0]
    bad = want.split(": ")[1].split()[0]
    code, _, err = cli("report", "a", "-q", flag, bad)
    assert code == 2 and _error(err) == f"tracediag: error: {flag}: {want.split(': ', 1)[1]}"


def test_bounds_of_a_host_only_trace_is_one_line(cli):
    """The gloo jobs run on CPU: no rank has device engine events, so no bound exists. Before:
    four 15-line blocks of 'window 0..0 ns', '-' and 'unknown'."""
    code, out, _ = cli("bounds", GLOO_JOBS / "straggler_compute", "-q")
    assert code == 0
    assert out == (
        "no device work on any of the 4 ranks: bounds need device engine events "
        "(DMA, matrix, vector) and this trace has none\n"
    )
    # a device trace keeps its per-rank blocks
    code, out, _ = cli("bounds", STRAGGLER, "-q")
    assert code == 0 and out.startswith("rank 0: window ") and "no device work" not in out
