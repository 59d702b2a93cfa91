"""The bounds and precision sections of the text and Markdown reports, read from the JSON
report's ``bounds`` and ``precision`` (absent from older saved reports: no section then)."""

from __future__ import annotations

from tracediag.model.units import fmt_ns

#: The bounds shown, one column each, with their headers.
_BOUNDS = (
    ("memory_bound", "DMA active"),
    ("memory_ideal", "DMA@peak"),
    ("compute_bound", "TE active"),
    ("compute_ideal", "FLOPs@peak"),
    ("pipeline_bound", "busiest"),
)
#: The keys of ``bounds_ns`` those columns show, in order (the HTML report draws a bar for each).
BOUND_KEYS = tuple(k for k, _ in _BOUNDS)


def _ns(x) -> str:
    return "-" if x is None else fmt_ns(x)


def _flops(x: float) -> str:
    if not x:
        return "-"
    return f"{x / 1e12:,.2f} TFLOP" if x >= 1e12 else f"{x / 1e9:,.1f} GFLOP"


def bounds_rows(report: dict) -> tuple[list[str], list[list[str]]]:
    """Header and one row per rank: window, the bounds, bottleneck engine and binding family."""
    header = ["rank", "window", *(h for _, h in _BOUNDS), "bottleneck"]
    rows = []
    for b in report.get("bounds") or []:
        bottleneck = f"{b['bottleneck']} ({b['binding']})" if b["bottleneck"] else "-"
        values = [_ns(b["bounds_ns"][k]) for k, _ in _BOUNDS]
        rows.append([str(b["rank"]), _ns(b["window"]["total_ns"]), *values, bottleneck])
    return header, rows


def precision_rows(report: dict) -> tuple[list[str], list[list[str]]]:
    """Header and one row per rank and format of its matmuls: count, time, FLOPs."""
    rows = [
        [str(p["rank"]), p["dtype"], str(p["events"]), fmt_ns(p["time_ns"]), _flops(p["flops"])]
        for p in report.get("precision") or []
    ]
    return ["rank", "format", "matmuls", "time", "FLOPs"], rows


def text_lines(report: dict, width: int, heading=str) -> list[str]:
    """The two sections for the terminal report (empty when the report has neither); lines cut
    at ``width``; ``heading`` styles the titles."""
    out: list[str] = []
    for title, (header, rows) in (
        ("Bounds per rank (gaps and sources: tracediag bounds)", bounds_rows(report)),
        ("Matmuls by numeric format", precision_rows(report)),
    ):
        if not rows:
            continue
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
        out += [heading(title), *(_line(r, widths)[:width] for r in [header, *rows]), ""]
    return out


def _line(cells: list[str], widths: list[int]) -> str:
    """One table line: the first cell left-aligned, the others right-aligned."""
    pairs = enumerate(zip(cells, widths, strict=True))
    return "  " + "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in pairs)


def markdown_lines(report: dict, table) -> list[str]:
    """The two sections as Markdown; ``table`` is the report's table maker."""
    out: list[str] = []
    header, rows = bounds_rows(report)
    if rows:
        out += [
            "### Bounds per rank",
            "",
            *table(header, rows, "l" + "r" * (len(header) - 2) + "l"),
        ]
        out += ["", "Gaps, peaks and their sources: `tracediag bounds --format json`.", ""]
    header, rows = precision_rows(report)
    if rows:
        out += ["### Matmuls by numeric format", "", *table(header, rows, "llrrr"), ""]
    return out
