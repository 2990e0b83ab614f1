"""Fit an agentic workload from a recorded agent trace (:mod:`loadgen.workload.agent_trace`):
``loadgen workload fit trace.jsonl -o workloads/NAME.toml``.

The workload's ``[agent]`` table gets:

- ``steps``: the recorded steps per task, as an empirical distribution (values and weights);
- ``tool_latency_ms`` and ``tool_output_tokens``: a log-normal fitted to the tools that ran
  (every call but the last step's): median ``exp(mean(log x))``, sigma ``std(log x)``,
  bounded by the observed min and max (a latency of 0 is a tool that answered at once and
  is left out of the fit; none above 0: no latency);
- ``fan_out``: the widths of the steps that fanned out (empirical), and
  ``fan_out_probability``: the fraction of steps after the first that fanned out.

The calls' lengths go through the same joint (prompt, output) histogram as a plain trace
(:func:`loadgen.workload.joint.fit_joint`), over the calls that carry a message (a task's
first step, a branch's sub-task message); a trace with every task's ``t_s`` also gets
``[arrivals]``: the tasks' mean start rate and burstiness.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from loadgen.workload.agent_trace import AgentTrace, load_agent_trace
from loadgen.workload.joint import JointLengths, fit_joint
from loadgen.workload.traces import gamma_shape

__all__ = ["AgentFit", "fit_agent_trace", "fit_lognormal"]


def fit_lognormal(x: np.ndarray) -> tuple[float, float]:
    """Median and sigma of a log-normal fitted to the values of ``x`` above 0 (by moments of log x)."""
    logs = np.log(np.asarray(x, dtype=float)[np.asarray(x) > 0])
    return float(np.exp(logs.mean())), float(logs.std())


def _empirical(values: np.ndarray) -> str:
    counts = sorted(Counter(int(v) for v in values).items())
    return "empirical:values=" + ";".join(str(v) for v, _ in counts) + ",weights=" + ";".join(str(c) for _, c in counts)


def _lognormal(x: np.ndarray) -> str | None:
    pos = np.asarray(x, dtype=float)[np.asarray(x) > 0]
    if not pos.size:
        return None
    med, sigma = fit_lognormal(pos)
    lo, hi = max(int(np.floor(pos.min())), 1), max(int(np.ceil(pos.max())), 1)
    return f"lognormal:median={med:.4g},sigma={sigma:.4g},min={lo},max={hi}"


def _q(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass(slots=True)
class AgentFit:
    """What was fitted from an agent trace; :meth:`to_toml` is the workload file."""

    name: str
    source: str
    trace: AgentTrace
    joint: JointLengths
    steps: np.ndarray  # per task
    tool_latency_ms: np.ndarray  # per call that ran a tool
    tool_tokens: np.ndarray  # per call that ran a tool
    fan_widths: np.ndarray  # per step that fanned out
    fan_probability: float
    rate: float | None = None  # tasks/s
    burstiness: float | None = None

    @property
    def rows(self) -> int:
        """The trace's calls."""
        return sum(t.calls for t in self.trace.tasks)

    def agent_table(self) -> dict[str, str | float]:
        """The ``[agent]`` table's values (distributions as their text)."""
        table: dict[str, str | float] = {"steps": _empirical(self.steps)}
        latency = _lognormal(self.tool_latency_ms)
        if latency is not None:
            table["tool_latency_ms"] = latency
        table["tool_output_tokens"] = _lognormal(self.tool_tokens) or "1"
        if self.fan_widths.size:
            table["fan_out"] = _empirical(self.fan_widths)
            table["fan_out_probability"] = round(self.fan_probability, 4)
        return table

    def to_toml(self) -> str:
        desc = (
            f"fitted from {Path(self.source).name}: {len(self.trace.tasks)} tasks, {self.rows} calls, "
            f"{float(self.steps.mean()):.3g} steps a task"
        )
        lines = [
            f"# Fitted by `loadgen workload fit` from {self.source} (a recorded agent trace).",
            "# [agent]: steps per task, tool latency and output, fan-out; the joint histogram: the calls' lengths.",
            f"name = {_q(self.name)}",
            f"description = {_q(desc)}",
            "",
        ]
        if self.rate is not None:
            lines += [
                "[arrivals]  # the tasks' mean start rate and burstiness (gamma shape = 1/CV^2)",
                f"rate = {self.rate:.6g}",
                f"burstiness = {self.burstiness or 1.0:.4g}",
                "",
            ]
        lines.append("[agent]")
        for k, v in self.agent_table().items():
            lines.append(f"{k} = {_q(v) if isinstance(v, str) else v}")
        return "\n".join(lines) + "\n\n" + self.joint.to_toml()


def fit_agent_trace(path: str, name: str, *, bins: int = 32, fmt: str = "auto") -> AgentFit:
    """Fit the agent trace at ``path`` (``fmt``: auto, loadgen or aiperf)."""

    trace = load_agent_trace(path, fmt)
    calls = [(s, c) for t in trace.tasks for s, st in enumerate(t.steps, 1) for c in st]
    last = {id(c) for t in trace.tasks for c in t.steps[-1]}
    tools = [c for _, c in calls if id(c) not in last]
    msgs = [c for _, c in calls if c.prompt_tokens > 0]
    prompt = np.asarray([c.prompt_tokens for c in msgs], dtype=np.int64)
    output = np.asarray([c.output_tokens for c in msgs], dtype=np.int64)
    later = [len(st) for t in trace.tasks for st in t.steps[1:]]
    widths = np.asarray([w for w in later if w > 1], dtype=np.int64)
    offsets = trace.offsets
    rate = shape = None
    if offsets is not None and len(offsets) > 1 and offsets[-1] > 0:
        rate = (len(offsets) - 1) / float(offsets[-1])
        shape = gamma_shape(offsets)
    return AgentFit(
        name,
        path,
        trace,
        fit_joint(prompt, output, bins),
        np.asarray([len(t.steps) for t in trace.tasks], dtype=np.int64),
        np.asarray([c.tool_latency_ms for c in tools], dtype=float),
        np.asarray([c.tool_tokens for c in tools], dtype=float),
        widths,
        widths.size / len(later) if later else 0.0,
        rate,
        shape,
    )
