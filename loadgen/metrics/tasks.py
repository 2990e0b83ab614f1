"""Task metrics of agentic levels: the ``tasks`` entry of a level summary.

A *task* is the records of one level with the same ``task`` id (warm-up dropped). Its
calls carry ``step`` (from 1; a fan-out's branches share it), ``branch`` and ``steps``
(how many steps it was drawn to have); ``tool_ms`` is the tool that ran after a call,
which the next step waited for. The runner sends no later step after a failed one.

Each task is exactly one of:

- **completed**: every record ok and its highest step reached ``steps``;
- **incomplete** — cut by the level's end: no record failed except as ``cancelled`` (the
  level's end cancels calls in flight), its highest step is short of ``steps``, and either
  a call was cancelled or its next step was due (the last step's latest ``done`` plus its
  ``tool_ms``) at or after the level's last send, when the level sent nothing more;
- **failed**: the rest — a record failed (any kind but ``cancelled``), or the task stopped
  short of ``steps`` while the level was still sending. ``failed_by_error`` counts the
  error kind of each failed task's first failing call (its lowest step), or
  ``"missing_steps"`` when none failed.

Incomplete tasks count neither as failed nor as completed. A completed task's
**completion time** is its first ``sent_ns`` to its latest ``done_ns`` (the end of the
last step's last token). ``tasks_per_s`` and ``goodput_tasks_per_s`` are completed tasks,
and those meeting every per-task SLO (``task=60s``), over the level's window (first send
to last ``done`` of all its measured records); ``slo_attainment`` is the share of the
completed and failed tasks that met them (a failed task misses; with no task SLO, the
share that completed). ``task:p90=60s`` is a check on the completed tasks' times.

Time shares, over completed tasks (the mean of each task's share of its completion
time): **LLM** is the union of its calls' ``[sent, done]`` intervals; **tools** the union
of ``[done, done + tool_ms]`` not overlapping the LLM time (clipped to the task's end);
**waiting** the rest (the runner's own turnaround, a think time).

``by_step`` (step index ``"1"``…``"10"``, then ``"11+"``) and ``by_context`` (the call's
target prompt tokens: ``"<2k"``, ``"2k-8k"``, ``"8k-32k"``, ``">=32k"``, k = 1024) count
every agent call and describe the ok ones' TTFT and ITL: later steps resend a longer
history, so a prefix cache shows as flat TTFT by step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pandas as pd

from loadgen.metrics.level_intervals import with_intervals
from loadgen.metrics.per_request import EventArrays
from loadgen.metrics.results import Check, LevelSummary, Tasks, TaskStep
from loadgen.metrics.slo import SLO, TASK_METRICS
from loadgen.metrics.stats import distribution, stat_value
from loadgen.records import ErrorKind, RequestRecord

__all__ = ["CONTEXT_BUCKETS", "STEP_CAP", "covered_ns", "task_shares", "tasks_of", "with_tasks"]

STEP_CAP = 10  # steps past this one share the bucket "11+"
CONTEXT_BUCKETS: tuple[tuple[str, int], ...] = (("<2k", 2048), ("2k-8k", 8192), ("8k-32k", 32768), (">=32k", 1 << 62))
MISSING = "missing_steps"

F64 = npt.NDArray[np.float64]


def covered_ns(spans: Sequence[tuple[int, int]]) -> int:
    """The length of the union of ``[start, end]`` spans (empty ones ignored)."""
    total, reach = 0, None
    for lo, hi in sorted(s for s in spans if s[1] > s[0]):
        if reach is None or lo > reach:
            total, reach = total + hi - lo, hi
        elif hi > reach:
            total, reach = total + hi - reach, hi
    return total


def task_shares(calls: Sequence[RequestRecord]) -> tuple[int, int, int, int]:
    """``(completion, llm, tools, waiting)`` in ns of one task's calls (see the module docstring)."""
    start = min(r.sent_ns for r in calls)
    end = max(r.done_ns for r in calls)
    llm = [(r.sent_ns, r.done_ns) for r in calls]
    tools = [(r.done_ns, min(end, r.done_ns + round(r.tool_ms * 1e6))) for r in calls if r.tool_ms > 0]
    in_llm = covered_ns(llm)
    in_tools = covered_ns(llm + tools) - in_llm
    return end - start, in_llm, in_tools, end - start - in_llm - in_tools


def _outcome(calls: Sequence[RequestRecord], last_send: int) -> str:
    """``"completed"``, ``"incomplete"`` or an error kind (failed)."""
    failed = sorted(
        (r.step, r.branch, r.status.value) for r in calls if not r.ok and r.status is not ErrorKind.CANCELLED
    )
    if failed:
        return str(failed[0][2])
    top = max(r.step for r in calls)
    cancelled = any(r.status is ErrorKind.CANCELLED for r in calls)
    if top >= max(r.steps for r in calls) and not cancelled:
        return "completed"
    due = max(r.done_ns + round(r.tool_ms * 1e6) for r in calls if r.step == top)
    return "incomplete" if cancelled or due >= last_send else MISSING


def _bucket_of_step(step: int) -> str:
    return str(step) if step <= STEP_CAP else f"{STEP_CAP + 1}+"


def _bucket_of_context(tokens: int) -> str:
    return next(name for name, below in CONTEXT_BUCKETS if tokens < below)


def _table(
    labels: list[str | None],
    frame: pd.DataFrame,
    ev: EventArrays,
    ok: npt.NDArray[np.bool_],
    itl: F64,
    order: list[str],
) -> dict[str, TaskStep]:
    names = [n for n in order if n in set(labels)]
    code = {n: i for i, n in enumerate(names)}
    codes = np.fromiter((-1 if x is None else code[x] for x in labels), dtype=np.int32, count=len(labels))
    itl_codes = ev.like_itl(np.repeat(codes, ev.n_chunks), ok)
    ttft = frame["ttft_ms"].to_numpy(dtype=np.float64)
    return {
        n: TaskStep(
            calls=int((codes == c).sum()),
            ttft_ms=distribution(ttft[(codes == c) & ok]),
            itl_ms=distribution(itl[itl_codes == c]),
        )
        for c, n in enumerate(names)
    }


def tasks_of(
    measured: Sequence[RequestRecord],
    frame: pd.DataFrame,
    ev: EventArrays,
    ok: npt.NDArray[np.bool_],
    itl: F64,
    slos: Sequence[SLO] = (),
    confidence: float = 0.95,
) -> Tasks | None:
    """The ``tasks`` entry of a level; None without agent calls. ``measured`` are the level's
    non-warm-up records in ``frame``'s row order, ``itl`` its ITL samples (``ev.itl_ms(ok)``)."""
    by_task: dict[int, list[RequestRecord]] = {}
    for r in measured:
        if r.task is not None:
            by_task.setdefault(r.task, []).append(r)
    if not by_task:
        return None
    sent = [r.sent_ns for r in measured if r.sent_ns]
    done = [r.done_ns for r in measured if r.done_ns]
    last_send = max(sent, default=0)
    seconds = (max(done) - min(sent)) / 1e9 if sent and done else 0.0
    outcomes = {t: _outcome(calls, last_send) for t, calls in sorted(by_task.items())}
    completed = [t for t, o in outcomes.items() if o == "completed"]
    failed = [o for o in outcomes.values() if o not in ("completed", "incomplete")]
    shares = np.array([task_shares(by_task[t]) for t in completed], dtype=np.float64).reshape(-1, 4)
    ms = shares[:, 0] / 1e6
    limits = [s for s in slos if s.metric in TASK_METRICS]
    meets = np.ones(ms.size, dtype=bool)
    for s in limits:
        if s.stat is None:
            meets &= ms <= s.limit_ms
    judged = len(completed) + len(failed)
    starts = np.array([min(r.sent_ns for r in by_task[t]) for t in completed], dtype=np.int64)
    frac = shares[:, 1:] / np.where(shares[:, :1] > 0, shares[:, :1], np.nan)
    mean = [float(np.nanmean(frac[:, i])) if np.isfinite(frac[:, i]).any() else None for i in range(3)]
    checks = []
    for s in limits:
        if s.stat is not None:
            value = stat_value(ms, s.stat)
            checks.append(Check(slo=str(s), value_ms=value, passed=value is not None and value <= s.limit_ms))
    agent = [r.task is not None for r in measured]
    steps = [_bucket_of_step(r.step) if a else None for r, a in zip(measured, agent, strict=True)]
    contexts = [_bucket_of_context(r.target_prompt_tokens) if a else None for r, a in zip(measured, agent, strict=True)]
    step_order = [_bucket_of_step(i) for i in range(1, STEP_CAP + 2)]
    return Tasks(
        tasks=len(by_task),
        completed=len(completed),
        failed=len(failed),
        incomplete=sum(1 for o in outcomes.values() if o == "incomplete"),
        completion_ms=with_intervals(distribution(ms), ms, starts, confidence),
        tasks_per_s=len(completed) / seconds if seconds > 0 else None,
        slo_attainment=float(meets.sum()) / judged if judged else None,
        goodput_tasks_per_s=float(meets.sum()) / seconds if seconds > 0 else None,
        llm_share=mean[0],
        tool_share=mean[1],
        wait_share=mean[2],
        slos=[str(s) for s in limits if s.stat is None],
        checks=checks,
        failed_by_error={k: failed.count(k) for k in sorted(set(failed))},
        by_step=_table(steps, frame, ev, ok, itl, step_order),
        by_context=_table(contexts, frame, ev, ok, itl, [n for n, _ in CONTEXT_BUCKETS]),
    )


def with_tasks(
    level: LevelSummary,
    measured: Sequence[RequestRecord],
    frame: pd.DataFrame,
    ev: EventArrays,
    ok: npt.NDArray[np.bool_],
    itl: F64,
    slos: Sequence[SLO],
    confidence: float,
) -> LevelSummary:
    """``level`` with its ``tasks`` entry, and a task SLO left out of the requests' SLOs."""
    tasks = tasks_of(measured, frame, ev, ok, itl, slos, confidence)
    if tasks is None and not any(s.metric in TASK_METRICS for s in slos):
        return level
    goodput = dataclasses.replace(level.goodput, slos=[str(s) for s in slos if s.per_request])
    return dataclasses.replace(level, tasks=tasks, goodput=goodput)
