"""Colours the views share for severities and critical-path categories (fine on dark and light)."""

from __future__ import annotations

#: Rich style per severity (info, warning, error).
SEVERITY_STYLE = ("cyan", "bold yellow", "bold red")

#: Rich colour per critical-path category, in ``critical_path.CATEGORIES`` order.
CATEGORY_COLOR = {
    "compute": "dodger_blue2",
    "dma_transfer": "green3",
    "dma_wait": "dark_orange",
    "collective_transfer": "medium_purple",
    "collective_skew": "red3",
    "host": "dark_cyan",
    "gap": "grey50",
}
