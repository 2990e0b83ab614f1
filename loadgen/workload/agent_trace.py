"""Recorded agent traces: one JSONL line per LLM call, replayed as agentic tasks.

``format = "loadgen"`` reads loadgen's agent-trace format (``task``, ``step``, ``branch``,
``parents``, ``prompt_tokens`` added to the context, ``output_tokens``, ``tool_tokens``,
``tool_latency_ms``, ``t_s``); ``format = "aiperf"`` reads AIPerf's Mooncake-style session
trace (``session_id``, ``input_length``, ``output_length``, ``timestamp``, ``delay``), a
session a task and each row a step of a chain. Every line of a task names the same task;
steps run 1..n without gaps and branches 0..k-1. Every number is bounded (``MAX_LENGTH``,
``MAX_STEPS``, ``MAX_FAN_OUT``, ``MAX_TOOL_MS``, 30 days); errors name the file, the line
and the field, in one line.

The fields, their defaults and bounds, and how a trace replays: workloads/README.md,
"Recorded agent traces".
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from loadgen.errors import ConfigError, WorkloadError
from loadgen.inputs import open_input
from loadgen.records import LEVEL_STRIDE, MAX_LEVEL_S, RequestSpec, TaskBranch, TaskPlan
from loadgen.workload.distributions import MAX_LENGTH
from loadgen.workload.prompts import PromptSynthesizer
from loadgen.workload.tasks import MAX_CALLS, MAX_FAN_OUT, MAX_STEPS

__all__ = [
    "AGENT_TRACE_FORMATS",
    "MAX_TOOL_MS",
    "AgentTrace",
    "AgentTraceSource",
    "TraceCall",
    "TraceTask",
    "is_agent_trace",
    "load_agent_trace",
    "parse_agent_trace",
    "parse_aiperf_sessions",
]

AGENT_TRACE_FORMATS = ("auto", "loadgen", "aiperf")
_KEYS = ("task", "step", "branch", "parents", "prompt_tokens", "output_tokens", "tool_tokens", "tool_latency_ms", "t_s")
_TOOL = [
    {
        "type": "function",
        "function": {
            "name": "run",
            "description": "Run a tool.",
            "parameters": {"type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"]},
        },
    }
]
_OUTPUT_KEY = -(1 << 61)  # tool results' text keys: far from every request index
MAX_TOOL_MS = 86_400_000  # a recorded tool's run (AIPerf: a delay) at most: one day
_MAX_STAMP_MS = 2.0**53  # AIPerf timestamps: exact in a double (their span is checked apart)


@dataclass(slots=True)
class TraceCall:
    """One recorded LLM call (one line)."""

    step: int
    branch: int
    output_tokens: int
    prompt_tokens: int = 0
    tool_tokens: int = 0
    tool_latency_ms: float = 0.0
    parents: tuple[int, ...] = ()
    t_s: float | None = None
    line: int = 0


@dataclass(slots=True)
class TraceTask:
    """One recorded task: ``steps[s]`` holds the calls (branches) of step ``s + 1``."""

    id: str
    steps: list[list[TraceCall]]
    start_s: float | None = None  # its first step's t_s

    @property
    def calls(self) -> int:
        return sum(len(b) for b in self.steps)


@dataclass(slots=True)
class AgentTrace:
    """A recorded agent trace: its tasks in order of their start (file order without ``t_s``)."""

    source: str
    tasks: list[TraceTask]
    format: str = "loadgen"
    speed: float = 1.0  # replay: the recorded starts divided by this (2 = twice as fast)

    @property
    def offsets(self) -> np.ndarray | None:
        """Open loop: each task's start (s) from the first task's, divided by :attr:`speed`;
        None when a task has no ``t_s``."""
        if not self.tasks or any(t.start_s is None for t in self.tasks):
            return None
        starts = np.asarray([t.start_s or 0.0 for t in self.tasks], dtype=np.float64)
        offsets: np.ndarray = (starts - starts[0]) / self.speed
        return offsets

    @property
    def calls(self) -> int:
        """The recorded LLM calls of every task."""
        return sum(t.calls for t in self.tasks)

    def output_tokens(self) -> np.ndarray:
        """Every recorded call's ``output_tokens``."""
        return np.asarray([c.output_tokens for t in self.tasks for b in t.steps for c in b], dtype=np.float64)

    def describe(self) -> dict[str, Any]:
        """run.json's ``trace`` entry of a replay of this trace."""
        offsets = self.offsets
        starts = [t.start_s for t in self.tasks if t.start_s is not None]
        return {
            "path": self.source,
            "format": "agent" if self.format == "loadgen" else "aiperf-sessions",
            "rows": self.calls,
            "file_rows": self.calls,
            "recorded_span_s": max(starts) - min(starts) if offsets is not None else None,
            "replay_span_s": float(offsets[-1]) if offsets is not None else None,
            "tasks": len(self.tasks),
            "speed": self.speed,
        }


def _tool_name(tool: Any) -> str:
    fn = tool.get("function") if isinstance(tool, dict) else None
    name = fn.get("name") if isinstance(fn, dict) else tool.get("name") if isinstance(tool, dict) else None
    return name if isinstance(name, str) and name else "tool"


def _err(src: str, line: int, fld: str | None, msg: str) -> WorkloadError:
    return WorkloadError(msg, source=f"{src}: line {line}", key=fld)


def _int(obj: dict[str, Any], k: str, default: int | None, lo: int, hi: int, src: str, n: int) -> int:
    v = obj.get(k, default)
    if v is None:
        raise _err(src, n, k, "missing; it is required")
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise _err(src, n, k, f"expected a whole number in [{lo}, {hi:,}], got {v!r}")
    return v


def _float(obj: dict[str, Any], k: str, src: str, n: int, top: float, unit: str) -> float | None:
    """``obj[k]``, a finite number in [0, ``top``] (in ``unit``), or None when absent."""
    v = obj.get(k)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= top:  # (NaN fails too)
        raise _err(src, n, k, f"expected {unit} in [0, {top:,.0f}], got {v!r}")
    return float(v)


def _objects(lines: Iterable[bytes], src: str) -> Iterator[tuple[int, dict[str, Any]]]:
    for n, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise _err(src, n, None, f"not valid JSON: {exc.msg}") from None
        if not isinstance(obj, dict):
            raise _err(src, n, None, "expected an object")
        yield n, obj


def _task_id(v: Any, src: str, n: int, k: str) -> str:
    if isinstance(v, bool) or not isinstance(v, (str, int)) or v == "":
        raise _err(src, n, k, f"expected a non-empty string or a whole number, got {v!r}")
    return str(v)


def _call(obj: dict[str, Any], src: str, n: int) -> tuple[str, TraceCall]:
    for k in obj:
        if k not in _KEYS:
            raise _err(src, n, k, f"unknown field; allowed: {', '.join(_KEYS)}")
    if "task" not in obj:
        raise _err(src, n, "task", "missing; it is required")
    task = _task_id(obj["task"], src, n, "task")
    step = _int(obj, "step", None, 1, MAX_STEPS, src, n)
    parents_raw = obj.get("parents", [step - 1] if step > 1 else [])
    if not isinstance(parents_raw, list) or not all(
        isinstance(p, int) and not isinstance(p, bool) and 1 <= p < step for p in parents_raw
    ):
        raise _err(src, n, "parents", f"expected an array of earlier steps (1..{step - 1}), got {parents_raw!r}")
    if step > 1 and not parents_raw:
        raise _err(src, n, "parents", f"step {step} needs at least one parent step")
    call = TraceCall(
        step=step,
        branch=_int(obj, "branch", 0, 0, MAX_FAN_OUT - 1, src, n),
        output_tokens=_int(obj, "output_tokens", None, 1, MAX_LENGTH, src, n),
        prompt_tokens=_int(obj, "prompt_tokens", 0, 0, MAX_LENGTH, src, n),
        tool_tokens=_int(obj, "tool_tokens", 0, 0, MAX_LENGTH, src, n),
        tool_latency_ms=_float(obj, "tool_latency_ms", src, n, MAX_TOOL_MS, "milliseconds") or 0.0,
        parents=tuple(sorted(set(parents_raw))),
        t_s=_float(obj, "t_s", src, n, MAX_LEVEL_S, "seconds"),
        line=n,
    )
    return task, call


def _assemble(src: str, calls: dict[str, list[TraceCall]], start_key: str = "t_s") -> AgentTrace:
    """Calls grouped by task into steps and branches, checked for gaps; tasks by start,
    which span at most ``MAX_LEVEL_S`` (``start_key``: the field that gives them)."""
    tasks = []
    for tid, got in calls.items():
        by_step: dict[int, dict[int, TraceCall]] = {}
        for c in got:
            branches = by_step.setdefault(c.step, {})
            if c.branch in branches:
                raise _err(
                    src,
                    c.line,
                    "branch",
                    f"task {tid!r} step {c.step} branch {c.branch} is already on line {branches[c.branch].line}",
                )
            branches[c.branch] = c
        steps = []
        for s in range(1, max(by_step) + 1):
            if s not in by_step:
                last = max(c.line for c in got)
                raise _err(src, last, "step", f"task {tid!r} has no step {s} (its steps run 1..{max(by_step)})")
            b = by_step[s]
            for k in range(len(b)):
                if k not in b:
                    raise _err(
                        src, max(c.line for c in b.values()), "branch", f"task {tid!r} step {s} has no branch {k}"
                    )
            steps.append([b[k] for k in range(len(b))])
        first = steps[0][0]
        first.prompt_tokens = max(first.prompt_tokens, 1)
        times = [c.t_s for c in steps[0] if c.t_s is not None]
        tasks.append(TraceTask(tid, steps, min(times) if times else None))
    if not tasks:
        raise WorkloadError("the trace holds no calls", source=src)
    if len(tasks) > LEVEL_STRIDE // MAX_CALLS:
        raise WorkloadError(f"at most {LEVEL_STRIDE // MAX_CALLS:,} tasks, got {len(tasks):,}", source=src)
    if all(t.start_s is not None for t in tasks):
        tasks.sort(key=lambda t: t.start_s or 0.0)  # (stable: file order among equal starts)
        latest = tasks[-1]
        span = (latest.start_s or 0.0) - (tasks[0].start_s or 0.0)
        if span > MAX_LEVEL_S:
            raise _err(
                src,
                next(c.line for c in latest.steps[0] if c.t_s == latest.start_s),
                start_key,
                f"the tasks' starts span {span:,.3f} s, more than {MAX_LEVEL_S // 86_400} days",
            )
    return AgentTrace(src, tasks)


def parse_agent_trace(lines: Iterable[bytes], source: str) -> AgentTrace:
    """The loadgen agent-trace lines ``lines`` (see the module docstring); errors name ``source``."""
    calls: dict[str, list[TraceCall]] = {}
    for n, obj in _objects(lines, source):
        task, call = _call(obj, source, n)
        calls.setdefault(task, []).append(call)
    return _assemble(source, calls)


def parse_aiperf_sessions(lines: Iterable[bytes], source: str) -> AgentTrace:
    """AIPerf's session trace rows (``session_id``, ``input_length``, ``output_length``,
    ``timestamp``, ``delay``) as tasks of chained steps (see the module docstring)."""
    sessions: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    for n, obj in _objects(lines, source):
        if "messages" in obj and "input_length" not in obj:
            raise _err(source, n, "messages", "rows with messages need a tokenizer; give input_length instead")
        sid = _task_id(obj.get("session_id", f"row {n}"), source, n, "session_id")
        sessions.setdefault(sid, []).append((n, obj))
    calls: dict[str, list[TraceCall]] = {}
    for sid, rows in sessions.items():
        if len(rows) > MAX_STEPS:
            raise _err(source, rows[MAX_STEPS][0], "session_id", f"session {sid!r}: at most {MAX_STEPS} rows")
        got: list[TraceCall] = []
        prev_in = 0
        start: float | None = None
        for s, (n, obj) in enumerate(rows, start=1):
            inp = _int(obj, "input_length", None, 1, MAX_LENGTH, source, n)
            out = _int(obj, "output_length", None, 1, MAX_LENGTH, source, n)
            ts = _float(obj, "timestamp", source, n, _MAX_STAMP_MS, "milliseconds")
            delay = _float(obj, "delay", source, n, MAX_TOOL_MS, "milliseconds")
            if s == 1:
                start = None if ts is None else ts / 1e3
            elif got:
                got[-1].tool_tokens = max(inp - prev_in - got[-1].output_tokens, 0)
                got[-1].tool_latency_ms = delay or 0.0
            got.append(
                TraceCall(
                    step=s,
                    branch=0,
                    output_tokens=out,
                    prompt_tokens=inp if s == 1 else 0,
                    parents=(s - 1,) if s > 1 else (),
                    t_s=start if s == 1 else None,
                    line=n,
                )
            )
            prev_in = inp
        calls[sid] = got
    return _assemble(source, calls, "timestamp")


def is_agent_trace(path: Path) -> str | None:
    """``"loadgen"`` or ``"aiperf"`` when ``path``'s first line looks like that agent trace, else None."""
    try:
        with open_input(path) as fh:
            first = fh.readline(65536).decode("utf-8", errors="replace")
    except OSError:
        return None
    if '"task"' in first and '"step"' in first:
        return "loadgen"
    if '"session_id"' in first and '"input_length"' in first:
        return "aiperf"
    return None


def load_agent_trace(path: str, fmt: str = "auto") -> AgentTrace:
    """The agent trace at ``path`` (``fmt``: auto, loadgen or aiperf)."""
    if fmt not in AGENT_TRACE_FORMATS:
        raise ConfigError(f"unknown agent trace format {fmt!r}; choose one of: {', '.join(AGENT_TRACE_FORMATS)}")
    p = Path(path)
    if fmt == "auto":
        fmt = is_agent_trace(p) or "loadgen"
    try:
        with open_input(p) as fh:
            trace = (parse_aiperf_sessions if fmt == "aiperf" else parse_agent_trace)(fh, path)
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror or exc}", source=path) from None
    trace.format = fmt
    return trace


@dataclass(slots=True)
class AgentTraceSource:
    """The runner's task source for a recorded trace. Open loop: the task at schedule
    position ``p`` is the trace's ``p``-th task (its start from :attr:`AgentTrace.offsets`).
    Closed loop: users take the recorded tasks in order — with ``users`` set (a replay of
    ``users`` users, however many worker processes hold them), user ``u`` takes the tasks
    ``u, u + users, ...``, so every task is replayed once; without it, a free user takes the
    next task not yet started (within one process). A task's calls take the request
    indices ``level * LEVEL_STRIDE + position * MAX_CALLS`` on."""

    trace: AgentTrace
    seed: int
    synth: PromptSynthesizer
    tools: list[Any] | None = None  # every call's tool definitions (None: one generic tool)
    users: int | None = None
    _next: dict[int, int] = field(default_factory=dict)

    def task(self, level: int, position: int) -> TaskPlan:
        """The trace's task ``position`` (wrapping round when the level asks for more)."""
        rec = self.trace.tasks[position % len(self.trace.tasks)]
        base = level * LEVEL_STRIDE + position * MAX_CALLS
        tools = self.tools if self.tools is not None else _TOOL
        names = [_tool_name(t) for t in tools]
        steps: list[list[TaskBranch]] = []
        j = 0
        last = len(rec.steps)
        for s, calls in enumerate(rec.steps, 1):
            branches = []
            for c in calls:
                index = base + j
                prompt = self.synth.text(c.prompt_tokens, index) if c.prompt_tokens else ""
                spec = RequestSpec(index, prompt, c.prompt_tokens, c.output_tokens, source_row=c.line - 1)
                branches.append(
                    TaskBranch(
                        spec=spec,
                        tool=names[j % len(names)],
                        tool_s=0.0 if s == last else c.tool_latency_ms / 1e3,
                        output_tokens=0 if s == last else c.tool_tokens,
                        output_key=index,
                    )
                )
                j += 1
            steps.append(branches)
        return TaskPlan(task=position, steps=steps, tools=tools)

    def user_tasks(self, level: int, user: int) -> Iterator[TaskPlan]:
        """Closed loop: user ``user``'s share of the recorded tasks (see the class docstring)."""
        if self.users is not None:
            for p in range(user, len(self.trace.tasks), self.users):
                yield self.task(level, p)
            return
        while (p := self._next.get(level, 0)) < len(self.trace.tasks):
            self._next[level] = p + 1
            yield self.task(level, p)

    def tool_output(self, tokens: int, key: int) -> str:
        """A tool's result text of ``tokens`` tokens (the same for the same ``key``)."""
        return self.synth.text(tokens, _OUTPUT_KEY + key) if tokens else ""
