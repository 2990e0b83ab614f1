"""The report's agentic-task section: a task timeline and TTFT by step and by context.

- :func:`task_timeline`: like a trace viewer, one row per task (a sample of at most
  :data:`TIMELINE_TASKS` per level, spread over the level in send order), x = seconds from
  the level's first shown send; each call a bar from its send to its end (failed calls
  red), the tool after it a thin grey bar, a fan-out's branches stacked inside the row.
  The calls are read from the run folder's records (only when the summary has tasks).
- :func:`ttft_by_step`: each level's TTFT p50 (solid) and p90 (dotted) by step index and by
  context length, from the summary's ``tasks`` entry.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from loadgen.metrics.results import LevelSummary
from loadgen.records import RequestRecord
from loadgen.report.page import Page, esc
from loadgen.report.plotdata import palette, rounded, spread
from loadgen.report.readers import read_records_pieces
from loadgen.report.rundata import RunData

__all__ = ["TIMELINE_TASKS", "task_section", "task_timeline", "ttft_by_step"]

TIMELINE_TASKS = 50
_ROW = 0.8  # of a task's row, the height its calls share
_TOOL = 0.15  # a tool bar's height, of a branch's
_KINDS = (("LLM call", "#1f77b4"), ("failed call", "#d62728"), ("tool", "#7f7f7f"))


def _agent_call(rec: RequestRecord) -> bool:
    return not rec.warmup and rec.task is not None and rec.sent_ns != 0


def _bars(calls: list[list[RequestRecord]], t0: int) -> dict[str, dict[str, list[Any]]]:
    """Per kind: x (length, s), base (start, s), y (centre), width (height), text."""
    out: dict[str, dict[str, list[Any]]] = {k: defaultdict(list) for k, _ in _KINDS}
    for row, task in enumerate(calls):
        fan: dict[int, int] = defaultdict(int)
        for r in task:
            fan[r.step] = max(fan[r.step], r.branch + 1)
        for r in task:
            height = _ROW / fan[r.step]
            y = row - _ROW / 2 + (r.branch + 0.5) * height
            start, end = (r.sent_ns - t0) / 1e9, (max(r.done_ns, r.sent_ns) - t0) / 1e9
            what = f"task {r.task} · step {r.step}" + (f" · branch {r.branch}" if fan[r.step] > 1 else "")
            kind = "LLM call" if r.ok else "failed call"
            bars = [(kind, start, end, 0.9 * height, f"{what}: {1000 * (end - start):.0f} ms, {r.status.value}")]
            if r.tool_ms > 0:
                bars.append(("tool", end, end + r.tool_ms / 1e3, _TOOL * height, f"{what}: tool {r.tool_ms:.0f} ms"))
            for name, lo, hi, h, text in bars:
                b = out[name]
                b["x"].append(hi - lo)
                b["base"].append(lo)
                b["y"].append(y)
                b["width"].append(h)
                b["text"].append(text)
    return out


def task_timeline(data: RunData, max_tasks: int = TIMELINE_TASKS) -> dict[str, Any] | None:
    """The task timeline (see the module docstring); None when no level has tasks."""
    if not any(lv.tasks is not None for lv in data.levels):
        return None
    tasks: dict[tuple[int, int], list[RequestRecord]] = defaultdict(list)
    for r in read_records_pieces(data.folder, keep=_agent_call).records:
        tasks[(r.level, r.task if r.task is not None else -1)].append(r)
    traces: list[dict[str, Any]] = []
    owners: list[int] = []
    buttons: list[tuple[int, str]] = []
    axes: dict[int, dict[str, Any]] = {}
    for i, lv in enumerate(data.levels):
        mine = sorted((v for (lvl, _), v in tasks.items() if lvl == i), key=lambda c: min(r.sent_ns for r in c))
        if not mine:
            continue
        shown = [sorted(mine[k], key=lambda r: (r.step, r.branch)) for k in spread(len(mine), max_tasks).tolist()]
        t0 = min(r.sent_ns for r in shown[0])
        for (name, colour), bars in zip(_KINDS, _bars(shown, t0).values(), strict=True):
            traces.append(
                {
                    "type": "bar",
                    "orientation": "h",
                    "name": name,
                    "legendgroup": name,
                    "x": rounded(bars["x"], 6),
                    "base": rounded(bars["base"], 6),
                    "y": rounded(bars["y"], 4),
                    "width": rounded(bars["width"], 4),
                    "text": bars["text"],
                    "textposition": "none",
                    "hovertemplate": "%{text}<extra></extra>",
                    "marker": {"color": colour},
                    "meta": f"tasks.{i}.{name.split()[0]}",
                }
            )
            owners.append(i)
        axes[i] = {"tickvals": list(range(len(shown))), "ticktext": [f"task {c[0].task}" for c in shown]}
        buttons.append((i, f"level {lv.load.label()} ({len(shown)} of {len(mine)} tasks)"))
    if not traces:
        return None
    chosen = buttons[-1][0]
    for t, owner in zip(traces, owners, strict=True):
        t["visible"] = owner == chosen
    layout: dict[str, Any] = {
        "barmode": "overlay",
        "xaxis": {"title": {"text": "seconds from the level's first shown send"}},
        "yaxis": {"autorange": "reversed", **axes[chosen]},
        "legend": {"orientation": "h", "y": 1.08},
        "margin": {"l": 80},
    }
    if len(buttons) > 1:
        layout["updatemenus"] = [
            {
                "x": 1.0,
                "y": 1.15,
                "buttons": [
                    {
                        "label": label,
                        "method": "update",
                        "args": [
                            {"visible": [o == i for o in owners]},
                            {"yaxis.tickvals": axes[i]["tickvals"], "yaxis.ticktext": axes[i]["ticktext"]},
                        ],
                    }
                    for i, label in buttons
                ],
                "active": len(buttons) - 1,
            }
        ]
    return {"data": traces, "layout": layout}


def _ms(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


def ttft_by_step(levels: list[LevelSummary]) -> dict[str, Any] | None:
    """TTFT p50/p90 by step index (left) and by context length (right) per level; None without tasks."""
    colours = palette(len(levels))
    traces: list[dict[str, Any]] = []
    for i, lv in enumerate(levels):
        if lv.tasks is None:
            continue
        for axis, table in (("x", lv.tasks.by_step), ("x2", lv.tasks.by_context)):
            for stat, dash in (("p50", "solid"), ("p90", "dot")):
                traces.append(
                    {
                        "type": "scatter",
                        "mode": "lines+markers",
                        "x": list(table),
                        "y": [_ms(table[k].ttft_ms.stat(stat)) for k in table],
                        "xaxis": axis,
                        "yaxis": "y" if axis == "x" else "y2",
                        "name": f"{lv.load.label()} {stat}",
                        "legendgroup": str(i),
                        "showlegend": axis == "x",
                        "line": {"color": colours[i], "dash": dash},
                        "meta": f"ttft-step.{i}.{'step' if axis == 'x' else 'context'}.{stat}",
                    }
                )
    if not traces:
        return None
    layout = {
        "xaxis": {"domain": [0, 0.55], "type": "category", "title": {"text": "step of the task"}},
        "yaxis": {"title": {"text": "TTFT (ms)"}, "rangemode": "tozero"},
        "xaxis2": {"domain": [0.65, 1], "type": "category", "title": {"text": "prompt tokens (target)"}},
        "yaxis2": {"anchor": "x2", "rangemode": "tozero"},
    }
    return {"data": traces, "layout": layout}


def task_section(page: Page, data: RunData) -> None:
    """Add the "Agentic tasks" section when a level has tasks."""
    timeline = task_timeline(data)
    steps = ttft_by_step(data.levels)
    if timeline is None or steps is None:
        return
    page.section(
        "tasks",
        "Agentic tasks",
        '<p class="note">Each row is a task (a sample of at most '
        f"{TIMELINE_TASKS} per level): its calls as bars from send to end (failed ones red), the tool "
        "after a call as a thin grey bar, a fan-out's branches stacked in the row. Pick the level in "
        "the menu.</p>"
        + page.figure("fig-task-timeline", timeline, 620)
        + f'<p class="note">{esc("TTFT by step of the task and by context length: later steps resend a longer history, so a working prefix cache keeps TTFT flat.")}</p>'
        + page.figure("fig-task-ttft", steps, 420),
    )
