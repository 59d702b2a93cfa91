"""A list of many rows drawn on demand (line API): only the rows on screen are formatted.

For tables too long for a DataTable (a critical path can have 100k segments): the caller gives
the row count and a function that formats one row; nothing is built per row up front.

Columns are ``(title, width)`` or ``(title, width, weight)``: the width left over on a wide
screen goes to the weighted columns, in proportion to their weights. A row of one cell (a
group's heading) spans the whole line.
"""

from __future__ import annotations

from collections.abc import Callable

from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding
from textual.message import Message
from textual.strip import Strip
from textual.widget import Widget

#: Formats row ``i`` as (text, style) cells, one per column (or one for the whole line).
RowCells = Callable[[int], list[tuple[str, str]]]


def fit_widths(columns: list[tuple], width: int) -> list[int]:
    """Each column's width on a line of ``width`` cells: its own, plus its weight's share of
    what is left."""
    base = [c[1] for c in columns]
    weights = [c[2] if len(c) > 2 else 0 for c in columns]
    spare = width - sum(base)
    if spare <= 0 or not sum(weights):
        return base
    extra = [spare * w // sum(weights) for w in weights]
    return [b + e for b, e in zip(base, extra, strict=True)]


class RowList(Widget, can_focus=True):
    """Rows with a header line and a cursor; enter posts :class:`RowList.Selected`."""

    BINDINGS = [
        Binding("up", "move(-1)", show=False),
        Binding("down", "move(1)", show=False),
        Binding("pageup", "page(-1)", show=False),
        Binding("pagedown", "page(1)", show=False),
        Binding("home", "jump(0)", show=False),
        Binding("end", "jump(-1)", show=False),
        Binding("enter", "select", "Open"),
    ]
    COMPONENT_CLASSES = {"rowlist--header", "rowlist--cursor"}
    DEFAULT_CSS = """
    RowList { height: 1fr; }
    RowList > .rowlist--header { text-style: bold; background: $panel; }
    RowList > .rowlist--cursor { background: $accent 40%; text-style: bold; }
    """

    class Selected(Message):
        """The row under the cursor was chosen."""

        def __init__(self, index: int) -> None:
            super().__init__()
            self.index = index

    class Moved(Message):
        """The cursor moved to a row."""

        def __init__(self, index: int) -> None:
            super().__init__()
            self.index = index

    def __init__(self, columns: list[tuple], count: int, cells: RowCells, **kwargs) -> None:
        super().__init__(**kwargs)
        self.columns = columns
        self.count = count
        self.cells = cells
        self.cursor = 0
        self.offset_row = 0

    @property
    def page(self) -> int:
        return max(self.size.height - 1, 1)

    def move_to(self, row: int) -> None:
        """Put the cursor on ``row`` (clamped) and scroll it into view."""
        self.cursor = min(max(row, 0), max(self.count - 1, 0))
        if self.cursor < self.offset_row:
            self.offset_row = self.cursor
        elif self.cursor >= self.offset_row + self.page:
            self.offset_row = self.cursor - self.page + 1
        self.post_message(self.Moved(self.cursor))
        self.refresh()

    def action_move(self, delta: int) -> None:
        self.move_to(self.cursor + delta)

    def action_page(self, delta: int) -> None:
        self.move_to(self.cursor + delta * self.page)

    def action_jump(self, row: int) -> None:
        self.move_to(row if row >= 0 else self.count - 1)

    def action_select(self) -> None:
        if self.count:
            self.post_message(self.Selected(self.cursor))

    def set_rows(self, count: int) -> None:
        """A new row count (the caller's rows changed): cursor back to the top."""
        self.count = count
        self.cursor = self.offset_row = 0
        self.refresh()

    @property
    def widths(self) -> list[int]:
        return fit_widths(self.columns, self.size.width)

    def _line(self, cells: list[tuple[str, str]], base: Style) -> Strip:
        widths = self.widths if len(cells) > 1 else [self.size.width]
        segments = []
        for (text, style), width in zip(cells, widths, strict=True):
            cell = text if len(text) < width else text[: max(width - 2, 0)] + "… "
            cell = cell.ljust(width)
            segments.append(Segment(cell, base + Style.parse(style) if style else base))
        return Strip(segments).adjust_cell_length(self.size.width, base)

    def render_line(self, y: int) -> Strip:
        base = self.rich_style
        if y == 0:
            header = self.get_component_rich_style("rowlist--header")
            return self._line([(c[0], "") for c in self.columns], base + header)
        row = self.offset_row + y - 1
        if row >= self.count:
            return Strip.blank(self.size.width, base)
        style = base
        if row == self.cursor:
            style = base + self.get_component_rich_style("rowlist--cursor")
        return self._line(self.cells(row), style)

    def on_click(self, event) -> None:
        if event.y >= 1:
            self.move_to(self.offset_row + event.y - 1)
