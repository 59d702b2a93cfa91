"""The bounds and precision sections of the text and Markdown reports, read from the JSON
report's ``bounds`` and ``precision`` (absent from older saved reports: no section then)."""

from __future__ import annotations

from tracediag.model.units import fmt_ns
from tracediag.model.wording import ranks_label

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


def _no_device(b: dict) -> bool:
    """A rank with no device engine work (a host-only trace): an empty window, no bottleneck
    (as ``tracediag bounds`` tells them)."""
    return (b["window"]["total_ns"] or 0) <= 0 and not b["bottleneck"]


def device_bounds(report: dict) -> list[dict]:
    """The report's ``bounds`` of the ranks with device work: the rows of :func:`bounds_rows`."""
    return [b for b in report.get("bounds") or [] if not _no_device(b)]


def bounds_note(report: dict) -> str:
    """The line that stands for the ranks left out of the bounds table: ``"No device work on
    ranks 0-3: bounds need device engine events (DMA, matrix, vector)."`` when no rank has
    any, ``"No device work on rank 2: no bounds."`` for some; ``""`` when none is left out."""
    idle = [int(b["rank"]) for b in report.get("bounds") or [] if _no_device(b)]
    if not idle:
        return ""
    if len(idle) == len(report["bounds"]):
        return (
            f"No device work on {ranks_label(idle)}: bounds need device engine events (DMA,"
            " matrix, vector)."
        )
    return f"No device work on {ranks_label(idle)}: no bounds."


def bounds_rows(report: dict) -> tuple[list[str], list[list[str]]]:
    """Header and one row per rank with device work (:func:`device_bounds`; the others are
    :func:`bounds_note`'s line): window, the bounds, bottleneck engine and binding family."""
    header = ["rank", "window", *(h for _, h in _BOUNDS), "bottleneck"]
    rows = []
    for b in device_bounds(report):
        bottleneck = f"{b['bottleneck']} ({b['binding']})" if b["bottleneck"] else "-"
        values = [_ns(b["bounds_ns"][k]) for k, _ in _BOUNDS]
        rows.append([str(b["rank"]), _ns(b["window"]["total_ns"]), *values, bottleneck])
    return header, rows


#: The gaps between consecutive bounds, as AWS names them, with the bounds they lie between.
GAP_NAMES = {
    "dma_idle": ("DMA idle", "window - DMA active"),
    "dma_inefficiency": ("DMA inefficiency", "DMA active - DMA@peak"),
    "excess_hbm_traffic": ("excess HBM traffic", "DMA@peak - necessary@peak"),
    "te_idle": ("TE idle", "window - TE active"),
    "te_underutilization": ("TE underutilization", "TE active - FLOPs@peak"),
    "transpose_overhead": ("transpose overhead", "FLOPs@peak - without transposes"),
    "serialization": ("serialization", "window - busiest"),
}
#: At most this many gaps in the reports' table (the largest savings first).
GAP_ROWS = 8


def gap_rows(report: dict) -> tuple[list[str], list[list[str]]]:
    """Header and the gaps with the largest replayed savings (at most :data:`GAP_ROWS`, over
    every rank): rank, gap, the bounds it lies between, its size, its saving. None when the
    report replayed no gap (older reports, graphs over the replay budget)."""
    found = []
    for b in device_bounds(report):
        for gap, saving in (b.get("gap_savings_ns") or {}).items():
            size = b["gaps_ns"].get(gap)
            if saving and size and gap in GAP_NAMES:
                found.append((-saving, int(b["rank"]), gap, size, saving))
    rows = [
        [str(r), GAP_NAMES[g][0], GAP_NAMES[g][1], fmt_ns(size), fmt_ns(saving)]
        for _, r, g, size, saving in sorted(found)[:GAP_ROWS]
    ]
    return ["rank", "gap", "between", "gap size", "saving (replay)"], rows


def gap_note(report: dict) -> str:
    """Why the gaps have no savings (the first rank's note), "" when they have."""
    return next(
        (b["gap_savings_note"] for b in device_bounds(report) if b.get("gap_savings_note")), ""
    )


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
    note = bounds_note(report)
    for title, (header, rows), extra in (
        ("Bounds per rank (gaps and sources: tracediag bounds)", bounds_rows(report), note),
        ("Gaps between the bounds: what closing each saves", gap_rows(report), gap_note(report)),
        ("Matmuls by numeric format", precision_rows(report), ""),
    ):
        if not rows and not extra:
            continue
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
        table = [_line(r, widths)[:width] for r in [header, *rows]] if rows else []
        out += [heading(title), *table, *([f"  {extra}"[:width]] if extra else []), ""]
    return out


def _line(cells: list[str], widths: list[int]) -> str:
    """One table line: the first cell left-aligned, the others right-aligned."""
    pairs = enumerate(zip(cells, widths, strict=True))
    return "  " + "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in pairs)


def markdown_lines(report: dict, table) -> list[str]:
    """The two sections as Markdown; ``table`` is the report's table maker."""
    out: list[str] = []
    header, rows = bounds_rows(report)
    note = bounds_note(report)
    if rows:
        out += [
            "### Bounds per rank",
            "",
            *table(header, rows, "l" + "r" * (len(header) - 2) + "l"),
        ]
        out += ["", *([note, ""] if note else [])]
        out += ["Gaps, peaks and their sources: `tracediag bounds --format json`.", ""]
    elif note:
        out += ["### Bounds per rank", "", note, ""]
    header, rows = gap_rows(report)
    if rows:
        out += ["### Gaps between the bounds", "", *table(header, rows, "lllrr"), ""]
        out += [
            "Each saving is the replayed step with that gap closed, never more than the gap.",
            "",
        ]
    elif gap := gap_note(report):
        out += ["### Gaps between the bounds", "", f"Savings {gap}.", ""]
    header, rows = precision_rows(report)
    if rows:
        out += ["### Matmuls by numeric format", "", *table(header, rows, "llrrr"), ""]
    return out
