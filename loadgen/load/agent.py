"""Agentic tasks on the runner: chains of LLM calls with tool calls and results between them.

A task (:class:`~loadgen.records.TaskPlan`) is held by one asyncio task from its first
step to its last, so it stays on the worker process that starts it; the closed and open
loops around it are :mod:`loadgen.load.conversations`'s. Step ``s`` resends the context so
far in chat's shape (the assistant's streamed text and tool calls, then the tool results),
which each dialect renders in its own; after a call the tool runs for its drawn latency
(``record.tool_ms``). A failed call fails its task: no later step is sent.

docs/architecture.md, "How a level is sent" → "Sessions and agentic tasks", has the
history's shape, the synthetic tool call, how the budget, credits and ``--duration`` end a
task, and which records a task ended early leaves.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any, Protocol, cast, runtime_checkable

from loadgen.load.context import LevelContext
from loadgen.load.conversations import Conversations, NextCall, send_capped
from loadgen.load.credits import Credits
from loadgen.load.plan import LevelPlan
from loadgen.records import ChatMessage, RequestSpec, TaskBranch, TaskPlan

__all__ = ["AgentTasks", "TaskSource"]

_now = time.perf_counter_ns


@runtime_checkable
class TaskSource(Protocol):
    """Where tasks come from (:class:`loadgen.workload.tasks.AgentSource`)."""

    def user_tasks(self, level: int, user: int) -> Iterator[TaskPlan]:
        """Closed loop: user ``user``'s tasks in order."""
        ...

    def task(self, level: int, position: int) -> TaskPlan:
        """Open loop: the task of schedule position ``position``."""
        ...

    def tool_output(self, tokens: int, key: int) -> str:
        """A tool's result text of ``tokens`` tokens (the same for the same ``key``)."""
        ...


class AgentTasks(Conversations[TaskPlan]):
    """A level's tasks, prepared before it starts; :meth:`drive` runs them (a
    :class:`~loadgen.load.context.Driver`)."""

    def __init__(self, source: TaskSource, plan: LevelPlan) -> None:
        self.source = source
        super().__init__(plan)

    def _user(self, user: int) -> Iterator[TaskPlan]:
        return self.source.user_tasks(self.plan.spec_level, user)

    def _item(self, position: int) -> TaskPlan:
        return self.source.task(self.plan.spec_level, position)

    async def _hold(
        self,
        ctx: LevelContext,
        task: TaskPlan,
        due: int,
        next_call: NextCall,
        worker: int,
        cap: Credits | None,
        max_late: int,
        deadline: int | None,
    ) -> bool:
        """Run one task's steps from ``due`` on; False when the user should stop (the budget
        or the level is spent, or a tool would run past ``deadline``)."""
        history: list[dict[str, Any]] = []
        if task.system is not None:
            history.append({"role": "system", "content": task.system})
        context = task.context_tokens  # tokens of the context so far
        n = len(task.steps)
        for s, branches in enumerate(task.steps, 1):
            warms = []
            for _ in branches:  # the branches the budget allows (a user's last ones may be cut)
                warm = next_call()
                if warm is None:
                    break
                warms.append(warm)
            if not warms:
                return False
            call = _Call(ctx, self.source, task, history, context, s, n, worker, cap, max_late, deadline)
            results = await asyncio.gather(*(call.run(b, k, due, w) for k, (b, w) in enumerate(zip(branches, warms))))
            if len(warms) < len(branches):
                return False
            if any(r is None for r in results):
                # failed (or a call was dropped): no later step; a tool cut by the level's end: the user stops
                return not call.cut
            done = [r for r in results if r is not None]
            for r in done:
                history.extend(r[0])
            context = max(r[1] for r in done) + sum(r[2] for r in done)
            due = max(r[3] for r in done)
        return True


class _Call:
    """The calls of one step: each branch's request on the step's context, then its tool."""

    def __init__(
        self,
        ctx: LevelContext,
        source: TaskSource,
        task: TaskPlan,
        history: list[dict[str, Any]],
        context: int,
        step: int,
        steps: int,
        worker: int,
        cap: Credits | None,
        max_late: int,
        deadline: int | None,
    ) -> None:
        self.ctx, self.source, self.task, self.history = ctx, source, task, history
        self.context, self.step, self.steps, self.worker = context, step, steps, worker
        self.cap, self.max_late, self.deadline = cap, max_late, deadline
        self.cut = False  # a branch's tool would have run past the level's end

    async def run(
        self, b: TaskBranch, k: int, due: int, warm: bool
    ) -> tuple[list[dict[str, Any]], int, int, int] | None:
        """Send branch ``k`` and run its tool: the history it adds, the context it saw (in
        tokens), the tokens it adds and when its tool finished; None when it failed."""
        ctx, msg = self.ctx, b.spec
        own: list[dict[str, Any]] = []
        if msg.prompt:
            content = msg.prompt if isinstance(msg.prompt, str) else "\n".join(m.get("content", "") for m in msg.prompt)
            own.append({"role": "user", "content": content})
        spec = RequestSpec(
            index=msg.index,
            prompt=cast(list[ChatMessage], self.history + own),
            prompt_tokens=self.context + msg.prompt_tokens,
            max_tokens=msg.max_tokens,
            request_class=msg.request_class,
            group=self.task.group,
            answer=[],
            images=msg.images,
            source_row=msg.source_row,  # a replayed trace: the call's line
            task=self.task.task,
            step=self.step,
            branch=k,
            steps=self.steps,
            tools=self.task.tools,
            calls=[],
        )
        rec = ctx.new_record(spec, self.worker, warm)
        rec.scheduled_ns = due
        rec.tool_ms = b.tool_s * 1e3
        if not await send_capped(ctx, spec, rec, self.cap, due, self.max_late) or not rec.ok:
            return None
        prompt = rec.prompt_tokens if rec.prompt_tokens is not None else spec.prompt_tokens
        added = rec.completion_tokens if rec.completion_tokens is not None else rec.output_tokens
        if self.step == self.steps:
            return own, prompt, added, rec.done_ns
        assert spec.answer is not None and spec.calls is not None
        calls = [
            (c[1] if c[1] else f"call_{self.task.task}_{self.step}_{k}_{j}", c[2] or b.tool, c[3])
            for j, c in enumerate(spec.calls)
        ] or [(f"call_{self.task.task}_{self.step}_{k}", b.tool, "{}")]
        text = "".join(spec.answer)
        output = self.source.tool_output(b.output_tokens, b.output_key)
        turn: list[dict[str, Any]] = [
            {
                "role": "assistant",
                "content": text or None,
                "tool_calls": [
                    {"id": i, "type": "function", "function": {"name": name, "arguments": args}}
                    for i, name, args in calls
                ],
            }
        ]
        turn += [
            {"role": "tool", "tool_call_id": i, "content": output if j == 0 else ""}
            for j, (i, _, _) in enumerate(calls)
        ]
        end = rec.done_ns + int(b.tool_s * 1e9)
        if self.deadline is not None and end >= self.deadline:  # --duration: the level ends first
            self.cut = True
            return None
        if not await ctx.sleep_until(end) and ctx.stopped:
            return None
        return own + turn, prompt, added + b.output_tokens, max(end, _now())
