"""The documentation stays true to the code: generated pages are current, real reports validate
against docs/report.schema.json, the configuration page lists every key, the TUI page every key
binding, the worked example's numbers are the code's, and the site builds."""

from __future__ import annotations

import copy
import importlib
import pkgutil
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import jsonschema
import orjson
import pytest

from tests import gate_runs
from tests.worked_example import example_trace
from tracediag.cli import docs_gen
from tracediag.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
SAMPLES = ROOT / "sample_traces"
# the generated jobs the gate tests diagnose (see tests/gate_runs.py), diagnosed once per session
reports = gate_runs.reports
run_dirs = gate_runs.run_dirs
FIX = f"run `{docs_gen.REGENERATE}` from the repository root and commit the result"


# ---- generated pages --------------------------------------------------------------------------


@pytest.mark.parametrize("page", list(docs_gen.PAGES))
def test_generated_page_is_current(page):
    text = (DOCS / page).read_text(encoding="utf-8")
    assert text == docs_gen.PAGES[page](), f"docs/{page} is stale: {FIX}"


@pytest.mark.parametrize("page", docs_gen.OUTPUT_PAGES)
def test_pasted_command_output_is_current(page):
    text = (DOCS / page).read_text(encoding="utf-8")
    assert "<!-- output: tracediag" in text
    assert docs_gen.refresh_outputs(text, ROOT) == text, f"output in docs/{page} is stale: {FIX}"


def test_rule_reference_holds_every_rule_document():
    from tracediag.engine.rule import all_rules

    text = (DOCS / "rules.md").read_text(encoding="utf-8")
    for code, cls in all_rules().items():
        if cls.__module__.startswith("tracediag.rules."):
            assert f"## {code} {cls.name}\n" in text
            assert cls.doc["how to fix"].strip() in text


def test_docs_gen_check_names_a_stale_page(tmp_path, capsys):
    docs = tmp_path / "docs"
    docs.mkdir()
    assert docs_gen.main(["--docs", str(docs)]) == 0
    assert sorted(p.name for p in docs.iterdir()) == sorted(docs_gen.PAGES)
    assert docs_gen.main(["--docs", str(docs), "--check"]) == 0
    (docs / "rules.md").write_text("# old\n", encoding="utf-8")
    assert docs_gen.main(["--docs", str(docs), "--check"]) == 1
    assert f"rules.md is stale: run `{docs_gen.REGENERATE}`" in capsys.readouterr().err


# ---- the report's JSON Schema -----------------------------------------------------------------


@pytest.fixture(scope="module")
def schema() -> dict:
    data = orjson.loads((DOCS / "report.schema.json").read_bytes())
    jsonschema.Draft202012Validator.check_schema(data)
    return data


def _json_report(tmp: Path, *argv: str) -> dict:
    out = tmp / f"report{len(list(tmp.iterdir()))}.json"
    code = main([*argv, "--format", "json", "-q", "-o", str(out)])
    assert code == 0
    return orjson.loads(out.read_bytes())


@pytest.fixture(scope="module")
def real_reports(tmp_path_factory, reports) -> dict[str, dict]:
    """Real reports: the bundled samples (Neuron Parquet, legacy JSON, Chrome; 2 ranks each) as
    `report --format json` writes them, generated jobs (shared with the gate tests), and a check
    report whose gate has failures, budgets and a baseline comparison."""
    from tracediag.ci.baseline import compare, make_baseline
    from tracediag.ci.budgets import parse_budgets
    from tracediag.ci.gate import evaluate_gate
    from tracediag.model.findings import Severity

    tmp = tmp_path_factory.mktemp("reports")
    checked = reports("slow_dma")
    budgets = parse_budgets({"max-step-time-ms": 1.0, "min-mfu-pct": 10})
    comparison = compare(checked, make_baseline([("clean", reports("clean0"))]))
    checked["gate"] = evaluate_gate(checked, Severity.WARNING, budgets, comparison)
    return {
        "parquet": _json_report(
            tmp, "report", str(SAMPLES / "neuron_parquet_straggler" / "parquet")
        ),
        "neuron json": _json_report(
            tmp, "report", str(SAMPLES / "neuron_json_fragmented_dma" / "json")
        ),
        "chrome": _json_report(tmp, "report", str(SAMPLES / "chrome_straggler" / "chrome")),
        "generated straggler": reports("straggler"),
        "check with gate": checked,
    }


def test_real_reports_validate_against_the_schema(schema, real_reports):
    validator = jsonschema.Draft202012Validator(schema)
    for name, report in real_reports.items():
        errors = [f"{list(e.path)}: {e.message}" for e in validator.iter_errors(report)]
        assert not errors, f"{name}: {errors}"
        assert len(report["ranks"]) == 2
        assert report["findings"]
    assert {r["format"] for r in real_reports["chrome"]["ranks"]} == {"chrome-json"}
    assert {r["format"] for r in real_reports["neuron json"]["ranks"]} == {"neuron-json"}
    gate = real_reports["check with gate"]["gate"]
    assert [b["budget"] for b in gate["budgets"]] == ["max-step-time-ms", "min-mfu-pct"]
    assert gate["failures"] and gate["baseline"]["new_findings"]


def _errors(schema: dict, report: dict) -> list[str]:
    return [e.message for e in jsonschema.Draft202012Validator(schema).iter_errors(report)]


@pytest.mark.parametrize(
    "path",
    [
        ("summary",),
        ("critical_path", "length_ns"),
        ("findings", 0, "saving_ns"),
        ("ranks", 0, "clock_offset_ns"),
        ("inputs", 0, "format"),
        ("layout", "pp"),
        ("config", "rules_run"),
        ("critical_path", "by_category_ns", "dma_wait"),
        ("gate", "passed"),
    ],
)
def test_schema_catches_a_removed_or_renamed_key(schema, real_reports, path):
    report = copy.deepcopy(real_reports["check with gate"])
    *parents, key = path
    holder = report
    for p in parents:
        holder = holder[p]
    holder[f"{key}_renamed"] = holder.pop(key)
    assert _errors(schema, report), f"removing {path} went unnoticed"


def test_schema_catches_a_changed_type(schema, real_reports):
    report = copy.deepcopy(real_reports["parquet"])
    report["ranks"][0]["step_time_ns"] = str(report["ranks"][0]["step_time_ns"])
    report["findings"][0]["severity"] = "fatal"
    assert len(_errors(schema, report)) == 2


def test_schema_accepts_additive_keys(schema, real_reports):
    report = copy.deepcopy(real_reports["parquet"])
    report["new_section"] = {"anything": [1, 2]}
    report["layout"]["new_field"] = 2
    report["ranks"][0]["new_field"] = 1
    report["findings"][0]["new_field"] = "x"
    report["critical_path"]["new_field"] = []
    assert _errors(schema, report) == []
    report["critical_path"]["by_category_ns"]["new_category"] = 1  # would break the sum
    assert _errors(schema, report)


def _documented_fields(section: str) -> set[str]:
    """Field names in the first column of the first table under ``## section`` of
    report-schema.md."""
    text = (DOCS / "report-schema.md").read_text(encoding="utf-8")
    body = text.split(f"\n## {section}\n", 1)[1]
    table = re.search(r"^\|.*?(?=\n[^|]|\Z)", body, re.S | re.M).group(0)
    fields = set()
    for line in table.splitlines():
        if line.startswith("| `"):
            fields |= set(re.findall(r"`([a-z][a-z0-9_]*)`", line.split("|")[1]))
    return fields


@pytest.mark.parametrize(
    ("section", "where"),
    [
        ("Top level", ()),
        ("`inputs[]`", ("$defs", "input")),
        ("`ranks[]`", ("$defs", "rank")),
        ("`critical_path`", ("$defs", "critical_path")),
        ("`findings[]`", ("$defs", "finding")),
        ("`summary`", ("properties", "summary")),
        ("`config`", ("properties", "config")),
        ("`layout`", ("$defs", "layout")),
        ("`steps[]`", ("$defs", "step")),
        ("`step_summary`", ("$defs", "step_summary")),
        ("`bounds[]`", ("$defs", "bounds")),
        ("`precision[]`", ("$defs", "precision")),
        ("`gate`", ("$defs", "gate")),
    ],
)
def test_schema_and_its_page_list_the_same_fields(schema, section, where):
    node = schema
    for key in where:
        node = node[key]
    documented, described = _documented_fields(section), set(node["properties"])
    assert documented == described, (
        f"docs/report-schema.md ({section}) and docs/report.schema.json disagree: only documented "
        f"{sorted(documented - described)}, only in the schema {sorted(described - documented)}; "
        "a new field goes in both (in the schema's 'required' too when always present)"
    )


# ---- formats ----------------------------------------------------------------------------------


def test_formats_page_covers_every_reader():
    from tracediag.parsers import READERS

    table = (DOCS / "formats.md").read_text(encoding="utf-8").split("\n## ", 1)[0]
    missing = [r.FORMAT for r in READERS if f"`{r.FORMAT}`" not in table]
    assert not missing, f"docs/formats.md's table lacks the readers {missing}: describe them"


# ---- configuration ----------------------------------------------------------------------------


def test_configuration_page_documents_every_key():
    from tracediag.engine.config import KNOWN_KEYS

    text = (DOCS / "configuration.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^## `([a-z-]+)`$", text, re.M))
    assert documented == KNOWN_KEYS, (
        "docs/configuration.md needs one '## `key`' section per key of tracediag/engine/config.py's "
        f"KNOWN_KEYS: missing {sorted(KNOWN_KEYS - documented)}, "
        f"unknown {sorted(documented - KNOWN_KEYS)}"
    )


def test_configuration_page_names_every_hardware_profile_and_baseline_key():
    from tracediag.analysis.hardware import PROFILES
    from tracediag.ci.baseline_settings import KEYS

    text = (DOCS / "configuration.md").read_text(encoding="utf-8")
    hardware = text.split("## `hardware`", 1)[1].split("\n## ", 1)[0]
    assert all(f"`{name}`" in hardware for name in PROFILES)
    baseline = text.split("## `baseline`", 1)[1]
    assert all(f"`{key}`" in baseline for key in KEYS)


def test_configuration_examples_are_valid():
    from tracediag.engine.config import from_mapping
    from tracediag.engine.rule import all_rules

    rules = all_rules()
    for page in ("configuration.md", "ci.md", "index.md", "getting-started.md"):
        text = (DOCS / page).read_text(encoding="utf-8")
        for block in re.findall(r"```toml\n(.*?)```", text, re.S):
            data = tomllib.loads(block)
            config = from_mapping(data.get("tool", {}).get("tracediag", data), page)
            for code in [*config.rule_options, *config.severity]:
                assert code in rules, f"{page}: no rule {code}"
                config.options_for(code, rules[code].options)


# ---- the TUI's keys ---------------------------------------------------------------------------

#: Key names as the help page writes them.
_KEY_NAMES = {
    "question_mark": "?",
    "slash": "/",
    "plus": "+",
    "minus": "-",
    "comma": ",",
    "full_stop": ".",
    "left": "←",
    "right": "→",
    "up": "↑",
    "down": "↓",
}
#: Paging and scrolling keys every list and scrolling view has, which the help page does not
#: spell out.
_UNDOCUMENTED = {"pageup", "pagedown", "home", "end", "space"}


def _bindings():
    import tracediag.tui as tui

    for info in pkgutil.iter_modules(tui.__path__):
        module = importlib.import_module(f"tracediag.tui.{info.name}")
        for cls in vars(module).values():
            if isinstance(cls, type) and cls.__module__ == module.__name__:
                yield from ((cls.__name__, b) for b in vars(cls).get("BINDINGS", []))


def test_tui_page_documents_every_key_binding():
    from textual.binding import Binding

    from tracediag.tui.help_screen import HELP

    documented = set(re.findall(r"`([^`]+)`", HELP))
    missing = []
    for owner, binding in _bindings():
        binding = binding if isinstance(binding, Binding) else Binding(*binding)
        keys = binding.key.split(",")
        forms = {binding.key_display, *keys, *(_KEY_NAMES.get(k, k) for k in keys)}
        if not forms & documented and not set(keys) <= _UNDOCUMENTED:
            missing.append(f"{owner}: {binding.key} ({binding.action})")
    assert not missing, f"keys missing from the TUI help page (docs/tui.md): {missing}"
    assert "## tracediag keys" in (DOCS / "tui.md").read_text(encoding="utf-8")


# ---- the worked example -----------------------------------------------------------------------


def test_worked_example_page_has_the_codes_numbers():
    from tracediag.graph.critical_path import walk
    from tracediag.graph.dependencies import build_graph

    trace = example_trace()
    path = walk(build_graph(trace), trace)
    seg = path.segments
    expected = [
        (int(rank), int(start), int(end), int(end - start), str(cat))
        for rank, start, end, cat in zip(
            seg["rank"], seg["start_ns"], seg["end_ns"], seg["category"], strict=True
        )
    ]
    text = (DOCS / "how-it-decides.md").read_text(encoding="utf-8")
    table = text.split("**The critical path**", 1)[1].split("\n\n", 2)[1]
    rows = [
        [c.strip() for c in line.strip("|").split("|")]
        for line in table.splitlines()
        if re.match(r"\| [^-]", line) and not line.startswith("| segment")
    ]
    documented = [(int(r[1]), int(r[2]), int(r[3]), int(r[4]), r[5].split()[0]) for r in rows]
    assert documented == expected
    by_category = ", ".join(f"{c} {ns}" for c, ns in path.by_category().items() if c != "compute")
    assert by_category in text.replace("\n", " ")
    assert f"compute {path.by_category()['compute']}" in text
    assert f"The step takes {path.length_ns} ns" in text


# ---- the site ---------------------------------------------------------------------------------


def test_site_builds_strictly(tmp_path):
    pytest.importorskip("mkdocs")
    out = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert (tmp_path / "site" / "rules" / "index.html").is_file()
    assert (tmp_path / "site" / "report.schema.json").is_file()
