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
from loadgen.report.console import UNBOUNDED, with_pm
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
            notes.append(esc(f"cannot bound: {iv.reason or 'too few effective values'}"))
        else:
            plus.append(max(iv.high - point, 0.0) * scale)
            minus.append(max(point - iv.low, 0.0) * scale)
            notes.append(
                esc(
                    f"{100 * iv.confidence:g}% interval {iv.low * scale:.4g} – {iv.high * scale:.4g}{unit}"
                    f" (n_eff {iv.n_eff:.0f})"
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
    """A table cell: the interval's larger side relative to ``value`` (``±6%``),
    :data:`~loadgen.report.console.UNBOUNDED` when it cannot be bounded, ``–`` without one."""
    if iv is None or value is None:
        return "–"
    if not iv.bounded:
        return UNBOUNDED
    return with_pm("", value, iv).strip() or "–"


def interval_note(levels: Sequence[LevelSummary]) -> str:
    """The line under the level table: the intervals' confidence and each level's
    ``n_eff`` (of its TTFT series), and why a TTFT p99 shows ``—`` ("" without intervals)."""
    neffs: list[str] = []
    confidence: set[float] = set()
    reasons: list[tuple[str, str]] = []
    for i, lv in enumerate(levels):
        ivs = lv.ttft_ms.intervals or {}
        mean = ivs.get("mean")
        if mean is None:
            continue
        confidence.add(mean.confidence)
        neffs.append(f"{i + 1}: {mean.n_eff:.0f} of {lv.ttft_ms.count}")
        p99 = ivs.get("p99")
        if p99 is not None and not p99.bounded:
            reasons.append((str(i + 1), p99.reason or "too few effective values"))
    if not neffs:
        return ""
    conf = " / ".join(f"{100 * c:g}%" for c in sorted(confidence))
    why = ""
    if reasons:  # one reason: the others differ in their numbers only
        at = ", ".join(n for n, _ in reasons)
        why = f" {UNBOUNDED}: TTFT p99 cannot be bounded at level {at} (level {reasons[0][0]}: {reasons[0][1]})."
    return (
        f'<p class="note" id="interval-note">±: {conf} intervals, the larger side relative to the value '
        f"(error bars in the figures below). Effective sample size n_eff of each level's TTFT series, in send "
        f"order — {esc(', '.join(neffs))}.{esc(why)}</p>"
    )
