"""Agentic workloads: a workload's ``[agent]`` table (what a task looks like).

An agent's *task* is a chain of ``steps`` LLM calls. Each call sends the context so far (the
group's system prompt and tools, the task's messages, every earlier answer and tool call as
the server streamed it, the tools' results) and, except on the last step, is followed by a
tool that takes ``tool_latency_ms`` and returns ``tool_output_tokens`` tokens. A step after
the first may fan out (``fan_out``, ``fan_out_probability``) into branches run concurrently;
their answers and results join the context before the next step. Each value is a number or
a distribution. :mod:`loadgen.workload.tasks` draws the tasks, :mod:`loadgen.load.agent`
runs them.

The table's keys, defaults and what a record of a task carries: workloads/README.md,
"Agents".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from loadgen.errors import WorkloadError
from loadgen.workload.distributions import Distribution

__all__ = ["AGENT_KEYS", "AgentConfig", "parse_agent"]

AGENT_KEYS = (
    "steps",
    "tool_latency_ms",
    "tool_output_tokens",
    "fan_out",
    "fan_out_probability",
    "system_prompt_tokens",
    "tools_tokens",
    "tools_count",
    "groups",
    "zipf",
)
MAX_TOOLS = 128  # synthesised tool definitions of one group at most


@dataclass(slots=True)
class AgentConfig:
    """A workload's ``[agent]`` table (see the module docstring)."""

    steps: Distribution
    tool_output_tokens: Distribution
    tool_latency_ms: Distribution | None = None  # None: tools answer at once
    fan_out: Distribution | None = None  # None: no step fans out
    fan_out_probability: float = 0.0
    system_prompt_tokens: int = 0
    tools_tokens: Distribution | None = None  # None: the workload's tools (or none)
    tools_count: int = 8
    groups: int = 1
    zipf: float = 1.0

    def to_dict(self) -> dict[str, Any]:
        def d(v: Distribution | None) -> str | None:
            return None if v is None else v.describe()

        return {
            "steps": d(self.steps),
            "tool_latency_ms": d(self.tool_latency_ms),
            "tool_output_tokens": d(self.tool_output_tokens),
            "fan_out": d(self.fan_out),
            "fan_out_probability": self.fan_out_probability,
            "system_prompt_tokens": self.system_prompt_tokens,
            "tools_tokens": d(self.tools_tokens),
            "tools_count": self.tools_count,
            "groups": self.groups,
            "zipf": self.zipf,
        }


class _Reader(Protocol):  # the workload file's strict reader (loadgen.workload.spec)
    def error(self, key: str | None, message: str) -> WorkloadError: ...
    def check_keys(self, table: dict[str, Any], allowed: tuple[str, ...], where: str) -> None: ...
    def positive_int(self, table: dict[str, Any], k: str, key: str) -> int: ...
    def dist(self, table: dict[str, Any], k: str, key: str) -> Distribution: ...


def _number(r: _Reader, t: dict[str, Any], k: str, default: float, top: float) -> float:
    v = t.get(k, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= top:
        bound = "1" if top == 1 else "inf"
        raise r.error(f"agent.{k}", f"expected a number in [0, {bound}], got {v!r}")
    return float(v)


def parse_agent(t: Any, r: _Reader, has_tools: bool) -> AgentConfig:
    """The ``[agent]`` table ``t`` read strictly (errors name ``agent.KEY``)."""
    if not isinstance(t, dict):
        raise r.error("agent", f"expected a table with {', '.join(AGENT_KEYS)}")
    r.check_keys(t, AGENT_KEYS, "agent")

    def optional(k: str) -> Distribution | None:
        return r.dist(t, k, f"agent.{k}") if t.get(k, 0) != 0 else None

    system = (
        r.positive_int(t, "system_prompt_tokens", "agent.system_prompt_tokens")
        if t.get("system_prompt_tokens", 0)
        else 0
    )
    tools = optional("tools_tokens")
    if tools is not None and has_tools:
        raise r.error("agent.tools_tokens", "the workload gives its own tools; remove tools_tokens or tools")
    count = r.positive_int(t, "tools_count", "agent.tools_count") if "tools_count" in t else 8
    if count > MAX_TOOLS:
        raise r.error("agent.tools_count", f"at most {MAX_TOOLS}, got {count}")
    if "tools_count" in t and tools is None:
        raise r.error("agent.tools_count", "synthesised tools need agent.tools_tokens")
    groups = r.positive_int(t, "groups", "agent.groups") if "groups" in t else 1
    if "groups" in t and not (system or tools):
        raise r.error("agent.groups", "groups need agent.system_prompt_tokens or agent.tools_tokens")
    fan_out = optional("fan_out")
    if "fan_out_probability" in t and fan_out is None:
        raise r.error("agent.fan_out_probability", "needs agent.fan_out")
    return AgentConfig(
        steps=r.dist(t, "steps", "agent.steps"),
        tool_output_tokens=r.dist(t, "tool_output_tokens", "agent.tool_output_tokens"),
        tool_latency_ms=optional("tool_latency_ms"),
        fan_out=fan_out,
        fan_out_probability=_number(r, t, "fan_out_probability", 1.0 if fan_out else 0.0, 1),
        system_prompt_tokens=system,
        tools_tokens=tools,
        tools_count=count,
        groups=groups,
        zipf=_number(r, t, "zipf", 1.0, float("inf")),
    )
