"""``?``: every view and its keys on one page."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Markdown

HELP = """\
# tracediag keys

tracediag ranks what slows the step by its **what-if saving**: what the step would gain if
the cause were fixed. Start at the overview, open a finding, then its timeline.

## Everywhere
| key | does |
|---|---|
| `o` `f` `c` `r` `i` | overview, findings, critical path, ranks heatmap, steps (iterations) |
| `t` | timeline (of the finding under the cursor, else of the whole step) |
| `escape` | back |
| `ctrl+p` | command palette: views, findings by name, theme |
| `T` | dark / light theme |
| `?` | this help |
| `q` | quit |

## Findings
| key | does |
|---|---|
| `enter` | the finding's detail: evidence, saving, suggestion, the rule's document |
| `/` | search as you type (every word must match); `enter` or `escape` back to the table |
| `s` / `S` | sort by the next column / reverse (or click a header) |
| `F` `V` `R` | cycle the family, minimum severity and rank filters |
| `x` | clear filters and search |

## Timeline
Lanes are tracks (engines, DMA queues, streams, CPU threads) of the ranks involved, in the same
order on every rank; tracks holding only profiler markers get no lane. Labels fit the widest
lane (up to a third of the screen). Critical-path events are drawn in the warning colour, waits
on the path as `░`; the finding's window is shaded.

| key | does |
|---|---|
| `←` `→` | previous / next event on the lane |
| `↑` `↓` | lane above / below |
| `+` `-` | zoom in / out around the selected event |
| `,` `.` | pan left / right (also `shift+←` `shift+→`) |
| `p` `n` | select the previous / next event of the critical path (its segments are one step) |
| `a` | lanes for all ranks / the ranks involved |
| `s` `0` `z` | back to the opening window / whole trace / the selected event |

## Critical path
Every segment of the path; the columns widen with the screen.

| key | does |
|---|---|
| `enter` | open the segment in the timeline (on a group's heading: open / close it) |
| `/` | search as you type (every word must match: category, `r2`, track, event, op, layer) |
| `s` / `S` | sort by the next column (start, duration, category, rank, track, event, layer) / reverse |
| `g` | group by category, by rank, or not at all (groups by path time, largest first) |
| `x` | back to the chronological list: no search, no groups |

## Ranks
`↑` `↓` `←` `→` move, `enter` opens the collective in the timeline. A straggler is a column that
is hot on every row; `▲` marks the last arrival. The darkest colour stands for the largest
lateness, but never less than 0.5% of the critical path, so noise stays pale; the line above
the grid says how long the critical path waits for each rank's late arrivals.

## Steps
Every step (iteration: `ProfilerStep#N`, an XLA step, a Neuron execution) with its time (the
median over the ranks of their own step), its ratio to the typical (median) step, and, for an
outlier, its cause. The cursor picks a step (the typical one first); below the table are its
critical path by category, each rank's own step time and device breakdown, and the findings
seen in it (a finding is in a step when their windows share 5% of the shorter of the two).

| key | does |
|---|---|
| `↑` `↓` | pick the step above / below |
| `enter` `t` | the picked step in the timeline, on every rank |
| `space` `pageup` `pagedown` | scroll the picked step's figures |
"""


class HelpScreen(ModalScreen):
    """The keys of every view."""

    BINDINGS = [Binding("escape,q,question_mark", "app.pop_screen", "Close")]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen VerticalScroll { width: 90%; max-width: 96; height: 90%;
                                border: round $accent; background: $surface; }
    """

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Markdown(HELP)

    def on_mount(self) -> None:
        self.query_one(VerticalScroll).focus()
