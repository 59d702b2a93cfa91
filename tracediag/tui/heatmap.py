"""Arrival lateness per (collective instance x rank) as a heatmap: a straggler is a hot column.

The grid comes from ``skew.lateness``; the widget draws only the rows and columns on screen.
"""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding
from textual.message import Message
from textual.strip import Strip
from textual.widget import Widget

from tracediag.analysis.arrival_skew import LatenessGrid
from tracediag.model.units import fmt_bytes, fmt_ns

LABEL_WIDTH = 24
WIDE_CELL = 9
NARROW_CELL = 3


def _compact(ns: float) -> str:
    return ("+" if ns > 0 else "") + fmt_ns(ns).replace(" ", "")


class HeatmapView(Widget, can_focus=True):
    """The grid with a cell cursor; enter posts :class:`HeatmapView.Selected`."""

    BINDINGS = [
        Binding("up", "move(-1, 0)", show=False),
        Binding("down", "move(1, 0)", show=False),
        Binding("left", "move(0, -1)", show=False),
        Binding("right", "move(0, 1)", show=False),
        Binding("pageup", "page(-1)", show=False),
        Binding("pagedown", "page(1)", show=False),
        Binding("enter", "select", "Open collective"),
    ]
    COMPONENT_CLASSES = {
        "heatmap--header",
        "heatmap--cursor",
        "heatmap--0",
        "heatmap--1",
        "heatmap--2",
        "heatmap--3",
        "heatmap--4",
    }
    DEFAULT_CSS = """
    HeatmapView { height: 1fr; }
    HeatmapView > .heatmap--header { text-style: bold; background: $panel; }
    HeatmapView > .heatmap--cursor { text-style: bold reverse; }
    HeatmapView > .heatmap--0 { color: $foreground-muted; }
    HeatmapView > .heatmap--1 { background: $warning 20%; }
    HeatmapView > .heatmap--2 { background: $warning 50%; }
    HeatmapView > .heatmap--3 { background: $error 55%; }
    HeatmapView > .heatmap--4 { background: $error 90%; color: $text; text-style: bold; }
    """

    class Selected(Message):
        """A cell was chosen: open that collective on that rank."""

        def __init__(self, row: int, col: int) -> None:
            super().__init__()
            self.row, self.col = row, col

    class Moved(Message):
        """The cursor moved."""

        def __init__(self, row: int, col: int) -> None:
            super().__init__()
            self.row, self.col = row, col

    def __init__(self, grid: LatenessGrid, **kwargs) -> None:
        super().__init__(**kwargs)
        self.grid = grid
        self.row = self.col = 0
        self.row0 = self.col0 = 0

    @property
    def cell_width(self) -> int:
        fits = LABEL_WIDTH + WIDE_CELL * len(self.grid.ranks) <= self.size.width
        return WIDE_CELL if fits else NARROW_CELL  # many ranks: colour only, values below

    @property
    def visible_cols(self) -> int:
        return max((self.size.width - LABEL_WIDTH) // self.cell_width, 1)

    def move_to(self, row: int, col: int) -> None:
        """Put the cursor on a cell (clamped) and scroll it into view."""
        n_rows, n_cols = self.grid.late.shape
        self.row = min(max(row, 0), max(n_rows - 1, 0))
        self.col = min(max(col, 0), max(n_cols - 1, 0))
        rows = max(self.size.height - 1, 1)
        self.row0 = min(max(self.row0, self.row - rows + 1), self.row)
        self.col0 = min(max(self.col0, self.col - self.visible_cols + 1), self.col)
        self.post_message(self.Moved(self.row, self.col))
        self.refresh()

    def action_move(self, d_row: int, d_col: int) -> None:
        self.move_to(self.row + d_row, self.col + d_col)

    def action_page(self, delta: int) -> None:
        self.move_to(self.row + delta * max(self.size.height - 1, 1), self.col)

    def action_select(self) -> None:
        if self.grid.late.size:
            self.post_message(self.Selected(self.row, self.col))

    def render_line(self, y: int) -> Strip:
        base = self.rich_style
        width, cw = self.size.width, self.cell_width
        cols = range(self.col0, min(self.col0 + self.visible_cols, len(self.grid.ranks)))
        if y == 0:
            head = base + self.get_component_rich_style("heatmap--header")
            text = "instance \\ rank".ljust(LABEL_WIDTH)
            text += "".join(str(self.grid.ranks[c]).rjust(cw - 1)[-(cw - 1) :] + " " for c in cols)
            return Strip([Segment(text, head)]).adjust_cell_length(width, head)
        r = self.row0 + y - 1
        if r >= len(self.grid.keys):
            return Strip.blank(width, base)
        nbytes = self.grid.nbytes[r]
        size = fmt_bytes(nbytes) if nbytes == nbytes else ""
        label = f"#{self.grid.keys[r]} {self.grid.ops[r]} {size}"[: LABEL_WIDTH - 1]
        segments = [Segment(label.ljust(LABEL_WIDTH), base)]
        for c in cols:
            segments.append(Segment(self._cell_text(r, c, cw), self._cell_style(r, c, base)))
        return Strip(segments).adjust_cell_length(width, base)

    def _cell_text(self, r: int, c: int, cw: int) -> str:
        value = self.grid.late[r, c]
        if value != value:
            return "·".center(cw)
        if cw == NARROW_CELL:
            return ("▲" if self.grid.last[r, c] else " ").center(cw)
        return _compact(value).rjust(cw - 1)[-(cw - 1) :] + ("▲" if self.grid.last[r, c] else " ")

    def _cell_style(self, r: int, c: int, base: Style) -> Style:
        level = int(self.grid.level[r, c])
        style = base + self.get_component_rich_style(f"heatmap--{max(level, 0)}")
        if (r, c) == (self.row, self.col):
            style += self.get_component_rich_style("heatmap--cursor")
        return style
