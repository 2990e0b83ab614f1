"""The summary's intervals on the page: error bars on the level curves, ± cells and a note
for the level table.

Nothing is computed here but the distance from a point to the bounds ``summary.json``
gives for it: a bar runs from ``low`` to ``high`` (``array = high - point``,
``arrayminus = point - low``, so it can be asymmetric). A point whose interval is not
bounded on both sides gets no bar and the hover note ``cannot bound: <reason>``: its
array entries are :data:`NO_BAR`, the string ``"NaN"``, which plotly reads as NaN and draws
nothing for (it reads ``null`` as 0 and would draw a flat cap at the point). A
summary without intervals (schema 1) gets neither bars nor notes, so its figures are
those it had before.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from loadgen.metrics.results import LevelSummary, StatInterval
from loadgen.numfmt import NONE, fmt, fmt_n_eff
from loadgen.report.console import (
    N_EFF_SERIES,
    level_n_eff,
    trials_note,
    unbounded_cells,
    unbounded_line,
    unbounded_reason,
    with_pm,
)
from loadgen.report.page import esc

__all__ = ["NO_BAR", "add_error_bars", "error_bar", "interval_note", "pm_cell"]

NO_BAR = "NaN"
"""An error-bar array entry that draws no bar (JSON has no NaN; plotly takes ``+"NaN"``)."""


def error_bar(
    points: Sequence[float | None], intervals: Sequence[StatInterval | None], scale: float = 1.0, unit: str = ""
) -> tuple[dict[str, Any], list[str]] | None:
    """Plotly's ``error_y`` for a curve through ``points`` and, per point, a hover note
    (the interval, or why there is none); ``None`` when no point has an interval.
    ``scale`` multiplies points and bounds alike (100 for a share drawn in %)."""
    if all(iv is None for iv in intervals):
        return None
    plus: list[float | str] = []
    minus: list[float | str] = []
    notes: list[str] = []
    for point, iv in zip(points, intervals):
        if iv is None or point is None:
            plus.append(NO_BAR)
            minus.append(NO_BAR)
            notes.append("")
        elif iv.low is None or iv.high is None:
            plus.append(NO_BAR)
            minus.append(NO_BAR)
            notes.append(esc(f"cannot bound: {unbounded_reason(iv)}"))
        else:
            plus.append(max(iv.high - point, 0.0) * scale)
            minus.append(max(point - iv.low, 0.0) * scale)
            notes.append(
                esc(
                    f"{100 * iv.confidence:g}% interval {fmt(iv.low * scale)} – {fmt(iv.high * scale)}{unit}"
                    f" (n_eff {fmt_n_eff(iv.n_eff)})"
                )
            )
    bar = {
        "type": "data",
        "symmetric": False,
        "array": plus,
        "arrayminus": minus,
        "thickness": 1.2,
        "width": 4,
    }
    return bar, notes


def add_error_bars(
    trace: dict[str, Any],
    points: Sequence[float | None],
    intervals: Sequence[StatInterval | None],
    scale: float = 1.0,
    unit: str = "",
) -> dict[str, Any]:
    """``trace`` with :func:`error_bar`'s bars and hover notes (as its ``text``, shown in
    its hover label), or unchanged when no point has an interval."""
    found = error_bar(points, intervals, scale, unit)
    if found is None:
        return trace
    bar, notes = found
    trace["error_y"] = {**bar, "color": trace.get("line", {}).get("color", "#444")}
    trace["text"] = notes
    template = trace.get("hovertemplate")
    if template is not None:  # plotly shows text by default only without a template
        head, sep, tail = template.partition("<extra>")
        trace["hovertemplate"] = f"{head}<br>%{{text}}{sep}{tail}"
    return trace


def pm_cell(value: float | None, iv: StatInterval | None) -> str:
    """A table cell for the interval of ``value`` shown beside it: ``±6.2%`` (the larger
    side, relative), ``[low, high]`` when wider than the value, ``±—`` when it cannot be
    bounded (the value is still shown in its own column; the table's note says why), ``–``
    without one."""
    if iv is None or value is None:
        return NONE
    return with_pm("", value, iv).strip() or NONE


def interval_note(
    levels: Sequence[LevelSummary], shown: Sequence[tuple[str, str, str]] = (("TTFT p99", "ttft_ms", "p99"),)
) -> str:
    """The line under a level table: the intervals' confidence, each level's one ``n_eff``
    (:data:`~loadgen.report.console.N_EFF_SERIES`), and, once for the table, which of the
    ``shown`` intervals (label, distribution, statistic) print ``±—``, at which levels and
    why ("" without intervals)."""
    neffs: list[str] = []
    confidence: set[float] = set()
    for i, lv in enumerate(levels):
        mean = (lv.ttft_ms.intervals or {}).get("mean")
        found = level_n_eff(lv)
        if mean is None or found is None:
            continue
        confidence.add(mean.confidence)
        neffs.append(f"{i + 1}: {fmt_n_eff(found[0])} of {found[1]}")
    if not neffs:
        return ""
    conf = " / ".join(f"{100 * c:g}%" for c in sorted(confidence))
    why = unbounded_line(unbounded_cells([(str(i + 1), lv) for i, lv in enumerate(levels)], shown), noun="level")
    return (
        f'<p class="note" id="interval-note">±: {conf} intervals, the larger side relative to the value '
        f"(wider than the value: [low, high]; error bars in the figures below). n_eff of each level's "
        f"{N_EFF_SERIES} (requests in send order) — {esc(', '.join(neffs))}."
        + (f' <span id="trials-note">{esc(trials)}.</span>' if (trials := trials_note(levels)) else "")
        + (f' <span id="unbounded-note">{esc(why)}.</span>' if why else "")
        + "</p>"
    )
