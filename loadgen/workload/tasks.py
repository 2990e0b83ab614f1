"""The tasks of an agentic workload (a workload with an ``[agent]`` table).

A task (:class:`~loadgen.records.TaskPlan`) is drawn from the seed, the level and its
position alone (closed loop: the user and that user's task number; open loop: its
arrival), never from the number of worker processes: its steps, which steps fan out and
into how many branches, every call's request (class, lengths, message), tool, tool latency
and tool output length, and its group (Zipf-popular, as sessions' system prompts), whose
system prompt and tool definitions every call of the task sends.

A task's calls take consecutive request indices: a closed-loop user's go on from its
previous task's; an open-loop task at position ``p`` owns ``MAX_CALLS`` from
``level * LEVEL_STRIDE + p * MAX_CALLS``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from loadgen.records import LEVEL_STRIDE, USER_STRIDE, TaskBranch, TaskPlan
from loadgen.workload.agent import AgentConfig
from loadgen.workload.generate import specs_at
from loadgen.workload.prompts import PromptSynthesizer
from loadgen.workload.sessions import zipf_weights
from loadgen.workload.spec import Workload

__all__ = ["MAX_CALLS", "MAX_FAN_OUT", "MAX_STEPS", "AgentSource"]

MAX_STEPS = 256  # steps of one task at most
MAX_FAN_OUT = 16  # branches of one step at most
MAX_CALLS = MAX_STEPS * MAX_FAN_OUT  # calls of one task at most (open loop: a task's request indices)
TASK_STRIDE = 1 << 20  # closed loop: task ids of one user
_M64 = (1 << 64) - 1
_SYSTEM_KEY = -(1 << 40)  # the texts' keys: far from every request's index and from each other
_TOOLS_KEY = -(1 << 41)
_OUTPUT_KEY = -(1 << 62)
_PARAMETERS = {"type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"]}
_FALLBACK = [{"type": "function", "function": {"name": "run", "description": "Run a tool.", "parameters": _PARAMETERS}}]


def _tool_name(tool: Any) -> str:
    fn = tool.get("function") if isinstance(tool, dict) else None
    name = (fn if isinstance(fn, dict) else tool if isinstance(tool, dict) else {}).get("name")
    return name if isinstance(name, str) and name else "tool"


@dataclass(slots=True)
class AgentSource:
    """Tasks of a workload with an ``[agent]`` table (the runner's task source)."""

    workload: Workload
    seed: int
    synth: PromptSynthesizer
    _groups: dict[int, tuple[str | None, list[Any], int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.workload.agent is None:
            raise ValueError(f"workload {self.workload.name!r} has no [agent] table")

    @property
    def agent(self) -> AgentConfig:
        assert self.workload.agent is not None
        return self.workload.agent

    def group_context(self, group: int) -> tuple[str | None, list[Any], int]:
        """Group ``group``'s system prompt (None: none), tool definitions and their tokens."""
        got = self._groups.get(group)
        if got is not None:
            return got
        a = self.agent
        system = self.synth.text(a.system_prompt_tokens, _SYSTEM_KEY - group) if a.system_prompt_tokens else None
        tokens = a.system_prompt_tokens
        tools: list[Any] = self.workload.tools if self.workload.tools is not None else _FALLBACK
        if a.tools_tokens is not None:
            rng = np.random.default_rng([self.seed & _M64, 0x7001, group])
            total = int(a.tools_tokens.sample(rng, 1)[0])
            each = max(total // a.tools_count, 1)
            tools = [
                {
                    "type": "function",
                    "function": {
                        "name": f"tool_{i}",
                        "description": self.synth.text(each, _TOOLS_KEY - group * 256 - i),
                        "parameters": _PARAMETERS,
                    },
                }
                for i in range(a.tools_count)
            ]
            tokens += each * a.tools_count
        got = self._groups[group] = (system, tools, tokens)
        return got

    def tool_output(self, tokens: int, key: int) -> str:
        """The text a tool returns: ``tokens`` tokens, the same for the same ``key``."""
        return self.synth.text(tokens, _OUTPUT_KEY + key)

    def _shape(self, key: list[int]) -> tuple[list[int], np.ndarray, np.ndarray, int]:
        """Branches per step, tool latencies (s) and output tokens per call, and the group."""
        a = self.agent
        rng = np.random.default_rng([self.seed & _M64, 0xA6E7, *key])
        n = int(min(a.steps.sample(rng, 1)[0], MAX_STEPS))
        fans = [1] * n
        if a.fan_out is not None and n > 1:
            draws = rng.random(n - 1)
            widths = np.minimum(a.fan_out.sample(rng, n - 1), MAX_FAN_OUT)
            fans[1:] = [int(w) if d < a.fan_out_probability else 1 for d, w in zip(draws, widths)]
        calls = sum(fans)
        latency = np.zeros(calls) if a.tool_latency_ms is None else a.tool_latency_ms.sample(rng, calls) / 1e3
        outputs = a.tool_output_tokens.sample(rng, calls)
        group = 0
        if a.groups > 1:
            group = int(rng.choice(a.groups, p=zipf_weights(a.groups, a.zipf)))
        return fans, latency, outputs, group

    def _plan(self, task: int, base: int, shape: tuple[list[int], np.ndarray, np.ndarray, int]) -> TaskPlan:
        fans, latency, outputs, group = shape
        system, tools, tokens = self.group_context(group)
        names = [_tool_name(t) for t in tools]
        specs = specs_at(self.workload, range(base, base + sum(fans)), seed=self.seed, synth=self.synth)
        pick = np.random.default_rng([self.seed & _M64, 0x700, base]).integers(0, len(names), len(specs))
        steps: list[list[TaskBranch]] = []
        j = 0
        for s, width in enumerate(fans):
            last = s == len(fans) - 1
            branches = []
            for _ in range(width):
                spec = specs[j]
                if s and width == 1:  # a step that does not fan out continues from the tool result
                    spec.prompt, spec.prompt_tokens, spec.images = "", 0, ()
                branches.append(
                    TaskBranch(
                        spec=spec,
                        tool=names[int(pick[j])],
                        tool_s=0.0 if last else float(latency[j]),
                        output_tokens=0 if last else int(outputs[j]),
                        output_key=spec.index,
                    )
                )
                j += 1
            steps.append(branches)
        return TaskPlan(task=task, steps=steps, system=system, tools=tools, context_tokens=tokens, group=group)

    def user_tasks(self, level: int, user: int) -> Iterator[TaskPlan]:
        """Closed loop: user ``user``'s tasks of level ``level``, one after another (their
        calls take the user's request indices in order)."""
        start = level * LEVEL_STRIDE + user * USER_STRIDE
        used = 0
        for k in range(TASK_STRIDE):
            shape = self._shape([level, 0, user, k])
            if used + sum(shape[0]) > USER_STRIDE:
                return
            plan = self._plan(user * TASK_STRIDE + k, start + used, shape)
            used += sum(shape[0])
            yield plan

    def task(self, level: int, position: int) -> TaskPlan:
        """Open loop: the task arriving at schedule position ``position``."""
        return self._plan(position, level * LEVEL_STRIDE + position * MAX_CALLS, self._shape([level, 1, position]))
