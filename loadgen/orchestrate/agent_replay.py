"""``loadgen run --trace`` of a recorded agent trace: its flags, its workload and its profile.

A file whose first line is a loadgen agent-trace call (``task`` and ``step``) or an AIPerf
session row (``session_id`` and ``input_length``) is an agent trace (``--trace-format
agent`` or ``aiperf-sessions`` says so outright). It replays as one level:

- open loop (the default): each task starts at its recorded start divided by ``--speed``;
  ``--requests`` and ``--warmup`` count tasks, ``--duration`` cuts the level;
- closed loop (``--concurrency N``): N users, user ``u`` replays the tasks ``u, u + N, ...``
  in order (on whichever worker process holds it), so every task runs once.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from loadgen.errors import ConfigError
from loadgen.load.profiles import Profile
from loadgen.records import MAX_LEVEL_S
from loadgen.workload.agent_trace import AgentTrace, is_agent_trace, load_agent_trace
from loadgen.workload.spec import Workload

if TYPE_CHECKING:
    from loadgen.orchestrate.flags import RunFlags

__all__ = ["AGENT_FORMATS", "agent_format", "agent_replay", "agent_trace_profile"]

AGENT_FORMATS = {"agent": "loadgen", "aiperf-sessions": "aiperf"}  # --trace-format: agent_trace's names


def agent_format(path: str, given: str | None) -> str | None:
    """The agent-trace format (``loadgen`` or ``aiperf``) of ``--trace path``, or None for a
    request trace (``given``: ``--trace-format``)."""
    if given is not None and given != "auto":
        from loadgen.workload.traces import TRACE_FORMATS

        if given not in TRACE_FORMATS and given not in AGENT_FORMATS:
            names = ", ".join([*TRACE_FORMATS, *AGENT_FORMATS])
            raise ConfigError(f"unknown trace format {given!r}; choose one of: {names}", field="trace_format")
        return AGENT_FORMATS.get(given)
    from loadgen.inputs import input_problem

    if input_problem(Path(path)) is not None:  # the request-trace reader says what is wrong
        return None
    return is_agent_trace(Path(path))


def agent_replay(f: RunFlags, path: str, fmt: str) -> tuple[Workload, AgentTrace]:
    """The workload and the agent trace of ``--trace path`` in agent-trace format ``fmt``."""
    given: object
    for flag, given in (
        ("--window", f.window),
        ("--rate", f.rate),
        ("--output-tokens", f.output_tokens),
        ("--arrival/--burstiness", f.arrival or f.burstiness),
    ):
        if given is not None:
            why = {
                "--window": "an agent trace replays whole tasks; give --requests to replay its first ones",
                "--rate": "an agent trace replays at its tasks' recorded starts; give --speed to compress them",
                "--output-tokens": "an agent trace gives each call's output length; remove it",
            }.get(flag, "an agent trace replays at its tasks' recorded starts; remove it")
            raise ConfigError(why, key=flag)
    speed = 1.0 if f.speed is None else f.speed
    if not speed > 0:
        raise ConfigError(f"must be > 0, got {speed:g}", field="speed")
    trace = load_agent_trace(path, fmt)
    trace.speed = speed
    what = "agent trace" if fmt == "loadgen" else "AIPerf session trace"
    wl = Workload(name=Path(path).stem, description=f"{what} {path}", classes=[], source=path)
    return wl, trace


def _user_calls(trace: AgentTrace, users: int) -> int:
    """The most calls any of ``users`` closed-loop users replays (user u: tasks u, u + users, ...)."""
    return max(sum(t.calls for t in trace.tasks[u::users]) for u in range(min(users, len(trace.tasks))))


def agent_trace_profile(trace: AgentTrace, f: RunFlags) -> Profile:
    """The one level of an agent-trace replay (see the module docstring), before --precision."""
    given: object
    for flag, given in (("--profile", f.profile), ("--levels", f.levels)):
        if given is not None:
            raise ConfigError("an agent trace replays as one level; remove it", key=flag)
    n = len(trace.tasks)
    if f.concurrency is not None:
        for flag, given in (("--requests", f.requests), ("--warmup", f.warmup or None), ("--speed", f.speed)):
            if given is not None:
                raise ConfigError("a closed-loop agent-trace replay runs every recorded task once; remove it", key=flag)
        users = f.concurrency
        if users < 1:
            raise ConfigError(f"must be >= 1, got {users}", field="concurrency")
        # each user's quota of calls covers its own tasks: the tasks, not the budget, end the level
        prof = Profile(
            name="agent-trace",
            kind="levels",
            mode="concurrency",
            levels=[float(users)],
            requests=users * _user_calls(trace, users),
            duration_s=f.duration,
            slo_latency=f.slo_latency or "queued",
            source=trace.source,
            max_duration_s=None,
        )
        return prof
    offsets = trace.offsets
    if offsets is None:
        first = next(t for t in trace.tasks if t.start_s is None)
        raise ConfigError(
            f"task {first.id!r} has no t_s on its first step, so the tasks' starts are unknown: replay it "
            "closed loop with --concurrency N",
            source=trace.source,
        )
    warm = f.warmup or 0
    if warm < 0 or warm >= n:
        raise ConfigError(f"must be >= 0 and below the trace's {n} tasks, got {warm}", field="warmup")
    requests = min(f.requests if f.requests is not None else n, n - warm)
    span = float(offsets[-1])
    if not span <= MAX_LEVEL_S:  # scheduled times are int64 nanoseconds; a replay must end
        raise ConfigError(
            f"the tasks' starts would take {span:,.0f} s to replay at --speed {trace.speed:g}, more than "
            f"{MAX_LEVEL_S // 86_400} days; raise --speed",
            source=trace.source,
        )
    prof = Profile(
        name="agent-trace",
        kind="levels",
        mode="rate",
        levels=[float(f"{(n - 1) / span:.6g}") if n > 1 and span > 0 else 1.0],  # (6 digits: never rounded to 0)
        requests=requests,
        duration_s=f.duration,
        warmup_requests=warm,
        arrival="trace",
        max_in_flight=f.max_in_flight,
        slo_latency=f.slo_latency or "queued",
        source=trace.source,
        max_duration_s=None,
    )
    return prof
