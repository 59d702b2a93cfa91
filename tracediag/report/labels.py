"""Short labels the renderers share: percentages, rank lists, time windows, severity counts."""

from __future__ import annotations

from tracediag.model.units import fmt_ns


def percent(part: float, whole: float) -> str:
    """``part`` as a percentage of ``whole`` with one decimal (``"19.2%"``); ``"-"`` if no whole."""
    return f"{100.0 * part / whole:.1f}%" if whole else "-"


def plural(n: int, word: str) -> str:
    """``plural(1, "finding")`` -> ``"1 finding"``; ``plural(2, "finding")`` -> ``"2 findings"``."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def ranks_label(ranks: list[int]) -> str:
    """``"rank 3"`` or ``"ranks 0-3,5"``."""
    return f"rank {ranks[0]}" if len(set(ranks)) == 1 else f"ranks {rank_list(ranks)}"


def rank_list(ranks: list[int]) -> str:
    """``[0, 1, 2, 3, 5]`` -> ``"0-3,5"`` (compact even for hundreds of ranks); ``"-"`` if none."""
    if not ranks:
        return "-"
    ordered = sorted(set(ranks))
    runs: list[str] = []
    first = prev = ordered[0]
    for r in ordered[1:] + [None]:
        if r is not None and r == prev + 1:
            prev = r
            continue
        runs.append(str(first) if first == prev else f"{first}-{prev}")
        if r is not None:
            first = prev = r
    return ",".join(runs)


def window(finding: dict, path_start_ns: int) -> str:
    """The finding's time window relative to the start of the critical path, or ``""``."""
    start, end = finding["start_ns"], finding["end_ns"]
    if not (start or end):
        return ""
    return f"{fmt_ns(start - path_start_ns)} to {fmt_ns(end - path_start_ns)}"


def severity_counts(summary: dict) -> str:
    """``"1 error, 2 warning, 0 info"`` from the report's summary."""
    return ", ".join(f"{summary[s]} {s}" for s in ("error", "warning", "info"))


def layout_label(layout: dict) -> str:
    """``dp=2 tp=1 pp=4 ep=1 (inferred)``, with the layout's notes."""
    sizes = " ".join(f"{d}={layout[d]}" for d in ("dp", "tp", "pp", "ep"))
    notes = "; ".join(layout.get("notes", []))
    return f"{sizes} ({layout['source']}{'; ' + notes if notes else ''})"
