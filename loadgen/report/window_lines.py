"""The sentence that says which window a level's headline rates were measured over.

The console's level detail prints it under the rates; the HTML report's level table says
the same in its note. The rules (held window, arrival window, whole window) are in
docs/metrics.md, "Throughput windows".
"""

from __future__ import annotations

from collections.abc import Sequence

from loadgen.metrics.results import LevelSummary
from loadgen.numfmt import fmt

__all__ = ["WINDOW_NOTE", "held_text", "rate_window_line", "window_note"]

WINDOW_NOTE = (
    "Throughput and goodput over each level's held window (a closed loop: every user busy, up to the first user "
    "out of work; an open loop: its arrival window after the fill time); the whole window's (ramp and drain "
    "tail included) are in summary.json, throughput.whole."
)


def window_note(levels: Sequence[LevelSummary]) -> str:
    """The level table's note on its rates (:data:`WINDOW_NOTE`; a summary written before
    the held window existed: the whole window)."""
    if any(lv.throughput.window is not None for lv in levels):
        return WINDOW_NOTE
    return "Throughput over each level's window."


def held_text(level: LevelSummary) -> str:
    """``", over its held window"`` (or arrival window) for a headline card; "" otherwise."""
    win = level.throughput.window
    if win is None or win.rule == "whole":
        return ""
    return ", over its held window" if win.rule == "held" else ", over its arrival window"


_WHY = {
    "held": "every user busy, up to the first user out of work",
    "arrivals": "the arrival window, after the fill time",
}


def rate_window_line(level: LevelSummary) -> str:
    """``"rates over 0.00–21.5 s of 42.3 s (every user busy, ...); whole window 4.73 req/s,
    1,316 out tok/s"``; ``""`` for a summary written before the held window existed."""
    win, tp = level.throughput.window, level.throughput
    if win is None:
        return ""
    whole = tp.whole_rates(level.duration_s)
    if win.rule == "whole":
        return f"rates over the whole window: {win.note or 'no load was held'}"
    tokens = "" if whole.output_tokens_per_s is None else f", {fmt(whole.output_tokens_per_s)} out tok/s"
    return (
        f"rates over {fmt(win.start_s)}–{fmt(win.end_s)} s of {fmt(level.duration_s)} s ({_WHY[win.rule]}); "
        f"whole window {fmt(whole.requests_per_s)} req/s{tokens}"
    )
