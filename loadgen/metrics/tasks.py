"""Task metrics of agentic levels: the ``tasks`` entry of a level summary.

A *task* is the records of one level with the same ``task`` id (warm-up dropped); each is
exactly one of **completed**, **incomplete** (cut short by the loop, every call ok or
``cancelled``) or **failed** (a call failed). Completion times, ``tasks_per_s``, the task
SLO's attainment and goodput, the LLM / tools / waiting time shares, ``by_step`` and
``by_context`` come from them.

The definitions: docs/metrics.md, "Per level" (Agentic tasks).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from operator import attrgetter

import numpy as np
import numpy.typing as npt
import pandas as pd

from loadgen.metrics.level_intervals import with_intervals
from loadgen.metrics.per_request import EventArrays
from loadgen.metrics.results import Check, LevelSummary, Tasks, TaskStep
from loadgen.metrics.slo import SLO
from loadgen.metrics.stats import distribution, stat_value
from loadgen.records import ErrorKind, RequestRecord

__all__ = ["CONTEXT_BUCKETS", "STEP_CAP", "tasks_of", "union_ns", "with_tasks"]

STEP_CAP = 10  # steps past this one share the bucket "11+"
CONTEXT_BUCKETS: tuple[tuple[str, int], ...] = (("<2k", 2048), ("2k-8k", 8192), ("8k-32k", 32768), (">=32k", 1 << 62))

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]
_STEP_NAMES = [*map(str, range(1, STEP_CAP + 1)), f"{STEP_CAP + 1}+"]


def union_ns(group: I64, lo: I64, hi: I64, n_groups: int) -> I64:
    """Per group ``0..n_groups-1``, the length of the union of its ``[lo, hi]`` spans (empty
    ones ignored): sorted by start, each span adds what reaches past the furthest end of
    the spans before it in its group."""
    keep = hi > lo
    group, lo, hi = group[keep], lo[keep], hi[keep]
    order = np.lexsort((lo, group))
    group, lo, hi = group[order], lo[order], hi[order]
    reach = pd.Series(hi).groupby(group).cummax().to_numpy(dtype=np.int64)
    first = np.ones(group.size, dtype=bool)
    first[1:] = group[1:] != group[:-1]
    before = np.where(first, lo, np.roll(reach, 1))
    added = np.maximum(hi - np.maximum(lo, before), 0)
    out = np.zeros(n_groups, dtype=np.int64)
    np.add.at(out, group, added)
    return out


def _table(
    codes: npt.NDArray[np.int32], names: list[str], frame: pd.DataFrame, ev: EventArrays, ok: Bools, itl: F64
) -> dict[str, TaskStep]:
    """Per code (-1: not an agent call), the calls and the ok ones' TTFT and ITL, named by ``names``."""
    itl_codes = ev.like_itl(np.repeat(codes, ev.n_chunks), ok)
    ttft = frame["ttft_ms"].to_numpy(dtype=np.float64)
    return {
        names[c]: TaskStep(
            calls=int((codes == c).sum()),
            ttft_ms=distribution(ttft[(codes == c) & ok]),
            itl_ms=distribution(itl[itl_codes == c]),
        )
        for c in np.unique(codes[codes >= 0]).tolist()
    }


def _ints(measured: Sequence[RequestRecord], name: str) -> I64:
    get = attrgetter(name)
    return np.fromiter(map(get, measured), dtype=np.int64, count=len(measured))


def tasks_of(
    measured: Sequence[RequestRecord],
    frame: pd.DataFrame,
    ev: EventArrays,
    ok: Bools,
    itl: F64,
    slos: Sequence[SLO] = (),
    confidence: float = 0.95,
) -> Tasks | None:
    """The ``tasks`` entry of a level; None without agent calls. ``measured`` are the level's
    non-warm-up records in ``frame``'s row order, ``itl`` its ITL samples (``ev.itl_ms(ok)``)."""
    ids = np.fromiter((-1 if t is None else t for t in map(attrgetter("task"), measured)), np.int64, len(measured))
    agent = ids >= 0
    if not agent.any():
        return None
    sent_all, done_all = frame["sent_ns"].to_numpy(dtype=np.int64), frame["done_ns"].to_numpy(dtype=np.int64)
    sent_on, done_on = sent_all[sent_all != 0], done_all[done_all != 0]
    seconds = (int(done_on.max()) - int(sent_on.min())) / 1e9 if sent_on.size and done_on.size else 0.0
    rows = np.flatnonzero(agent)
    task_ids, g = np.unique(ids[rows], return_inverse=True)
    n = task_ids.size
    step, steps = _ints(measured, "step")[rows], _ints(measured, "steps")[rows]
    branch = _ints(measured, "branch")[rows]
    tool = np.fromiter(map(attrgetter("tool_ms"), measured), np.float64, len(measured))[rows]
    sent, done, call_ok = sent_all[rows], done_all[rows], ok[rows]
    status = frame["status"].to_numpy()[rows]
    cancelled = status == ErrorKind.CANCELLED.value
    broke = ~call_ok & ~cancelled
    by = pd.DataFrame({"g": g, "sent": sent, "done": done, "step": step, "steps": steps, "c": cancelled, "f": broke})
    per = by.groupby("g").agg(
        start=("sent", "min"),
        end=("done", "max"),
        top=("step", "max"),
        steps=("steps", "max"),
        c=("c", "any"),
        f=("f", "any"),
    )
    start, end = per["start"].to_numpy(np.int64), per["end"].to_numpy(np.int64)
    top, any_cancel, any_fail = per["top"].to_numpy(np.int64), per["c"].to_numpy(bool), per["f"].to_numpy(bool)
    due_at = done + np.round(tool * 1e6).astype(np.int64)
    completed = ~any_fail & ~any_cancel & (top >= per["steps"].to_numpy(np.int64))
    incomplete = ~any_fail & ~completed
    failed = any_fail
    kinds = np.full(n, "", dtype=object)  # a failed task's first failing call's error kind
    f_rows = np.flatnonzero(broke)[np.lexsort((branch[broke], step[broke], g[broke]))]
    first_g, first_at = np.unique(g[f_rows], return_index=True)
    kinds[first_g] = status[f_rows[first_at]]
    in_llm = union_ns(g, sent, done, n)
    tool_end = np.minimum(due_at, end[g])
    both = union_ns(np.concatenate([g, g]), np.concatenate([sent, done]), np.concatenate([done, tool_end]), n)
    span = (end - start)[completed]
    ms = span / 1e6
    frac = (
        np.column_stack([in_llm, both - in_llm, end - start - both])[completed]
        / np.where(span > 0, span, np.nan)[:, None]
    )
    mean = [float(np.nanmean(frac[:, i])) if np.isfinite(frac[:, i]).any() else None for i in range(3)]
    limits = [s for s in slos if s.per_task]
    meets = np.ones(ms.size, dtype=bool)
    checks = []
    for s in limits:
        if s.stat is None:
            meets &= ms <= s.limit_ms
        else:
            value = stat_value(ms, s.stat)
            checks.append(Check(slo=str(s), value_ms=value, passed=value is not None and value <= s.limit_ms))
    judged = int(completed.sum() + failed.sum())
    failed_kinds = pd.Series(kinds[failed], dtype=object).value_counts()
    step_codes = np.full(len(measured), -1, dtype=np.int32)
    step_codes[rows] = np.minimum(step, STEP_CAP + 1) - 1
    context_codes = np.full(len(measured), -1, dtype=np.int32)
    bounds = np.array([below for _, below in CONTEXT_BUCKETS[:-1]], dtype=np.int64)
    context_codes[rows] = np.searchsorted(bounds, frame["target_prompt_tokens"].to_numpy(np.int64)[rows], side="right")
    return Tasks(
        tasks=n,
        completed=int(completed.sum()),
        failed=int(failed.sum()),
        incomplete=int(incomplete.sum()),
        completion_ms=with_intervals(distribution(ms), ms, start[completed], confidence),
        tasks_per_s=float(completed.sum()) / seconds if seconds > 0 else None,
        slo_attainment=float(meets.sum()) / judged if judged else None,
        goodput_tasks_per_s=float(meets.sum()) / seconds if seconds > 0 else None,
        llm_share=mean[0],
        tool_share=mean[1],
        wait_share=mean[2],
        slos=[str(s) for s in limits if s.stat is None],
        checks=checks,
        failed_by_error={str(k): int(v) for k, v in sorted(failed_kinds.items())},
        by_step=_table(step_codes, _STEP_NAMES, frame, ev, ok, itl),
        by_context=_table(context_codes, [name for name, _ in CONTEXT_BUCKETS], frame, ev, ok, itl),
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
    if tasks is None and not any(s.per_task for s in slos):
        return level
    goodput = dataclasses.replace(level.goodput, slos=[str(s) for s in slos if s.per_request])
    return dataclasses.replace(level, tasks=tasks, goodput=goodput)
