"""Text lines about an agentic level's tasks (the console and the report's level section).

Reads the summary's ``tasks`` entry only (:mod:`loadgen.metrics.tasks` computes it).
"""

from __future__ import annotations

from loadgen.metrics.results import LevelSummary, TaskStep
from loadgen.numfmt import fmt, fmt_share
from loadgen.report.live import fmt_latency

__all__ = ["task_lines"]


def _share(v: float | None) -> str:
    return fmt_share(v)


def _ttft(table: dict[str, TaskStep], first: int = 4) -> str:
    keys = list(table)
    shown = keys if len(keys) <= first + 2 else [*keys[:first], keys[-1]]
    return " · ".join(f"{k}: {fmt_latency(table[k].ttft_ms.p50)}" for k in shown)


def task_lines(level: LevelSummary, where: str = "") -> list[str]:
    """Two lines for a level with tasks (none without): counts, completion time, rate,
    task SLO attainment, time shares; TTFT p50 by step and by context length."""
    t = level.tasks
    if t is None:
        return []
    failed = ", ".join(f"{k} {v}" for k, v in t.failed_by_error.items())
    head = (
        f"{where}tasks {t.tasks}: {t.completed} completed, {t.failed} failed"
        + (f" ({failed})" if failed else "")
        + f", {t.incomplete} cut short by the load loop; completion p50 {fmt_latency(t.completion_ms.p50)} "
        f"p99 {fmt_latency(t.completion_ms.p99)}; " + fmt(t.tasks_per_s) + " tasks/s"
    )
    if t.slos:
        goodput = fmt(t.goodput_tasks_per_s)
        head += f"; {' '.join(t.slos)} met by {_share(t.slo_attainment)} (goodput {goodput} tasks/s)"
    head += f"; time in LLM {_share(t.llm_share)} · tools {_share(t.tool_share)} · waiting {_share(t.wait_share)}"
    lines = [head]
    if t.by_step:
        lines.append(f"{where}TTFT p50 by step {_ttft(t.by_step)}; by context {_ttft(t.by_context, 4)}")
    return lines
