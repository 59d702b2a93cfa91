"""``tracediag diff`` output: text and Markdown tables of a diff or a correlation (JSON is the
result dictionary itself)."""

from __future__ import annotations

from tracediag.model.units import fmt_ns


def _ns(v) -> str:
    return "-" if v is None else fmt_ns(v)


def _signed_ns(v) -> str:
    return "-" if v is None else ("+" if v > 0 else "") + fmt_ns(v)


def _pct(v) -> str:
    return "-" if v is None else f"{v:+.1f}%"


def _p(v) -> str:
    return "-" if v is None else (f"{v:.2g}" if v >= 1e-4 else "<1e-4")


def _tables(result: dict) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, header, rows) of every table of the result."""
    if result["kind"] == "correlation":
        s = result["step"]
        r, rl, mape = result["pearson_r"], result["pearson_r_log"], result["weighted_mape_pct"]
        step = [["step time", _ns(s["measured_ns"]), _ns(s["predicted_ns"]), _pct(s["error_pct"])]]
        agreement = [
            ["operators matched", str(result["ops_matched"])],
            ["operators only measured", str(result["ops_only_measured"])],
            ["operators only predicted", str(result["ops_only_predicted"])],
            ["correlation of mean durations (r)", "-" if r is None else f"{r:.3f}"],
            ["correlation of their logarithms (r)", "-" if rl is None else f"{rl:.3f}"],
            ["time-weighted mean absolute error", "-" if mape is None else f"{mape:.1f}%"],
        ]
        worst = [
            [w["op"], w["kind"], _ns(w["measured_mean_ns"]), _ns(w["predicted_mean_ns"]),
             _pct(w["error_pct"]), _signed_ns(w["total_error_ns"])]
            for w in result["worst"]
        ]  # fmt: skip
        return [
            ("Prediction against measurement", ["", "measured", "predicted", "error"], step),
            ("Agreement over operators", ["", ""], agreement),
            (
                "Operators furthest off",
                ["op", "kind", "measured mean", "predicted mean", "error", "total error"],
                worst,
            ),
        ]
    s = result["step"]
    step = [["step time", _ns(s["a_ns"]), _ns(s["b_ns"]), _signed_ns(s["change_ns"]),
             _pct(s["change_pct"]), _p(s["p_value"])]]  # fmt: skip
    slower = result.get("slower_rank")
    if slower:
        step.append([f"rank {slower['rank']} own work (grew most)", _ns(slower["work_a_ns"]),
                     _ns(slower["work_b_ns"]), _signed_ns(slower["work_change_ns"]),
                     _pct(slower["work_change_pct"]), ""])  # fmt: skip
    cats = [
        [c["category"], f"{_ns(c['a_ns'])} ({c['a_pct']:.1f}%)",
         f"{_ns(c['b_ns'])} ({c['b_pct']:.1f}%)", _signed_ns(c["change_ns"])]
        for c in result["categories"]
    ]  # fmt: skip
    tables = [
        ("Step", ["", "A", "B", "change", "", "p (ranks)"], step),
        ("Critical path by category", ["category", "A", "B", "change"], cats),
    ]
    found = result.get("findings", {})
    changed = [
        [status, f["code"], f["severity"], ", ".join(map(str, f["ranks"] or [])) or "-",
         f["layer"] or "-", f["op"] or "-", _ns(f["saving_ns"]), f["title"] or ""]
        for status, key in (("added", "added"), ("removed", "removed"))
        for f in found.get(key, [])
    ]  # fmt: skip
    # in both runs, at another severity: B's figures, A's before the arrow
    changed += [
        ["changed", f["code"], f"{f['a_severity']} -> {f['severity']}",
         ", ".join(map(str, f["ranks"] or [])) or "-", f["layer"] or "-", f["op"] or "-",
         f"{_ns(f['a_saving_ns'])} -> {_ns(f['saving_ns'])}", f["title"] or ""]
        for f in found.get("changed", [])
    ]  # fmt: skip
    if changed:
        header = ["finding", "code", "severity", "ranks", "layer", "op", "saving", "title"]
        tables.append(("Findings added in B, removed from A, changed", header, changed))
    for key, title in (
        ("layers", "Layers (mean per rank)"),
        ("ops", "Operators (mean per instance)"),
    ):
        rows = [
            [r[key[:-1]], _ns(r["a_mean_ns"]), _ns(r["b_mean_ns"]), _pct(r["change_pct"]),
             _signed_ns(r["change_total_ns"]), _p(r["q_value"]), "yes" if r["significant"] else ""]
            for r in result[key]
        ]  # fmt: skip
        if rows:
            header = [key[:-1], "A", "B", "change", "total change", "q", "significant"]
            tables.append((title, header, rows))
    return tables


def render_diff_text(result: dict) -> str:
    """Aligned plain-text tables."""
    lines = []
    if result["kind"] == "diff":
        lines += [f"A: {', '.join(result['a'])}", f"B: {', '.join(result['b'])}"]
    else:
        lines += [
            f"measured: {', '.join(result['measured'])}",
            f"predicted: {', '.join(result['predicted'])}",
        ]
    for title, header, rows in _tables(result):
        widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=True)]
        lines += ["", title]
        for row in [header, *rows]:
            cells = [
                str(c).ljust(w) if i == 0 else str(c).rjust(w)
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            ]
            lines.append("  " + "  ".join(cells).rstrip())
    if result["kind"] == "diff":
        lines += ["", _findings_summary(result)]
        lines += [f"significant: Benjamini-Hochberg q < {result['alpha']} (Welch's t-test per row)"]
        lines += [f"note: {n}" for n in result.get("notes", [])]
    return "\n".join(lines) + "\n"


def _findings_summary(result: dict) -> str:
    """One line: how many findings B added, A lost and both share (matched by fingerprint)."""
    f = result.get("findings", {})
    changed = len(f.get("changed", []))
    return (
        f"findings (by fingerprint): {len(f.get('added', []))} added in B, "
        f"{len(f.get('removed', []))} removed from A, {f.get('unchanged', 0)} in both"
        + (f" ({changed} at another severity)" if changed else "")
    )


def render_diff_markdown(result: dict) -> str:
    """Markdown tables, for a pull-request comment."""
    title = (
        "tracediag diff"
        if result["kind"] == "diff"
        else "tracediag: prediction against measurement"
    )
    lines = [f"## {title}"]
    for name, header, rows in _tables(result):
        lines += ["", f"### {name}", "", "| " + " | ".join(header) + " |",
                  "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]  # fmt: skip
        lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    if result["kind"] == "diff":
        lines += ["", _findings_summary(result) + "."]
        lines += [f"- note: {n}" for n in result.get("notes", [])]
    return "\n".join(lines) + "\n"
